#include "core/marginal_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/routing.h"
#include "core/status_macros.h"

namespace dar {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Next-hop weights of every destination: weights[t][l] is the share of node src(l)'s traffic
// toward targets[t] that leaves on link l.
using Weights = std::vector<std::vector<double>>;

// What one destination's weights do to its traffic: the traffic through every node, the order
// in which it flows (every node before its next hops) and its load on every link.
struct DestinationFlow {
  std::vector<double> through;  // by NodeId
  std::vector<NodeId> order;
  std::vector<double> links;  // by LinkId
};

std::vector<double> Scaled(std::vector<double> loads, double unit_bps) {
  for (double& x : loads) x *= unit_bps;
  return loads;
}

class Problem {
 public:
  Problem(const Topology& topo, TargetDemand demand, double unit_bps)
      : topo_(topo), unit_bps_(unit_bps), targets_(topo.Destinations()) {
    host_loads_ = std::move(demand.host_loads);
    injected_.assign(targets_.size(), std::vector<double>(topo.num_nodes(), 0.0));
    for (size_t t = 0; t < targets_.size(); ++t) {
      auto it = demand.injected.find(targets_[t]);
      if (it != demand.injected.end()) injected_[t] = std::move(it->second);
    }
  }

  const Topology& topo() const { return topo_; }
  double unit_bps() const { return unit_bps_; }
  const std::vector<NodeId>& targets() const { return targets_; }
  const std::vector<double>& injected(size_t t) const { return injected_[t]; }
  const std::vector<double>& host_loads() const { return host_loads_; }

  // Whether traffic toward targets[t] may take link l: up, of some capacity, and not into a
  // host other than the target (hosts forward nothing).
  bool Usable(size_t t, LinkId l) const {
    const Link& link = topo_.link(l);
    return link.up && link.params.capacity.bps() > 0 && link.src != targets_[t] &&
           (link.dst == targets_[t] || topo_.node(link.dst).kind != NodeKind::kHost);
  }

  // The starting weights: those of `start` where it has a table for the destination that
  // uses only usable links, reaches the destination from every node ECMP does and has no
  // loop; WCMP's elsewhere (ECMP's next hops weighted by the capacity each leads to: equal on
  // a symmetric fabric, and a prior that already keeps new traffic off a degraded link).
  // `orders[t]` is the order of w[t] where `start`'s table was taken; empty otherwise.
  Weights Start(const RoutingTables* start, std::vector<std::vector<NodeId>>& orders) const {
    Weights w(targets_.size(), std::vector<double>(topo_.num_links(), 0.0));
    orders.assign(targets_.size(), {});
    std::optional<RoutingTables> wcmp;  // computed only if a destination needs it
    for (size_t t = 0; t < targets_.size(); ++t) {
      if (start != nullptr && StartFrom(*start, t, w[t], orders[t])) continue;
      if (!wcmp) {
        // Over the usable links: a link of no capacity is no path.
        Topology usable = topo_;
        for (LinkId l = 0; l < usable.num_links(); ++l) {
          if (usable.link(l).params.capacity.bps() <= 0) usable.mutable_link(l).up = false;
        }
        wcmp = ComputeWcmpTables(usable);
      }
      std::fill(w[t].begin(), w[t].end(), 0.0);
      for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
        for (const NextHop& hop : wcmp->Lookup(v, targets_[t])) w[t][hop.link] = hop.weight;
      }
    }
    return w;
  }

