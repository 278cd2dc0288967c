// dar-train's configuration: which simulator episodes to learn from, the PPO
// hyper-parameters, the network's shape and the reward's weights. Loaded from YAML (see
// configs/train/default.yaml for every key with its default) and validated in one place;
// errors name the file and the key.
#ifndef DAR_TRAIN_TRAIN_CONFIG_H_
#define DAR_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dar::train {

// The reward of one decision (a row's sampled candidate), from what the route computer sees
// of that candidate in the next cycle:
//   R = alpha * ref_d / (ref_d + path_delay) + beta * (1 - path_loss) + gamma * ref_q / (ref_q +
//   queue)
// This is issue 5's alpha/latency + beta(1 - loss) + gamma/queue made finite at zero: each
// term is 1 when the quantity is 0 and falls as 1/x once it is well above its reference, so a
// path twice as slow earns about half the latency reward.
struct RewardConfig {
  double alpha = 1.0;
  double beta = 1.0;
  double gamma = 1.0;
  double reference_delay_s = 50e-6;  // ref_d
  double reference_queue_s = 20e-6;  // ref_q
};

struct PpoConfig {
  double learning_rate = 3e-3;
  double clip = 0.2;    // the surrogate's ratio is clipped to [1 - clip, 1 + clip]
  int epochs = 4;       // passes over an iteration's decisions
  int minibatch = 512;  // decisions per gradient step
  // Per cycle. Short: the sampled candidate (one flowlet's choice) changes the network only
  // through the weights it is drawn from, so later rewards are mostly not its doing; a long
  // horizon adds their noise to its advantage (on the smoke scenario 0.9 made the reward fall
  // while 0.2 made it rise).
  double discount = 0.2;
  double gae_lambda = 0.9;
  double value_coef = 0.5;
  double entropy_coef = 0.0;
  double max_grad_norm = 0.5;
  // An iteration's remaining epochs are skipped once the approximate KL to the policy that
  // collected the data passes this; 0: never.
  double target_kl = 0.05;
};

// One training scenario: a scenario file, the policy of it to run (its `dar` settings), and
// the simulator seeds its episodes cycle through.
struct TrainScenario {
  std::string path;  // as resolved against the config file's directory
  std::string policy = "dar";
  std::vector<uint64_t> seeds = {1};
  int episodes = 1;  // per iteration
  // Per-scenario reward references (WAN delays are milliseconds); <= 0: the config's.
  double reference_delay_s = 0;
  double reference_queue_s = 0;
};

struct TrainConfig {
  std::string name = "dar-policy";  // the model's name
  uint64_t seed = 1;                // torch and action sampling
  int iterations = 30;
  int jobs = 1;  // episodes simulated at once (threads); the result does not depend on it
  std::vector<TrainScenario> scenarios;
  std::vector<int> hidden = {32, 32};  // hidden layer widths of the policy (and value) MLP
  // Start from the analytic engine: the network's initial logit is ln(analytic weight) plus a
  // small random term, so training refines the engine's weights rather than starting blind.
  bool init_from_analytic = true;
  double min_weight = 0.001;  // as the engine's diffusion: weights are floored at this
  RewardConfig reward;
  PpoConfig ppo;
  std::string model_file = "model.json";  // under the output directory

  // The resolved config, every field, for the record.
  nlohmann::json ToJson() const;
};

// Loads and validates `path`; scenario paths are resolved against its directory.
absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);
// Same from YAML text; `path` names it in errors and anchors relative paths.
absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& yaml_text, const std::string& path);

}  // namespace dar::train

#endif  // DAR_TRAIN_TRAIN_CONFIG_H_
