// Simulator speed: events per second and simulated time per wall time, one core.
//   make bench   (or ./build/bench/sim_bench --benchmark_filter=...)
#include <string>

#include "benchmark/benchmark.h"
#include "core/random.h"
#include "fmt/format.h"
#include "sim/runner.h"
#include "sim/scenario.h"

namespace dar::sim {
namespace {

std::string FatTree(int k) {
  return fmt::format(R"(
topology:
  type: fat_tree
  k: {}
  host_link: {{capacity_gbps: 10, delay_us: 1, queue_kb: 512}}
  fabric_link: {{capacity_gbps: 10, delay_us: 1, queue_kb: 512}}
network: {{ecn_threshold_kb: 64}}
)",
                     k);
}

void RunBench(benchmark::State& state, const std::string& yaml, const char* policy) {
  absl::StatusOr<Scenario> s = ParseScenario(yaml, std::string(DAR_SOURCE_DIR) + "/bench/x.yaml");
  if (!s.ok()) {
    state.SkipWithError(std::string(s.status().message()).c_str());
    return;
  }
  int64_t events = 0;
  double sim_s = 0;
  for (auto _ : state) {
    absl::StatusOr<nlohmann::json> r = RunPolicy(*s, s->policies[0], {});
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    events += (*r)["metrics"]["events"].get<int64_t>();
    sim_s += (*r)["metrics"]["sim_time_s"].get<double>();
  }
  state.counters["events_per_s"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
  state.counters["sim_s_per_wall_s"] = benchmark::Counter(sim_s, benchmark::Counter::kIsRate);
  state.SetLabel(policy);
}

// Every host of a k=8 fat-tree (128) sends 4 MB to a partner in a random permutation.
void BM_FatTreePermutation(benchmark::State& state) {
  Random rng(1);
  std::vector<int> perm(128);
  for (int i = 0; i < 128; ++i) perm[i] = i;
  for (int i = 127; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  std::string transfers;
  for (int i = 0; i < 128; ++i) {
    if (perm[i] != i) transfers += fmt::format("      - {{src: h{}, dst: h{}}}\n", i, perm[i]);
  }
  const char* policy =
      state.range(0) == 0 ? "ecmp" : "{name: spray, routing: ecmp, forwarding: per_packet}";
  const std::string yaml = FatTree(8) + fmt::format(R"(
duration_ms: 1
workloads:
  - type: bulk
    size_mb: 4
    transfers:
{}
policies: [{}]
)",
                                                    transfers, policy);
  RunBench(state, yaml, state.range(0) == 0 ? "ecmp" : "spray");
}
BENCHMARK(BM_FatTreePermutation)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Ring AllReduce among all 128 hosts of a k=8 fat-tree, 16 MB, one iteration.
void BM_AllReduce128(benchmark::State& state) {
  const std::string yaml = FatTree(8) + R"(
duration_ms: 1
workloads:
  - {type: allreduce, group: all, message_mb: 16, iterations: 1, compute_ms: 0}
policies: [ecmp]
)";
  RunBench(state, yaml, "ecmp");
}
BENCHMARK(BM_AllReduce128)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dar::sim

BENCHMARK_MAIN();
