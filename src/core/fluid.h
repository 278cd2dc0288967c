// Fluid (steady-state) analysis: how a traffic matrix loads every link under given tables.
//
// Traffic toward a destination is split at every node by the next-hop weights, like a fluid;
// nothing is queued or dropped. This is the yardstick for comparing tables without a
// simulation.
#ifndef DAR_CORE_FLUID_H_
#define DAR_CORE_FLUID_H_

#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

// `amount` units of traffic from endpoint `src` to endpoint `dst` (bits per second when the
// result goes to MaxUtilization).
struct Demand {
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  double amount = 0;
};

// OK, or InvalidArgument naming demand `index` if it names a node `topo` lacks or its amount
// is negative or not finite.
absl::Status CheckDemand(const Topology& topo, size_t index, const Demand& d);

// One unit from every endpoint (Topology::Endpoints) to every other endpoint, ordered by
// source then destination id.
std::vector<Demand> UniformDemand(const Topology& topo);

// A demand matrix as tables carry it: per route target, the traffic every node injects toward
// it (a stub host's traffic enters at its switch), and the loads of the host links at either
// end, which no table changes.
struct TargetDemand {
  // Route target -> the nodes whose traffic enters toward it and how much, one entry a node,
  // in increasing NodeId order.
  std::map<NodeId, std::vector<std::pair<NodeId, double>>> injected;
  std::vector<double> host_loads;  // per link, by LinkId
};

// Errors: InvalidArgument for a bad demand, FailedPrecondition if a host end of one has its
// link down.
absl::StatusOr<TargetDemand> SplitDemand(const Topology& topo, const std::vector<Demand>& demands);

// The load of every link (indexed by LinkId) when `demands` are routed by `tables`. Traffic to
// a host hanging off a switch is routed toward the switch (its route target) and then crosses
// the host link. Demands with src == dst are ignored.
// Errors: FailedPrecondition if traffic reaches a node with no next hop, a host it would have
// to pass through, a down or unknown link, or a loop; InvalidArgument for a bad demand (an
// unknown node, a negative or non-finite amount) or tables without the needed destination.
absl::StatusOr<std::vector<double>> ComputeLinkLoads(const Topology& topo,
                                                     const RoutingTables& tables,
                                                     const std::vector<Demand>& demands);

// How one demand is carried: the share of its traffic (0, 1] on every link it crosses, in
// link-id order.
struct PairRoute {
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  double demand = 0;
  std::vector<std::pair<LinkId, double>> links;
};

// The route of every demand with src != dst, in the order of `demands`, as ComputeLinkLoads
// routes it (loads[l] == sum over routes of demand * share on l, up to rounding).
// Errors: as ComputeLinkLoads.
absl::StatusOr<std::vector<PairRoute>> ComputePairRoutes(const Topology& topo,
                                                         const RoutingTables& tables,
                                                         const std::vector<Demand>& demands);

// The largest load / capacity over all links, with loads in bits per second (indexed by
// LinkId). A loaded link of zero capacity gives +infinity; 0 if nothing is loaded.
// REQUIRES: loads.size() == topo.num_links().
double MaxUtilization(const Topology& topo, const std::vector<double>& loads);

}  // namespace dar

#endif  // DAR_CORE_FLUID_H_
