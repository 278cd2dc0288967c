#include "control/table_versions.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <optional>
#include <utility>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"

namespace dar::control {
namespace {

constexpr char kFormat[] = "dar-table-versions/1";
// Room left at the top of the range: no version is ever handed out above it.
constexpr uint64_t kCeiling = std::numeric_limits<uint64_t>::max() / 2;

}  // namespace

absl::StatusOr<TableVersions> TableVersions::Load(std::string file, int64_t now_unix_ns) {
  uint64_t next = static_cast<uint64_t>(std::max<int64_t>(now_unix_ns / 1'000'000, 1));
  if (!file.empty()) {
    absl::StatusOr<std::optional<uint64_t>> reserved =
        ReadCounterFile(file, kFormat, "reserved", kCeiling);
    if (!reserved.ok()) {
      return absl::Status(reserved.status().code(),
                          fmt::format("table versions {} (fix or remove the file; without it "
                                      "versions start from the clock)",
                                      std::string(reserved.status().message())));
    }
    if (*reserved) next = std::max(next, **reserved + 1);
  }
  TableVersions v(std::move(file), next);
  RETURN_IF_ERROR(v.Reserve());
  return v;
}

TableVersions TableVersions::ForTerm(uint64_t term) {
  assert(term >= 1 && term <= kMaxTerm);
  TableVersions v("", (term << kTermShift) + 1);
  v.by_term_ = true;
  v.reserved_ = std::numeric_limits<uint64_t>::max();
  return v;
}

absl::Status TableVersions::Reserve() {
  const uint64_t top = next_ + kBlock - 1;
  if (file_.empty()) {
    reserved_ = top;
    return absl::OkStatus();
  }
  // Only a block on disk counts as reserved: after a failed write the next version tries again.
  RETURN_IF_ERROR(WriteCounterFile(file_, kFormat, "reserved", top, 0600));
  reserved_ = top;
  return absl::OkStatus();
}

uint64_t TableVersions::Take(absl::Status* save_error) {
  *save_error = next_ > reserved_ ? Reserve() : absl::OkStatus();
  return next_++;
}

TableVersions::Claim TableVersions::OnClaim(uint64_t installed, int64_t now_unix_ns,
                                            absl::Status* save_error) {
  *save_error = absl::OkStatus();
  if (installed < next_) return Claim::kKnown;
  if (by_term_) return Claim::kRefused;
  // Bounded by the clock, not by the counter, so that claims one after another cannot walk
  // the counter away from the clock (where a restart without the file would begin): honest
  // versions grow by ten a second, the clock by a thousand milliseconds.
  const uint64_t clock_ms = static_cast<uint64_t>(std::max<int64_t>(now_unix_ns / 1'000'000, 1));
  if (installed >= kCeiling || installed >= clock_ms + kMaxClaimStep) return Claim::kRefused;
  next_ = installed + 1;
  if (next_ > reserved_) *save_error = Reserve();
  return Claim::kAdopted;
}

}  // namespace dar::control
