// ControllerCore's answers to "why": what the decision layer sees of each link (ListLinks),
// and why a node splits its traffic toward a destination as it does (ExplainRoute).
//
// With the marginal layer (the default), a link's cost is its marginal cost under DAR's
// objective at the load the layer plans for it: the demand the agents report, routed by the
// tables in force, at what the link is measured to deliver (core/marginal_routing.h). A
// node's distance to a destination is the marginal distance delta over the tables' next hops,
// and Gallager's rule moves traffic toward the next hop whose path (link + its distance) costs
// least: at the optimum every used next hop's path costs the same. With the diffusion layer,
// a link's cost is the class's link cost (core/link_cost.h) and the distance the potential.
#include <algorithm>
#include <cmath>
#include <limits>

#include "control/controller_core.h"
#include "core/fluid.h"
#include "core/marginal_routing.h"
#include "fmt/format.h"

namespace dar::control {

struct ControllerCore::LinkInputs {
  std::shared_ptr<const Overlay> overlay;  // computer_overlay_
  RouteComputerConfig config;              // the route computer's
  Duration probe_interval{0};
  std::vector<DataRate> delivers;  // RouteComputer::DeliveryCapacity
  std::vector<char> slow;          // RouteComputer::Slow
  std::vector<LinkState> state;    // RouteComputer::StateOf
  std::vector<LinkSample> last;    // the tail's last sample
  std::vector<char> down, drained;
  std::vector<int64_t> heard_unix_ns;  // when the tail last reported it; 0: never
  std::array<std::vector<double>, kTrafficClasses> cost;  // RouteComputer::Cost
  // The marginal layer: what it decides over, for which demand, by which objective.
  bool marginal = false;
  Topology known;
  std::vector<Demand> demand;  // bytes per second
  RoutingObjective objective;
};

struct ControllerCore::LinkPlan {
  std::vector<int64_t> slow_until_ns;                      // Unix time; 0 when not slow
  std::vector<double> planned;                             // utilisation the decision plans for
  std::vector<double> marginal_cost;                       // marginal layer only
  std::array<std::vector<double>, kTrafficClasses> share;  // of the tail's rows
  std::vector<std::string> why;
  std::string plan_error;  // why `planned` is not the demand's (empty: it is)
};

namespace {

// "9.8 Mb/s", "100 Gb/s".
std::string FormatRate(DataRate r) {
  const double bps = static_cast<double>(r.bps());
  if (bps >= 1e9) return fmt::format("{:.3g} Gb/s", bps / 1e9);
  if (bps >= 1e6) return fmt::format("{:.3g} Mb/s", bps / 1e6);
  return fmt::format("{:.3g} kb/s", bps / 1e3);
}

// For a link found slow (delivering `delivers` of `configured`), how many more samples the
// delivery estimate takes to return above slow_fraction of the configured capacity without
// new evidence: RouteComputer::DeliveryCapacity's gap to the configured capacity decays as
// exp(-age / capacity_recovery_periods).
double SlowSamplesLeft(DataRate delivers, DataRate configured, const RouteComputerConfig& c) {
  const double gap = static_cast<double>(configured.bps() - delivers.bps());
  const double allowed = (1 - c.slow_fraction) * static_cast<double>(configured.bps());
  if (gap <= allowed || allowed <= 0) return 0;
  return c.capacity_recovery_periods * std::log(gap / allowed);
}

}  // namespace

ControllerCore::LinkInputs ControllerCore::GatherLinksLocked(
    std::shared_ptr<const RouteSnapshot>* snapshot) const {
  std::set<std::pair<std::string, std::string>> drained;
  LinkInputs in;
  {
    MutexLock lock(&mu_);
    drained = drained_;
    in.probe_interval = config_.probe_interval;
    if (snapshot != nullptr) *snapshot = latest_;
  }
  const std::vector<bool> drained_links = DrainedLinks(*computer_overlay_, drained);
  in.overlay = computer_overlay_;
  in.config = computer_->config();
  const Topology& topo = computer_overlay_->topology;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    in.delivers.push_back(computer_->DeliveryCapacity(l));
    in.slow.push_back(computer_->Slow(l) ? 1 : 0);
    in.state.push_back(computer_->StateOf(l));
    in.last.push_back(computer_->last_sample(l));
    in.down.push_back(cable_down_[l] ? 1 : 0);
    in.drained.push_back(drained_links[l] ? 1 : 0);
    in.heard_unix_ns.push_back(ends_[l].heard_unix_ns);
    for (int cls = 0; cls < kTrafficClasses; ++cls) in.cost[cls].push_back(computer_->Cost(cls, l));
  }
  in.marginal = marginal_ != nullptr;
  if (in.marginal) {
    in.known = KnownTopologyLocked(drained_links);
    in.demand = marginal_->DemandEstimate();
    in.objective = marginal_config_.routing.objective;
  }
  return in;
}

