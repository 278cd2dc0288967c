// What a routing does to each demand, for `dar-sim loads`: per-pair routes (the share of a
// pair's traffic on every link), path stretch and max-min fair admission when the demand
// exceeds capacity. Fluid model, as core/fluid.h: nothing is queued or dropped.
//
// Routes come from routing tables (ComputePairRoutes, core/fluid.h) or from per-source flows
// (PairRoutesFromSourceFlows, for the LP optimum of core/te_lp.h). Thread-compatible.
#ifndef DAR_CORE_TE_METRICS_H_
#define DAR_CORE_TE_METRICS_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/fluid.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

// The traffic of one source node over every link (indexed by LinkId), in demand units, toward
// all its destinations together: a source-aggregated flow.
struct SourceFlow {
  NodeId source = kNoNode;
  std::vector<double> link_flow;
};

// The traffic from `flows` toward each destination, split the only way the aggregate allows
// without more information: traffic of one source mixes at every node, so at node v each
// destination's traffic leaves on every out-link in proportion to that link's flow (the part
// that ends at v excepted). For an acyclic flow this is a flow decomposition: pair totals and
// link loads are those of `flows`.
// REQUIRES: every flow conserves traffic for the demands of its source (up to rounding).
// Errors: FailedPrecondition if a source's flow has a cycle, or a demand's source has no flow
// in `flows`; InvalidArgument for a bad demand as ComputeLinkLoads.
absl::StatusOr<std::vector<PairRoute>> PairRoutesFromSourceFlows(
    const Topology& topo, const std::vector<Demand>& demands, const std::vector<SourceFlow>& flows);

// Path stretch of routes. The delay of a pair's traffic is the mean, weighted by traffic, of
// the propagation delays of the paths it takes (sum over links of share * delay); its stretch
// is that over the delay of the shortest-delay path between the pair (>= 1). Pairs whose
// shortest delay is 0 (co-located nodes) have no stretch and are left out of the total.
struct StretchReport {
  // Mean stretch over pairs, weighted by demand; 1 if no pair has a stretch.
  double total = 1;
  // Per route, in the order given.
  std::vector<Duration> path_delay;
  std::vector<Duration> shortest_delay;
  std::vector<double> stretch;  // 0 where shortest_delay is 0
};
StretchReport ComputeStretch(const Topology& topo, const std::vector<PairRoute>& routes);

// Admitted throughput when the routes overload links: max-min fair admission along the fixed
// routes, by progressive filling (fluid). Every pair's admitted fraction of its demand grows
// at the same pace from 0; when a link fills (load = capacity), the pairs crossing it stop
// growing; the others go on, up to their whole demand. Fairness is thus in the fraction of a
// pair's demand (weighted max-min with demands as weights): scaling all demands together
// scales no pair's admitted fraction up, and with one bottleneck of utilisation U > 1 every
// pair through it is admitted 1 / U.
struct AdmissionReport {
  double admitted_fraction = 1;       // admitted over total demand
  double min_pair_fraction = 1;       // the least admitted fraction of any pair
  std::vector<double> pair_fraction;  // per route, in the order given
};
// Capacities are the links' in bits per second, each demand unit `unit_bps`.
// REQUIRES: unit_bps > 0.
AdmissionReport MaxMinAdmission(const Topology& topo, const std::vector<PairRoute>& routes,
                                double unit_bps);

}  // namespace dar

#endif  // DAR_CORE_TE_METRICS_H_
