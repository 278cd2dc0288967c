// ControllerCore's admin API: the views of nodes, links, routes, events, policy and keys,
// and the operator's changes (policy, key rotation, drains).
#include <cmath>

#include "base/status_macros.h"
#include "control/controller_core.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"

namespace dar::control {

absl::Status ControllerCore::CheckAdmin(const security::SpiffeId& peer) const {
  MutexLock lock(&mu_);
  if (peer.kind == security::PeerKind::kAdmin && peer.trust_domain == config_.trust_domain) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(fmt::format(
      "admin API: the client is {}, not an admin of trust domain {} (spiffe://{}/admin/<name>)",
      peer.ToString(), config_.trust_domain, config_.trust_domain));
}

void ControllerCore::SetRevocations(std::shared_ptr<const security::RevocationList> list) {
  MutexLock lock(&mu_);
  if (list == revoked_) return;
  const size_t count = list == nullptr ? 0 : list->size();
  revoked_ = std::move(list);
  RecordEventLocked(
      "revocations_loaded", "",
      fmt::format("{} revoked certificate{} refused from now on", count, count == 1 ? "" : "s"));
}

std::shared_ptr<const security::RevocationList> ControllerCore::revocations() const {
  MutexLock lock(&mu_);
  return revoked_;
}

absl::Status ControllerCore::CheckNotRevoked(const std::string& serial,
                                             const std::string& who) const {
  MutexLock lock(&mu_);
  if (revoked_ == nullptr || !revoked_->Revoked(serial)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      fmt::format("the certificate of {} (serial {}) is revoked", who, serial));
}

void ControllerCore::OnAdminRefused(const std::string& who, const absl::Status& status) {
  metrics_.admin_refused->Increment();
  RecordEvent("admin_refused", who, std::string(status.message()));
}

v1::NodeView ControllerCore::NodeViewLocked(NodeId n) const {
  v1::NodeView view;
  const uint32_t wire = overlay_->wire_id[n];
  view.set_node_id(wire);
  view.set_name(overlay_->name(n));
  view.set_overlay_address(overlay_->overlay_address[n]);
  if (auto it = agents_.find(wire); it != agents_.end()) {
    view.set_connected(it->second.link != nullptr);
    view.set_acked_version(it->second.acked_version);
    view.set_refused_tables(it->second.refused_tables);
    view.set_last_seen_unix_ns(it->second.last_seen_unix_ns);
    view.set_static_table(it->second.table_status.static_table());
    view.set_fallbacks(it->second.table_status.fallbacks());
    view.set_samples_dropped(it->second.samples_dropped);
  }
  return view;
}

std::vector<v1::NodeView> ControllerCore::ListNodes() const {
  MutexLock lock(&mu_);
  std::vector<v1::NodeView> out;
  out.reserve(static_cast<size_t>(overlay_->topology.num_nodes()));
  for (NodeId n = 0; n < overlay_->topology.num_nodes(); ++n) out.push_back(NodeViewLocked(n));
  return out;
}

v1::TopologyView ControllerCore::GetTopology() const {
  v1::TopologyView view;
  for (v1::NodeView& n : ListNodes()) *view.add_nodes() = std::move(n);
  for (v1::LinkView& l : ListLinks()) *view.add_links() = std::move(l);
  return view;
}

absl::StatusOr<v1::GetRoutesResponse> ControllerCore::GetRoutes(
    const v1::GetRoutesRequest& request) const {
  std::shared_ptr<const RouteSnapshot> snapshot;
  {
    MutexLock lock(&mu_);
    snapshot = latest_;
  }
  if (snapshot == nullptr) return absl::UnavailableError("no tables yet: no cycle has run");
  if (request.traffic_class() >= static_cast<uint32_t>(kTrafficClasses)) {
    return absl::InvalidArgumentError(fmt::format(
        "traffic_class {} does not exist (0 latency, 1 bulk)", request.traffic_class()));
  }
  const Overlay& o = *snapshot->overlay;
  const int n = o.topology.num_nodes();
  NodeId only_node = kNoNode, only_dest = kNoNode;
  if (!request.node().empty() && (only_node = o.FindByNameOrId(request.node())) == kNoNode) {
    return absl::NotFoundError(fmt::format("node '{}': no such name or id", request.node()));
  }
  if (!request.destination().empty() &&
      (only_dest = o.FindByNameOrId(request.destination())) == kNoNode) {
    return absl::NotFoundError(
        fmt::format("destination '{}': no such name or id", request.destination()));
  }
  const int cls = static_cast<int>(request.traffic_class());
  v1::GetRoutesResponse out;
  out.set_version(snapshot->version);
  for (NodeId v = 0; v < n; ++v) {
    if (only_node != kNoNode && v != only_node) continue;
    for (NodeId d = 0; d < n; ++d) {
      if (d == v || (only_dest != kNoNode && d != only_dest)) continue;
      const absl::Span<const NextHop> hops = snapshot->Row(cls, v, d);
      v1::RouteView* r = out.add_routes();
      r->set_node(o.name(v));
      r->set_destination(o.name(d));
      r->set_traffic_class(cls);
      r->set_potential(snapshot->Potential(cls, d, v));
      for (const NextHop& h : hops) {
        v1::NextHopView* nh = r->add_next_hops();
        nh->set_neighbour(o.name(o.topology.link(h.link).dst));
        nh->set_weight(h.weight);
      }
    }
  }
  return out;
}

std::vector<v1::Event> ControllerCore::ListEvents(uint32_t limit) const {
  MutexLock lock(&mu_);
  std::vector<v1::Event> out;
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (limit != 0 && out.size() >= limit) break;
    out.push_back(*it);
  }
  return out;
}

