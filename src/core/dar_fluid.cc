#include "core/dar_fluid.h"

#include <algorithm>
#include <cmath>

#include "core/status_macros.h"

namespace dar {

absl::StatusOr<DarFluidResult> SettleDarTables(const Topology& topo,
                                               const std::vector<Demand>& demand, double unit_bps,
                                               const DarFluidConfig& config) {
  DiffusionEngine engine(topo, config.diffusion);
  const int links = topo.num_links();
  std::vector<double> utilisation(links, 0.0), costs(links);
  DarFluidResult result;
  for (int cycle = 1; cycle <= config.max_cycles; ++cycle) {
    for (LinkId l = 0; l < links; ++l) {
      const Link& link = topo.link(l);
      LinkState s;
      s.up = link.up;
      s.capacity = link.params.capacity;
      s.propagation = link.params.delay;
      s.utilisation = utilisation[l];
      costs[l] = LinkCost(s, config.weights, config.scales);
    }
    engine.ComputeAll(costs);
    result.tables = engine.Tables(cycle);
    result.cycles = cycle;
    ASSIGN_OR_RETURN(const std::vector<double> loads,
                     ComputeLinkLoads(topo, result.tables, demand));
    double moved = 0;
    for (LinkId l = 0; l < links; ++l) {
      const double capacity = static_cast<double>(topo.link(l).params.capacity.bps());
      const double now = capacity > 0 ? loads[l] * unit_bps / capacity : 0;
      const double next = config.damping * now + (1 - config.damping) * utilisation[l];
      moved = std::max(moved, std::abs(next - utilisation[l]));
      utilisation[l] = next;
    }
    if (moved < config.tolerance) break;
  }
  return result;
}

}  // namespace dar
