// The agent's tables between the controller and the data plane: validates every RouteTable the
// controller sends, keeps the last good one (also on disk), and chooses what the data plane
// forwards with (ARCHITECTURE.md, "Fallback chain"):
//
//   controller's table (current, or last good) while refreshed within stale_after
//                                                   ──(stale)──▶ static table
//
// - A table is accepted only if every check passes; a refused table is never installed, the
//   table held stays (served as the last good one if the refused table was newer). The refusal
//   reason goes back in the ack.
// - Checks, in this order: version newer than the installed one; a delta's base is the
//   installed version; every destination is a known node other than this one, every traffic
//   class 0 or 1, no row twice; every next hop a neighbour (once per row) over a link the data
//   plane does not report down; weights finite, positive and summing to 1; potentials finite
//   and every next hop's strictly below the row's own (descent: what makes tables loop-free);
//   after applying, every destination this node can reach (over links not reported down) has a
//   row in both classes. The compact form (RouteTable.default_route, implied_stubs) fills in
//   rows not sent: a default route only at a stub, over its one link; rows toward stubs
//   implied only if the table names this node's configuration's stubs (StubDigest), a row
//   toward one then being the row toward its switch; a delta must keep its base's digest. A row
//   without next hops is accepted only with potential +infinity: the controller's explicit
//   "unreachable from here" (it knows of failures beyond this node's links); the data plane then
//   has no route for it.
// - Which table is served is the fallback chain's (core/fallback_chain.h), as in the
//   simulator's forwarders: current; last good once a newer table was refused for anything
//   but its version; static (hop-count shortest paths of the configured topology, links
//   reported down removed) once the accepted table has not been refreshed (by a newer
//   accepted table, full or delta) for stale_after. Transitions are counted and logged. A
//   newer valid table recovers. Versions only grow: a stale table's version is still the
//   floor.
// - Disk: every accepted table is written to <state_dir>/tables.bin (a temporary file renamed
//   into place) and read back by LoadFromDisk at start, so that a restarted agent forwards at
//   once on it. A missing file means static; a corrupt one (bad header, size, checksum or
//   protobuf, another node's, or a table that fails the checks that do not depend on link
//   state) is ignored with a log line, and static is used.
//
// Thread-safe: the control client offers tables, the data plane's callback reports liveness,
// and anyone may ask for the active table. Time is passed in (a steady clock); it must not go
// backwards from call to call.
#ifndef DAR_AGENT_TABLE_STORE_H_
#define DAR_AGENT_TABLE_STORE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/agent_config.h"
#include "agent/agent_tables.h"
#include "base/json_log.h"
#include "base/mutex.h"
#include "core/fallback_chain.h"
#include "core/topology.h"
#include "core/units.h"
#include "dar/v1/agent.pb.h"

namespace dar::agent {

// The file inside the state dir.
inline constexpr char kTableFileName[] = "tables.bin";

// Whether Offer refused a table for its compact form (a default route at a node that is no
// stub, stubs other than this node's configuration has): the controller then sends whole
// tables (TableAck.compact_refused).
bool IsCompactFormRefusal(const absl::Status& status);

// Event counts since construction; the chain's transitions inherited.
struct TableStoreCounters : FallbackCounters {
  int64_t offered = 0;
  int64_t accepted = 0;
  int64_t refused = 0;           // offered == accepted + refused
  int64_t loaded_from_disk = 0;  // 1 if LoadFromDisk found a usable table
  int64_t disk_ignored = 0;      // a table file that was unreadable or invalid
  int64_t disk_write_errors = 0;
  int64_t link_changes = 0;  // liveness changes reported for neighbour links
};

class TableStore {
 public:
  // `config` and `topology` (BuildAgentTopology(config)) must outlive the store; `log` may be
  // null. Starts on the static table; every neighbour link up.
  // REQUIRES: stale_after > 0.
  TableStore(const AgentConfig& config, const Topology& topology, Duration stale_after,
             JsonLog* log);

  TableStore(const TableStore&) = delete;
  TableStore& operator=(const TableStore&) = delete;

  // Reads <state_dir>/tables.bin (see the top of this file). OK if a table was loaded (it is
  // then served, refreshed at `now`); otherwise the reason (NotFound for no file), logged
  // unless NotFound. Call once, before the first Offer.
  absl::Status LoadFromDisk(Time now);

