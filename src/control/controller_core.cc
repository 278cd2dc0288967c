// ControllerCore: construction, the publisher, and the agents' streams (admission, samples,
// table acks). The decision cycle, the admin API and the configuration are beside it:
// controller_cycle.cc, controller_admin.cc, controller_reload.cc.
#include "control/controller_core.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "base/status_macros.h"
#include "fmt/format.h"
#include "security/certs.h"
#include "wire/link_sample_wire.h"

namespace dar::control {
namespace {

constexpr size_t kMaxSamplesPerMessage = 4096;

}  // namespace

std::pair<std::string, std::string> CableKey(const std::string& a, const std::string& b) {
  return a < b ? std::pair(a, b) : std::pair(b, a);
}

ControllerCore::ControllerCore(const ControllerConfig& config, const Clock& clock, JsonLog& log,
                               ControllerMetrics& metrics, bool publish_thread,
                               std::optional<security::KeyRing> keys,
                               std::optional<TableVersions> versions,
                               std::shared_ptr<StateStore> state)
    : clock_(clock),
      log_(log),
      metrics_(metrics),
      state_(state != nullptr ? std::move(state) : StateDirStore(config)),
      config_(config),
      policy_(config.policy),
      // Without a file or an initial key, Load cannot fail.
      keys_(keys ? std::move(*keys)
                 : *security::KeyRing::Load(security::KeyRingOptions{}, clock.UnixNanos())),
      // Without a file, Load cannot fail either.
      versions_(versions ? std::move(*versions) : *TableVersions::Load("", clock.UnixNanos())) {
  assert(!config.trust_domain.empty());
  overlay_ = MakeOverlay(config_);
  agent_config_ = BuildAgentConfigLocked();
  LoadedModel model = LoadModel(config_, "the analytic engine runs");
  weight_policy_ = std::move(model.policy);
  learned_ = std::move(model.view);
  metrics_.SetPolicyActive(weight_policy_ != nullptr);
  ResetComputer(clock_.Now());
  if (publish_thread) publisher_ = std::thread([this] { PublishLoop(); });
}

ControllerCore::~ControllerCore() {
  if (!publisher_.joinable()) return;
  {
    MutexLock lock(&pub_mu_);
    pub_stop_ = true;
  }
  pub_cv_.NotifyAll();
  publisher_.join();
}

void ControllerCore::PublishLoop() {
  for (;;) {
    std::shared_ptr<const RouteSnapshot> snapshot;
    {
      MutexLock lock(&pub_mu_);
      pub_cv_.Wait(&pub_mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pub_mu_) {
        return pub_stop_ || pub_pending_ != nullptr;
      });
      if (pub_stop_) return;
      snapshot = std::move(pub_pending_);
      pub_pending_ = nullptr;
    }
    const Duration took = OfferToAll(snapshot);
    log_.Debug("publish", {{"version", snapshot->version}, {"publish_ms", ToMillis(took)}});
  }
}

Duration ControllerCore::OfferToAll(const std::shared_ptr<const RouteSnapshot>& snapshot) {
  const auto start = std::chrono::steady_clock::now();
  // A replica that lost the lead since the cycle offers nothing (its tables would be refused
  // where a newer leader's arrived, but need not go out at all).
  if (!Acts()) return Duration(0);
  std::vector<std::shared_ptr<AgentLink>> links;
  {
    MutexLock lock(&mu_);
    links = ConnectedLinksLocked();
  }
  for (const std::shared_ptr<AgentLink>& link : links) link->OfferSnapshot(snapshot);
  const Duration took =
      std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start);
  metrics_.publish_seconds->Observe(ToSeconds(took));
  return took;
}