  // The flow of weights `w` toward targets[t]. `order`, if given, is an order of weights
  // with the same next hops (the same links weighted above zero), reused.
  absl::StatusOr<DestinationFlow> Route(size_t t, const std::vector<double>& w,
                                        const std::vector<NodeId>* order = nullptr) const {
    DestinationFlow f;
    if (order != nullptr) {
      f.order = *order;
    } else {
      ASSIGN_OR_RETURN(f.order, Order(w));
    }
    f.through = injected_[t];
    f.links.assign(topo_.num_links(), 0.0);
    for (NodeId v : f.order) {
      if (v == targets_[t] || f.through[v] == 0) continue;
      bool sent = false;
      for (LinkId l : topo_.node(v).out_links) {
        if (w[l] <= 0) continue;
        const double share = f.through[v] * w[l];
        f.links[l] += share;
        f.through[topo_.link(l).dst] += share;
        sent = true;
      }
      if (!sent) {
        return absl::FailedPreconditionError(absl::StrCat(
            "'", topo_.node(v).name, "' cannot reach '", topo_.node(targets_[t]).name, "'"));
      }
    }
    return f;
  }

  // Every link's load: the host links' and every destination's.
  std::vector<double> Loads(const std::vector<DestinationFlow>& flows) const {
    std::vector<double> loads = host_loads_;
    for (const DestinationFlow& f : flows) {
      for (LinkId l = 0; l < topo_.num_links(); ++l) loads[l] += f.links[l];
    }
    return loads;
  }

  bool HasTraffic(size_t t) const {
    return std::any_of(injected_[t].begin(), injected_[t].end(), [](double x) { return x > 0; });
  }

 private:
  bool StartFrom(const RoutingTables& start, size_t t, std::vector<double>& w,
                 std::vector<NodeId>& order) const {
    const NodeId target = targets_[t];
    if (start.num_nodes() != topo_.num_nodes() || !start.IsDestination(target) ||
        start.Table(target) == nullptr) {
      return false;
    }
    for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
      if (v == target) continue;
      const absl::Span<const NextHop> hops = start.Lookup(v, target);
      // A switch that could forward toward the target must have a next hop.
      if (hops.empty() && topo_.node(v).kind == NodeKind::kSwitch &&
          std::any_of(topo_.node(v).out_links.begin(), topo_.node(v).out_links.end(),
                      [&](LinkId l) { return Usable(t, l); })) {
        return false;
      }
      for (const NextHop& hop : hops) {
        if (hop.link < 0 || hop.link >= topo_.num_links() || topo_.link(hop.link).src != v ||
            !Usable(t, hop.link) || !(hop.weight > 0)) {
          return false;
        }
        w[hop.link] = hop.weight;
      }
    }
    absl::StatusOr<std::vector<NodeId>> ordered = Order(w);
    if (!ordered.ok()) return false;
    order = *std::move(ordered);
    return true;
  }

  // The nodes in an order where every node comes before its next hops (Kahn). The weights
  // are loop-free by construction; a loop is a bug.
  absl::StatusOr<std::vector<NodeId>> Order(const std::vector<double>& w) const {
    const int n = topo_.num_nodes();
    std::vector<int> in(n, 0);
    for (LinkId l = 0; l < topo_.num_links(); ++l) in[topo_.link(l).dst] += w[l] > 0;
    std::vector<NodeId> order;
    order.reserve(n);
    for (NodeId v = 0; v < n; ++v) {
      if (in[v] == 0) order.push_back(v);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      for (LinkId l : topo_.node(order[i]).out_links) {
        if (w[l] > 0 && --in[topo_.link(l).dst] == 0) order.push_back(topo_.link(l).dst);
      }
    }
    if (static_cast<int>(order.size()) != n) {
      return absl::InternalError("marginal routing: the next hops of a destination form a loop");
    }
    return order;
  }

  const Topology& topo_;
  double unit_bps_;
  std::vector<NodeId> targets_;
  std::vector<std::vector<double>> injected_;  // [t][node]
  std::vector<double> host_loads_;
};

// x^n for a small non-negative integer n, by squaring: p is an integer in practice, and
// std::pow is most of the cost of evaluating J.
double IntPow(double x, int n) {
  double result = 1;
  for (; n > 0; n >>= 1, x *= x) {
    if (n & 1) result *= x;
  }
  return result;
}

