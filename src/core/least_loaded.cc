#include "core/least_loaded.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/routing.h"
#include "core/units.h"

namespace dar {
namespace {

// Relative tolerance under which two costs count as equal (as in routing.cc).
constexpr double kRelEps = 1e-9;
// Absolute slack on load comparisons, so that loads equal up to rounding count as ties.
constexpr double kLoadEps = 1e-12;

bool EqualCost(double a, double b) {
  return std::abs(a - b) <= kRelEps * std::max({1.0, std::abs(a), std::abs(b)});
}

// Whether traffic toward `dest` may continue from node `n`: hosts only end paths.
bool Forwards(const Topology& topo, NodeId n, NodeId dest) {
  return n == dest || topo.node(n).kind != NodeKind::kHost;
}

bool Usable(const Topology& topo, absl::Span<const double> base_cost, LinkId l) {
  return topo.link(l).up && base_cost[l] < kInfinity;
}

struct Candidate {
  LinkId link;
  double score;       // max(utilisation of the link, load of the rest of the path)
  double cost_to_go;  // base cost of the link + distance of its far end
};

DestinationTablePtr ComputeDestination(const Topology& topo, absl::Span<const double> base_cost,
                                       absl::Span<const double> utilisation,
                                       const LeastLoadedConfig& config, NodeId dest) {
  const std::vector<double> dist = ShortestDistances(topo, dest, base_cost);
  std::vector<NodeId> order;
  for (NodeId v = 0; v < topo.num_nodes(); ++v) {
    if (dist[v] < kInfinity) order.push_back(v);
  }
  std::sort(order.begin(), order.end(),
            [&dist](NodeId a, NodeId b) { return std::pair(dist[a], a) < std::pair(dist[b], b); });

  std::vector<double> load(topo.num_nodes(), kInfinity);
  load[dest] = 0;
  std::vector<std::vector<NextHop>> per_node(topo.num_nodes());
  std::vector<Candidate> candidates;
  for (NodeId v : order) {
    if (v == dest || topo.StubUplink(v) != kNoLink) continue;
    candidates.clear();
    for (LinkId l : topo.node(v).out_links) {
      if (!Usable(topo, base_cost, l)) continue;
      const NodeId u = topo.link(l).dst;
      if (!Forwards(topo, u, dest) || load[u] == kInfinity) continue;
      const double cost_to_go = base_cost[l] + dist[u];
      // Strictly closer; a neighbour at the same distance up to rounding is not, unless the
      // link itself is a shortest path (a cost too small to tell apart).
      if (!(dist[u] < dist[v])) continue;
      if (EqualCost(dist[u], dist[v]) && !EqualCost(cost_to_go, dist[v])) continue;
      if (config.max_stretch && cost_to_go > *config.max_stretch * dist[v] * (1 + kRelEps) &&
          !EqualCost(cost_to_go, dist[v])) {
        continue;
      }
      candidates.push_back({l, std::max(utilisation[l], load[u]), cost_to_go});
    }
    if (candidates.empty()) continue;
    double best = kInfinity;
    for (const Candidate& c : candidates) best = std::min(best, c.score);
    const double load_limit = best + config.tolerance + kLoadEps;
    double cheapest = kInfinity;
    for (const Candidate& c : candidates) {
      if (c.score <= load_limit) cheapest = std::min(cheapest, c.cost_to_go);
    }
    const double cost_limit = cheapest * (1 + config.cost_slack);
    std::vector<NextHop>& hops = per_node[v];
    double chosen_load = kInfinity;
    for (const Candidate& c : candidates) {
      if (c.score > load_limit) continue;
      if (c.cost_to_go > cost_limit && !EqualCost(c.cost_to_go, cheapest)) continue;
      hops.push_back({c.link, 0});
      chosen_load = std::min(chosen_load, c.score);
    }
    for (NextHop& h : hops) h.weight = 1.0 / static_cast<double>(hops.size());
    load[v] = chosen_load;
  }
  return std::make_shared<const DestinationTable>(dest, per_node);
}

}  // namespace

RoutingTables ComputeLeastLoadedTables(const Topology& topo, absl::Span<const double> base_cost,
                                       absl::Span<const double> utilisation,
                                       const LeastLoadedConfig& config) {
  assert(base_cost.size() == static_cast<size_t>(topo.num_links()));
  assert(utilisation.size() == static_cast<size_t>(topo.num_links()));
  assert(config.tolerance >= 0 && config.cost_slack >= 0);
  assert(!config.max_stretch || *config.max_stretch >= 1);
  const std::vector<NodeId> destinations = topo.Destinations();
  RoutingTables tables(topo.num_nodes(), destinations);
  for (NodeId dest : destinations) {
    tables.Set(ComputeDestination(topo, base_cost, utilisation, config, dest));
  }
  return tables;
}

}  // namespace dar
