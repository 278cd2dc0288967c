// ControllerCore's decision cycle: the batch of samples and sends, the cables' liveness
// (CableUp), drained links, the engine or the marginal layer, the snapshot, the log's summary.
#include <algorithm>
#include <chrono>

#include "base/status_macros.h"
#include "control/controller_core.h"
#include "core/link_liveness.h"
#include "fmt/format.h"

namespace dar::control {
namespace {

constexpr int kSummaryEvery = 100;  // cycles between the info-level cycle summaries
// A learned policy failing every cycle would fill the log at 10 lines a second; once a minute
// says it as well (the failures are counted in the metrics).
constexpr Duration kPolicyFailureLogEvery = Seconds(60);
}  // namespace

Topology ControllerCore::KnownTopologyLocked(const std::vector<bool>& drained_links) const {
  Topology known = computer_overlay_->topology;
  for (LinkId l = 0; l < known.num_links(); ++l) {
    if (cable_down_[l] || drained_links[l]) known.mutable_link(l).up = false;
    const DataRate delivers = computer_->DeliveryCapacity(l);
    if (delivers.bps() > 0 && delivers < known.link(l).params.capacity) {
      known.mutable_link(l).params.capacity = delivers;
    }
  }
  return known;
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
  // A replica that does not lead decides nothing (no agent is connected to it).
  if (!Acts()) return CycleReport{};
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
  std::vector<bool> connected;  // by NodeId
  {
    MutexLock lock(&mu_);
    batch.swap(pending_);
    std::fill(pending_by_node_.begin(), pending_by_node_.end(), 0);
    std::fill(pending_sent_by_node_.begin(), pending_sent_by_node_.end(), 0);
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
    absl::Status save_error;
    report.version = versions_.Take(&save_error);
    if (!save_error.ok()) {
      RecordEventLocked("state_not_saved", "",
                        fmt::format("table versions may repeat after a restart if the clock goes "
                                    "back: {}",
                                    std::string(save_error.message())));
    }
    timeout = config_.sample_timeout;
    // Whose stream is open: a node silent on it may be behind (CableEnd.lagging).
    connected.assign(static_cast<size_t>(computer_overlay_->topology.num_nodes()), false);
    for (const auto& [wire, a] : agents_) {
      const NodeId v = computer_overlay_->Find(wire);
      if (v != kNoNode && a.link != nullptr) connected[v] = true;
    }
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
  // What this controller knows of each end (core/link_liveness.h holds the rule). A node is
  // behind as a whole while its stream is open and no report of any of its links is fresh,
  // for at most kLagGrace sample timeouts: its samples are late, its links not down.
  constexpr int kLagGrace = 10;
  const auto fresh = [&](const LinkEnd& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_) {
    return e.heard_unix_ns != 0 && now - e.heard <= timeout;
  };
  std::vector<bool> node_fresh(static_cast<size_t>(topo.num_nodes()), false);
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    if (fresh(ends_[l])) node_fresh[topo.link(l).src] = true;
  }
  const auto end_of = [&](LinkId x) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_) {
    if (x == kNoLink) return CableEnd{.exists = false};
    const LinkEnd& e = ends_[x];
    const NodeId v = topo.link(x).src;
    return CableEnd{
        .heard = e.heard_unix_ns != 0,
        .fresh = fresh(e),
        .says_up = e.up,
        .age = now - e.heard,
        .lagging = connected[v] && !node_fresh[v] && now - e.heard <= kLagGrace * timeout};
  };
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const LinkId r = topo.link(l).reverse;
    if (r != kNoLink && r < l) continue;  // each cable once
    const CableEnd here = end_of(l), there = end_of(r);
    const bool up = CableUp(here, there, /*was_up=*/!cable_down_[l]);
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
    const Topology known = KnownTopologyLocked(drained_links);
    const int64_t changes = marginal_->stats().route_changes;
    const std::shared_ptr<const RoutingTables> in_force = marginal_->Decide(now, known);
    const uint64_t first_version = computer_->SkipCycle();
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      auto tables = std::make_shared<RoutingTables>(*in_force);
      tables->set_version(first_version + static_cast<uint64_t>(cls));
      cycle.tables[cls] = std::move(tables);
    }
    cycle.route_changes = marginal_->stats().route_changes - changes;
    snapshot =
        MakeRankedSnapshot(overlay, known, cycle.tables, report.version, unix_now, previous.get());
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
                       {"decision_ms", ToMillis(report.decision)},
                       {"publish_ms", ToMillis(report.publish)},
                       {"full", report.full},
                       {"route_changes", report.route_changes},
                       {"changed_links", report.changed_links},
                       {"classes_recomputed", report.classes_recomputed},
                       {"samples", report.samples_applied},
                       {"links_down", links_down}});
  RecordHistoryLocked(snapshot.get(), now, unix_now);
  recent_decisions_ms_.push_back(ToMillis(report.decision));
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
  // A replica waiting to lead is healthy, and not ready (ReadinessProblem).
  if (!Acts()) return "";
  MutexLock lock(&mu_);
  if (!cycled_) return "no decision cycle has run yet";
  const Duration limit = std::max<Duration>(3 * policy_.cycle, Seconds(1));
  const Duration age = clock_.Now() - last_cycle_;
  if (age > limit) return fmt::format("no decision cycle for {:.0f} ms", ToMillis(age));
  return "";
}

std::string ControllerCore::ReadinessProblem() const {
  if (std::string problem = NotLeading(); !problem.empty()) return problem;
  if (std::string problem = HealthProblem(); !problem.empty()) return problem;
  MutexLock lock(&mu_);
  int connected = 0;
  for (const auto& [wire, a] : agents_) connected += a.link != nullptr;
  if (connected == 0) {
    return fmt::format("no agent connected (0 of {} nodes)", overlay_->topology.num_nodes());
  }
  return "";
}

Duration ControllerCore::cycle_period() const {
  MutexLock lock(&mu_);
  return policy_.cycle;
}

}  // namespace dar::control