std::pair<uint64_t, int64_t> ControllerCore::LatestVersion() const {
  MutexLock lock(&mu_);
  if (latest_ == nullptr) return {0, 0};
  return {latest_->version, latest_->computed_unix_ns};
}

std::string ControllerCore::DecisionLayer() const {
  MutexLock lock(&cycle_mu_);
  return marginal_ != nullptr ? "marginal" : "diffusion";
}

std::vector<v1::Event> ControllerCore::EventsSince(uint64_t* cursor, size_t limit) const {
  MutexLock lock(&mu_);
  const uint64_t first_kept = events_recorded_ - events_.size();
  uint64_t from = std::max(*cursor, first_kept);
  if (limit != 0 && events_recorded_ - from > limit) from = events_recorded_ - limit;
  std::vector<v1::Event> out;
  for (uint64_t i = from; i < events_recorded_; ++i) {
    out.push_back(events_[i - first_kept]);
  }
  *cursor = events_recorded_;
  return out;
}

v1::PolicySettings ControllerCore::GetPolicy() const {
  MutexLock lock(&mu_);
  v1::PolicySettings s;
  const RouteComputerConfig& r = policy_.routes;
  s.set_temperature(r.diffusion.temperature);
  s.set_hysteresis(r.diffusion.hysteresis);
  s.set_min_cost_change(r.min_cost_change);
  s.set_forwarding_mode(std::string(ForwardingModeName(policy_.forwarding_mode)));
  s.set_cycle_ms(static_cast<uint32_t>(policy_.cycle.count() / 1000000));
  s.set_latency_utilisation_weight(r.latency.utilisation);
  s.set_bulk_utilisation_weight(r.bulk.utilisation);
  v1::LearnedPolicyView& l = *s.mutable_learned();
  l = learned_;
  l.set_policy_cycles(static_cast<uint64_t>(metrics_.policy_cycles->Value()));
  l.set_policy_failures(static_cast<uint64_t>(metrics_.policy_failures->Value()));
  l.set_policy_decisions(static_cast<uint64_t>(metrics_.policy_decisions->Value()));
  l.set_last_failure(policy_last_failure_);
  return s;
}

absl::StatusOr<v1::PolicySettings> ControllerCore::SetPolicy(const v1::PolicySettings& s) {
  const auto check = [](double v, double lo, double hi, std::string_view field) {
    if (std::isfinite(v) && v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(
        fmt::format("policy.{}: must be in [{}, {}], got {}", field, lo, hi, v));
  };
  for (absl::Status st :
       {check(s.temperature(), 0, 1e6, "temperature"), check(s.hysteresis(), 0, 2, "hysteresis"),
        check(s.min_cost_change(), 0, 1e6, "min_cost_change"),
        check(s.latency_utilisation_weight(), 0, 1e6, "latency_utilisation_weight"),
        check(s.bulk_utilisation_weight(), 0, 1e6, "bulk_utilisation_weight")}) {
    if (!st.ok()) return st;
  }
  if (s.cycle_ms() > 60000) {
    return absl::InvalidArgumentError(
        fmt::format("policy.cycle_ms: must be 1..60000 (0 keeps it), got {}", s.cycle_ms()));
  }
  std::optional<ForwardingMode> mode;
  if (!s.forwarding_mode().empty()) {
    absl::StatusOr<ForwardingMode> m = ParseForwardingMode(s.forwarding_mode());
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("policy.forwarding_mode: {}", std::string(m.status().message())));
    }
    mode = *m;
  }
  std::vector<std::shared_ptr<AgentLink>> links;
  std::shared_ptr<const v1::AgentConfig> agent_config;
  {
    MutexLock lock(&mu_);
    ControllerPolicy p = policy_;
    p.routes.diffusion.temperature = s.temperature();
    p.routes.diffusion.hysteresis = s.hysteresis();
    p.routes.min_cost_change = s.min_cost_change();
    p.routes.latency.utilisation = s.latency_utilisation_weight();
    p.routes.bulk.utilisation = s.bulk_utilisation_weight();
    if (s.cycle_ms() != 0) p.cycle = Milliseconds(s.cycle_ms());
    if (mode) p.forwarding_mode = *mode;
    if (absl::Status st = p.routes.Validate(); !st.ok()) {
      return absl::InvalidArgumentError(fmt::format("policy: {}", std::string(st.message())));
    }
    const bool mode_changed = p.forwarding_mode != policy_.forwarding_mode;
    policy_ = p;
    policy_dirty_ = true;
    if (mode_changed) {
      agent_config_ = BuildAgentConfigLocked();
      agent_config = agent_config_;
      links = ConnectedLinksLocked();
    }
    policy_override_ = s;
    policy_override_->clear_learned();
    SaveOperatorStateLocked();
    RecordEventLocked("policy_changed", "",
                      fmt::format("temperature {}, hysteresis {}, min_cost_change {}, "
                                  "forwarding {}, cycle {} ms, utilisation weights {}/{}",
                                  s.temperature(), s.hysteresis(), s.min_cost_change(),
                                  ForwardingModeName(p.forwarding_mode), p.cycle.count() / 1000000,
                                  s.latency_utilisation_weight(), s.bulk_utilisation_weight()));
  }
  for (const auto& link : links) link->OfferConfig(agent_config);
  return GetPolicy();
}

