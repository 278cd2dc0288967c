// Solve time of the TE LP (core/te_lp.h) on the largest development topology, VtlWavenet2011
// (91 nodes, 93 edges, 186 directed links), under the uniform and the gravity demand; with
// only the min-max-utilisation stage and with the least-delay second stage. Also the per-pair
// metrics `dar-sim loads` derives from the LP's flows. One core, deterministic input.
//   ./build/bench/te_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/demand.h"
#include "core/fluid.h"
#include "core/te_lp.h"
#include "core/te_metrics.h"
#include "core/topology_json.h"

namespace dar {
namespace {

constexpr double kUnit = 1e9;

const Topology& Vtl() {
  static const Topology* topo = new Topology(
      LoadNodeLinkJson(std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/VtlWavenet2011.json",
                       JsonImportOptions())
          .value());
  return *topo;
}

std::vector<Demand> MakeDemand(bool gravity) {
  return gravity ? GravityDemand(Vtl()).value() : UniformDemand(Vtl());
}

// Arguments: gravity (0 uniform, 1 gravity), delay stage (0 or 1).
void BM_TeLp(benchmark::State& state) {
  const std::vector<Demand> demand = MakeDemand(state.range(0) == 1);
  const TeLpOptions options{.minimise_delay = state.range(1) == 1};
  int iterations = 0;
  for (auto _ : state) {
    absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(Vtl(), demand, kUnit, options);
    if (!lp.ok()) {
      state.SkipWithError(std::string(lp.status().message()).c_str());
      return;
    }
    iterations = lp->iterations;
    benchmark::DoNotOptimize(lp->lambda);
  }
  state.counters["simplex_iterations"] = iterations;
  state.SetLabel(std::string(state.range(0) == 1 ? "gravity" : "uniform") +
                 (state.range(1) == 1 ? ", with delay stage" : ", max-util only"));
}
BENCHMARK(BM_TeLp)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->Iterations(3);

// Per-pair routes from the LP's source flows, stretch and max-min admission.
void BM_LpMetrics(benchmark::State& state) {
  const std::vector<Demand> demand = MakeDemand(state.range(0) == 1);
  const TeLpResult lp = SolveMinMaxUtilization(Vtl(), demand, kUnit).value();
  for (auto _ : state) {
    const std::vector<PairRoute> routes =
        PairRoutesFromSourceFlows(Vtl(), demand, lp.flows).value();
    benchmark::DoNotOptimize(ComputeStretch(Vtl(), routes).total);
    benchmark::DoNotOptimize(MaxMinAdmission(Vtl(), routes, kUnit).admitted_fraction);
  }
  state.SetLabel(state.range(0) == 1 ? "gravity" : "uniform");
}
BENCHMARK(BM_LpMetrics)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dar

BENCHMARK_MAIN();