ControllerCore::LinkPlan ControllerCore::PlanLinks(const LinkInputs& in,
                                                   const RouteSnapshot* snapshot, int64_t unix_now,
                                                   PlanDetail detail) {
  const Topology& topo = in.overlay->topology;
  const auto links = static_cast<size_t>(topo.num_links());
  LinkPlan plan;
  plan.slow_until_ns.assign(links, 0);
  plan.planned.resize(links);
  plan.marginal_cost.assign(links, 0.0);
  plan.why.resize(links);
  for (auto& s : plan.share) s.assign(links, 0.0);
  // The tables of this topology: a reload that changed the overlay has not cycled yet.
  if (snapshot != nullptr && snapshot->overlay != in.overlay) snapshot = nullptr;

  for (LinkId l = 0; l < topo.num_links(); ++l) {
    plan.planned[l] = in.state[l].utilisation;
    if (in.slow[l]) {
      const double left = SlowSamplesLeft(in.delivers[l], topo.link(l).params.capacity, in.config);
      const int64_t from = in.heard_unix_ns[l] != 0 ? in.heard_unix_ns[l] : unix_now;
      plan.slow_until_ns[l] =
          from + static_cast<int64_t>(left * static_cast<double>(in.probe_interval.count()));
    }
  }

  // The marginal layer: the load it plans for, and what one more unit costs there.
  if (in.marginal) {
    std::vector<double> loads(links, 0.0);  // bytes per second
    if (snapshot == nullptr) {
      plan.plan_error = "no tables yet";
    } else if (absl::StatusOr<std::vector<double>> routed =
                   ComputeLinkLoads(topo, *snapshot->tables[0], in.demand);
               routed.ok()) {
      loads = *std::move(routed);
    } else {
      plan.plan_error = std::string(routed.status().message());
    }
    double max_u = 0;
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      const double cap = static_cast<double>(in.known.link(l).params.capacity.bps());
      plan.planned[l] = cap > 0 ? loads[l] * 8 / cap : 0;
      if (in.known.link(l).up) max_u = std::max(max_u, plan.planned[l]);
    }
    RoutingObjective objective = in.objective;
    objective.reference_utilization = max_u > 0 ? max_u : 1;
    const ObjectiveTerms terms = EvaluateObjective(in.known, loads, /*unit_bps=*/8, objective);
    plan.marginal_cost = terms.first;
  }

  if (detail == PlanDetail::kHistory) return plan;

  // Each link's share of its tail's rows, averaged over the destinations. Destination by
  // destination: the tables are kept so, and the rows of one destination are read together.
  if (snapshot != nullptr && topo.num_nodes() > 1) {
    const double per_row = 1.0 / (topo.num_nodes() - 1);
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      for (NodeId d = 0; d < topo.num_nodes(); ++d) {
        for (NodeId v = 0; v < topo.num_nodes(); ++v) {
          if (d == v) continue;
          for (const NextHop& h : snapshot->Row(cls, v, d)) {
            plan.share[cls][h.link] += h.weight * per_row;
          }
        }
      }
    }
  }

  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const double queue_ms = ToMillis(in.state[l].queueing);
    const double loss = in.last[l].loss;
    std::string& why = plan.why[l];
    if (in.down[l]) {
      why = "down: a link end reports it down, or no sample came in time (events say which)";
    } else if (in.drained[l]) {
      why = "drained by an operator (darctl link undrain)";
    } else if (in.slow[l]) {
      // The estimate recovers as samples arrive: without them it stays where it is.
      const bool silent = in.heard_unix_ns[l] != 0 &&
                          unix_now - in.heard_unix_ns[l] > 10 * in.probe_interval.count();
      why = fmt::format("slow: delivers {} of {} while queued, counted at that {}",
                        FormatRate(in.delivers[l]), FormatRate(topo.link(l).params.capacity),
                        silent ? std::string("until its samples resume")
                               : fmt::format("for another {:.0f} s without new evidence",
                                             static_cast<double>(std::max<int64_t>(
                                                 0, plan.slow_until_ns[l] - unix_now)) *
                                                 1e-9));
    } else if (queue_ms >= 1) {
      why = fmt::format("queueing: {:.1f} ms measured{}", queue_ms,
                        loss >= 0.001 ? fmt::format(", loss {:.1f}%", 100 * loss) : "");
    } else if (loss >= 0.001) {
      why = fmt::format("loss: {:.1f}% of probes", 100 * loss);
    } else if (in.marginal && plan.planned[l] >= 0.5) {
      why = fmt::format("loaded: the demand puts {:.0f}% on it, marginal cost {:.3g}",
                        100 * plan.planned[l], plan.marginal_cost[l]);
    } else if (!in.marginal && plan.planned[l] >= 0.5) {
      why = fmt::format("loaded: {:.0f}% forecast", 100 * plan.planned[l]);
    } else {
      why = in.marginal ? "light: its length decides (a hop, plus its delay)"
                        : "light: its hop and delay terms decide";
    }
  }
  return plan;
}

