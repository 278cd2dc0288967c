// The learned policy's cost: INT8 and FP32 inference per decision, on the rows of a real
// cycle, and a full RouteComputer cycle on a k=16 fat-tree without a policy, with the INT8
// one and with the FP32 one (features, inference, checks and the new tables included), with
// the links' load held (what is unchanged can be shared) and moving (a new sample on every
// link before each cycle), on one thread and on two. The model is random with dar-train's
// default shape, 11 features -> 32 -> 32 -> 1 (ReLU); BM_Inference also runs one hidden layer,
// 11 -> 32 -> 1.
//   ./build/bench/learn_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/diffusion.h"
#include "core/link_cost.h"
#include "core/policy_features.h"
#include "core/random.h"
#include "core/route_computer.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "learn/policy_audit.h"
#include "learn/policy_model.h"

namespace dar {
namespace {

// A random model of dar-train's default shape, or with `hidden_layers` hidden layers of 32.
learn::PolicyModel DefaultShapeModel(int hidden_layers = 2) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0, 1);
  learn::PolicyModel m;
  m.name = "bench";
  m.feature_mean.assign(kPolicyFeatures, 0);
  m.feature_scale.assign(kPolicyFeatures, 1);
  std::vector<int> widths(static_cast<size_t>(hidden_layers), 32);
  widths.push_back(1);
  int in = kPolicyFeatures;
  for (int out : widths) {
    learn::DenseLayer l;
    l.in = in;
    l.out = out;
    for (int i = 0; i < in * out; ++i) {
      l.weight.push_back(normal(rng) / std::sqrt(static_cast<float>(in)));
    }
    l.bias.assign(out, 0.01f);
    m.layers.push_back(std::move(l));
    in = out;
  }
  return m;
}