// One link's term of J and its first and second derivatives by the link's load.
struct LinkTerm {
  double value = 0, first = 0, second = 0;
};
LinkTerm TermOf(const Link& link, double load, double unit_bps, const RoutingObjective& o) {
  const double capacity = static_cast<double>(link.params.capacity.bps()) / unit_bps;
  if (capacity <= 0) return {};
  const double p = o.power;
  // Loads updated in place may round a little below zero.
  const double x = std::max(0.0, load) / capacity / o.reference_utilization;
  const double length = o.length_weight * (1 + static_cast<double>(link.params.delay.count()) /
                                                   static_cast<double>(o.reference_delay.count()));
  const double x_p2 =
      p == std::floor(p) && p <= 64 ? IntPow(x, static_cast<int>(p) - 2) : std::pow(x, p - 2);
  return {.value = capacity * o.reference_utilization * x_p2 * x * x / p + length * load,
          .first = x_p2 * x + length,
          .second = (p - 1) * x_p2 / (capacity * o.reference_utilization)};
}

// Per destination, the marginal distance of every node (delta), the curvature of its paths
// (H = sum_k phi_k^2 (J''_k + H_k): how fast delta rises with traffic added at the node), and
// whether an uphill link (delta not falling along it) lies downstream.
struct Marginals {
  std::vector<double> delta, curvature;
  std::vector<bool> tainted;
};

Marginals MarginalsToward(const Problem& p, size_t t, const std::vector<double>& w,
                          const std::vector<NodeId>& order, const ObjectiveTerms& terms) {
  const Topology& topo = p.topo();
  const int n = topo.num_nodes();
  Marginals m{std::vector<double>(n, kInf), std::vector<double>(n, 0.0),
              std::vector<bool>(n, false)};
  const NodeId target = p.targets()[t];
  m.delta[target] = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodeId v = *it;
    if (v == target) continue;
    double delta = 0, curvature = 0;
    bool any = false, tainted = false;
    for (LinkId l : topo.node(v).out_links) {
      if (w[l] <= 0) continue;
      const NodeId k = topo.link(l).dst;
      any = true;
      delta += w[l] * (terms.first[l] + m.delta[k]);
      curvature += w[l] * w[l] * (terms.second[l] + m.curvature[k]);
    }
    if (!any) continue;
    m.delta[v] = delta;
    m.curvature[v] = curvature;
    for (LinkId l : topo.node(v).out_links) {
      if (w[l] <= 0) continue;
      const NodeId k = topo.link(l).dst;
      tainted = tainted || m.tainted[k] || !(m.delta[k] < delta);
    }
    m.tainted[v] = tainted;
  }
  return m;
}

// One Gallager step toward targets[t] with step scale `step`: at every node, traffic moves
// from each next hop to the one of least marginal cost.
void StepToward(const Problem& p, size_t t, const DestinationFlow& flow,
                const ObjectiveTerms& terms, const MarginalRoutingConfig& config, double step,
                std::vector<double>& w) {
  const Topology& topo = p.topo();
  const Marginals m = MarginalsToward(p, t, w, flow.order, terms);
  const NodeId target = p.targets()[t];
  for (NodeId v = 0; v < topo.num_nodes(); ++v) {
    // A node without traffic keeps its weights: they steer only what may come, and moving
    // them would churn tables for nothing.
    if (v == target || m.delta[v] == kInf || !(flow.through[v] > 0)) continue;
    const std::vector<LinkId>& out = topo.node(v).out_links;
    // The next hop of least marginal cost: a current one, or a neighbour v may start using.
    LinkId best = kNoLink;
    double best_cost = kInf;
    for (LinkId l : out) {
      const NodeId k = topo.link(l).dst;
      const bool allowed = w[l] > 0 || (p.Usable(t, l) && !m.tainted[k] && m.delta[k] < m.delta[v]);
      if (!allowed) continue;
      const double a = terms.first[l] + m.delta[k];
      if (a < best_cost) best_cost = a, best = l;
    }
    if (best == kNoLink) continue;
    const double traffic = flow.through[v];
    const NodeId best_k = topo.link(best).dst;
    const double best_curvature = terms.second[best] + m.curvature[best_k];
    const double tie = config.tie_tolerance * std::max(std::abs(best_cost), 1e-300);
    double moved = 0;
    for (LinkId l : out) {
      if (l == best || w[l] <= 0) continue;
      const NodeId k = topo.link(l).dst;
      const double excess = terms.first[l] + m.delta[k] - best_cost;
      if (!(excess > tie)) continue;
      const double curvature = traffic * (terms.second[l] + m.curvature[k] + best_curvature);
      const double share = curvature > 0 ? std::min(w[l], step * excess / curvature) : step * w[l];
      w[l] -= share;
      moved += share;
    }
    w[best] += moved;
  }
}