std::vector<v1::LinkView> ControllerCore::ListLinks() const {
  std::vector<v1::LinkView> out;
  std::optional<LinkInputs> in;
  std::shared_ptr<const RouteSnapshot> snapshot;
  {
    MutexLock cycle_lock(&cycle_mu_);
    in = GatherLinksLocked(&snapshot);
    const Overlay& overlay = *computer_overlay_;
    const Topology& topo = overlay.topology;
    const double horizon_s = ToSeconds(in->probe_interval) * computer_->config().horizon_periods;
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      const Link& link = topo.link(l);
      const LinkSample& last = in->last[l];
      const Forecast f = computer_->ForecastOf(l);
      v1::LinkView v;
      v.set_src_id(overlay.wire_id[link.src]);
      v.set_dst_id(overlay.wire_id[link.dst]);
      v.set_src_name(overlay.name(link.src));
      v.set_dst_name(overlay.name(link.dst));
      v.set_up(in->down[l] == 0);
      v.set_drained(in->drained[l] != 0);
      v.set_capacity_bps(static_cast<uint64_t>(link.params.capacity.bps()));
      v.set_rtt_ms(ToMillis(last.rtt_smoothed));
      v.set_base_rtt_ns(computer_->BaseRtt(l).count());
      v.set_loss(last.loss);
      v.set_utilisation(last.utilisation);
      v.set_queue_bytes(last.queue_bytes);
      v.set_forecast_utilisation(f.mean);
      v.set_forecast_stddev(f.stddev);
      v.set_horizon_s(horizon_s);
      v.set_cost_latency(in->cost[0][l]);
      v.set_cost_bulk(in->cost[1][l]);
      v.set_last_sample_unix_ns(in->heard_unix_ns[l]);
      v.set_slow(in->slow[l] != 0);
      v.set_delivery_capacity_bps(static_cast<uint64_t>(in->delivers[l].bps()));
      v.set_queueing_ms(ToMillis(in->state[l].queueing));
      out.push_back(std::move(v));
    }
  }
  // The costly part, with no lock held.
  const LinkPlan plan = PlanLinks(*in, snapshot.get(), clock_.UnixNanos());
  for (size_t l = 0; l < out.size(); ++l) {
    v1::LinkView& v = out[l];
    v.set_slow_until_unix_ns(plan.slow_until_ns[l]);
    v.set_planned_utilisation(plan.planned[l]);
    v.set_marginal_cost(plan.marginal_cost[l]);
    v.set_share_latency(plan.share[0][l]);
    v.set_share_bulk(plan.share[1][l]);
    v.set_why(plan.why[l]);
  }
  return out;
}