ControllerCore::LoadedModel ControllerCore::LoadModel(const ControllerConfig& config,
                                                      const char* outcome) {
  LoadedModel out;
  const ControllerPolicy& p = config.policy;
  out.view.set_active("analytic");
  if (p.policy_model.empty()) return out;
  out.view.set_model_file(p.policy_model);
  out.view.set_precision(PrecisionName(p.policy_precision));
  absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> policy = LoadLearnedPolicy(config);
  if (!policy.ok()) {
    out.status = policy.status();
    const std::string why(policy.status().message());
    out.view.set_refusal(why);
    out.view.set_refused_unix_ns(clock_.UnixNanos());
    metrics_.policy_model_refusals->Increment();
    log_.Error("learned policy model refused",
               {{"model", p.policy_model}, {"error", why}, {"outcome", outcome}});
    RecordEvent("policy_model_refused", "", fmt::format("{}; {}", why, outcome));
    return out;
  }
  const learn::PolicyModel& m = (*policy)->model();
  out.view.set_active("learned");
  out.view.set_name(m.name);
  out.view.set_created_by(m.created_by);
  out.view.set_seed(m.seed);
  out.view.set_format_version(learn::kModelFormatVersion);
  out.view.set_checksum(learn::PolicyModelChecksum(m));
  out.view.set_loaded_unix_ns(clock_.UnixNanos());
  RecordEvent("policy_model_loaded", "",
              fmt::format("{}, checksum {}", (*policy)->Describe(), out.view.checksum()));
  out.policy = std::move(*policy);
  return out;
}

void ControllerCore::UsePool(int threads) {
  if (pool_ != nullptr && pool_->concurrency() == threads) return;
  auto next = std::make_unique<ThreadPool>(threads);
  if (computer_ != nullptr) computer_->set_executor(next.get());
  pool_ = std::move(next);
}

void ControllerCore::ResetComputer(Time now) {
  UsePool(policy_.cycle_threads);
  computer_ = std::make_unique<RouteComputer>(overlay_->topology, policy_.routes, pool_.get());
  computer_->set_weight_policy(weight_policy_);
  policy_counted_ = RouteComputerStats{};
  computer_overlay_ = overlay_;
  marginal_.reset();
  const int links = overlay_->topology.num_links();
  ends_.assign(links, LinkEnd{now, true, 0});
  cable_down_.assign(links, false);
  policy_dirty_ = false;
}

std::shared_ptr<const v1::AgentConfig> ControllerCore::BuildAgentConfigLocked() const {
  auto c = std::make_shared<v1::AgentConfig>();
  c->set_probe_interval_ms(static_cast<uint32_t>(config_.probe_interval.count() / 1000000));
  c->set_missed_probes(config_.missed_probes);
  c->set_forwarding_mode(std::string(ForwardingModeName(policy_.forwarding_mode)));
  c->set_table_stale_ms(static_cast<uint32_t>(config_.table_stale.count() / 1000000));
  for (const v1::OverlayKey& k : keys_.keys()) *c->add_keys() = k;
  for (NodeId n = 0; n < overlay_->topology.num_nodes(); ++n) {
    v1::OverlayNode* o = c->add_nodes();
    o->set_node_id(overlay_->wire_id[n]);
    o->set_name(overlay_->name(n));
    o->set_overlay_address(overlay_->overlay_address[n]);
  }
  return c;
}

std::vector<std::shared_ptr<AgentLink>> ControllerCore::ConnectedLinksLocked() const {
  std::vector<std::shared_ptr<AgentLink>> out;
  for (const auto& [id, agent] : agents_) {
    if (agent.link != nullptr) out.push_back(agent.link);
  }
  return out;
}

void ControllerCore::RecordEventLocked(const std::string& kind, const std::string& node,
                                       const std::string& detail) {
  v1::Event e;
  e.set_time_unix_ns(clock_.UnixNanos());
  e.set_kind(kind);
  e.set_node(node);
  e.set_detail(detail);
  events_.push_back(std::move(e));
  ++events_recorded_;
  while (events_.size() > static_cast<size_t>(std::max(1, config_.events_kept))) {
    events_.pop_front();
  }
  metrics_.CountEvent(kind);
  const bool trouble = kind == "link_down" || kind.find("refused") != std::string::npos;
  log_.Write(trouble ? LogLevel::kWarn : LogLevel::kInfo, "event",
             {{"kind", kind}, {"node", node}, {"detail", detail}});
}

void ControllerCore::RecordEvent(const std::string& kind, const std::string& node,
                                 const std::string& detail) {
  MutexLock lock(&mu_);
  RecordEventLocked(kind, node, detail);
}

// --- Agents ---