// Frank-Wolfe's bound: J(F*) >= J(F) + min over routings F' of J'(F) . (F' - F), and the
// minimum puts every destination's traffic on its shortest paths under the link lengths J'.
// The host links' loads are the same under every routing and drop out.
double LowerBound(const Problem& p, const std::vector<DestinationFlow>& flows,
                  const ObjectiveTerms& terms) {
  const Topology& topo = p.topo();
  double now = 0, shortest = 0;
  for (const DestinationFlow& f : flows) {
    for (LinkId l = 0; l < topo.num_links(); ++l) now += terms.first[l] * f.links[l];
  }
  for (size_t t = 0; t < p.targets().size(); ++t) {
    if (!p.HasTraffic(t)) continue;
    const std::vector<double>& injected = p.injected(t);
    std::vector<double> lengths(topo.num_links(), kInf);
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      if (p.Usable(t, l)) lengths[l] = std::max(terms.first[l], 1e-300);
    }
    const std::vector<double> distance = ShortestDistances(topo, p.targets()[t], lengths);
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      if (injected[v] > 0) shortest += injected[v] * distance[v];
    }
  }
  return terms.value - std::max(0.0, now - shortest);
}

// The tables of weights `w`: next hops below min_weight dropped, the rest renormalised.
// Destinations whose weights are `start`'s table unchanged (`kept`) keep that table.
RoutingTables TablesOf(const Problem& p, const Weights& w, double min_weight,
                       const RoutingTables* start, const std::vector<bool>& kept) {
  const Topology& topo = p.topo();
  RoutingTables tables(topo.num_nodes(), p.targets());
  std::vector<std::vector<NextHop>> rows(topo.num_nodes());
  for (size_t t = 0; t < p.targets().size(); ++t) {
    if (kept[t]) {
      tables.Set(start->SharedTable(p.targets()[t]));
      continue;
    }
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      rows[v].clear();
      if (topo.StubUplink(v) != kNoLink) continue;
      double sum = 0;
      for (LinkId l : topo.node(v).out_links) {
        if (w[t][l] >= min_weight) rows[v].push_back({l, w[t][l]}), sum += w[t][l];
      }
      for (NextHop& hop : rows[v]) hop.weight /= sum;
    }
    tables.Set(std::make_shared<const DestinationTable>(p.targets()[t], rows));
  }
  return tables;
}

}  // namespace

double UtilizationNorm(const Topology& topo, const std::vector<double>& loads, double unit_bps,
                       double power) {
  double sum = 0, max = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const double capacity = static_cast<double>(topo.link(l).params.capacity.bps()) / unit_bps;
    if (capacity > 0) max = std::max(max, loads[l] / capacity);
  }
  if (!(max > 0)) return 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const double capacity = static_cast<double>(topo.link(l).params.capacity.bps()) / unit_bps;
    if (capacity > 0) sum += capacity * std::pow(loads[l] / capacity / max, power);
  }
  return max * std::pow(sum, 1 / power);
}

