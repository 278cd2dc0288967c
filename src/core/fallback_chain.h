// The forwarder's fallback chain (ARCHITECTURE.md, "Fallback chain") as a state machine,
// without the tables themselves: which table to serve and when the source changes. One rule
// for both forwarders: core::TableManager (the simulator's) and agent::TableStore (the real
// agent's) hold their tables and ask this which one to serve.
//
//   current ──(an offer is refused)──▶ last good ──(stale)──▶ static
//
// - Current: the newest accepted table, served while fresh and while the latest offer that
//   passed the version check was accepted.
// - Last good: an offer newer than the current one failed the other checks. The forwarder
//   keeps serving the table it had (every accepted table was checked and is never replaced by
//   an older one, so the last good table is the current one) and says so.
// - Static: nothing accepted yet, or the newest accepted table is stale (accepted more than
//   stale_after ago, nothing newer since): the controller is gone and the forwarder's own
//   static table is the better guide. A new accepted table recovers.
// Versions only grow: a stale table's version is still the floor for the next offer.
//
// Pure logic: time is given with every call and must not go backwards. Not thread-safe.
#ifndef DAR_CORE_FALLBACK_CHAIN_H_
#define DAR_CORE_FALLBACK_CHAIN_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "core/units.h"

namespace dar {

// Where the table to forward with comes from; see the chain above.
enum class TableSource : uint8_t {
  kCurrent,   // the newest accepted table, fresh, and the latest offer was accepted
  kLastGood,  // the newest accepted table, fresh, but a newer offer was refused as invalid
  kStatic,    // the forwarder's own hop-count table
};

// Transitions since construction. Starting on the static table is not a fallback, and the
// first accepted table is not a recovery: recoveries_from_static <= fallbacks_to_static.
struct FallbackCounters {
  int64_t fallbacks_to_last_good = 0;  // kCurrent -> kLastGood
  int64_t fallbacks_to_static = 0;     // kCurrent or kLastGood -> kStatic
  int64_t recoveries_from_static = 0;  // kStatic -> kCurrent, after a fallback
};

class FallbackChain {
 public:
  // REQUIRES: stale_after > 0.
  explicit FallbackChain(Duration stale_after);

  // OK if an offer of `version` may be checked further: above every version accepted so far
  // (any version before the first). FailedPrecondition "version V is not newer than the
  // installed version H" otherwise; such a refusal changes nothing.
  absl::Status CheckVersion(uint64_t version) const;
  // An offer of `version` passed every check at `now`: it is the current table, fresh from
  // `now`. The next Observe sees the change. REQUIRES: CheckVersion(version).ok().
  void Accept(uint64_t version, Time now);
  // An offer past the version check failed the others: a fresh current table is served as the
  // last good one until the next accepted offer. The next Observe sees the change.
  void RefuseInvalid();

  // The source at `now`, counting a transition from the one last observed (the owner calls it
  // after Accept and RefuseInvalid, and whenever it serves a table).
  TableSource Observe(Time now);
  // The source at `now`, without counting.
  TableSource SourceAt(Time now) const;
  // The source as last observed.
  TableSource source() const { return source_; }

  // From now on; judged at the next Observe. REQUIRES: stale_after > 0.
  void set_stale_after(Duration stale_after);
  Duration stale_after() const { return stale_after_; }
  // The highest version accepted so far; nullopt before the first.
  std::optional<uint64_t> version() const { return version_; }
  // When the current table was accepted.
  Time accepted_at() const { return accepted_at_; }
  const FallbackCounters& counters() const { return counters_; }

 private:
  Duration stale_after_;
  std::optional<uint64_t> version_;
  Time accepted_at_{0};
  bool last_offer_invalid_ = false;
  TableSource source_ = TableSource::kStatic;
  FallbackCounters counters_;
};

}  // namespace dar

#endif  // DAR_CORE_FALLBACK_CHAIN_H_