absl::StatusOr<v1::RouteExplanation> ControllerCore::ExplainRoute(
    const v1::ExplainRouteRequest& request) const {
  if (request.traffic_class() >= static_cast<uint32_t>(kTrafficClasses)) {
    return absl::InvalidArgumentError(fmt::format(
        "traffic_class {} does not exist (0 latency, 1 bulk)", request.traffic_class()));
  }
  std::optional<LinkInputs> in;
  std::shared_ptr<const RouteSnapshot> snapshot;
  {
    MutexLock cycle_lock(&cycle_mu_);
    in = GatherLinksLocked(&snapshot);
  }
  if (snapshot == nullptr) return absl::UnavailableError("no tables yet: no cycle has run");
  if (snapshot->overlay != in->overlay) {
    return absl::UnavailableError("the overlay changed: no tables of it yet; try again");
  }
  // The rest reads the inputs and the immutable snapshot, with no lock held.
  const Overlay& o = *in->overlay;
  const Topology& topo = o.topology;
  const NodeId node = o.FindByNameOrId(request.node());
  if (node == kNoNode) {
    return absl::NotFoundError(fmt::format("node '{}': no such name or id", request.node()));
  }
  const NodeId dest = o.FindByNameOrId(request.destination());
  if (dest == kNoNode) {
    return absl::NotFoundError(
        fmt::format("destination '{}': no such name or id", request.destination()));
  }
  if (node == dest) {
    return absl::InvalidArgumentError(
        fmt::format("node and destination are both '{}'", o.name(node)));
  }
  const int cls = static_cast<int>(request.traffic_class());
  const LinkPlan plan = PlanLinks(*in, snapshot.get(), clock_.UnixNanos());
  const auto link_cost = [&](LinkId l) {
    return in->marginal ? plan.marginal_cost[l] : in->cost[cls][l];
  };

  // Every node's distance toward `dest` over the tables' next hops, and the most utilised
  // link of its routes (kNoLink at the destination), memoised; the tables are loop-free.
  const auto n = static_cast<size_t>(topo.num_nodes());
  std::vector<double> distance(n, std::numeric_limits<double>::quiet_NaN());
  std::vector<LinkId> bottleneck(n, kNoLink);
  const auto worse = [&](LinkId a, LinkId b) {
    if (a == kNoLink) return b;
    if (b == kNoLink) return a;
    return plan.planned[b] > plan.planned[a] ? b : a;
  };
  const auto solve = [&](const auto& self, NodeId v) -> void {
    if (!std::isnan(distance[v])) return;
    if (v == dest) {
      distance[v] = 0;
      return;
    }
    // Marked before the next hops are solved, so that tables with a loop (which the
    // validator refuses) end here instead of recursing without end.
    distance[v] = std::numeric_limits<double>::infinity();
    const absl::Span<const NextHop> hops = snapshot->Row(cls, v, dest);
    double sum = hops.empty() ? std::numeric_limits<double>::infinity() : 0;
    LinkId worst = kNoLink;
    for (const NextHop& h : hops) {
      const NodeId next = topo.link(h.link).dst;
      self(self, next);
      sum += h.weight * (link_cost(h.link) + distance[next]);
      worst = worse(worst, worse(h.link, bottleneck[next]));
    }
    distance[v] = in->marginal ? sum : snapshot->Potential(cls, dest, v);
    bottleneck[v] = worst;
  };
  solve(solve, node);

  v1::RouteExplanation out;
  out.set_node(o.name(node));
  out.set_destination(o.name(dest));
  out.set_traffic_class(static_cast<uint32_t>(cls));
  out.set_version(snapshot->version);
  out.set_decision(in->marginal ? "marginal" : "diffusion");
  out.set_distance(distance[node]);
  for (const Demand& d : in->demand) {
    if (d.src == node && d.dst == dest) out.set_demand_bps(d.amount * 8);
  }
  const absl::Span<const NextHop> hops = snapshot->Row(cls, node, dest);
  double least = std::numeric_limits<double>::infinity(), most = 0;
  for (const NextHop& h : hops) {
    const NodeId next = topo.link(h.link).dst;
    const LinkId worst = worse(h.link, bottleneck[next]);
    v1::NextHopExplanation* x = out.add_next_hops();
    x->set_neighbour(o.name(next));
    x->set_weight(h.weight);
    x->set_link_cost(link_cost(h.link));
    x->set_neighbour_distance(distance[next]);
    x->set_path_cost(link_cost(h.link) + distance[next]);
    x->set_bottleneck(
        fmt::format("{}->{}", o.name(topo.link(worst).src), o.name(topo.link(worst).dst)));
    x->set_bottleneck_utilisation(plan.planned[worst]);
    x->set_link_why(plan.why[h.link]);
    least = std::min(least, x->path_cost());
    most = std::max(most, x->path_cost());
  }

  // The rule, and what stands out.
  const auto note = [&](std::string text) { out.add_notes(std::move(text)); };
  if (hops.empty()) {
    note(fmt::format("{} has no next hop toward {}: it is cut off from it", o.name(node),
                     o.name(dest)));
  } else if (in->marginal) {
    note(
        "marginal layer: traffic moves from next hops whose path costs more to the one that "
        "costs least (Gallager); at the optimum every next hop in use costs the same");
    if (out.demand_bps() == 0) {
      note(fmt::format(
          "no demand from {} to {} is measured: the split is the one the objective chose for "
          "the other traffic, or the start's (over the shortest paths, by their capacity)",
          o.name(node), o.name(dest)));
    }
    if (hops.size() > 1 && least > 0 && most > least * 1.05) {
      note(
          fmt::format("the paths' costs differ by {:.0f}%: the layer is still moving traffic "
                      "toward the cheapest, or holds until a change gains publish_gain",
                      100 * (most / least - 1)));
    }
    if (!plan.plan_error.empty()) {
      note(fmt::format("the planned loads are not the demand's: {}", plan.plan_error));
    }
  } else {
    note(
        "diffusion layer: a next hop is downhill in the potential, and each is weighted by the "
        "soft-minimum of its path cost (link cost + the neighbour's potential) at the "
        "temperature");
  }
  for (const NextHop& h : hops) {
    if (in->slow[h.link] || in->drained[h.link] || in->down[h.link]) {
      note(
          fmt::format("{}->{}: {}", o.name(node), o.name(topo.link(h.link).dst), plan.why[h.link]));
    }
  }
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const Link& link = topo.link(l);
    if (link.src == node && (in->slow[l] || in->drained[l] || in->down[l]) &&
        std::none_of(hops.begin(), hops.end(), [&](const NextHop& h) { return h.link == l; })) {
      note(fmt::format("{}->{} is not used: {}", o.name(node), o.name(link.dst), plan.why[l]));
    }
  }
  return out;
}

