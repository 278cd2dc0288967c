#include "train/train_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"

namespace dar::train {
namespace {

absl::Status ReadReward(YamlReader& r, RewardConfig& reward) {
  ASSIGN_OR_RETURN(reward.alpha, r.Optional<double>("alpha", reward.alpha, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(reward.beta, r.Optional<double>("beta", reward.beta, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(reward.gamma, r.Optional<double>("gamma", reward.gamma, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(
      reward.reference_delay_s,
      r.Optional<double>("reference_delay_s", reward.reference_delay_s, Bounds::Positive()));
  ASSIGN_OR_RETURN(
      reward.reference_queue_s,
      r.Optional<double>("reference_queue_s", reward.reference_queue_s, Bounds::Positive()));
  if (reward.alpha + reward.beta + reward.gamma <= 0) {
    return r.Error("alpha", "alpha, beta and gamma are all 0: nothing to learn");
  }
  return r.CheckNoUnknownKeys();
}

absl::Status ReadPpo(YamlReader& r, PpoConfig& ppo) {
  ASSIGN_OR_RETURN(ppo.learning_rate,
                   r.Optional<double>("learning_rate", ppo.learning_rate, Bounds::Positive()));
  ASSIGN_OR_RETURN(ppo.clip, r.Optional<double>("clip", ppo.clip, Bounds{0.0, false, 1.0, false}));
  ASSIGN_OR_RETURN(ppo.epochs, r.Optional<int>("epochs", ppo.epochs, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(ppo.minibatch, r.Optional<int>("minibatch", ppo.minibatch, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(ppo.discount, r.Optional<double>("discount", ppo.discount, Bounds::Fraction()));
  ASSIGN_OR_RETURN(ppo.gae_lambda,
                   r.Optional<double>("gae_lambda", ppo.gae_lambda, Bounds::Fraction()));
  ASSIGN_OR_RETURN(ppo.value_coef,
                   r.Optional<double>("value_coef", ppo.value_coef, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(ppo.entropy_coef,
                   r.Optional<double>("entropy_coef", ppo.entropy_coef, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(ppo.max_grad_norm,
                   r.Optional<double>("max_grad_norm", ppo.max_grad_norm, Bounds::Positive()));
  ASSIGN_OR_RETURN(ppo.target_kl,
                   r.Optional<double>("target_kl", ppo.target_kl, Bounds::NonNegative()));
  return r.CheckNoUnknownKeys();
}

absl::StatusOr<TrainScenario> ReadScenario(YamlReader& r, const std::filesystem::path& base) {
  TrainScenario s;
  ASSIGN_OR_RETURN(std::string file, r.Required<std::string>("file"));
  s.path = (base / file).lexically_normal().string();
  ASSIGN_OR_RETURN(s.policy, r.Optional<std::string>("policy", s.policy));
  std::vector<int64_t> seeds(s.seeds.begin(), s.seeds.end());
  ASSIGN_OR_RETURN(seeds, r.Optional<std::vector<int64_t>>("seeds", seeds, Bounds::AtLeast(0)));
  if (seeds.empty()) return r.Error("seeds", "must list at least one seed");
  s.seeds.assign(seeds.begin(), seeds.end());
  ASSIGN_OR_RETURN(s.episodes, r.Optional<int>("episodes", s.episodes, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(s.reference_delay_s,
                   r.Optional<double>("reference_delay_s", 0.0, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(s.reference_queue_s,
                   r.Optional<double>("reference_queue_s", 0.0, Bounds::NonNegative()));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return s;
}

}  // namespace

nlohmann::json TrainConfig::ToJson() const {
  nlohmann::json scen = nlohmann::json::array();
  for (const TrainScenario& s : scenarios) {
    scen.push_back({{"file", s.path},
                    {"policy", s.policy},
                    {"seeds", s.seeds},
                    {"episodes", s.episodes},
                    {"reference_delay_s", s.reference_delay_s},
                    {"reference_queue_s", s.reference_queue_s}});
  }
  return {{"name", name},
          {"seed", seed},
          {"iterations", iterations},
          {"scenarios", scen},
          {"hidden", hidden},
          {"init_from_analytic", init_from_analytic},
          {"min_weight", min_weight},
          {"reward",
           {{"alpha", reward.alpha},
            {"beta", reward.beta},
            {"gamma", reward.gamma},
            {"reference_delay_s", reward.reference_delay_s},
            {"reference_queue_s", reward.reference_queue_s}}},
          {"ppo",
           {{"learning_rate", ppo.learning_rate},
            {"clip", ppo.clip},
            {"epochs", ppo.epochs},
            {"minibatch", ppo.minibatch},
            {"discount", ppo.discount},
            {"gae_lambda", ppo.gae_lambda},
            {"value_coef", ppo.value_coef},
            {"entropy_coef", ppo.entropy_coef},
            {"max_grad_norm", ppo.max_grad_norm},
            {"target_kl", ppo.target_kl}}}};
}

absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& yaml_text,
                                             const std::string& path) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, path));
  ASSIGN_OR_RETURN(YamlReader r, YamlReader::Create(root, path + ":"));
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  TrainConfig c;
  ASSIGN_OR_RETURN(c.name, r.Optional<std::string>("name", c.name));
  ASSIGN_OR_RETURN(int64_t seed, r.Optional<int64_t>("seed", 1, Bounds::AtLeast(0)));
  c.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(c.iterations, r.Optional<int>("iterations", c.iterations, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(c.jobs, r.Optional<int>("jobs", c.jobs, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(std::vector<YamlReader> scenarios, r.RequiredMapList("scenarios"));
  if (scenarios.empty()) return r.Error("scenarios", "must list at least one scenario");
  for (YamlReader& s : scenarios) {
    ASSIGN_OR_RETURN(TrainScenario ts, ReadScenario(s, base));
    c.scenarios.push_back(std::move(ts));
  }
  std::vector<int64_t> hidden(c.hidden.begin(), c.hidden.end());
  ASSIGN_OR_RETURN(hidden,
                   r.Optional<std::vector<int64_t>>("hidden", hidden, Bounds::InRange(2, 1024)));
  if (hidden.empty()) return r.Error("hidden", "must list at least one hidden layer");
  c.hidden.assign(hidden.begin(), hidden.end());
  ASSIGN_OR_RETURN(c.init_from_analytic,
                   r.Optional<bool>("init_from_analytic", c.init_from_analytic));
  ASSIGN_OR_RETURN(c.min_weight,
                   r.Optional<double>("min_weight", c.min_weight, Bounds{0.0, true, 0.5, false}));
  ASSIGN_OR_RETURN(YamlReader reward, r.OptionalMap("reward"));
  RETURN_IF_ERROR(ReadReward(reward, c.reward));
  ASSIGN_OR_RETURN(YamlReader ppo, r.OptionalMap("ppo"));
  RETURN_IF_ERROR(ReadPpo(ppo, c.ppo));
  ASSIGN_OR_RETURN(c.model_file, r.Optional<std::string>("model_file", c.model_file));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return c;
}

absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseTrainConfig(text, path);
}

}  // namespace dar::train