absl::Status ControllerCore::CheckRelay(const security::SpiffeId& relay, uint32_t member) const {
  MutexLock lock(&mu_);  // a reload replaces the configuration and the overlay
  if (relay.kind != security::PeerKind::kNode || relay.trust_domain != config_.trust_domain) {
    return absl::PermissionDeniedError(
        fmt::format("relay for node {}: the relay is {}, not a node of trust domain {}", member,
                    relay.ToString(), config_.trust_domain));
  }
  const Topology& topo = overlay_->topology;
  const NodeId m = overlay_->Find(member);
  if (m == kNoNode) {
    return absl::NotFoundError(
        fmt::format("node {} is not in the controller's configuration", member));
  }
  const std::vector<LinkId>& links = topo.node(m).out_links;
  // A node's certificate names its wire id (Admit).
  if (links.size() != 1 ||
      std::to_string(overlay_->wire_id[topo.link(links[0]).dst]) != relay.name) {
    return absl::PermissionDeniedError(fmt::format(
        "{} may not relay for node {} ({}): a relay carries only the nodes whose one link goes "
        "to it",
        relay.ToString(), member, overlay_->name(m)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ControllerCore::Admission> ControllerCore::Admit(const security::SpiffeId& peer,
                                                                const v1::Hello& hello,
                                                                std::shared_ptr<AgentLink> link) {
  const uint32_t id = hello.node_id();
  const std::string claimed = std::to_string(id);
  const std::string not_leading = NotLeading();  // may ask etcd: outside the lock
  absl::Status refusal;
  Admission admission;
  std::shared_ptr<AgentLink> replaced;
  {
    MutexLock lock(&mu_);
    const NodeId v = overlay_->Find(id);
    if (peer.kind != security::PeerKind::kNode) {
      refusal = absl::PermissionDeniedError(
          fmt::format("hello for node {}: the client is {}, not a node", id, peer.ToString()));
    } else if (peer.trust_domain != config_.trust_domain) {
      refusal = absl::PermissionDeniedError(
          fmt::format("hello for node {}: the client is {}, outside trust domain {}", id,
                      peer.ToString(), config_.trust_domain));
    } else if (peer.name != claimed) {
      refusal = absl::PermissionDeniedError(fmt::format(
          "hello says node {} but the client's certificate is {}", id, peer.ToString()));
    } else if (!not_leading.empty()) {
      refusal = absl::FailedPreconditionError(not_leading);
    } else if (v == kNoNode) {
      refusal =
          absl::NotFoundError(fmt::format("node {} is not in the controller's configuration", id));
    } else {
      for (int i = 0; i < hello.links_size(); ++i) {
        const uint32_t nb = hello.links(i).neighbor_id();
        const NodeId u = overlay_->Find(nb);
        if (u == kNoNode || overlay_->topology.FindLink(v, u) == kNoLink) {
          refusal = absl::FailedPreconditionError(fmt::format(
              "hello from node {} ({}): links[{}] to node {} is not a configured link of it", id,
              overlay_->name(v), i, nb));
          break;
        }
      }
    }
    absl::Status save_error;
    TableVersions::Claim claim = TableVersions::Claim::kKnown;
    if (refusal.ok()) {
      claim = versions_.OnClaim(hello.installed_version(), clock_.UnixNanos(), &save_error);
    }
    if (claim == TableVersions::Claim::kRefused) {
      refusal = absl::PermissionDeniedError(fmt::format(
          "hello from node {} claims installed table version {}, more than {} above this "
          "controller's next version {} and its clock: not taken (versions are the "
          "controller's; if the node is honest, remove its saved tables)",
          id, hello.installed_version(), TableVersions::kMaxClaimStep, versions_.next()));
    } else if (claim == TableVersions::Claim::kAdopted) {
      RecordEventLocked(
          "table_versions_adopted", overlay_->name(v),
          fmt::format("the node holds version {}, above this controller's; versions "
                      "continue above it{}",
                      hello.installed_version(),
                      save_error.ok() ? "" : ": " + std::string(save_error.message())));
    }
    if (refusal.ok()) {
      Agent& agent = agents_[id];
      replaced = std::move(agent.link);
      agent.link = std::move(link);
      agent.last_seen_unix_ns = clock_.UnixNanos();
      admission.config = agent_config_;
      admission.snapshot = latest_;
      admission.ack_timeout = config_.table_stale / 2;
      admission.refresh = TableRefresh(config_.table_stale);
      const std::string mode(ForwardingModeName(policy_.forwarding_mode));
      const auto& modes = hello.capabilities().forwarding_modes();
      if (!modes.empty() && std::find(modes.begin(), modes.end(), mode) == modes.end()) {
        log_.Warn("agent does not support the forwarding mode",
                  {{"node", overlay_->name(v)}, {"mode", mode}});
      }
      RecordEventLocked(
          "agent_connected", overlay_->name(v),
          fmt::format("id {}, delta tables {}, installed version {}{}", id,
                      hello.capabilities().delta_tables() ? "yes" : "no", hello.installed_version(),
                      replaced != nullptr ? ", replaces a stream" : ""));
      int connected = 0;
      for (const auto& [wire, a] : agents_) connected += a.link != nullptr;
      metrics_.agents_connected->Set(connected);
      OnTableStatusLocked(id, hello.table_status());
    }
  }
  if (!refusal.ok()) {
    OnStreamRefused("hello_refused", claimed, refusal);
    return refusal;
  }
  if (replaced != nullptr) {
    replaced->Close(
        absl::AbortedError(fmt::format("node {} opened a newer stream; this one is closed", id)));
  }
  return admission;
}

void ControllerCore::Detach(uint32_t wire_id, const AgentLink* link) {
  MutexLock lock(&mu_);
  auto it = agents_.find(wire_id);
  if (it == agents_.end() || it->second.link.get() != link || link == nullptr) return;
  it->second.link = nullptr;
  const NodeId v = overlay_->Find(wire_id);
  RecordEventLocked("agent_disconnected",
                    v == kNoNode ? std::to_string(wire_id) : overlay_->name(v),
                    fmt::format("id {}", wire_id));
  int connected = 0;
  for (const auto& [wire, a] : agents_) connected += a.link != nullptr;
  metrics_.agents_connected->Set(connected);
}

absl::Status ControllerCore::OnSamples(uint32_t wire_id, const v1::LinkSamples& samples) {
  std::shared_ptr<const Overlay> overlay;
  {
    MutexLock lock(&mu_);
    overlay = overlay_;
  }
  const NodeId v = overlay->Find(wire_id);
  if (v == kNoNode) {
    return absl::FailedPreconditionError(
        fmt::format("node {} is no longer in the configuration", wire_id));
  }
  if (samples.samples_size() > static_cast<int>(kMaxSamplesPerMessage)) {
    return absl::InvalidArgumentError(
        fmt::format("node {} sent {} samples in one message, at most "
                    "{} allowed",
                    wire_id, samples.samples_size(), kMaxSamplesPerMessage));
  }
  const Time now = clock_.Now();
  const int64_t unix_now = clock_.UnixNanos();
  std::vector<PendingSample> batch;
  batch.reserve(samples.samples_size());
  const Topology& topo = overlay->topology;
  for (int i = 0; i < samples.samples_size(); ++i) {
    const v1::LinkSample& s = samples.samples(i);
    const NodeId u = overlay->Find(s.neighbor_id());
    const LinkId l = u == kNoNode ? kNoLink : topo.FindLink(v, u);
    if (l == kNoLink) {
      return absl::PermissionDeniedError(
          fmt::format("node {} ({}) sent samples[{}] for a link to node {}, which is not one of "
                      "its links",
                      wire_id, overlay->name(v), i, s.neighbor_id()));
    }
    if (absl::Status st = wire::CheckWireSample(s, i, wire_id); !st.ok()) return st;
    batch.push_back(
        PendingSample{l, wire::FromWire(s, topo.link(l).params.capacity, now), now, unix_now});
  }
  // What the node sent per destination. An entry for a node the overlay lacks (an agent
  // with an older node list) or for the node itself, or an impossible count, is left out
  // and said once per (node, destination) as an event; the samples still count.
  std::vector<PendingSent> sent;
  std::vector<std::pair<uint32_t, std::string>> ignored;  // destination id, why
  for (int i = 0; i < samples.sent_size() && i < topo.num_nodes(); ++i) {
    const v1::SentBytes& x = samples.sent(i);
    const NodeId d = overlay->Find(x.destination_id());
    if (d == kNoNode || d == v || x.bytes() > kMaxSentBytesPerReport) {
      ignored.emplace_back(
          x.destination_id(),
          fmt::format("sent[{}] for destination {}: {}", i, x.destination_id(),
                      d == kNoNode ? "not a node of the overlay"
                      : d == v     ? "the node itself"
                                   : fmt::format("{} bytes in one report", x.bytes())));
      continue;
    }
    sent.push_back(PendingSent{v, d, x.bytes()});
  }
  size_t dropped = 0;          // samples
  size_t dropped_reports = 0;  // entries of what it sent
  bool newly_down = false;
  {
    MutexLock lock(&mu_);
    if (overlay != overlay_) return absl::OkStatus();  // a reload raced: these ids are stale
    auto it = agents_.find(wire_id);
    if (it != agents_.end()) it->second.last_seen_unix_ns = unix_now;
    if (reported_overlay_ != overlay) {
      reported_.assign(static_cast<size_t>(topo.num_links()), Reported::kUnheard);
      pending_by_node_.assign(static_cast<size_t>(topo.num_nodes()), 0);
      pending_sent_by_node_.assign(static_cast<size_t>(topo.num_nodes()), 0);
      reported_overlay_ = overlay;
    }
    for (const PendingSample& p : batch) {
      Reported& r = reported_[static_cast<size_t>(p.link)];
      newly_down |= !p.sample.up && r != Reported::kDown;
      r = p.sample.up ? Reported::kUp : Reported::kDown;
    }
    // Bounded, and by node: 64 samples of each of its link ends (6 s at 10 Hz, so a stalled
    // cycle cannot let memory grow) and 64 more. A node sending more than that between two
    // cycles loses its own samples; the others' shares are untouched.
    uint32_t& mine = pending_by_node_[static_cast<size_t>(v)];
    const size_t share = 64 * (topo.node(v).out_links.size() + 1);
    for (PendingSample& p : batch) {
      if (mine >= share) {
        ++dropped;
        continue;
      }
      pending_.push_back(p);
      ++mine;
    }
    // What it sent, by the same rule: 64 reports of each destination a cycle.
    uint32_t& mine_sent = pending_sent_by_node_[static_cast<size_t>(v)];
    const size_t sent_share = 64 * static_cast<size_t>(topo.num_nodes());
    for (const PendingSent& x : sent) {
      if (mine_sent >= sent_share) {
        ++dropped_reports;
        continue;
      }
      pending_sent_.push_back(x);
      ++mine_sent;
    }
    if (dropped + dropped_reports > 0 && it != agents_.end()) {
      Agent& a = it->second;
      a.samples_dropped += dropped + dropped_reports;
      if (unix_now - a.dropped_event_unix_ns >= 60'000'000'000) {
        a.dropped_event_unix_ns = unix_now;
        RecordEventLocked("samples_dropped", overlay->name(v),
                          fmt::format("{} of its samples and reports dropped so far: it sends "
                                      "more than its share ({} samples a cycle); other nodes' "
                                      "samples are kept",
                                      a.samples_dropped, share));
      }
    }
    for (const auto& [destination, why] : ignored) {
      if (sent_ignored_.insert({wire_id, destination}).second) {
        RecordEventLocked("sent_ignored", overlay->name(v), why);
      }
    }
  }
  metrics_.sample_messages->Increment();
  metrics_.samples->Increment(static_cast<double>(batch.size() - dropped));
  if (dropped > 0) metrics_.samples_dropped->Increment(static_cast<double>(dropped));
  if (newly_down && early_cycle_) early_cycle_();
  return absl::OkStatus();
}

void ControllerCore::CloseAll(const absl::Status& status) {
  std::vector<std::shared_ptr<AgentLink>> links;
  {
    MutexLock lock(&mu_);
    links = ConnectedLinksLocked();
  }
  for (const auto& link : links) link->Close(status);
}

std::string ControllerCore::NotLeading() const {
  if (Acts()) return "";
  const std::string leader = replica_.leader ? replica_.leader() : "";
  return leader.empty()
             ? std::string("this replica does not lead, and no replica leads now")
             : fmt::format("this replica does not lead; the leading replica is at {}", leader);
}

absl::Status ControllerCore::Lead(uint64_t term) {
  {
    // What this replica heard of the links when it last led is old, and their agents have not
    // reconnected yet: every end starts unheard, as at a start, so that the term's first
    // tables do not route around links only this replica's absence made silent (CableUp).
    MutexLock cycle_lock(&cycle_mu_);
    std::fill(ends_.begin(), ends_.end(), LinkEnd{});
  }
  {
    MutexLock lock(&mu_);
    versions_ = TableVersions::ForTerm(term);
    // What this replica knew of the operator's changes when it last led is stale: the store's
    // word replaces it.
    drained_.clear();
    policy_ = config_.policy;
    policy_dirty_ = true;
    policy_override_.reset();
    RecordEventLocked("leading", "", fmt::format("term {}", term));
  }
  absl::StatusOr<security::KeyRing> keys = KeyRingFor(config(), clock_.UnixNanos(), state_);
  if (!keys.ok()) return keys.status();  // the ring in memory stays
  {
    MutexLock lock(&mu_);
    keys_ = *std::move(keys);
    agent_config_ = BuildAgentConfigLocked();
  }
  return RestoreOperatorState();
}

void ControllerCore::StepDown(const std::string& why) {
  RecordEvent("leadership_lost", "", why);
  CloseAll(absl::UnavailableError(fmt::format("this replica no longer leads: {}", why)));
}

void ControllerCore::OnTableStatus(uint32_t wire_id, const v1::TableStatus& status) {
  MutexLock lock(&mu_);
  OnTableStatusLocked(wire_id, status);
}

void ControllerCore::OnTableStatusLocked(uint32_t wire_id, const v1::TableStatus& status) {
  Agent& agent = agents_[wire_id];
  const v1::TableStatus before = agent.table_status;
  agent.table_status = status;
  agent.last_seen_unix_ns = clock_.UnixNanos();
  const NodeId v = overlay_->Find(wire_id);
  const std::string name = v == kNoNode ? std::to_string(wire_id) : overlay_->name(v);
  if (status.last_fallback_unix_ns() > before.last_fallback_unix_ns()) {
    SaveOperatorStateLocked();  // heard of: not an event again after a restart
    const double ago_s =
        static_cast<double>(clock_.UnixNanos() - status.last_fallback_unix_ns()) * 1e-9;
    RecordEventLocked(
        "fallback", name,
        fmt::format("its controller table went stale {:.1f} s ago and it forwarded "
                    "on its static table; {} ({} fallbacks since the agent started)",
                    std::max(0.0, ago_s),
                    status.static_table() ? "still does" : "back on a controller table",
                    status.fallbacks()));
  } else if (before.static_table() && !status.static_table() && before.fallbacks() > 0) {
    RecordEventLocked("fallback_recovered", name, "forwards on a controller table again");
  }
}

void ControllerCore::OnAck(uint32_t wire_id, const v1::TableAck& ack, AckOutcome outcome) {
  MutexLock lock(&mu_);
  Agent& agent = agents_[wire_id];
  agent.last_seen_unix_ns = clock_.UnixNanos();
  const NodeId v = overlay_->Find(wire_id);
  const std::string name = v == kNoNode ? std::to_string(wire_id) : overlay_->name(v);
  switch (outcome) {
    case AckOutcome::kAccepted:
      agent.acked_version = ack.version();
      metrics_.tables_accepted->Increment();
      break;
    case AckOutcome::kRefused:
      ++agent.refused_tables;
      metrics_.tables_refused->Increment();
      RecordEventLocked(
          "table_refused", name,
          fmt::format("version {}: {}", ack.version(),
                      ack.reason().empty() ? "no reason given" : ack.reason().substr(0, 500)));
      break;
    case AckOutcome::kStale:
      log_.Debug("ack for a table not in flight",
                 {{"node", name}, {"version", ack.version()}, {"accepted", ack.accepted()}});
      break;
  }
}

void ControllerCore::OnTableSent(uint32_t wire_id, const v1::RouteTable& table) {
  if (table.base_version() == 0) {
    metrics_.tables_sent_full->Increment();
  } else {
    metrics_.tables_sent_delta->Increment();
  }
}

void ControllerCore::OnStreamRefused(const std::string& kind, const std::string& node,
                                     const absl::Status& status) {
  metrics_.streams_refused->Increment();
  RecordEvent(kind, node, status.ToString());
}

}  // namespace dar::control
