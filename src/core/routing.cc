#include "core/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <queue>
#include <utility>

#include "core/registry.h"
#include "core/units.h"

namespace dar {
namespace {

bool EqualCost(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)});
}

// Whether traffic toward `dest` may continue from node `n`: hosts only end paths.
bool Forwards(const Topology& topo, NodeId n, NodeId dest) {
  return n == dest || topo.node(n).kind != NodeKind::kHost;
}

// The up links out of `v` that start a shortest path toward `dest`, in link-id order.
std::vector<LinkId> ShortestNextHops(const Topology& topo, const std::vector<double>& dist,
                                     NodeId v, NodeId dest) {
  std::vector<LinkId> out;
  if (v == dest || dist[v] == kInfinity) return out;
  for (LinkId l : topo.node(v).out_links) {
    const Link& link = topo.link(l);
    if (!link.up || !Forwards(topo, link.dst, dest) || dist[link.dst] == kInfinity) continue;
    if (EqualCost(dist[v], link.params.metric + dist[link.dst])) out.push_back(l);
  }
  return out;
}

template <typename ChooseHops>
RoutingTables ComputeTables(const Topology& topo, ChooseHops choose) {
  const std::vector<NodeId> destinations = topo.Destinations();
  RoutingTables tables(topo.num_nodes(), destinations);
  for (size_t i = 0; i < destinations.size(); ++i) {
    const NodeId dest = destinations[i];
    const std::vector<double> dist = ShortestDistances(topo, dest);
    std::vector<std::vector<NextHop>> per_node(topo.num_nodes());
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      if (topo.StubUplink(v) != kNoLink) continue;  // stubs use their only link
      per_node[v] = choose(ShortestNextHops(topo, dist, v, dest), i);
    }
    tables.Set(std::make_shared<const DestinationTable>(dest, per_node));
  }
  return tables;
}

}  // namespace

std::vector<double> ShortestDistances(const Topology& topo, NodeId dest) {
  std::vector<double> metrics(topo.num_links());
  for (LinkId l = 0; l < topo.num_links(); ++l) metrics[l] = topo.link(l).params.metric;
  return ShortestDistances(topo, dest, metrics);
}

std::vector<double> ShortestDistances(const Topology& topo, NodeId dest,
                                      absl::Span<const double> link_costs) {
  std::vector<double> dist(topo.num_nodes(), kInfinity);
  using Entry = std::pair<double, NodeId>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  dist[dest] = 0;
  queue.push({0, dest});
  while (!queue.empty()) {
    const auto [d, u] = queue.top();
    queue.pop();
    if (d > dist[u] || !Forwards(topo, u, dest)) continue;
    for (LinkId l : topo.node(u).in_links) {
      const Link& link = topo.link(l);
      if (!link.up || !(link_costs[l] < kInfinity)) continue;
      const double candidate = d + link_costs[l];
      if (candidate < dist[link.src]) {
        dist[link.src] = candidate;
        queue.push({candidate, link.src});
      }
    }
  }
  return dist;
}

std::vector<bool> ReachesDestination(const Topology& topo, NodeId dest) {
  std::vector<bool> reaches(topo.num_nodes(), false);
  std::vector<NodeId> queue = {dest};
  reaches[dest] = true;
  for (size_t i = 0; i < queue.size(); ++i) {
    const NodeId u = queue[i];
    if (!Forwards(topo, u, dest)) continue;
    for (LinkId l : topo.node(u).in_links) {
      const Link& link = topo.link(l);
      if (!link.up || reaches[link.src]) continue;
      reaches[link.src] = true;
      queue.push_back(link.src);
    }
  }
  return reaches;
}

RoutingTables ComputeStaticTables(const Topology& topo) {
  return ComputeTables(topo, [&topo](std::vector<LinkId> links, size_t dest_index) {
    std::vector<NextHop> hops;
    if (links.empty()) return hops;
    std::sort(links.begin(), links.end(), [&](LinkId a, LinkId b) {
      return std::pair(topo.link(a).dst, a) < std::pair(topo.link(b).dst, b);
    });
    hops.push_back({links[dest_index % links.size()], 1.0});
    return hops;
  });
}

RoutingTables ComputeEcmpTables(const Topology& topo) {
  return ComputeTables(topo, [](const std::vector<LinkId>& links, size_t) {
    std::vector<NextHop> hops;
    hops.reserve(links.size());
    for (LinkId l : links) hops.push_back({l, 1.0 / static_cast<double>(links.size())});
    return hops;
  });
}

RoutingTables ComputeWcmpTables(const Topology& topo) {
  const std::vector<NodeId> destinations = topo.Destinations();
  RoutingTables tables(topo.num_nodes(), destinations);
  std::vector<NodeId> order(topo.num_nodes());
  for (const NodeId dest : destinations) {
    const std::vector<double> dist = ShortestDistances(topo, dest);
    // Nodes nearest first, so every next hop's capacity is known before it is needed.
    for (NodeId v = 0; v < topo.num_nodes(); ++v) order[v] = v;
    std::sort(order.begin(), order.end(),
              [&](NodeId a, NodeId b) { return std::pair(dist[a], a) < std::pair(dist[b], b); });
    std::vector<double> reach(topo.num_nodes(), 0);  // capacity toward dest, bits/s
    reach[dest] = kInfinity;
    std::vector<std::vector<NextHop>> per_node(topo.num_nodes());
    for (const NodeId v : order) {
      if (v == dest || dist[v] == kInfinity) continue;
      const std::vector<LinkId> links = ShortestNextHops(topo, dist, v, dest);
      if (links.empty()) continue;
      std::vector<double> share(links.size());
      double total = 0;
      for (size_t i = 0; i < links.size(); ++i) {
        const Link& link = topo.link(links[i]);
        share[i] = std::min(static_cast<double>(link.params.capacity.bps()), reach[link.dst]);
        total += share[i];
      }
      reach[v] = total;
      if (topo.StubUplink(v) != kNoLink) continue;  // stubs use their only link
      for (size_t i = 0; i < links.size(); ++i) {
        const double w = total > 0 ? share[i] / total : 1.0 / static_cast<double>(links.size());
        per_node[v].push_back({links[i], w});
      }
    }
    tables.Set(std::make_shared<const DestinationTable>(dest, per_node));
  }
  return tables;
}

namespace {

const Registration<TablePolicy> kStatic("static", [](const Topology& topo) {
  return absl::StatusOr<RoutingTables>(ComputeStaticTables(topo));
});
const Registration<TablePolicy> kEcmp("ecmp", [](const Topology& topo) {
  return absl::StatusOr<RoutingTables>(ComputeEcmpTables(topo));
});
const Registration<TablePolicy> kWcmp("wcmp", [](const Topology& topo) {
  return absl::StatusOr<RoutingTables>(ComputeWcmpTables(topo));
});

}  // namespace
}  // namespace dar