ObjectiveTerms EvaluateObjective(const Topology& topo, const std::vector<double>& loads,
                                 double unit_bps, const RoutingObjective& objective) {
  ObjectiveTerms terms;
  terms.first.assign(topo.num_links(), 0.0);
  terms.second.assign(topo.num_links(), 0.0);
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const LinkTerm t = TermOf(topo.link(l), loads[l], unit_bps, objective);
    terms.value += t.value;
    terms.first[l] = t.first;
    terms.second[l] = t.second;
  }
  return terms;
}

absl::StatusOr<MarginalRoutingResult> MinimiseRoutingObjective(
    const Topology& topo, const std::vector<Demand>& demand, double unit_bps,
    const MarginalRoutingConfig& config, const RoutingTables* start,
    const std::vector<double>* other_loads) {
  ASSIGN_OR_RETURN(TargetDemand split, SplitDemand(topo, demand));
  if (other_loads != nullptr) {
    for (LinkId l = 0; l < topo.num_links(); ++l) split.host_loads[l] += (*other_loads)[l];
  }
  const Problem problem(topo, std::move(split), unit_bps);
  const size_t targets = problem.targets().size();
  std::vector<std::vector<NodeId>> orders;
  Weights w = problem.Start(start, orders);
  std::vector<DestinationFlow> flows(targets);
  // Destinations still at `start`'s weights.
  std::vector<bool> kept(targets);
  for (size_t t = 0; t < targets; ++t) {
    kept[t] = !orders[t].empty();
    ASSIGN_OR_RETURN(flows[t], problem.Route(t, w[t], kept[t] ? &orders[t] : nullptr));
  }
  const auto max_utilization = [&](const std::vector<double>& loads) {
    return MaxUtilization(topo, Scaled(loads, unit_bps));
  };

  MarginalRoutingResult result;
  RoutingObjective objective = config.objective;
  objective.reference_utilization = max_utilization(problem.Loads(flows));
  if (!(objective.reference_utilization > 0)) objective.reference_utilization = 1;
  bool steady = false;
  const int64_t links = topo.num_links();
  int64_t iteration_scans = 0;  // a step of every destination with traffic
  for (size_t t = 0; t < targets; ++t) iteration_scans += problem.HasTraffic(t) ? links : 0;
  const auto out_of_scans = [&] {
    return config.max_link_scans > 0 && result.link_scans >= config.max_link_scans;
  };
  for (int round = 0; round < config.reference_rounds && !result.out_of_scans; ++round) {
    result.reference_trace.push_back(objective.reference_utilization);
    std::vector<double> loads = problem.Loads(flows);
    ObjectiveTerms terms = EvaluateObjective(topo, loads, unit_bps, objective);
    result.lower_bound = 0;
    result.settled = false;
    // Each destination's step scale, by Armijo backtracking: halved until J falls, doubled
    // (up to 1) after each step taken. Destinations move one after the other (Gauss-Seidel),
    // each against the loads the others left, so one that needs a short step does not hold
    // the rest back.
    std::vector<double> step(targets, 1.0);
    std::vector<std::pair<LinkId, LinkTerm>> changed;
    for (int i = 0; i < config.max_iterations; ++i) {
      if (out_of_scans()) {
        result.out_of_scans = true;
        break;
      }
      // The bound costs a shortest-path tree per destination: every tenth iteration. None
      // when fewer than ten iterations are left: a capped minimisation stops on its cap.
      const bool ten_left = config.max_iterations - i >= 10 &&
                            (config.max_link_scans == 0 ||
                             config.max_link_scans - result.link_scans >= 10 * iteration_scans);
      if (i % 10 == 0 && ten_left) {
        result.lower_bound = std::max(result.lower_bound, LowerBound(problem, flows, terms));
      }
      if (terms.value - result.lower_bound <= config.gap_tolerance * std::abs(terms.value)) {
        result.settled = true;
        break;
      }
      const double before = terms.value;
      for (size_t t = 0; t < targets; ++t) {
        if (!problem.HasTraffic(t)) continue;
        for (; step[t] > 1e-9; step[t] /= 2) {
          result.link_scans += links;
          std::vector<double> next = w[t];
          StepToward(problem, t, flows[t], terms, config, step[t], next);
          if (next == w[t]) {
            // Nothing to move (every next hop within the tie tolerance of the best): what the
            // step below would do with a step of no change, without routing it.
            step[t] = std::min(1.0, step[t] * 2);
            break;
          }
          // A step that only reweights next hops keeps the order of the flow.
          bool same_hops = true;
          for (size_t l = 0; same_hops && l < next.size(); ++l) {
            same_hops = (next[l] > 0) == (w[t][l] > 0);
          }
          ASSIGN_OR_RETURN(DestinationFlow next_flow,
                           problem.Route(t, next, same_hops ? &flows[t].order : nullptr));
          // J after the step, from the terms of the links whose load it changes.
          changed.clear();
          double value = terms.value;
          for (LinkId l = 0; l < topo.num_links(); ++l) {
            const double delta = next_flow.links[l] - flows[t].links[l];
            if (delta == 0) continue;
            const LinkTerm before_l = TermOf(topo.link(l), loads[l], unit_bps, objective);
            const LinkTerm after_l = TermOf(topo.link(l), loads[l] + delta, unit_bps, objective);
            value += after_l.value - before_l.value;
            changed.push_back({l, after_l});
          }
          if (value <= terms.value) {
            for (const auto& [l, term] : changed) {
              loads[l] += next_flow.links[l] - flows[t].links[l];
              terms.first[l] = term.first;
              terms.second[l] = term.second;
            }
            terms.value = value;
            w[t] = std::move(next);
            flows[t] = std::move(next_flow);
            kept[t] = false;
            step[t] = std::min(1.0, step[t] * 2);
            break;
          }
        }
        step[t] = std::max(step[t], 1e-9);
      }
      // Against rounding drift of the loads updated in place.
      loads = problem.Loads(flows);
      terms = EvaluateObjective(topo, loads, unit_bps, objective);
      // Every step taken lowered J as the incremental sums saw it; recomputed from scratch,
      // J must not have risen over the sweep beyond rounding.
      if (terms.value > before + 1e-9 * std::abs(before)) result.oscillated = true;
      if (!(terms.value < before)) break;  // no step lowers J: as good as these weights get
      ++result.iterations;
      result.objective_trace.push_back(terms.value);
      result.max_utilization.push_back(max_utilization(loads));
      const size_t n = result.objective_trace.size();
      if (i >= config.stall_iterations &&
          result.objective_trace[n - 1 - config.stall_iterations] - terms.value <=
              config.stall_tolerance * std::abs(terms.value)) {
        result.settled = true;
        break;
      }
    }
    const double now = max_utilization(loads);
    steady =
        std::abs(now - objective.reference_utilization) <= 0.01 * objective.reference_utilization;
    if (steady || !(now > 0) || round + 1 == config.reference_rounds || out_of_scans()) {
      result.out_of_scans = result.out_of_scans || (!steady && out_of_scans());
      break;
    }
    objective.reference_utilization = now;
  }
  // The reference turned back (rose after falling, or fell after rising) and never steadied;
  // the last minimisation's maximum counts as the next reference would have.
  std::vector<double> u = result.reference_trace;
  if (!result.max_utilization.empty()) u.push_back(result.max_utilization.back());
  for (size_t i = 2; !steady && i < u.size(); ++i) {
    if ((u[i] - u[i - 1]) * (u[i - 1] - u[i - 2]) < 0) result.oscillated = true;
  }
  result.reference_utilization = objective.reference_utilization;
  result.tables = TablesOf(problem, w, config.min_weight, start, kept);
  ASSIGN_OR_RETURN(result.loads, ComputeLinkLoads(topo, result.tables, demand));
  if (other_loads != nullptr) {
    for (LinkId l = 0; l < topo.num_links(); ++l) result.loads[l] += (*other_loads)[l];
  }
  result.objective = EvaluateObjective(topo, result.loads, unit_bps, objective).value;
  return result;
}

}  // namespace dar
