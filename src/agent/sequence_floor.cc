#include "agent/sequence_floor.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"

namespace dar::agent {
namespace {

constexpr char kSequenceFloorFormat[] = "dar-agent-sequence/1";
// Far above any clock in milliseconds, far below where a shift by 20 overflows.
constexpr uint64_t kMaxMs = uint64_t{1} << 43;

}  // namespace

absl::StatusOr<SequenceFloor> SequenceFloor::Start(const std::string& state_dir,
                                                   int64_t now_unix_ns) {
  const std::string path = (std::filesystem::path(state_dir) / kSequenceFileName).string();
  uint64_t start = static_cast<uint64_t>(std::max<int64_t>(now_unix_ns / 1'000'000, 0));
  absl::StatusOr<std::optional<uint64_t>> reserved =
      ReadCounterFile(path, kSequenceFloorFormat, "reserved_ms", kMaxMs);
  if (!reserved.ok()) {
    return absl::Status(reserved.status().code(),
                        fmt::format("{} (fix or remove it; without it sequence numbers start "
                                    "from the clock)",
                                    std::string(reserved.status().message())));
  }
  if (*reserved) start = std::max(start, **reserved);
  SequenceFloor floor(path, start);
  RETURN_IF_ERROR(floor.Reserve(start + kReserveMs));
  return floor;
}

absl::Status SequenceFloor::Keep(uint64_t highest_sequence) {
  const uint64_t ms = highest_sequence >> 20;
  if (ms + kReserveMs / 2 < reserved_ms_) return absl::OkStatus();
  return Reserve(ms + kReserveMs);
}

absl::Status SequenceFloor::Reserve(uint64_t ms) {
  ms = std::min(ms, kMaxMs - 1);  // what Start reads back
  RETURN_IF_ERROR(WriteCounterFile(path_, kSequenceFloorFormat, "reserved_ms", ms, 0644));
  reserved_ms_ = ms;
  return absl::OkStatus();
}

}  // namespace dar::agent
