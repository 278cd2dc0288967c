// Helpers shared by the tests of the fluid model and of what minimises over it
// (te_lp_test.cc, marginal_routing_test.cc).
#ifndef DAR_CORE_FLUID_TEST_UTIL_H_
#define DAR_CORE_FLUID_TEST_UTIL_H_

#include <vector>

#include "core/fluid.h"
#include "core/routing.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar::fluid_test {

inline constexpr double kUnit = 1e9;  // one demand unit is 1 Gb/s

inline LinkParams Params(double gbps, int delay_ms = 1) {
  LinkParams p;
  p.capacity = DataRate::Gbps(gbps);
  p.delay = Milliseconds(delay_ms);
  return p;
}

// The maximum utilisation of `demand` (units of kUnit) under `tables`.
inline double MaxUtilizationUnder(const Topology& topo, const RoutingTables& tables,
                                  const std::vector<Demand>& demand) {
  std::vector<double> loads = ComputeLinkLoads(topo, tables, demand).value();
  for (double& l : loads) l *= kUnit;
  return MaxUtilization(topo, loads);
}

inline double EcmpMaxUtilization(const Topology& topo, const std::vector<Demand>& demand) {
  return MaxUtilizationUnder(topo, ComputeEcmpTables(topo), demand);
}

// Two disjoint two-hop paths A - M1 - B of `first` Gb/s and A - M2 - B of `second` Gb/s;
// nodes A, M1, M2, B are ids 0 to 3.
inline Topology TwoPaths(double first, double second) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId m1 = topo.AddNode("M1", NodeKind::kSwitch);
  const NodeId m2 = topo.AddNode("M2", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  topo.AddDuplexLink(a, m1, Params(first));
  topo.AddDuplexLink(m1, b, Params(first));
  topo.AddDuplexLink(a, m2, Params(second));
  topo.AddDuplexLink(m2, b, Params(second));
  return topo;
}

// A triangle A, B, C (ids 0 to 2) of 1 Gb/s links.
inline Topology Triangle() {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  const NodeId c = topo.AddNode("C", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, Params(1));
  topo.AddDuplexLink(b, c, Params(1));
  topo.AddDuplexLink(c, a, Params(1));
  return topo;
}

}  // namespace dar::fluid_test

#endif  // DAR_CORE_FLUID_TEST_UTIL_H_
