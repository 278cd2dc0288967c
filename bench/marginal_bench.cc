// DAR's marginal decision layer (core/marginal_routing.h, core/marginal_decision.h): the
// minimisation from ECMP (iterations to settle, time) on the largest development WAN and the
// one it takes longest on, and on a k=16 fat-tree with a degraded core link under a random
// host permutation; and one controller cycle, warm (the tables in force already optimal for a
// steady demand), on the same fat-tree. One core, deterministic input.
//   ./build/bench/marginal_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/demand.h"
#include "core/marginal_decision.h"
#include "core/marginal_routing.h"
#include "core/random.h"
#include "core/topology_gen.h"
#include "core/topology_json.h"

namespace dar {
namespace {

constexpr double kUnit = 1e9;

Topology Wan(const std::string& name) {
  return LoadNodeLinkJson(std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/" + name + ".json",
                          JsonImportOptions())
      .value();
}

// k=16: 1,024 hosts, 320 switches, 6,144 directed links; the core link c0-a0 at a quarter.
const Topology& FatTree16() {
  static const Topology* topo = [] {
    LinkParams p;
    p.capacity = DataRate::Gbps(100);
    p.delay = Microseconds(1);
    auto* t = new Topology(FatTree({.k = 16, .host_link = p, .fabric_link = p}));
    const NodeId a0 = *t->FindNode("a0"), c0 = *t->FindNode("c0");
    for (LinkId l : {t->FindLink(a0, c0), t->FindLink(c0, a0)}) {
      t->mutable_link(l).params.capacity = DataRate::Gbps(25);
    }
    return t;
  }();
  return *topo;
}

// Every host sends 50 Gb/s to another, a random permutation (seed 1).
std::vector<Demand> Permutation(const Topology& topo) {
  std::vector<NodeId> hosts = topo.Hosts(), to = hosts;
  Random rng(1);
  for (size_t i = to.size() - 1; i > 0; --i) std::swap(to[i], to[rng.Below(i + 1)]);
  std::vector<Demand> demand;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i] != to[i]) demand.push_back({hosts[i], to[i], 50});
  }
  return demand;
}

void Minimise(benchmark::State& state, const Topology& topo, const std::vector<Demand>& demand) {
  MarginalRoutingResult result;
  for (auto _ : state) {
    absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    result = std::move(*r);
  }
  state.counters["iterations"] = result.iterations;
  state.counters["settled"] = result.settled;
  state.counters["gap"] = (result.objective - result.lower_bound) / result.objective;
}

void BM_MinimiseVtlWavenetGravity(benchmark::State& state) {
  const Topology topo = Wan("VtlWavenet2011");
  Minimise(state, topo, GravityDemand(topo).value());
}
BENCHMARK(BM_MinimiseVtlWavenetGravity)->Unit(benchmark::kMillisecond);

void BM_MinimiseInternodeUniform(benchmark::State& state) {
  const Topology topo = Wan("Internode");
  Minimise(state, topo, UniformDemand(topo));
}
BENCHMARK(BM_MinimiseInternodeUniform)->Unit(benchmark::kMillisecond);

void BM_MinimiseFatTree16(benchmark::State& state) {
  Minimise(state, FatTree16(), Permutation(FatTree16()));
}
BENCHMARK(BM_MinimiseFatTree16)->Unit(benchmark::kMillisecond)->Iterations(3);

// One cycle of a controller whose tables are already the optimum for a steady demand: the
// demand update, the warm minimisation and the publish test.
void BM_DecideWarmFatTree16(benchmark::State& state) {
  const Topology& topo = FatTree16();
  const std::vector<Demand> demand = Permutation(topo);
  MarginalDecisionConfig config;
  config.period = Milliseconds(100);
  MarginalDecision decision(topo, config);
  int64_t now_ms = 0;
  const auto cycle = [&] {
    for (const Demand& d : demand) {
      decision.CountSent(d.src, d.dst, static_cast<int64_t>(d.amount * 1e9 / 8 * 0.1));
    }
    now_ms += 100;
    return decision.Decide(Time(Milliseconds(now_ms)), topo);
  };
  for (int i = 0; i < 30; ++i) cycle();  // the demand estimate settles, the tables with it
  const int64_t iterations = decision.stats().iterations;
  const int64_t cycles = decision.stats().cycles;
  for (auto _ : state) benchmark::DoNotOptimize(cycle());
  state.counters["iterations_per_cycle"] =
      static_cast<double>(decision.stats().iterations - iterations) /
      static_cast<double>(decision.stats().cycles - cycles);
  state.counters["publishes"] = static_cast<double>(decision.stats().publishes);
}
BENCHMARK(BM_DecideWarmFatTree16)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace dar

BENCHMARK_MAIN();
