// What the controller sends one connected agent next, and what it knows the agent holds.
//
// Configuration goes first whenever it changed. Tables are stop-and-wait, as xDS acks them:
// at most one table is unacknowledged at a time, and while it is, newer snapshots only replace
// the one waiting (a slow agent skips versions instead of queueing them). A table is a delta
// against the snapshot the agent last accepted when the agent takes deltas; it is full for
// the first table, after a refusal, after the overlay changed, for agents without delta
// support, and when an ack has not come within `ack_timeout` (the agent's state is then
// unknown). Versions sent only grow and stay above the version the agent said it holds.
//
// A snapshot that changes none of the node's rows (its delta would be empty) is not sent to
// an agent that takes deltas, only a refresh when `refresh` would have passed since the last
// table by the next snapshot (snapshots come a cycle apart, as last seen): the agent's table
// stays fresh (it falls back to static after table_stale) and its stream is not silent, and a
// steady network costs one message per agent per refresh instead of one per cycle, and its
// ack. An agent's version therefore moves when its rows change, or at the next refresh. The
// configuration's table_stale_ms, when given, sets both timeouts (a reload changes them).
//
// Pure: time is passed in. Not thread-safe (the stream that owns it locks).
#ifndef DAR_CONTROL_CONTROLLER_SESSION_H_
#define DAR_CONTROL_CONTROLLER_SESSION_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "control/controller_tables.h"
#include "core/units.h"
#include "dar/v1/agent.pb.h"

namespace dar::control {

enum class AckOutcome : uint8_t {
  kAccepted,  // the table in flight was accepted
  kRefused,   // the table in flight was refused; the next one is full
  kStale,     // an ack for a version not in flight (late, or never sent): ignored
};

// The refresh of agents whose staleness timeout is `table_stale`: a sixth of it, so that a
// table is refreshed several times before it could go stale, and twice before an agent with
// replicas calls its stream silent (at a third, agent/control_client.h); at most 5 s.
inline Duration TableRefresh(Duration table_stale) { return std::min(table_stale / 6, Seconds(5)); }

class AgentSession {
 public:
  // `wire_id`: the node's configured id. `installed_version`: what its Hello said it forwards
  // with; only newer versions are sent. `refresh`: the longest an agent that takes deltas
  // goes without a table while none of its rows changes (zero: every snapshot is sent).
  AgentSession(uint32_t wire_id, bool delta_tables, uint64_t installed_version,
               Duration ack_timeout, Duration refresh);

  // Tables in RouteTable's compact form (the agent's hello offered it); before the first.
  // After a table refused for that form (TableAck.compact_refused), whole tables only.
  void set_compact_tables(bool on) { compact_tables_ = on; }
  bool compact_tables() const { return compact_tables_; }

  // Configuration to send before anything else. Its keys are the epochs' secrets: the agent is
  // sent its own row of each (security::RowFor), never a secret.
  void SetConfig(std::shared_ptr<const v1::AgentConfig> config);
  // The newest snapshot; an older one than held already is ignored.
  void SetSnapshot(std::shared_ptr<const RouteSnapshot> snapshot);
  // The timeouts the staleness timeout `table_stale` gives: an ack within half of it, and a
  // refresh (TableRefresh).
  void SetTableStale(Duration table_stale);

  // The next message to send at `now`, if there is one.
  bool Next(Time now, v1::ControllerMessage& out);

  AckOutcome OnAck(const v1::TableAck& ack);

  uint32_t wire_id() const { return wire_id_; }
  uint64_t acked_version() const { return acked_ == nullptr ? 0 : acked_->version; }
  // The version sent and not yet acknowledged, 0 if none.
  uint64_t in_flight_version() const { return in_flight_ == nullptr ? 0 : in_flight_->version; }
  int64_t full_tables_sent() const { return full_sent_; }
  int64_t delta_tables_sent() const { return delta_sent_; }
  // Snapshots not sent because they changed none of the node's rows.
  int64_t unchanged_tables_held() const { return unchanged_held_; }

 private:
  uint32_t wire_id_;
  bool delta_tables_;
  bool compact_tables_ = false;
  uint64_t floor_;  // versions at or below this are not sent
  Duration ack_timeout_;
  Duration refresh_;
  std::shared_ptr<const v1::AgentConfig> config_;
  bool config_pending_ = false;
  // This node's rows of the epochs last sent, for the nodes row_nodes_ (wire ids): made once
  // per epoch (n BLAKE2b calls), not at every config push. An epoch's id names one secret for
  // the life of the controller's ring (rotations number upward).
  std::vector<v1::OverlayKey> rows_;
  std::vector<uint32_t> row_nodes_;
  std::shared_ptr<const RouteSnapshot> latest_;
  std::shared_ptr<const RouteSnapshot> in_flight_;
  Time in_flight_since_{0};  // when the last table was sent
  // When the newest snapshot was first seen, and how long after the one before.
  uint64_t seen_version_ = 0;
  Time seen_at_{0};
  Duration snapshot_gap_ = Duration::max();
  std::shared_ptr<const RouteSnapshot> acked_;  // what the agent forwards with, as we know
  bool need_full_ = true;
  int64_t full_sent_ = 0;
  int64_t delta_sent_ = 0;
  int64_t unchanged_held_ = 0;
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_SESSION_H_