  // Validates `table` and, if it passes, makes it the current table (refreshed at `now`) and
  // saves it to disk. Errors: FailedPrecondition with the reason of the refusal (what the ack
  // says); the table held stays, as the last good one if `table` was newer (counted, logged).
  absl::Status Offer(const v1::RouteTable& table, Time now);

  // The data plane saw the link to `neighbour` go down or come back up. Recomputes the static
  // table. Unknown neighbours are ignored.
  void SetNeighbourUp(NodeId neighbour, bool up);

  // A new staleness timeout (AgentConfig.table_stale_ms from the controller). REQUIRES: > 0.
  void set_stale_after(Duration stale_after);
  Duration stale_after() const;

  // The table to forward with at `now`; never null.
  std::shared_ptr<const AgentTables> Active(Time now);
  TableSource Source(Time now);
  // Active(now) if it differs from what the last call of TakeChange returned (the first call
  // always returns it), else null. What the control client installs in the data plane.
  std::shared_ptr<const AgentTables> TakeChange(Time now);

  // The version accepted (or loaded) last; 0 if none. Offers must be newer.
  uint64_t installed_version() const;
  TableStoreCounters counters() const;
  // Why the last refused offer was refused; empty before any.
  std::string last_refusal() const;

  // The path of the table file.
  std::string file_path() const;

 private:
  // The controller's table as held: rows[cls][dest] the row sent (destination, class,
  // potential, next hops), if any, and the compact form's default route and implied stubs
  // (RouteTable), which fill in the rows not sent.
  struct Rows {
    std::array<std::vector<std::optional<v1::Route>>, kTrafficClasses> rows;
    const NeighbourConfig* default_route = nullptr;  // of the config
    uint64_t stub_digest = 0;
  };

  enum class CheckMode : uint8_t { kOffer, kDisk };

  // The rows `table` leads to from the held ones, or why it is refused.
  absl::StatusOr<Rows> Check(const v1::RouteTable& table, CheckMode mode) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRoute(const v1::Route& route, CheckMode mode, NodeId& dest) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const AgentTables> BuildTables(const Rows& rows, uint64_t version) const;
  void RecomputeStatic() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The row `held` has toward `dest` in class `cls`: the one sent, or for an implied stub the
  // one sent toward its switch; null if neither (then the default route, if any, stands).
  const v1::Route* SentRow(const Rows& held, int cls, NodeId dest) const;
  // Which destinations this node reaches over links not reported down.
  std::vector<bool> Reachable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chain's source at `now`; a transition is logged.
  TableSource SourceLocked(Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The version accepted or loaded last; 0 if none.
  uint64_t VersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return chain_.version().value_or(0);
  }
  absl::Status Save(uint64_t version, const Rows& rows, int64_t computed_unix_ns) const;
  void Log(LogLevel level, std::string_view msg, const nlohmann::json& fields) const;
  // The configuration's node with wire id `id`, or kNoNode.
  NodeId NodeOf(uint32_t id) const {
    const auto it = node_of_.find(id);
    return it == node_of_.end() ? kNoNode : it->second;
  }

  const AgentConfig& config_;
  const Topology& topology_;
  JsonLog* log_;
  // By NodeId: the switch of a stub, else kNoNode (StubSwitches); and their StubDigest. The
  // compact form's implied rows need them.
  std::vector<NodeId> stub_switch_;
  uint64_t stub_digest_ = 0;
  // By wire id: the configuration's node (AgentConfig::FindNode, without its linear search:
  // a whole table names every node, thousands of them at scale).
  absl::flat_hash_map<uint32_t, NodeId> node_of_;

  mutable Mutex mu_;
  FallbackChain chain_ ABSL_GUARDED_BY(mu_);
  // By LinkId; only this node's neighbour links change.
  std::vector<bool> link_up_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const AgentTables> static_ ABSL_GUARDED_BY(mu_);
  Rows rows_ ABSL_GUARDED_BY(mu_);
  // Null before the first accepted table.
  std::shared_ptr<const AgentTables> current_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const AgentTables> handed_out_ ABSL_GUARDED_BY(mu_);
  TableStoreCounters counters_ ABSL_GUARDED_BY(mu_);
  std::string last_refusal_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dar::agent

#endif  // DAR_AGENT_TABLE_STORE_H_
