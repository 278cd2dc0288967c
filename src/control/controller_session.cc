#include "control/controller_session.h"

#include <algorithm>
#include <vector>

#include "security/key_ring.h"

namespace dar::control {

AgentSession::AgentSession(uint32_t wire_id, bool delta_tables, uint64_t installed_version,
                           Duration ack_timeout, Duration refresh)
    : wire_id_(wire_id),
      delta_tables_(delta_tables),
      floor_(installed_version),
      ack_timeout_(ack_timeout),
      refresh_(refresh) {}

void AgentSession::SetConfig(std::shared_ptr<const v1::AgentConfig> config) {
  config_ = std::move(config);
  config_pending_ = config_ != nullptr;
  if (config_ != nullptr && config_->table_stale_ms() > 0) {
    SetTableStale(Milliseconds(config_->table_stale_ms()));
  }
}

void AgentSession::SetTableStale(Duration table_stale) {
  ack_timeout_ = table_stale / 2;
  refresh_ = TableRefresh(table_stale);
}

void AgentSession::SetSnapshot(std::shared_ptr<const RouteSnapshot> snapshot) {
  if (snapshot == nullptr) return;
  if (latest_ != nullptr && snapshot->version <= latest_->version) return;
  latest_ = std::move(snapshot);
}

bool AgentSession::Next(Time now, v1::ControllerMessage& out) {
  if (config_pending_) {
    // Each epoch's secret stays here: the agent gets its own row of pair keys.
    v1::AgentConfig& c = *out.mutable_config();
    c = *config_;
    std::vector<uint32_t> nodes;
    nodes.reserve(static_cast<size_t>(c.nodes_size()));
    for (const v1::OverlayNode& n : c.nodes()) nodes.push_back(n.node_id());
    if (nodes != row_nodes_) {
      rows_.clear();
      row_nodes_ = nodes;
    }
    std::vector<v1::OverlayKey> rows;
    for (v1::OverlayKey& k : *c.mutable_keys()) {
      const auto cached = std::find_if(rows_.begin(), rows_.end(), [&](const v1::OverlayKey& r) {
        return r.key_id() == k.key_id();
      });
      v1::OverlayKey row =
          cached != rows_.end() ? std::move(*cached) : security::RowFor(k, wire_id_, nodes);
      row.set_active(k.active());
      k.Clear();  // (the secret's bytes go with it)
      k = row;
      rows.push_back(std::move(row));
    }
    rows_ = std::move(rows);  // the rows of retired epochs go
    config_pending_ = false;
    return true;
  }
  if (latest_ == nullptr || latest_->version <= floor_) return false;
  if (latest_->version != seen_version_) {
    snapshot_gap_ = seen_version_ == 0 ? Duration::max() : now - seen_at_;
    seen_version_ = latest_->version;
    seen_at_ = now;
  }
  if (in_flight_ != nullptr) {
    if (now - in_flight_since_ < ack_timeout_) return false;
    // No answer: what the agent holds is unknown, so only a full table is safe.
    in_flight_ = nullptr;
    need_full_ = true;
  }
  const NodeId node = latest_->overlay->Find(wire_id_);
  if (node == kNoNode) return false;  // no longer configured; the stream is being closed
  const RouteSnapshot* base = need_full_ || !delta_tables_ ? nullptr : acked_.get();
  const bool changed = BuildRouteTable(*latest_, node, base, *out.mutable_table(), compact_tables_);
  if (!changed && snapshot_gap_ < refresh_ && now - in_flight_since_ < refresh_ - snapshot_gap_) {
    // Nothing of the node's changed, and the next snapshot is soon enough for the refresh: the
    // agent's table is this one. The next snapshot replaces this one and is compared with the
    // same acked table.
    ++unchanged_held_;
    return false;
  }
  if (out.table().base_version() == 0) {
    ++full_sent_;
  } else {
    ++delta_sent_;
  }
  need_full_ = false;
  in_flight_ = latest_;
  in_flight_since_ = now;
  floor_ = latest_->version;
  return true;
}

AckOutcome AgentSession::OnAck(const v1::TableAck& ack) {
  if (in_flight_ == nullptr || ack.version() != in_flight_->version) return AckOutcome::kStale;
  if (ack.accepted()) {
    acked_ = std::move(in_flight_);
    in_flight_ = nullptr;
    return AckOutcome::kAccepted;
  }
  in_flight_ = nullptr;
  need_full_ = true;
  // The agent cannot fill in what the compact form leaves out (its configuration lags the
  // controller's): it gets whole tables for the rest of this stream. Other refusals (a link
  // it sees down, a delta's base) change nothing here.
  if (ack.compact_refused()) compact_tables_ = false;
  return AckOutcome::kRefused;
}

}  // namespace dar::control