void ControllerCore::RecordHistoryLocked(const RouteSnapshot* snapshot, Time now,
                                         int64_t unix_now) {
  if (history_overlay_ != computer_overlay_) {
    history_overlay_ = computer_overlay_;
    history_.assign(static_cast<size_t>(computer_overlay_->topology.num_links()), {});
    history_at_.reset();
  }
  if (history_at_ && now - *history_at_ < Seconds(1)) return;
  history_at_ = now;
  const LinkInputs in = GatherLinksLocked(/*snapshot=*/nullptr);
  const LinkPlan plan = PlanLinks(in, snapshot, unix_now, PlanDetail::kHistory);
  for (LinkId l = 0; l < static_cast<LinkId>(history_.size()); ++l) {
    std::deque<LinkPoint>& points = history_[l];
    if (points.size() >= kLinkHistory) points.pop_front();
    points.push_back({.unix_ns = unix_now,
                      .utilisation = in.last[l].utilisation,
                      .forecast = computer_->ForecastOf(l).mean,
                      .planned = plan.planned[l],
                      .rtt = in.last[l].rtt_smoothed,
                      .queueing = in.state[l].queueing});
  }
}

absl::StatusOr<ControllerCore::LinkSeries> ControllerCore::GetLinkSeries(
    const std::string& src, const std::string& dst) const {
  MutexLock cycle_lock(&cycle_mu_);
  Duration probe_interval;
  {
    MutexLock lock(&mu_);
    probe_interval = config_.probe_interval;
  }
  const Overlay& o = *computer_overlay_;
  const NodeId a = o.FindByNameOrId(src), b = o.FindByNameOrId(dst);
  LinkId link = kNoLink;
  for (LinkId l = 0; a != kNoNode && b != kNoNode && l < o.topology.num_links(); ++l) {
    if (o.topology.link(l).src == a && o.topology.link(l).dst == b) link = l;
  }
  if (link == kNoLink) {
    return absl::NotFoundError(fmt::format("no link from '{}' to '{}'", src, dst));
  }
  LinkSeries out;
  out.src = o.name(a);
  out.dst = o.name(b);
  out.horizon = probe_interval * computer_->config().horizon_periods;
  if (history_overlay_ == computer_overlay_) {
    out.points.assign(history_[link].begin(), history_[link].end());
  }
  return out;
}

}  // namespace dar::control
