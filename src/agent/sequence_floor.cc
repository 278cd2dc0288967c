#include "agent/sequence_floor.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace dar::agent {
namespace {

constexpr char kFormat[] = "dar-agent-sequence/1";
// Far above any clock in milliseconds, far below where a shift by 20 overflows.
constexpr uint64_t kMaxMs = uint64_t{1} << 43;

}  // namespace

absl::StatusOr<SequenceFloor> SequenceFloor::Start(const std::string& state_dir,
                                                   int64_t now_unix_ns) {
  const std::string path = (std::filesystem::path(state_dir) / kSequenceFileName).string();
  uint64_t start = static_cast<uint64_t>(std::max<int64_t>(now_unix_ns / 1'000'000, 0));
  absl::StatusOr<std::string> text = ReadFile(path, 4096);
  if (text.ok()) {
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
        j["format"].get<std::string>() != kFormat || !j.contains("reserved_ms") ||
        !j["reserved_ms"].is_number_unsigned() || j["reserved_ms"].get<uint64_t>() >= kMaxMs) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: not a JSON object with format \"{}\" and reserved_ms below 2^43 (fix or remove "
          "it; without it sequence numbers start from the clock)",
          path, kFormat));
    }
    start = std::max(start, j["reserved_ms"].get<uint64_t>());
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
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
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  if (ec)
    return absl::InternalError(
        fmt::format("{}: cannot create its directory: {}", path_, ec.message()));
  nlohmann::json j;
  j["format"] = kFormat;
  j["reserved_ms"] = ms;
  RETURN_IF_ERROR(WriteFileAtomically(path_, j.dump() + "\n", 0644));
  reserved_ms_ = ms;
  return absl::OkStatus();
}

}  // namespace dar::agent
