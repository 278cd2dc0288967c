#include "core/te_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/units.h"

namespace dar {
namespace {

// Propagation delay (ns) of the fastest path from `src` to every node over up links, never
// through a host. Delays may be 0.
std::vector<double> FastestFrom(const Topology& topo, NodeId src) {
  std::vector<double> dist(topo.num_nodes(), kInfinity);
  using Entry = std::pair<double, NodeId>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  dist[src] = 0;
  queue.push({0, src});
  while (!queue.empty()) {
    const auto [d, v] = queue.top();
    queue.pop();
    if (d > dist[v]) continue;
    if (v != src && topo.node(v).kind == NodeKind::kHost) continue;
    for (LinkId l : topo.node(v).out_links) {
      const Link& link = topo.link(l);
      if (!link.up) continue;
      const double next = d + static_cast<double>(link.params.delay.count());
      if (next < dist[link.dst]) {
        dist[link.dst] = next;
        queue.push({next, link.dst});
      }
    }
  }
  return dist;
}

}  // namespace

absl::StatusOr<std::vector<PairRoute>> PairRoutesFromSourceFlows(
    const Topology& topo, const std::vector<Demand>& demands,
    const std::vector<SourceFlow>& flows) {
  const int n = topo.num_nodes();
  // Per source, its demands (destination, amount, index of the route).
  std::map<NodeId, std::vector<size_t>> by_source;
  std::vector<PairRoute> routes;
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    RETURN_IF_ERROR(CheckDemand(topo, i, d));
    if (d.src == d.dst) continue;
    routes.push_back({.src = d.src, .dst = d.dst, .demand = d.amount, .links = {}});
    by_source[d.src].push_back(routes.size() - 1);
  }
  std::map<NodeId, const SourceFlow*> flow_of;
  for (const SourceFlow& f : flows) flow_of[f.source] = &f;

  for (const auto& [source, indices] : by_source) {
    auto it = flow_of.find(source);
    if (it == flow_of.end() || static_cast<int>(it->second->link_flow.size()) != topo.num_links()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no flow from source '", topo.node(source).name, "'"));
    }
    const std::vector<double>& flow = it->second->link_flow;
    std::vector<double> sink(n, 0.0), out(n, 0.0);
    for (size_t index : indices) sink[routes[index].dst] += routes[index].demand;
    std::vector<int> indegree(n, 0);
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      if (flow[l] <= 0) continue;
      out[topo.link(l).src] += flow[l];
      ++indegree[topo.link(l).dst];
    }
    // Kahn's order over the links that carry flow.
    std::vector<NodeId> order;
    std::vector<NodeId> ready;
    for (NodeId v = 0; v < n; ++v) {
      if (indegree[v] == 0) ready.push_back(v);
    }
    while (!ready.empty()) {
      const NodeId v = ready.back();
      ready.pop_back();
      order.push_back(v);
      for (LinkId l : topo.node(v).out_links) {
        if (flow[l] > 0 && --indegree[topo.link(l).dst] == 0) ready.push_back(topo.link(l).dst);
      }
    }
    if (static_cast<int>(order.size()) != n) {
      return absl::FailedPreconditionError(
          absl::StrCat("the flow from '", topo.node(source).name, "' has a cycle"));
    }
    // Per destination t, reach[v] is the share of the traffic at v that ends at t.
    std::vector<double> reach(n), link_share(topo.num_links());
    for (size_t index : indices) {
      PairRoute& route = routes[index];
      const NodeId t = route.dst;
      for (auto v = order.rbegin(); v != order.rend(); ++v) {
        const double through = sink[*v] + out[*v];
        double r = 0;
        if (through > 0) {
          if (*v == t) r += sink[*v] / through;
          for (LinkId l : topo.node(*v).out_links) {
            if (flow[l] > 0) r += flow[l] / through * reach[topo.link(l).dst];
          }
        }
        reach[*v] = r;
      }
      for (LinkId l = 0; l < topo.num_links(); ++l) {
        if (flow[l] <= 0 || route.demand <= 0) continue;
        const double share = flow[l] * reach[topo.link(l).dst] / route.demand;
        if (share > 0) route.links.push_back({l, std::min(share, 1.0)});
      }
    }
  }
  return routes;
}

