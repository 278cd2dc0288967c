#include "control/controller_core.h"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/link_liveness.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"
#include "wire/link_sample_wire.h"

namespace dar::control {
namespace {

constexpr size_t kMaxSamplesPerMessage = 4096;
constexpr int kSummaryEvery = 100;  // cycles between the info-level cycle summaries
// A learned policy failing every cycle would fill the log at 10 lines a second; once a minute
// says it as well (the failures are counted in the metrics).
constexpr Duration kPolicyFailureLogEvery = Seconds(60);

double Millis(Duration d) { return static_cast<double>(d.count()) * 1e-6; }

std::pair<std::string, std::string> CableKey(const std::string& a, const std::string& b) {
  return a < b ? std::pair(a, b) : std::pair(b, a);
}

bool SameOverlay(const ControllerConfig& a, const ControllerConfig& b) {
  if (a.nodes.size() != b.nodes.size() || a.links.size() != b.links.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const ControllerNodeConfig &x = a.nodes[i], &y = b.nodes[i];
    if (x.id != y.id || x.name != y.name || x.overlay_address != y.overlay_address) return false;
  }
  for (size_t i = 0; i < a.links.size(); ++i) {
    const ControllerLinkConfig &x = a.links[i], &y = b.links[i];
    if (x.a != y.a || x.b != y.b || x.capacity != y.capacity || x.delay != y.delay) return false;
  }
  return true;
}

}  // namespace

ControllerCore::ControllerCore(const ControllerConfig& config, const ControllerClock& clock,
                               JsonLog& log, ControllerMetrics& metrics, bool publish_thread,
                               std::optional<security::KeyRing> keys)
    : clock_(clock),
      log_(log),
      metrics_(metrics),
      config_(config),
      policy_(config.policy),
      // Without a file or an initial key, Load cannot fail.
      keys_(keys ? std::move(*keys)
                 : *security::KeyRing::Load(security::KeyRingOptions{}, clock.UnixNanos())) {
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
    log_.Debug("publish", {{"version", snapshot->version}, {"publish_ms", Millis(took)}});
  }
}

