// Where the controller's table versions come from: its own counter, never a peer's word.
//
// Agents install a table only if its version is newer than the one they hold (agent/
// table_store.h), so versions must keep growing across controller restarts, or the agents
// refuse every table and fall back to static routes. Two things keep them growing:
// - a counter persisted in the state directory, in blocks: the file holds the top of the block
//   being used, written before any version in the block is handed out, so a restart begins
//   above every version its predecessor issued (one write per kBlock versions);
// - the wall clock as a floor: a version is never below the controller's start time in
//   milliseconds, which covers a controller without a state directory (a cycle is far longer
//   than a millisecond, so a restart's clock is above its predecessor's versions).
// An agent's hello says which version it holds. A claim below the next version is what it
// should be; a claim a little above (the clock went back and nothing was persisted) moves the
// counter past it; a claim more than kMaxClaimStep above is refused: one hostile hello must not
// push the counter to the top of its range, where it would wrap.
//
// Replicas (control/leadership.h) number tables by term instead (ForTerm): the leader's term
// above kTermShift, a count within the term below, nothing persisted. Terms only grow, so each
// leader's versions are above all its predecessors' (and above the clock's, which stay below
// 2^44 until the year 2527): a deposed leader's tables are older than its successor's wherever
// they arrive.
//
// Thread-compatible.
#ifndef DAR_CONTROL_TABLE_VERSIONS_H_
#define DAR_CONTROL_TABLE_VERSIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dar::control {

class TableVersions {
 public:
  // Versions reserved by one write of the file: 1,000 s of cycles at 10 Hz.
  static constexpr uint64_t kBlock = 10'000;
  // How far above the clock in milliseconds an agent's claim may move the counter: 2^24, 4.7
  // hours. Claims one after another cannot walk the counter further from the clock than that.
  static constexpr uint64_t kMaxClaimStep = uint64_t{1} << 24;

  // Reads the counter file (`file` empty: nothing is persisted) and reserves the first block.
  // Errors, naming the file: unreadable or malformed (it is left as it is: fix or remove it),
  // or the reservation cannot be written.
  static absl::StatusOr<TableVersions> Load(std::string file, int64_t now_unix_ns);

  // The versions of the leader of `term`: (term << kTermShift) + 1, + 2, ... A claim at or above
  // the next version is refused (the agent holds a later leader's table). REQUIRES: 1 <= term
  // <= kMaxTerm.
  static constexpr int kTermShift = 44;
  static constexpr uint64_t kMaxTerm = (uint64_t{1} << (63 - kTermShift)) - 1;
  static TableVersions ForTerm(uint64_t term);
  // The term of a version made by ForTerm; 0 for one that was not.
  static uint64_t TermOf(uint64_t version) { return version >> kTermShift; }

  // The next version, which is then used up. Saves a new reservation first when the block is
  // used up; if that fails the version is still handed out (the clock floor still holds
  // across a restart) and the error is returned in `*save_error` (else OK).
  uint64_t Take(absl::Status* save_error);

  enum class Claim {
    kKnown,    // below the next version: one this controller (or its predecessor) issued
    kAdopted,  // above, and less than kMaxClaimStep above the clock: the counter now
               // continues above it
    kRefused,  // further above: not taken
  };
  // What to make of an agent saying it holds `installed`, at `now_unix_ns`. Errors as Take, for
  // kAdopted.
  Claim OnClaim(uint64_t installed, int64_t now_unix_ns, absl::Status* save_error);

  uint64_t next() const { return next_; }

 private:
  TableVersions(std::string file, uint64_t next) : file_(std::move(file)), next_(next) {}
  // Makes [next_, next_ + kBlock) reserved, writing the file.
  absl::Status Reserve();

  std::string file_;
  uint64_t next_;
  bool by_term_ = false;
  uint64_t reserved_ = 0;  // the last version that may be handed out without a write
};

}  // namespace dar::control

#endif  // DAR_CONTROL_TABLE_VERSIONS_H_
