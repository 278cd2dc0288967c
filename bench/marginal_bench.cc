// DAR's marginal decision layer (core/marginal_routing.h, core/marginal_decision.h): the
// minimisation from ECMP (iterations to settle, time) on the largest development WAN and the
// one it takes longest on, and on k=16 and k=32 fat-trees with a degraded core link under a
// random host permutation; and one controller cycle under a steady demand on the same
// fat-trees (every cycle at the bound on its work).
// One core, deterministic input.
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

// A k-ary fat-tree of 100 Gb/s links with the core link c0-a0 at a quarter. k=16: 1,024
// hosts, 320 switches, 6,144 directed links; k=32: 8,192 hosts, 1,280 switches, 49,152.
Topology DegradedFatTree(int k) {
  LinkParams p;
  p.capacity = DataRate::Gbps(100);
  p.delay = Microseconds(1);
  Topology t = FatTree({.k = k, .host_link = p, .fabric_link = p});
  const NodeId a0 = *t.FindNode("a0"), c0 = *t.FindNode("c0");
  for (LinkId l : {t.FindLink(a0, c0), t.FindLink(c0, a0)}) {
    t.mutable_link(l).params.capacity = DataRate::Gbps(25);
  }
  return t;
}

const Topology& FatTree16() {
  static const Topology* topo = new Topology(DegradedFatTree(16));
  return *topo;
}
const Topology& FatTree32() {
  static const Topology* topo = new Topology(DegradedFatTree(32));
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

// The same on k=32, to count the iterations a cold start needs (about a minute).
void BM_MinimiseFatTree32(benchmark::State& state) {
  Minimise(state, FatTree32(), Permutation(FatTree32()));
}
BENCHMARK(BM_MinimiseFatTree32)->Unit(benchmark::kMillisecond)->Iterations(1);

// One cycle of a controller on `topo` under a steady demand, after `warmup` cycles: the
// demand update, the minimisation resumed from the last cycle (within the deployed bound
// on a cycle's work, kCycleLinkScans) and the publish test.
void DecideCycles(benchmark::State& state, const Topology& topo, int warmup) {
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
  for (int i = 0; i < warmup; ++i) cycle();
  const MarginalDecisionStats before = decision.stats();
  for (auto _ : state) benchmark::DoNotOptimize(cycle());
  const MarginalDecisionStats& after = decision.stats();
  const double cycles = static_cast<double>(after.cycles - before.cycles);
  state.counters["iterations_per_cycle"] =
      static_cast<double>(after.iterations - before.iterations) / cycles;
  state.counters["out_of_scans"] =
      static_cast<double>(after.out_of_scans - before.out_of_scans) / cycles;
  state.counters["publishes"] = static_cast<double>(after.publishes);
}

// k=16 after 150 cycles of a steady demand (a cold start settles in 175 iterations; an
// iteration is 786,432 scans, so the bound lets a cycle step about 80 of the 128
// destinations). Under the bound a cycle does not see that it has settled: the stall test
// needs 50 iterations in one call, the lower bound ten left, so every cycle spends its bound.
void BM_DecideSteadyFatTree16(benchmark::State& state) { DecideCycles(state, FatTree16(), 150); }
BENCHMARK(BM_DecideSteadyFatTree16)->Unit(benchmark::kMillisecond)->Iterations(5);

// k=32 after the first cycles: an iteration is 512 destinations x 49,152 links, 25 M link
// scans, so a cycle steps about ten destinations; what it costs beyond them is the demand's
// flows (every destination rerouted), the loads under the tables in force and the tables.
void BM_DecideFatTree32(benchmark::State& state) { DecideCycles(state, FatTree32(), 3); }
BENCHMARK(BM_DecideFatTree32)->Unit(benchmark::kMillisecond)->Iterations(10);

}  // namespace
}  // namespace dar

BENCHMARK_MAIN();
