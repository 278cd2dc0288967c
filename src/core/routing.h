// Baseline routing: static (one shortest path) and ECMP (all equal-cost shortest paths)
// tables, and a registry of table-building policies by name.
//
// Path cost is the sum of link metrics (LinkParams::metric, default 1 = hop count) over up
// links only. Hosts never forward: a path may start or end at a host, never pass through one.
// Costs are compared with a relative tolerance of 1e-9, so paths whose costs differ only by
// rounding count as equal.
// REQUIRES (of every function here): every up link has a finite metric > 0.
#ifndef DAR_CORE_ROUTING_H_
#define DAR_CORE_ROUTING_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

// Cost of the cheapest path from every node to `dest` (0 at dest, +infinity where dest is
// unreachable). REQUIRES: 0 <= dest < topo.num_nodes().
std::vector<double> ShortestDistances(const Topology& topo, NodeId dest);
// The same with a cost per link instead of the metric; a link is usable if it is up and its
// cost is finite. REQUIRES: link_costs.size() == topo.num_links(), finite costs > 0.
std::vector<double> ShortestDistances(const Topology& topo, NodeId dest,
                                      absl::Span<const double> link_costs);
// Whether each node reaches `dest` over up links (ShortestDistances finite), by a
// breadth-first search: what a validator or a partition check needs, without a heap.
// REQUIRES: 0 <= dest < topo.num_nodes().
std::vector<bool> ReachesDestination(const Topology& topo, NodeId dest);

// For every destination in topo.Destinations(), one shortest-path next hop (weight 1) at
// every node that can reach it. Ties are broken per destination, D-mod-k style: with the
// candidates ordered by next-hop node id then link id, the i-th destination (ascending id)
// takes candidate i mod count. Fixed and deterministic, yet different destinations use
// different paths, as static fat-tree routing does (Zahavi, "D-Mod-K Routing", 2012).
// The destination itself has no next hop.
RoutingTables ComputeStaticTables(const Topology& topo);

// For every destination in topo.Destinations(), every shortest-path next hop at every node
// that can reach it, with equal weights, in link-id order.
RoutingTables ComputeEcmpTables(const Topology& topo);

// WCMP (Zhou et al., "WCMP: Weighted Cost Multipathing for Improved Fairness in Data
// Centers", EuroSys 2014): ECMP's next hops, each weighted by the capacity it leads to. The
// capacity a node has toward `dest` is the sum over its next hops of min(the link's capacity,
// the capacity the next hop has toward dest) (unbounded at dest), so a next hop behind a
// degraded or narrower link gets a proportionally smaller share, and the weights follow the
// bottleneck of every downstream stage, not just the first link. Static: from configured
// capacities only, never from load. A node whose next hops all lead to zero capacity splits
// equally.
RoutingTables ComputeWcmpTables(const Topology& topo);

// A named way to build tables for a topology. Registered with Registration<TablePolicy>;
// "static", "ecmp" and "wcmp" are built in. Look up with Registry<TablePolicy>::Find(name).
using TablePolicy = std::function<absl::StatusOr<RoutingTables>(const Topology& topo)>;

}  // namespace dar

#endif  // DAR_CORE_ROUTING_H_