Duration ControllerCore::OfferToAll(const std::shared_ptr<const RouteSnapshot>& snapshot) {
  const auto start = std::chrono::steady_clock::now();
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

void ControllerCore::CountPolicy(const RouteCycle& cycle, Time now) {
  const RouteComputerStats& s = computer_->stats();
  metrics_.policy_cycles->Increment(
      static_cast<double>(s.policy_cycles - policy_counted_.policy_cycles));
  metrics_.policy_failures->Increment(
      static_cast<double>(s.policy_failures - policy_counted_.policy_failures));
  metrics_.policy_decisions->Increment(
      static_cast<double>(s.policy_decisions - policy_counted_.policy_decisions));
  metrics_.policy_rows_held->Increment(
      static_cast<double>(s.policy_rows_held - policy_counted_.policy_rows_held));
  policy_counted_ = s;
  if (cycle.policy_error.empty()) return;
  ++policy_failures_unlogged_;
  if (policy_failure_logged_ && now - *policy_failure_logged_ < kPolicyFailureLogEvery) return;
  log_.Warn("learned policy failed: the cycle's tables keep the engine's weights",
            {{"error", cycle.policy_error},
             {"failures", policy_failures_unlogged_},
             {"logged_every_s", ToSeconds(kPolicyFailureLogEvery)}});
  policy_failure_logged_ = now;
  policy_failures_unlogged_ = 0;
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

absl::StatusOr<ControllerCore::Admission> ControllerCore::Admit(const security::SpiffeId& peer,
                                                                const v1::Hello& hello,
                                                                std::shared_ptr<AgentLink> link) {
  const uint32_t id = hello.node_id();
  const std::string claimed = std::to_string(id);
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
    if (refusal.ok()) {
      Agent& agent = agents_[id];
      replaced = std::move(agent.link);
      agent.link = std::move(link);
      agent.last_seen_unix_ns = clock_.UnixNanos();
      next_version_ = std::max(next_version_, hello.installed_version() + 1);
      admission.config = agent_config_;
      admission.snapshot = latest_;
      admission.ack_timeout = config_.table_stale / 2;
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
  size_t dropped = 0;
  bool newly_down = false;
  {
    MutexLock lock(&mu_);
    if (overlay != overlay_) return absl::OkStatus();  // a reload raced: these ids are stale
    auto it = agents_.find(wire_id);
    if (it != agents_.end()) it->second.last_seen_unix_ns = unix_now;
    if (reported_overlay_ != overlay) {
      reported_.assign(static_cast<size_t>(topo.num_links()), Reported::kUnheard);
      reported_overlay_ = overlay;
    }
    for (const PendingSample& p : batch) {
      Reported& r = reported_[static_cast<size_t>(p.link)];
      newly_down |= !p.sample.up && r != Reported::kDown;
      r = p.sample.up ? Reported::kUp : Reported::kDown;
    }
    // Bounded: a stalled cycle must not let memory grow; 64 samples a link is 6 s at 10 Hz.
    const size_t limit = 64 * static_cast<size_t>(topo.num_links()) + 1024;
    for (PendingSample& p : batch) {
      if (pending_.size() >= limit) {
        ++dropped;
        continue;
      }
      pending_.push_back(std::move(p));
    }
    if (pending_sent_.size() < 64 * static_cast<size_t>(topo.num_nodes()) * topo.num_nodes()) {
      pending_sent_.insert(pending_sent_.end(), sent.begin(), sent.end());
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

// --- The cycle ---

std::vector<bool> ControllerCore::DrainedLinks(
    const Overlay& overlay, const std::set<std::pair<std::string, std::string>>& drained) const {
  const Topology& topo = overlay.topology;
  std::vector<bool> out(topo.num_links(), false);
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const Link& link = topo.link(l);
    out[l] = drained.contains(CableKey(overlay.name(link.src), overlay.name(link.dst)));
  }
  return out;
}

CycleReport ControllerCore::RunCycle() {
  MutexLock cycle_lock(&cycle_mu_);
  const Time now = clock_.Now();
  const int64_t unix_now = clock_.UnixNanos();
  CycleReport report;
  std::vector<PendingSample> batch;
  std::vector<PendingSent> sent;
  std::set<std::pair<std::string, std::string>> drained;
  std::optional<RouteComputerConfig> routes;
  int cycle_threads = 0;
  std::optional<MarginalDecisionConfig> marginal;
  std::shared_ptr<const RouteSnapshot> previous;  // the last cycle's
  Duration timeout;
  {
    MutexLock lock(&mu_);
    batch.swap(pending_);
    sent.swap(pending_sent_);
    // A learned policy refines the diffusion engine's weights: with a model, diffusion.
    if (policy_.marginal && policy_.policy_model.empty()) {
      marginal = policy_.marginal_config;
      marginal->period = policy_.cycle;
    }
    drained = drained_;
    previous = latest_;
    if (policy_dirty_) {
      routes = policy_.routes;
      cycle_threads = policy_.cycle_threads;
    }
    policy_dirty_ = false;
    report.version = next_version_++;
    timeout = config_.sample_timeout;
  }
  const std::shared_ptr<const Overlay> overlay = computer_overlay_;
  const Topology& topo = overlay->topology;
  const auto t0 = std::chrono::steady_clock::now();

  if (routes) {
    UsePool(cycle_threads);
    computer_->SetConfig(*routes);
  }
  if (!marginal) {
    marginal_.reset();
  } else if (marginal_ == nullptr || *marginal != marginal_config_) {
    // New settings of the layer start it afresh; a policy change that does not touch them
    // (the diffusion engine's keys, the forwarding mode) keeps the demand and the tables.
    marginal_ = std::make_unique<MarginalDecision>(topo, *marginal);
    marginal_config_ = *marginal;
  }
  if (marginal_ != nullptr) {
    for (const PendingSent& x : sent) {
      marginal_->CountSent(x.src, x.dst, static_cast<int64_t>(x.bytes));
    }
  }
  for (const PendingSample& p : batch) {
    if (marginal_ != nullptr) marginal_->ObserveThroughput(p.link, p.sample.throughput);
    computer_->Observe(p.link, p.sample);
    ends_[p.link] = LinkEnd{p.received, p.sample.up, p.received_unix_ns};
    // Half the base RTT, not the smoothed one: queueing must not pass for propagation (the
    // computer counts it as queueing, StateOf).
    if (!overlay->delay_configured[p.link] && computer_->BaseRtt(p.link) > Duration(0)) {
      computer_->SetLinkParams(p.link, topo.link(p.link).params.capacity,
                               computer_->BaseRtt(p.link) / 2);
    }
  }
  report.samples_applied = static_cast<int>(batch.size());

  struct NewEvent {
    std::string kind, node, detail;
  };
  std::vector<NewEvent> events;
  // What this controller knows of each end (core/link_liveness.h holds the rule).
  const auto end_of = [&](LinkId x) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_) {
    if (x == kNoLink) return CableEnd{.exists = false};
    const LinkEnd& e = ends_[x];
    return CableEnd{.heard = e.heard_unix_ns != 0,
                    .fresh = e.heard_unix_ns != 0 && now - e.heard <= timeout,
                    .says_up = e.up,
                    .age = now - e.heard};
  };
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const LinkId r = topo.link(l).reverse;
    if (r != kNoLink && r < l) continue;  // each cable once
    const CableEnd here = end_of(l), there = end_of(r);
    const bool up = CableUp(here, there);
    if (up != cable_down_[l]) continue;  // unchanged
    cable_down_[l] = !up;
    computer_->SetKnownDown(l, !up);
    if (r != kNoLink) {
      cable_down_[r] = !up;
      computer_->SetKnownDown(r, !up);
    }
    const Link& link = topo.link(l);
    const std::string a = overlay->name(link.src), b = overlay->name(link.dst);
    events.push_back(NewEvent{up ? "link_up" : "link_down", a,
                              fmt::format("{}-{}: {} {}, {} {}", a, b, a, DescribeCableEnd(here), b,
                                          DescribeCableEnd(there))});
  }
  const std::vector<bool> drained_links = DrainedLinks(*overlay, drained);
  int links_down = 0, links_drained = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    computer_->SetDrained(l, drained_links[l]);
    links_down += cable_down_[l];
    links_drained += drained_links[l];
  }
  RouteCycle cycle;
  std::shared_ptr<const RouteSnapshot> snapshot;
  if (marginal_ != nullptr) {
    // The marginal layer decides over the links known up and not drained, at what each is
    // measured to deliver (a shaper or a congested underlay the configuration does not know
    // of: the route computer's delivery estimate, at most the configured capacity); the
    // tables carry the computer's versions (its engines idle), and their potentials are
    // ranks in each destination's DAG, kept from the last snapshot where a table is.
    Topology known = topo;
    for (LinkId l = 0; l < known.num_links(); ++l) {
      if (cable_down_[l] || drained_links[l]) known.mutable_link(l).up = false;
      const DataRate delivers = computer_->DeliveryCapacity(l);
      if (delivers.bps() > 0 && delivers < known.link(l).params.capacity) {
        known.mutable_link(l).params.capacity = delivers;
      }
    }
    const int64_t changes = marginal_->stats().route_changes;
    const std::shared_ptr<const RoutingTables> in_force = marginal_->Decide(now, known);
    const uint64_t first_version = computer_->SkipCycle();
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      auto tables = std::make_shared<RoutingTables>(*in_force);
      tables->set_version(first_version + static_cast<uint64_t>(cls));
      cycle.tables[cls] = std::move(tables);
    }
    cycle.route_changes = marginal_->stats().route_changes - changes;
    snapshot = MakeRankedSnapshot(overlay, cycle.tables, report.version, unix_now, previous.get());
  } else {
    cycle = computer_->Cycle(/*force_full=*/false);
    CountPolicy(cycle, now);
    snapshot = MakeSnapshot(overlay, *computer_, cycle, report.version, unix_now);
  }
  const auto t1 = std::chrono::steady_clock::now();
  ConfigPush rekeyed;
  {
    MutexLock lock(&mu_);
    latest_ = snapshot;
    cycled_ = true;
    last_cycle_ = now;
    if (!cycle.policy_error.empty()) policy_last_failure_ = cycle.policy_error;
    for (const NewEvent& e : events) RecordEventLocked(e.kind, e.node, e.detail);
    absl::StatusOr<bool> keys_changed = keys_.Advance(unix_now);
    if (!keys_changed.ok()) {
      RecordEventLocked("keys_not_saved", "", std::string(keys_changed.status().message()));
    } else if (*keys_changed) {
      rekeyed = KeysChangedLocked("rotation step");
    }
  }
  rekeyed.Send();
  if (publisher_.joinable()) {
    {
      MutexLock lock(&pub_mu_);
      pub_pending_ = snapshot;
    }
    pub_cv_.NotifyOne();
  } else {
    report.publish = OfferToAll(snapshot);
  }

  report.full = cycle.full;
  report.route_changes = cycle.route_changes;
  report.changed_links = cycle.changed_links[0] + cycle.changed_links[1];
  report.classes_recomputed = cycle.classes_recomputed;
  report.links_down = links_down;
  report.policy_error = cycle.policy_error;
  report.decision = std::chrono::duration_cast<Duration>(t1 - t0);
  metrics_.cycle_seconds->Observe(ToSeconds(report.decision));
  metrics_.cycles->Increment();
  if (cycle.full) metrics_.full_cycles->Increment();
  metrics_.route_changes->Increment(static_cast<double>(cycle.route_changes));
  metrics_.links_down->Set(links_down);
  metrics_.links_drained->Set(links_drained);
  metrics_.table_version->Set(static_cast<double>(report.version));
  metrics_.last_cycle_unix_seconds->Set(static_cast<double>(unix_now) * 1e-9);

  log_.Debug("cycle", {{"version", report.version},
                       {"decision_ms", Millis(report.decision)},
                       {"publish_ms", Millis(report.publish)},
                       {"full", report.full},
                       {"route_changes", report.route_changes},
                       {"changed_links", report.changed_links},
                       {"classes_recomputed", report.classes_recomputed},
                       {"samples", report.samples_applied},
                       {"links_down", links_down}});
  recent_decisions_ms_.push_back(Millis(report.decision));
  if (++cycles_since_summary_ >= kSummaryEvery) {
    std::vector<double> d = recent_decisions_ms_;
    std::sort(d.begin(), d.end());
    log_.Info("cycles", {{"cycles", d.size()},
                         {"version", report.version},
                         {"decision_ms_median", d[d.size() / 2]},
                         {"decision_ms_max", d.back()},
                         {"links_down", links_down},
                         {"links_drained", links_drained}});
    recent_decisions_ms_.clear();
    cycles_since_summary_ = 0;
  }
  return report;
}

std::string ControllerCore::HealthProblem() const {
  MutexLock lock(&mu_);
  if (!cycled_) return "no decision cycle has run yet";
  const Duration limit = std::max<Duration>(3 * policy_.cycle, Seconds(1));
  const Duration age = clock_.Now() - last_cycle_;
  if (age > limit) return fmt::format("no decision cycle for {:.0f} ms", Millis(age));
  return "";
}

Duration ControllerCore::cycle_period() const {
  MutexLock lock(&mu_);
  return policy_.cycle;
}

// --- Admin API ---

absl::Status ControllerCore::CheckAdmin(const security::SpiffeId& peer) const {
  MutexLock lock(&mu_);
  if (peer.kind == security::PeerKind::kAdmin && peer.trust_domain == config_.trust_domain) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(fmt::format(
      "admin API: the client is {}, not an admin of trust domain {} (spiffe://{}/admin/<name>)",
      peer.ToString(), config_.trust_domain, config_.trust_domain));
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
  }
  return view;
}