// Gives every link of `rc` a random sample: up to 0.8 utilisation, some queueing and loss.
void ObserveRandomLoad(RouteComputer& rc, Random& rng) {
  for (LinkId l = 0; l < rc.topology().num_links(); ++l) {
    LinkSample s;
    s.rtt_smoothed = Microseconds(5);
    s.utilisation = 0.8 * rng.Uniform();
    s.queue_bytes = rng.Uniform() < 0.1 ? static_cast<int64_t>(100'000 * rng.Uniform()) : 0;
    s.loss = rng.Uniform() < 0.05 ? 0.01 * rng.Uniform() : 0;
    rc.Observe(l, s);
  }
}

// A k=16 fat-tree route computer whose links carry random load, its cycle on `executor` (null:
// the caller's thread), a policy weighing each destination at least every
// `policy_refresh_cycles` cycles.
std::unique_ptr<RouteComputer> LoadedComputer(Executor* executor = nullptr,
                                              int policy_refresh_cycles = 1) {
  FatTreeParams p;
  p.k = 16;
  RouteComputerConfig config;
  config.policy_refresh_cycles = policy_refresh_cycles;
  auto rc = std::make_unique<RouteComputer>(FatTree(p), config, executor);
  Random rng(7);
  ObserveRandomLoad(*rc, rng);
  return rc;
}

// Keeps the batch it is given and answers with the engine's weights.
class Recorder : public WeightPolicy {
 public:
  absl::Status Weigh(const PolicyBatch& b, absl::Span<double> weights,
                     Executor& executor) override {
    batch = b;
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = b.candidates[i].analytic_weight;
    return absl::OkStatus();
  }
  std::string Describe() const override { return "recorder"; }
  PolicyBatch batch;
};

const PolicyBatch& RealBatch() {
  static const PolicyBatch* batch = [] {
    std::unique_ptr<RouteComputer> rc = LoadedComputer();
    auto recorder = std::make_shared<Recorder>();
    rc->set_weight_policy(recorder);
    rc->Cycle(true);
    rc->Cycle(true);  // with previous tables
    return new PolicyBatch(recorder->batch);
  }();
  return *batch;
}

// The policy's features alone (PolicyFeatureBuilder::Build, no rewards, as for inference) on a
// k=16 fat-tree whose links carry random load, with last cycle's tables under other loads.
// Arg: threads.
void BM_BuildFeatures(benchmark::State& state) {
  FatTreeParams p;
  p.k = 16;
  const Topology topo = FatTree(p);
  const int links = topo.num_links();
  const RouteComputerConfig config;
  Random rng(11);
  std::vector<LinkState> states(links);
  std::vector<double> present(links);
  const auto load = [&] {
    for (LinkId l = 0; l < links; ++l) {
      LinkState& s = states[l];
      s.utilisation = 0.8 * rng.Uniform();
      s.present_utilisation = present[l] = s.utilisation * rng.Uniform();
      s.queueing = rng.Uniform() < 0.1 ? Microseconds(static_cast<int64_t>(20 * rng.Uniform()))
                                       : Duration(0);
      s.loss = rng.Uniform() < 0.05 ? 0.01 * rng.Uniform() : 0;
    }
  };
  std::array<std::unique_ptr<DiffusionEngine>, kTrafficClasses> engines;
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> previous, tables;
  for (int round = 0; round < 2; ++round) {
    load();
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      if (engines[cls] == nullptr) {
        engines[cls] = std::make_unique<DiffusionEngine>(topo, config.diffusion);
      }
      std::vector<double> costs(links);
      for (LinkId l = 0; l < links; ++l) {
        costs[l] = LinkCost(states[l], cls == 0 ? config.latency : config.bulk, config.scales);
      }
      engines[cls]->ComputeAll(costs);
      previous[cls] = tables[cls];
      tables[cls] = std::make_shared<const RoutingTables>(engines[cls]->Tables(round + 1));
    }
  }
  std::array<const RoutingTables*, kTrafficClasses> now{}, before{};
  std::array<std::vector<const DiffusionEngine*>, kTrafficClasses> potentials;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    now[cls] = tables[cls].get();
    before[cls] = previous[cls].get();
    potentials[cls] = {engines[cls].get()};
  }
  PolicyInputs in;
  in.topology = &topo;
  in.states = states;
  in.present_utilisation = present;
  in.tables = now;
  in.engines = potentials;
  in.previous = before;
  in.scales = config.scales;
  in.reward_terms = false;
  PolicyFeatureBuilder builder;
  PolicyBatch batch;
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  for (auto _ : state) {
    builder.Build(in, batch, pool);
    benchmark::DoNotOptimize(batch.candidates.data());
  }
  state.counters["ns_per_candidate"] = benchmark::Counter(
      static_cast<double>(batch.candidates.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(std::to_string(batch.candidates.size()) + " candidates, " +
                 std::to_string(threads) + (threads == 1 ? " thread" : " threads"));
}
BENCHMARK(BM_BuildFeatures)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: 1 INT8, 0 FP32; threads (INT8 only: the batch's halves side by side); hidden layers
// of 32 (2: the default shape). Wall time.
void BM_Inference(benchmark::State& state) {
  const PolicyBatch& batch = RealBatch();
  learn::LearnedPolicy policy(DefaultShapeModel(static_cast<int>(state.range(2))), "bench",
                              state.range(0) == 1 ? learn::LearnedPolicy::Precision::kInt8
                                                  : learn::LearnedPolicy::Precision::kFloat);
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::vector<double> weights(batch.candidates.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(policy.Weigh(batch, absl::MakeSpan(weights), pool));
  }
  const double decisions = static_cast<double>(batch.decisions.size());
  state.counters["ns_per_decision"] =
      benchmark::Counter(decisions * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
  state.counters["ns_per_candidate"] = benchmark::Counter(
      static_cast<double>(batch.candidates.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(std::to_string(batch.decisions.size()) + " decisions, " +
                 std::to_string(batch.candidates.size()) + " candidates");
}
BENCHMARK(BM_Inference)
    ->Args({1, 1, 2})
    ->Args({1, 2, 2})
    ->Args({0, 1, 2})
    ->Args({1, 1, 1})
    ->Args({1, 2, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The INT8 network alone on the same rows (no softmax): BatchLogits, the first layer's link
// half once per link. Arg: the kernel (QuantizedPolicyModel::Kernel; 1 portable, 2 AVX2,
// 3 AVX2 + AVX-VNNI, 4 AVX2 + AVX512-VNNI on ymm, 5 AVX-512 with VNNI on zmm), skipped where
// the processor lacks it.
void BM_Int8Kernel(benchmark::State& state) {
  const auto kernel = static_cast<learn::QuantizedPolicyModel::Kernel>(state.range(0));
  if (!learn::QuantizedPolicyModel::Supports(kernel)) {
    state.SkipWithError("not on this processor");
    return;
  }
  const PolicyBatch& batch = RealBatch();
  const learn::QuantizedPolicyModel model(DefaultShapeModel());
  learn::QuantizedPolicyModel::Workspace ws;
  std::vector<float> logits(batch.candidates.size());
  for (auto _ : state) {
    model.BatchLogits(batch, absl::MakeSpan(logits), ws, kernel);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["ns_per_candidate"] = benchmark::Counter(
      static_cast<double>(batch.candidates.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Int8Kernel)->DenseRange(1, 5)->Unit(benchmark::kMillisecond);

// Not a timing: INT8 against FP32 on the same real rows (counters: the share of rows whose
// largest weight is on the same candidate, and the largest and mean weight differences).
void BM_Int8AgreesWithFloat(benchmark::State& state) {
  const PolicyBatch& batch = RealBatch();
  learn::LearnedPolicy int8(DefaultShapeModel(), "bench", learn::LearnedPolicy::Precision::kInt8);
  learn::LearnedPolicy fp32(DefaultShapeModel(), "bench", learn::LearnedPolicy::Precision::kFloat);
  std::vector<double> wq(batch.candidates.size()), wf(batch.candidates.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(int8.Weigh(batch, absl::MakeSpan(wq), InlineExecutorInstance()));
    benchmark::DoNotOptimize(fp32.Weigh(batch, absl::MakeSpan(wf), InlineExecutorInstance()));
  }
  const learn::PolicyAgreement a = learn::CompareWeights(batch, wq, wf);
  state.counters["same_choice_pct"] = 100 * a.same_argmax_share();
  state.counters["same_clear_choice_pct"] = 100 * a.clear_same_argmax_share();
  state.counters["clear_rows_pct"] =
      100.0 * static_cast<double>(a.clear_rows) / static_cast<double>(std::max<int64_t>(a.rows, 1));
  state.counters["max_weight_err"] = a.max_weight_error;
  state.counters["mean_weight_err"] = a.mean_weight_error();
}
BENCHMARK(BM_Int8AgreesWithFloat)->Iterations(1)->Unit(benchmark::kMillisecond);

// A full cycle (both classes, every destination). Args: 0 no policy, 1 INT8, 2 FP32; the
// cycle's threads (a ThreadPool of that many; 2: the classes side by side). Wall time:
// with 2 threads the CPU time of the benchmark's own thread says little.
// With a policy refreshed in turns: the share of the rows with a choice it weighed.
std::string RefreshLabel(const RouteComputer& rc) {
  const RouteComputerStats& s = rc.stats();
  const double all = static_cast<double>(s.policy_decisions + s.policy_rows_held);
  if (rc.config().policy_refresh_cycles == 1 || all == 0) return "";
  return fmt::format(", refresh every {} cycles ({:.0f}% of rows weighed)",
                     rc.config().policy_refresh_cycles,
                     100.0 * static_cast<double>(s.policy_decisions) / all);
}

// Args: 0 no policy, 1 INT8, 2 FP32; threads; RouteComputerConfig::policy_refresh_cycles.
void BM_FullCycleK16(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::unique_ptr<RouteComputer> rc = LoadedComputer(&pool, static_cast<int>(state.range(2)));
  if (state.range(0) > 0) {
    rc->set_weight_policy(std::make_shared<learn::LearnedPolicy>(
        DefaultShapeModel(), "bench",
        state.range(0) == 1 ? learn::LearnedPolicy::Precision::kInt8
                            : learn::LearnedPolicy::Precision::kFloat));
  }
  rc->Cycle(true);  // warm, as in a running controller
  for (auto _ : state) benchmark::DoNotOptimize(rc->Cycle(true));
  state.counters["policy_failures"] = static_cast<double>(rc->stats().policy_failures);
  static const char* kNames[] = {"analytic", "int8", "float"};
  state.SetLabel(std::string(kNames[state.range(0)]) + ", " + std::to_string(state.range(1)) +
                 (state.range(1) == 1 ? " thread" : " threads") + RefreshLabel(*rc));
}
BENCHMARK(BM_FullCycleK16)
    ->ArgsProduct({{0, 1, 2}, {1, 2}, {1}})
    ->Args({1, 1, kDeployedPolicyRefreshCycles})
    ->Args({1, 2, kDeployedPolicyRefreshCycles})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// As BM_FullCycleK16, but every link reports a new random sample before each cycle (not
// timed), so that no row's inputs stay as they were: the cost under churn, where nothing
// that depends on last cycle's inputs can be reused. Args: 0 no policy, 1 INT8; threads.
void BM_FullCycleK16Moving(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::unique_ptr<RouteComputer> rc = LoadedComputer(&pool, static_cast<int>(state.range(2)));
  if (state.range(0) > 0) {
    rc->set_weight_policy(std::make_shared<learn::LearnedPolicy>(
        DefaultShapeModel(), "bench", learn::LearnedPolicy::Precision::kInt8));
  }
  rc->Cycle(true);
  Random rng(8);
  for (auto _ : state) {
    state.PauseTiming();
    ObserveRandomLoad(*rc, rng);
    state.ResumeTiming();
    benchmark::DoNotOptimize(rc->Cycle(true));
  }
  state.counters["policy_failures"] = static_cast<double>(rc->stats().policy_failures);
  state.SetLabel(std::string(state.range(0) == 0 ? "analytic" : "int8") + ", " +
                 std::to_string(state.range(1)) + (state.range(1) == 1 ? " thread" : " threads") +
                 RefreshLabel(*rc));
}
BENCHMARK(BM_FullCycleK16Moving)
    ->ArgsProduct({{0, 1}, {1, 2}, {1}})
    ->Args({1, 1, kDeployedPolicyRefreshCycles})
    ->Args({1, 2, kDeployedPolicyRefreshCycles})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dar

BENCHMARK_MAIN();