v1::KeyRingView ControllerCore::KeyRingViewLocked() const {
  v1::KeyRingView view;
  for (const v1::OverlayKey& k : keys_.keys()) {
    v1::KeyView* v = view.add_keys();
    v->set_key_id(k.key_id());
    v->set_active(k.active());
  }
  view.set_phase(security::KeyPhaseName(keys_.phase()));
  view.set_phase_since_unix_ns(keys_.phase_since_unix_ns());
  return view;
}

ControllerCore::ConfigPush ControllerCore::KeysChangedLocked(const std::string& why) {
  agent_config_ = BuildAgentConfigLocked();
  std::string ids;
  for (const v1::OverlayKey& k : keys_.keys()) {
    ids += fmt::format("{}{}{}", ids.empty() ? "" : ", ", k.key_id(), k.active() ? "*" : "");
  }
  RecordEventLocked("keys", "",
                    fmt::format("{}: {} ({})", why, security::KeyPhaseName(keys_.phase()), ids));
  return ConfigPush{agent_config_, ConnectedLinksLocked()};
}

v1::KeyRingView ControllerCore::GetKeys() const {
  MutexLock lock(&mu_);
  return KeyRingViewLocked();
}

absl::StatusOr<v1::KeyRingView> ControllerCore::RotateKeys() {
  ConfigPush push;
  v1::KeyRingView view;
  {
    MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const bool started, keys_.Rotate(clock_.UnixNanos()));
    if (started) push = KeysChangedLocked("rotation requested");
    view = KeyRingViewLocked();
    view.set_rotation_started(started);
  }
  push.Send();
  return view;
}

std::shared_ptr<StateStore> StateDirStore(const ControllerConfig& config) {
  if (config.state_dir.empty()) return nullptr;
  return std::make_shared<DirectoryStateStore>(config.state_dir);
}

absl::StatusOr<security::KeyRing> KeyRingFor(const ControllerConfig& config, int64_t now_unix_ns,
                                             std::shared_ptr<StateStore> store) {
  security::KeyRingOptions o;
  o.store = std::move(store);
  o.rotate_every = config.key_rotate_every;
  o.rollout = config.key_rollout;
  if (config.initial_key) {
    ASSIGN_OR_RETURN(const net::OverlayKeyBytes key,
                     security::LoadKeyFile(config.initial_key->file));
    o.initial = std::make_pair(config.initial_key->id, key);
  }
  return security::KeyRing::Load(o, now_unix_ns);
}

absl::StatusOr<bool> ControllerCore::Drain(const std::string& a, const std::string& b, bool drain) {
  MutexLock lock(&mu_);
  const NodeId na = overlay_->FindByNameOrId(a);
  const NodeId nb = overlay_->FindByNameOrId(b);
  for (const auto& [text, n] : {std::pair{&a, na}, std::pair{&b, nb}}) {
    if (n == kNoNode) return absl::NotFoundError(fmt::format("drain: unknown node '{}'", *text));
  }
  if (overlay_->topology.FindLink(na, nb) == kNoLink) {
    return absl::NotFoundError(fmt::format("drain: no link {}-{} in the configuration",
                                           overlay_->name(na), overlay_->name(nb)));
  }
  const auto key = CableKey(overlay_->name(na), overlay_->name(nb));
  const bool changed = drain ? drained_.insert(key).second : drained_.erase(key) > 0;
  if (changed) {
    RecordEventLocked(drain ? "link_drained" : "link_undrained", overlay_->name(na),
                      fmt::format("{}-{}", key.first, key.second));
    SaveOperatorStateLocked();
  }
  return changed;
}

}  // namespace dar::control