std::vector<v1::NodeView> ControllerCore::ListNodes() const {
  MutexLock lock(&mu_);
  std::vector<v1::NodeView> out;
  for (NodeId n = 0; n < overlay_->topology.num_nodes(); ++n) out.push_back(NodeViewLocked(n));
  return out;
}

std::vector<v1::LinkView> ControllerCore::ListLinks() const {
  MutexLock cycle_lock(&cycle_mu_);
  std::set<std::pair<std::string, std::string>> drained;
  Duration probe_interval;
  {
    MutexLock lock(&mu_);
    drained = drained_;
    probe_interval = config_.probe_interval;
  }
  const Overlay& overlay = *computer_overlay_;
  const Topology& topo = overlay.topology;
  const std::vector<bool> drained_links = DrainedLinks(overlay, drained);
  const double horizon_s = ToSeconds(probe_interval) * computer_->config().horizon_periods;
  std::vector<v1::LinkView> out;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const Link& link = topo.link(l);
    const LinkSample& last = computer_->last_sample(l);
    const LinkState state = computer_->StateOf(l);
    const Forecast f = computer_->ForecastOf(l);
    v1::LinkView v;
    v.set_src_id(overlay.wire_id[link.src]);
    v.set_dst_id(overlay.wire_id[link.dst]);
    v.set_src_name(overlay.name(link.src));
    v.set_dst_name(overlay.name(link.dst));
    v.set_up(!cable_down_[l]);
    v.set_drained(drained_links[l]);
    v.set_capacity_bps(static_cast<uint64_t>(state.capacity.bps()));
    v.set_rtt_ms(Millis(last.rtt_smoothed));
    v.set_base_rtt_ns(computer_->BaseRtt(l).count());
    v.set_loss(last.loss);
    v.set_utilisation(last.utilisation);
    v.set_queue_bytes(last.queue_bytes);
    v.set_forecast_utilisation(f.mean);
    v.set_forecast_stddev(f.stddev);
    v.set_horizon_s(horizon_s);
    v.set_cost_latency(computer_->Cost(0, l));
    v.set_cost_bulk(computer_->Cost(1, l));
    v.set_last_sample_unix_ns(ends_[l].heard_unix_ns);
    out.push_back(std::move(v));
  }
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
      const absl::Span<const NextHop> hops = snapshot->tables[cls]->Lookup(v, d);
      v1::RouteView* r = out.add_routes();
      r->set_node(o.name(v));
      r->set_destination(o.name(d));
      r->set_traffic_class(cls);
      r->set_potential(snapshot->Potential(cls, d, v));
      for (const NextHop& h : hops) {
        v1::NextHopView* nh = r->add_next_hops();
        nh->set_neighbor(o.name(o.topology.link(h.link).dst));
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

absl::StatusOr<security::KeyRing> KeyRingFor(const ControllerConfig& config, int64_t now_unix_ns) {
  security::KeyRingOptions o;
  if (!config.state_dir.empty()) o.file = config.state_dir + "/overlay-keys.json";
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

// --- Configuration ---

absl::Status ControllerCore::Reload(const ControllerConfig& config) {
  LoadedModel model =
      LoadModel(config, "the reload is refused; the running configuration and policy stay");
  if (!model.status.ok()) {
    MutexLock lock(&mu_);
    learned_.set_refusal(model.view.refusal());
    learned_.set_refused_unix_ns(model.view.refused_unix_ns());
    return model.status;
  }
  MutexLock cycle_lock(&cycle_mu_);
  std::vector<std::shared_ptr<AgentLink>> to_close, to_update;
  std::vector<uint32_t> closed_ids;
  std::shared_ptr<const v1::AgentConfig> agent_config;
  {
    MutexLock lock(&mu_);
    ControllerConfig next = config;
    std::vector<std::string> restart;
    const auto keep = [&](auto& field, const auto& running, const char* name) {
      if (field != running) {
        restart.push_back(name);
        field = running;
      }
    };
    keep(next.listen, config_.listen, "listen");
    keep(next.tls.cert_file, config_.tls.cert_file, "tls.cert");
    keep(next.tls.key_file, config_.tls.key_file, "tls.key");
    keep(next.tls.ca_file, config_.tls.ca_file, "tls.ca");
    if (next.trust_domain.empty()) next.trust_domain = config_.trust_domain;
    keep(next.trust_domain, config_.trust_domain, "trust_domain");
    keep(next.http, config_.http, "http");
    keep(next.log_file, config_.log_file, "log");
    if (absl::StatusOr<LogLevel> level = ParseLogLevel(next.log_level); level.ok()) {
      log_.set_level(*level);
    }
    const bool overlay_changed = !SameOverlay(config_, next);
    config_ = std::move(next);
    policy_ = config_.policy;
    policy_dirty_ = true;
    policy_override_.reset();
    weight_policy_ = std::move(model.policy);
    learned_ = std::move(model.view);
    metrics_.SetPolicyActive(weight_policy_ != nullptr);
    computer_->set_weight_policy(weight_policy_);
    if (overlay_changed) {
      overlay_ = MakeOverlay(config_);
      ResetComputer(clock_.Now());
      pending_.clear();
      pending_sent_.clear();
      for (auto it = drained_.begin(); it != drained_.end();) {
        const NodeId a = overlay_->FindByNameOrId(it->first);
        const NodeId b = overlay_->FindByNameOrId(it->second);
        const bool exists =
            a != kNoNode && b != kNoNode && overlay_->topology.FindLink(a, b) != kNoLink;
        it = exists ? std::next(it) : drained_.erase(it);
      }
      for (auto it = agents_.begin(); it != agents_.end();) {
        if (overlay_->Find(it->first) != kNoNode) {
          ++it;
          continue;
        }
        if (it->second.link != nullptr) {
          to_close.push_back(it->second.link);
          closed_ids.push_back(it->first);
        }
        it = agents_.erase(it);
      }
    }
    agent_config_ = BuildAgentConfigLocked();
    agent_config = agent_config_;
    to_update = ConnectedLinksLocked();
    SaveOperatorStateLocked();
    RecordEventLocked("config_reloaded", "",
                      fmt::format("{}: {} nodes, {} links{}", config_.file, config_.nodes.size(),
                                  config_.links.size(),
                                  overlay_changed ? ", new overlay (tables start over)" : ""));
    if (!restart.empty()) {
      RecordEventLocked("config_restart_needed", "",
                        fmt::format("changes to {} take effect after a restart; running values "
                                    "kept",
                                    fmt::join(restart, ", ")));
    }
    int connected = 0;
    for (const auto& [wire, a] : agents_) connected += a.link != nullptr;
    metrics_.agents_connected->Set(connected);
  }
  metrics_.config_reloads->Increment();
  for (size_t i = 0; i < to_close.size(); ++i) {
    to_close[i]->Close(absl::FailedPreconditionError(
        fmt::format("node {} was removed from the controller's configuration", closed_ids[i])));
  }
  for (const auto& link : to_update) link->OfferConfig(agent_config);
  return absl::OkStatus();
}

namespace {
constexpr char kOperatorStateFormat[] = "dar-operator-state/1";
std::string OperatorStatePath(const ControllerConfig& c) { return c.state_dir + "/operator.json"; }
}  // namespace

void ControllerCore::SaveOperatorStateLocked() {
  if (config_.state_dir.empty() || restoring_) return;
  nlohmann::json j;
  j["format"] = kOperatorStateFormat;
  j["drained"] = nlohmann::json::array();
  for (const auto& [a, b] : drained_) j["drained"].push_back({a, b});
  if (policy_override_) {
    std::string policy;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    o.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*policy_override_, &policy, o);
    j["policy"] = nlohmann::json::parse(policy, nullptr, false);
  } else {
    j["policy"] = nullptr;
  }
  // The newest fallback to static each agent has reported, so that a restarted controller does
  // not make events again of the ones its predecessor had (an agent's hello repeats its last).
  j["fallbacks_heard"] = nlohmann::json::object();
  for (const auto& [wire, agent] : agents_) {
    if (agent.table_status.last_fallback_unix_ns() > 0) {
      j["fallbacks_heard"][std::to_string(wire)] = agent.table_status.last_fallback_unix_ns();
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir, ec);
  const absl::Status s =
      ec ? absl::InternalError(fmt::format("cannot create {}: {}", config_.state_dir, ec.message()))
         : WriteFileAtomically(OperatorStatePath(config_), j.dump(1) + "\n", 0600);
  if (!s.ok()) {
    RecordEventLocked(
        "state_not_saved", "",
        fmt::format("drains and policy will not survive a restart: {}", std::string(s.message())));
  }
}

absl::Status ControllerCore::RestoreOperatorState() {
  std::string path;
  {
    MutexLock lock(&mu_);
    if (config_.state_dir.empty()) return absl::OkStatus();
    path = OperatorStatePath(config_);
  }
  absl::StatusOr<std::string> text = ReadFile(path, 1 << 20);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (!text.ok()) return text.status();
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("operator state {}: {} (fix or remove the file; removing it forgets the "
                    "drains and policy set with darctl)",
                    path, why));
  };
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kOperatorStateFormat) {
    return bad(fmt::format("not a JSON object with format \"{}\"", kOperatorStateFormat));
  }
  const nlohmann::json heard = j.value("fallbacks_heard", nlohmann::json::object());
  std::vector<std::pair<uint32_t, int64_t>> fallbacks_heard;
  if (!heard.is_object()) return bad("fallbacks_heard: must be an object");
  for (const auto& [key, value] : heard.items()) {
    uint32_t wire = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), wire);
    if (ec != std::errc() || end != key.data() + key.size() || !value.is_number_integer()) {
      return bad(fmt::format("fallbacks_heard.{}: must be a node id and a time in ns", key));
    }
    fallbacks_heard.emplace_back(wire, value.get<int64_t>());
  }
  const nlohmann::json drained = j.value("drained", nlohmann::json::array());
  if (!drained.is_array()) return bad("drained: must be a list of [a, b] pairs");
  for (size_t i = 0; i < drained.size(); ++i) {
    const nlohmann::json& d = drained[i];
    if (!d.is_array() || d.size() != 2 || !d[0].is_string() || !d[1].is_string()) {
      return bad(fmt::format("drained[{}]: must be a pair of node names", i));
    }
  }
  std::optional<v1::PolicySettings> policy;
  if (j.contains("policy") && !j["policy"].is_null()) {
    v1::PolicySettings p;
    if (!google::protobuf::util::JsonStringToMessage(j["policy"].dump(), &p).ok()) {
      return bad("policy: not a policy");
    }
    policy = p;
  }
  {
    MutexLock lock(&mu_);
    restoring_ = true;
  }
  for (const nlohmann::json& d : drained) {
    const absl::StatusOr<bool> r = Drain(d[0].get<std::string>(), d[1].get<std::string>(), true);
    if (!r.ok()) {
      log_.Warn("a drain kept across the restart no longer applies: skipped",
                {{"file", path}, {"error", std::string(r.status().message())}});
    }
  }
  if (policy) {
    const absl::StatusOr<v1::PolicySettings> r = SetPolicy(*policy);
    if (!r.ok()) {
      log_.Warn("the policy kept across the restart is refused: skipped",
                {{"file", path}, {"error", std::string(r.status().message())}});
    }
  }
  {
    MutexLock lock(&mu_);
    for (const auto& [wire, at] : fallbacks_heard) {
      agents_[wire].table_status.set_last_fallback_unix_ns(at);
    }
    restoring_ = false;
    SaveOperatorStateLocked();
  }
  log_.Info("operator state restored",
            {{"file", path}, {"drained", drained.size()}, {"policy", policy.has_value()}});
  return absl::OkStatus();
}

ControllerConfig ControllerCore::config() const {
  MutexLock lock(&mu_);
  return config_;
}

}  // namespace dar::control
