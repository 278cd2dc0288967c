// Decision time of the diffusion engine: all destinations in one cycle (full recompute) and a
// one-link incremental update, on fat-trees k = 8, 16, 32 (the argument) and on the abilene
// WAN (0). One core.
//   ./build/bench/engine_bench --benchmark_filter='/(16|32)$' --benchmark_repetitions=3
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/diffusion.h"
#include "core/link_cost.h"
#include "core/random.h"
#include "core/topology_gen.h"
#include "core/topology_json.h"

namespace dar {
namespace {

Topology Make(int k) {
  if (k == 0) {
    JsonImportOptions options;
    return *LoadNodeLinkJson(std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json",
                             options);
  }
  FatTreeParams p;
  p.k = k;
  return FatTree(p);
}

std::vector<double> RandomCosts(const Topology& topo, uint64_t seed) {
  Random rng(seed);
  std::vector<double> costs(topo.num_links());
  for (double& c : costs) c = 1 + 0.5 * rng.Uniform();
  return costs;
}

void Label(benchmark::State& state, const Topology& topo) {
  int switches = 0;
  for (NodeId v = 0; v < topo.num_nodes(); ++v) switches += topo.node(v).kind == NodeKind::kSwitch;
  state.SetLabel(std::to_string(switches) + " switches, " +
                 std::to_string(topo.Destinations().size()) + " destinations");
}

void BM_FullCycle(benchmark::State& state) {
  const Topology topo = Make(static_cast<int>(state.range(0)));
  DiffusionEngine engine(topo, DiffusionConfig());
  const std::vector<double> costs = RandomCosts(topo, 1);
  engine.ComputeAll(costs);  // warm: tables exist, as in a running controller
  int64_t full = 0;
  for (auto _ : state) {
    engine.ComputeAll(costs);
    benchmark::DoNotOptimize(engine.Tables(1));
    full += engine.stats().destinations_full;
  }
  state.counters["reordered"] = benchmark::Counter(full, benchmark::Counter::kAvgIterations);
  Label(state, topo);
}
BENCHMARK(BM_FullCycle)->Arg(0)->Arg(8)->Arg(16)->Arg(32)->Unit(benchmark::kMillisecond);

// As a controller's full cycle sees it: every link's cost moved a little (up to 5%; two draws
// in turn) since the last cycle. Settling orders mostly hold, so destinations start warm.
void BM_FullCycleMovedCosts(benchmark::State& state) {
  const Topology topo = Make(static_cast<int>(state.range(0)));
  DiffusionEngine engine(topo, DiffusionConfig());
  const std::vector<double> base = RandomCosts(topo, 1);
  std::vector<double> costs[2] = {base, base};
  Random rng(2);
  for (std::vector<double>& c : costs) {
    for (double& x : c) x *= 1 + 0.05 * rng.Uniform();
  }
  engine.ComputeAll(costs[0]);
  int64_t full = 0, changes = 0, cycle = 0;
  for (auto _ : state) {
    engine.ComputeAll(costs[++cycle % 2]);
    benchmark::DoNotOptimize(engine.Tables(1));
    full += engine.stats().destinations_full;
    changes += engine.stats().route_changes;
  }
  state.counters["reordered"] = benchmark::Counter(full, benchmark::Counter::kAvgIterations);
  state.counters["route_changes"] = benchmark::Counter(changes, benchmark::Counter::kAvgIterations);
  Label(state, topo);
}
BENCHMARK(BM_FullCycleMovedCosts)->Arg(0)->Arg(8)->Arg(16)->Arg(32)->Unit(benchmark::kMillisecond);

// One link's cost moves back and forth by 30%: the incremental path of a control cycle.
void BM_OneLinkUpdate(benchmark::State& state) {
  const Topology topo = Make(static_cast<int>(state.range(0)));
  DiffusionConfig config;
  config.hysteresis = 0;  // every update really changes rows
  DiffusionEngine engine(topo, config);
  std::vector<double> costs = RandomCosts(topo, 1);
  engine.ComputeAll(costs);
  // A fabric link: for a fat-tree an aggregation -> core link, for the WAN link 0.
  LinkId link = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    if (topo.node(topo.link(l).src).name == "a0" && topo.node(topo.link(l).dst).name == "c0")
      link = l;
  }
  const double base = costs[link];
  int64_t relaxed = 0, dests = 0;
  bool up = false;
  for (auto _ : state) {
    up = !up;
    costs[link] = up ? base * 1.3 : base;
    const LinkId changed[] = {link};
    engine.Update(costs, changed);
    benchmark::DoNotOptimize(engine.Tables(2));
    relaxed += engine.stats().nodes_relaxed;
    dests += engine.stats().destinations_incremental + engine.stats().destinations_full;
  }
  state.counters["nodes_relaxed"] = benchmark::Counter(relaxed, benchmark::Counter::kAvgIterations);
  state.counters["destinations"] = benchmark::Counter(dests, benchmark::Counter::kAvgIterations);
  Label(state, topo);
}
BENCHMARK(BM_OneLinkUpdate)->Arg(0)->Arg(8)->Arg(16)->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dar

BENCHMARK_MAIN();
