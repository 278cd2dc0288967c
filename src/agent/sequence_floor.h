// A floor under the overlay sequence numbers an agent seals with, kept on disk, so that an
// agent restarted with its clock set back still begins above every number its peers accepted
// from it (they drop anything below their replay window as replayed, net/overlay_header.h).
//
// <state_dir>/overlay-sequence.json: {"format": "dar-agent-sequence/1", "reserved_ms": N}.
// Numbers start at the start time in milliseconds shifted left by 20 (2^20 numbers a
// millisecond per destination). At start the agent begins at max(clock, reserved_ms) and
// reserves kReserveMs milliseconds' worth above it, written before anything is sent; while it
// runs, Keep reserves further ahead whenever the highest number sent comes within half of the
// reserve. A restart begins above the reservation, so above everything sent, whatever the
// clock says. What that assumes: Keep runs at least every 32 ms' worth of numbers (the agent
// calls it once a second, so up to 33 M packets a second to one destination), and the file
// can be written; while it cannot (a full or read-only disk, a malformed file at start) the
// numbers rest on the clock alone and the agent logs it. Not thread-safe.
#ifndef DAR_AGENT_SEQUENCE_FLOOR_H_
#define DAR_AGENT_SEQUENCE_FLOOR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dar::agent {

inline constexpr char kSequenceFileName[] = "overlay-sequence.json";

class SequenceFloor {
 public:
  // 64 · 2^20 numbers per destination: a minute at a million packets a second to one peer.
  static constexpr uint64_t kReserveMs = 64;

  // Reads the file (none: the clock alone), begins at max(clock, reserved) and writes the
  // first reservation. Errors, naming the file: unreadable or malformed (left as it is), or the
  // reservation cannot be written.
  static absl::StatusOr<SequenceFloor> Start(const std::string& state_dir, int64_t now_unix_ns);

  // Where numbers start, in milliseconds (DataplaneConfig::sequence_floor_ms).
  uint64_t start_ms() const { return start_ms_; }

  // Reserves further ahead if `highest_sequence` (Dataplane::HighestSequence) has come within
  // half of the reserve. Errors: the file cannot be written (the reservation is unchanged).
  absl::Status Keep(uint64_t highest_sequence);

 private:
  SequenceFloor(std::string path, uint64_t start_ms)
      : path_(std::move(path)), start_ms_(start_ms) {}
  absl::Status Reserve(uint64_t ms);

  std::string path_;
  uint64_t start_ms_;
  uint64_t reserved_ms_ = 0;
};

}  // namespace dar::agent

#endif  // DAR_AGENT_SEQUENCE_FLOOR_H_