StretchReport ComputeStretch(const Topology& topo, const std::vector<PairRoute>& routes) {
  StretchReport report;
  std::map<NodeId, std::vector<double>> fastest;
  double weighted = 0, weight = 0;
  for (const PairRoute& route : routes) {
    auto it = fastest.find(route.src);
    if (it == fastest.end()) it = fastest.emplace(route.src, FastestFrom(topo, route.src)).first;
    double delay = 0;
    for (const auto& [l, share] : route.links) {
      delay += share * static_cast<double>(topo.link(l).params.delay.count());
    }
    const double shortest = it->second[route.dst];
    double stretch = shortest > 0 && std::isfinite(shortest) ? delay / shortest : 0;
    if (stretch > 0 && stretch < 1 && stretch > 1 - 1e-9) stretch = 1;  // rounding of the sum
    report.path_delay.push_back(Nanoseconds(std::llround(delay)));
    report.shortest_delay.push_back(std::isfinite(shortest) ? Nanoseconds(std::llround(shortest))
                                                            : Duration::max());
    report.stretch.push_back(stretch);
    if (stretch > 0) {
      weighted += route.demand * stretch;
      weight += route.demand;
    }
  }
  if (weight > 0) report.total = weighted / weight;
  return report;
}

AdmissionReport MaxMinAdmission(const Topology& topo, const std::vector<PairRoute>& routes,
                                double unit_bps) {
  const int links = topo.num_links();
  AdmissionReport report;
  report.pair_fraction.assign(routes.size(), 0.0);
  std::vector<double> capacity(links), frozen_load(links, 0.0), rate(links, 0.0);
  for (LinkId l = 0; l < links; ++l) {
    capacity[l] = static_cast<double>(topo.link(l).params.capacity.bps()) / unit_bps;
  }
  // Per link, the active routes crossing it.
  std::vector<std::vector<size_t>> crossing(links);
  std::vector<int> active_crossing(links, 0);  // rate[l] counts only while this is > 0
  std::vector<bool> active(routes.size(), true);
  size_t remaining = 0;
  for (size_t p = 0; p < routes.size(); ++p) {
    if (routes[p].demand <= 0) {
      active[p] = false;
      report.pair_fraction[p] = 1;
      continue;
    }
    ++remaining;
    for (const auto& [l, share] : routes[p].links) {
      rate[l] += routes[p].demand * share;
      crossing[l].push_back(p);
      ++active_crossing[l];
    }
  }
  double level = 0;  // the admitted fraction of every active route
  const auto freeze = [&](size_t p) {
    active[p] = false;
    --remaining;
    report.pair_fraction[p] = level;
    for (const auto& [l, share] : routes[p].links) {
      rate[l] -= routes[p].demand * share;
      frozen_load[l] += level * routes[p].demand * share;
      if (--active_crossing[l] == 0) rate[l] = 0;  // no rounding residue
    }
  };
  while (remaining > 0) {
    double next = 1;
    LinkId bottleneck = kNoLink;
    for (LinkId l = 0; l < links; ++l) {
      if (rate[l] <= 0) continue;
      const double fill = std::max(level, (capacity[l] - frozen_load[l]) / rate[l]);
      if (fill < next) {
        next = fill;
        bottleneck = l;
      }
    }
    level = next;
    if (bottleneck == kNoLink) {  // every active route gets its whole demand
      for (size_t p = 0; p < routes.size(); ++p) {
        if (active[p]) freeze(p);
      }
      break;
    }
    // Freeze the routes through the bottleneck and through every other link now full.
    for (LinkId l = 0; l < links; ++l) {
      if (rate[l] <= 0) continue;
      const double load = frozen_load[l] + level * rate[l];
      if (l != bottleneck && load < capacity[l] * (1 - 1e-9)) continue;
      for (size_t p : crossing[l]) {
        if (active[p]) freeze(p);
      }
    }
  }
  double admitted = 0, total = 0;
  for (size_t p = 0; p < routes.size(); ++p) {
    admitted += report.pair_fraction[p] * routes[p].demand;
    total += routes[p].demand;
    if (routes[p].demand > 0) {
      report.min_pair_fraction = std::min(report.min_pair_fraction, report.pair_fraction[p]);
    }
  }
  if (total > 0) report.admitted_fraction = admitted / total;
  return report;
}

}  // namespace dar
