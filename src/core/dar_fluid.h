// DAR's control loop run to a steady state on fluid loads, for `dar-sim loads --policy dar`:
// the tables DAR would settle on for a demand matrix, cycle after cycle feeding the links'
// utilisation under the last tables back into their costs.
#ifndef DAR_CORE_DAR_FLUID_H_
#define DAR_CORE_DAR_FLUID_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/diffusion.h"
#include "core/fluid.h"
#include "core/link_cost.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

struct DarFluidConfig {
  DiffusionConfig diffusion{.temperature = 0.5, .min_weight = 0.001, .hysteresis = 0};
  // The bulk class of the controller: capacity and utilisation matter, delay a little.
  ClassWeights weights{.hop = 1, .latency = 0.1, .loss = 0, .utilisation = 1, .capacity = 1};
  CostScales scales{.reference_delay = Milliseconds(1)};  // WAN delays are milliseconds
  int max_cycles = 200;
  double damping = 0.1;     // utilisation fed back: damping * new + (1 - damping) * old
  double tolerance = 1e-4;  // stop once no link's utilisation moves more than this
};

struct DarFluidResult {
  RoutingTables tables;
  int cycles = 0;  // control cycles until the utilisations settled (or max_cycles)
  // Whether the loop stopped because no link's utilisation moved more than the tolerance
  // (false: it ran out of cycles).
  bool settled = false;
  // Per cycle (index cycle - 1), the maximum utilisation of the loads under that cycle's
  // tables, before damping: what the network would see if it ran those tables.
  std::vector<double> max_utilization;
};

// Runs the loop for `demand`, each unit of which is `unit_bps` bits per second.
absl::StatusOr<DarFluidResult> SettleDarTables(const Topology& topo,
                                               const std::vector<Demand>& demand, double unit_bps,
                                               const DarFluidConfig& config = DarFluidConfig());

// How the loop went, for reports: whether it settled, and if not whether it oscillates.
struct DarLoopReport {
  bool settled = false;
  int cycles = 0;
  // Not settled, and the maximum utilisation still moves by more than `tolerance` over the
  // last cycles (the last min(cycles, 40)): either a repeating pattern (period >= 2) or no
  // convergence at all (period 0). A loop whose maximum utilisation has become constant while
  // some other link still moves is neither settled nor oscillating.
  bool oscillating = false;
  int period = 0;  // the smallest p in 2..8 with u[i] == u[i - p] (within tolerance) over the tail
  double best_max_utilization = 0;  // the least over all cycles
  int best_cycle = 0;               // the first cycle that reached it (1-based)
  double last_max_utilization = 0;  // under the tables the loop ended with
};

// REQUIRES: result.max_utilization.size() == result.cycles.
DarLoopReport DescribeDarLoop(const DarFluidResult& result, double tolerance = 1e-3);

}  // namespace dar

#endif  // DAR_CORE_DAR_FLUID_H_
