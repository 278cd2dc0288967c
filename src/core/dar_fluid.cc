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
    double moved = 0, max_now = 0;
    for (LinkId l = 0; l < links; ++l) {
      const double capacity = static_cast<double>(topo.link(l).params.capacity.bps());
      const double now = capacity > 0 ? loads[l] * unit_bps / capacity : 0;
      max_now = std::max(max_now, now);
      const double next = config.damping * now + (1 - config.damping) * utilisation[l];
      moved = std::max(moved, std::abs(next - utilisation[l]));
      utilisation[l] = next;
    }
    result.max_utilization.push_back(max_now);
    if (moved < config.tolerance) {
      result.settled = true;
      break;
    }
  }
  return result;
}

DarLoopReport DescribeDarLoop(const DarFluidResult& result, double tolerance) {
  const std::vector<double>& u = result.max_utilization;
  DarLoopReport report;
  report.settled = result.settled;
  report.cycles = result.cycles;
  if (u.empty()) return report;
  report.last_max_utilization = u.back();
  report.best_max_utilization = u[0];
  report.best_cycle = 1;
  for (size_t i = 1; i < u.size(); ++i) {
    if (u[i] < report.best_max_utilization) {
      report.best_max_utilization = u[i];
      report.best_cycle = static_cast<int>(i) + 1;
    }
  }
  if (result.settled) return report;
  const size_t tail = std::min<size_t>(u.size(), 40);
  const size_t start = u.size() - tail;
  const auto repeats = [&](size_t p) {
    if (tail < 2 * p) return false;
    for (size_t i = start + p; i < u.size(); ++i) {
      if (std::abs(u[i] - u[i - p]) > tolerance) return false;
    }
    return true;
  };
  if (repeats(1)) return report;  // the maximum no longer moves
  for (int p = 2; p <= 8; ++p) {
    if (repeats(p)) {
      report.oscillating = true;
      report.period = p;
      return report;
    }
  }
  const auto [lo, hi] =
      std::minmax_element(u.begin() + static_cast<std::ptrdiff_t>(start), u.end());
  report.oscillating = *hi - *lo > tolerance;
  return report;
}

}  // namespace dar
