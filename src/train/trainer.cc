#include "train/trainer.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "base/status_macros.h"
#include "core/random.h"
#include "fmt/format.h"
#include "sim/runner.h"
#include "sim/scenario.h"
#include "train/policy_net.h"
#include "train/ppo.h"
#include "train/rollout.h"

namespace dar::train {
namespace {

// The episode metrics the curve follows (sim results.json keys; lower is better for all).
constexpr const char* kMetricKeys[] = {"fct_mean_s", "fct_p99_s", "latency_p99_s",
                                       "completion_mean_s", "comm_time_s"};

struct LoadedScenario {
  sim::Scenario scenario;
  sim::PolicySpec policy;
  RewardConfig reward;  // with the scenario's reference overrides
};

struct EpisodeSpec {
  size_t scenario;
  uint64_t sim_seed;
  uint64_t rollout_seed;
};

struct EpisodeResult {
  Episode episode;
  nlohmann::json metrics;
};

// Rewarded decisions and their reward sum.
std::pair<int64_t, double> RewardSum(const Episode& e) {
  int64_t n = 0;
  double sum = 0;
  for (const Episode::Step& s : e.steps) {
    if (!s.has_reward) continue;
    ++n;
    sum += s.reward;
  }
  return {n, sum};
}

absl::StatusOr<std::vector<LoadedScenario>> LoadScenarios(const TrainConfig& config) {
  std::vector<LoadedScenario> out;
  for (const TrainScenario& ts : config.scenarios) {
    ASSIGN_OR_RETURN(sim::Scenario s, sim::LoadScenario(ts.path));
    LoadedScenario ls{std::move(s), {}, config.reward};
    bool found = false;
    for (const sim::PolicySpec& p : ls.scenario.policies) {
      if (p.name != ts.policy) continue;
      if (p.routing != "dar" && p.routing != "dar-learned") {
        return absl::InvalidArgumentError(
            fmt::format("{}: policy '{}' routes with '{}'; dar-train needs a dar policy", ts.path,
                        ts.policy, p.routing));
      }
      ls.policy = p;
      found = true;
    }
    if (!found) {
      return absl::InvalidArgumentError(
          fmt::format("{}: no policy named '{}' to train in", ts.path, ts.policy));
    }
    if (ts.reference_delay_s > 0) ls.reward.reference_delay_s = ts.reference_delay_s;
    if (ts.reference_queue_s > 0) ls.reward.reference_queue_s = ts.reference_queue_s;
    out.push_back(std::move(ls));
  }
  return out;
}

// Runs the episodes, up to `jobs` at once; results in the order of `specs`. `make_policy`
// builds each episode's rollout policy (on the calling thread, before any episode starts).
absl::StatusOr<std::vector<EpisodeResult>> RunEpisodes(
    const std::vector<LoadedScenario>& scenarios, const std::vector<EpisodeSpec>& specs, int jobs,
    const std::function<std::shared_ptr<RolloutPolicy>(const EpisodeSpec&)>& make_policy) {
  std::vector<std::shared_ptr<RolloutPolicy>> policies;
  for (const EpisodeSpec& spec : specs) policies.push_back(make_policy(spec));
  std::vector<EpisodeResult> results(specs.size());
  std::vector<absl::Status> errors(specs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      const LoadedScenario& ls = scenarios[specs[i].scenario];
      sim::Scenario scenario = ls.scenario;
      scenario.seed = specs[i].sim_seed;
      sim::RunOptions options;
      options.weight_policy = policies[i];
      absl::StatusOr<nlohmann::json> run = sim::RunPolicy(scenario, ls.policy, options);
      if (!run.ok()) {
        errors[i] = run.status();
        continue;
      }
      results[i].metrics = (*run)["metrics"];
      results[i].episode = policies[i]->TakeEpisode();
    }
  };
  const int threads = std::max(1, std::min<int>(jobs, static_cast<int>(specs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!errors[i].ok()) {
      return absl::Status(
          errors[i].code(),
          fmt::format("{} (seed {}): {}", scenarios[specs[i].scenario].scenario.path,
                      specs[i].sim_seed, std::string(errors[i].message())));
    }
  }
  return results;
}

// Mean and standard deviation of every feature over the episodes' candidates; a feature that
// does not vary gets scale 1.
void FeatureStats(const std::vector<EpisodeResult>& episodes, std::vector<float>& mean,
                  std::vector<float>& scale) {
  std::vector<double> sum(kPolicyFeatures, 0), sq(kPolicyFeatures, 0);
  double n = 0;
  for (const EpisodeResult& e : episodes) {
    const std::vector<float>& f = e.episode.features;
    for (size_t i = 0; i + kPolicyFeatures <= f.size(); i += kPolicyFeatures) {
      for (int k = 0; k < kPolicyFeatures; ++k) {
        sum[k] += f[i + k];
        sq[k] += static_cast<double>(f[i + k]) * f[i + k];
      }
      ++n;
    }
  }
  mean.assign(kPolicyFeatures, 0.0f);
  scale.assign(kPolicyFeatures, 1.0f);
  if (n == 0) return;
  for (int k = 0; k < kPolicyFeatures; ++k) {
    const double m = sum[k] / n;
    const double sd = std::sqrt(std::max(0.0, sq[k] / n - m * m));
    mean[k] = static_cast<float>(m);
    scale[k] = sd > 1e-3 ? static_cast<float>(sd) : 1.0f;
  }
}

double Number(const nlohmann::json& metrics, const char* key) {
  auto it = metrics.find(key);
  if (it == metrics.end() || !it->is_number()) return NAN;
  return it->get<double>();
}

std::string Ms(double s) { return std::isfinite(s) ? fmt::format("{:.3f}ms", s * 1e3) : "-"; }

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainOptions& options) {
  at::set_num_threads(1);
  torch::manual_seed(config.seed);
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("{}: cannot create the output directory: {}", options.out_dir, ec.message()));
  }
  ASSIGN_OR_RETURN(std::vector<LoadedScenario> scenarios, LoadScenarios(config));

  // The baseline: every (scenario, seed) pair once with the analytic engine.
  std::vector<EpisodeSpec> baseline_specs;
  std::map<std::pair<size_t, uint64_t>, size_t> baseline_index;
  for (size_t s = 0; s < scenarios.size(); ++s) {
    for (uint64_t seed : config.scenarios[s].seeds) {
      if (baseline_index.count({s, seed})) continue;
      baseline_index[{s, seed}] = baseline_specs.size();
      baseline_specs.push_back({s, seed, Random::Hash(config.seed * 7919 + baseline_specs.size())});
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<EpisodeResult> baseline,
                   RunEpisodes(scenarios, baseline_specs, config.jobs, [&](const EpisodeSpec& e) {
                     return std::make_shared<RolloutPolicy>(scenarios[e.scenario].reward,
                                                            e.rollout_seed);
                   }));
  std::vector<float> mean, scale;
  FeatureStats(baseline, mean, scale);
  double baseline_reward = 0;
  {
    int64_t n = 0;
    double sum = 0;
    for (const EpisodeResult& e : baseline) {
      auto [k, r] = RewardSum(e.episode);
      n += k;
      sum += r;
    }
    baseline_reward = n ? sum / n : 0.0;
    say(
        fmt::format("baseline (analytic engine): {} episodes, {} decisions, mean reward {:.4f}, "
                    "{:.1f} s",
                    baseline.size(), n, n ? sum / n : 0.0,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }

  PolicyNet net(config.hidden);
  net->SetNormalisation(mean, scale);
  if (config.init_from_analytic) net->InitFromAnalytic();
  // A return is about reward / (1 - discount) when the reward is steady.
  net->SetValueBias(static_cast<float>(baseline_reward / std::max(1e-3, 1 - config.ppo.discount)));
  torch::optim::Adam optimizer(net->parameters(),
                               torch::optim::AdamOptions(config.ppo.learning_rate));

  TrainResult result;
  for (int it = 1; it <= config.iterations; ++it) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<EpisodeSpec> specs;
    for (size_t s = 0; s < scenarios.size(); ++s) {
      const TrainScenario& ts = config.scenarios[s];
      for (int e = 0; e < ts.episodes; ++e) {
        const size_t k = static_cast<size_t>((it - 1) * ts.episodes + e) % ts.seeds.size();
        uint64_t stream = config.seed;
        stream = Random::SplitMix64(stream) ^ (static_cast<uint64_t>(it) << 32) ^ specs.size();
        specs.push_back({s, ts.seeds[k], Random::Hash(stream)});
      }
    }
    ASSIGN_OR_RETURN(std::vector<EpisodeResult> episodes,
                     RunEpisodes(scenarios, specs, config.jobs, [&](const EpisodeSpec& e) {
                       return std::make_shared<RolloutPolicy>(ClonePolicyNet(net),
                                                              scenarios[e.scenario].reward,
                                                              config.min_weight, e.rollout_seed);
                     }));

    IterationRecord rec;
    rec.iteration = it;
    rec.episodes = static_cast<int>(episodes.size());
    int64_t n = 0, base_n = 0;
    double sum = 0, base_sum = 0, log_ratio_sum = 0;
    int ratios = 0;
    std::map<const char*, std::pair<double, int>> metric_sums;
    for (size_t i = 0; i < episodes.size(); ++i) {
      auto [k, r] = RewardSum(episodes[i].episode);
      n += k;
      sum += r;
      const EpisodeResult& base =
          baseline[baseline_index.at({specs[i].scenario, specs[i].sim_seed})];
      auto [bk, br] = RewardSum(base.episode);
      base_n += bk;
      base_sum += br;
      for (const char* key : kMetricKeys) {
        const double v = Number(episodes[i].metrics, key);
        const double b = Number(base.metrics, key);
        if (!std::isfinite(v)) continue;
        metric_sums[key].first += v;
        ++metric_sums[key].second;
        if (std::isfinite(b) && b > 0 && v > 0) {
          log_ratio_sum += std::log(v / b);
          ++ratios;
        }
      }
    }
    auto metric_mean = [&](const char* key) {
      auto m = metric_sums.find(key);
      return m == metric_sums.end() ? NAN : m->second.first / m->second.second;
    };
    rec.decisions = n;
    rec.mean_reward = n ? sum / n : NAN;
    rec.analytic_reward = base_n ? base_sum / base_n : NAN;
    rec.fct_mean_s = metric_mean("fct_mean_s");
    rec.fct_p99_s = metric_mean("fct_p99_s");
    rec.latency_p99_s = metric_mean("latency_p99_s");
    rec.completion_mean_s = metric_mean("completion_mean_s");
    rec.metric_ratio = ratios ? std::exp(log_ratio_sum / ratios) : NAN;

    std::vector<Episode> eps;
    eps.reserve(episodes.size());
    for (EpisodeResult& e : episodes) eps.push_back(std::move(e.episode));
    const DecisionBatch batch = MakeDecisionBatch(eps, config.ppo);
    rec.ppo = PpoUpdate(net, optimizer, batch, config.ppo);
    rec.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    say(fmt::format(
        "iter {:>3}/{}  reward {:.4f} (analytic {:.4f})  fct {} p99 {}  lat p99 {}  "
        "metrics/analytic {:.3f}  pi_loss {:+.4f} v_loss {:.4f} entropy {:.3f} kl {:.4f} "
        "clip {:.2f}  {:.1f} s",
        it, config.iterations, rec.mean_reward, rec.analytic_reward, Ms(rec.fct_mean_s),
        Ms(rec.fct_p99_s), Ms(rec.latency_p99_s), rec.metric_ratio, rec.ppo.policy_loss,
        rec.ppo.value_loss, rec.ppo.entropy, rec.ppo.approx_kl, rec.ppo.clip_fraction, rec.wall_s));
    result.records.push_back(rec);
  }

  const std::filesystem::path dir(options.out_dir);
  RETURN_IF_ERROR(
      WriteTextFile((dir / "learning_curve.csv").string(), LearningCurveCsv(result.records)));
  RETURN_IF_ERROR(WriteTextFile((dir / "learning_curve.svg").string(),
                                LearningCurveSvg(result.records, "dar-train: " + config.name)));
  result.model = net->Export();
  result.model.name = config.name;
  result.model.created_by = options.created_by;
  result.model.seed = config.seed;
  result.model.config = config.ToJson();
  result.model.min_weight = config.min_weight;
  result.model_path = (dir / config.model_file).string();
  RETURN_IF_ERROR(learn::SavePolicyModel(result.model, result.model_path));
  return result;
}

}  // namespace dar::train
