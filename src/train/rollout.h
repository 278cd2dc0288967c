// One training episode's side of the WeightPolicy hook: the policy that the simulator's DAR
// control plane calls every cycle, and what it records for PPO.
//
// Every cycle, for every row (node, destination, class) with a choice, the policy
//   - hands the simulator weights: the softmax of the network's logits, floored at min_weight
//     (learn::WeightsFromLogits, as the engine will run it), and traffic spreads by them;
//   - samples one candidate from the same softmax (the choice one flowlet makes) and records
//     the row's features, the action, its log-probability and the value head's estimate;
//   - rewards the same row's decision of the previous cycle with what this cycle's batch says
//     of the candidate it sampled (RewardConfig in train_config.h), if that candidate is still
//     a next hop of the row.
// A row's decisions over consecutive cycles form its trajectory (Episode::Step::next).
//
// In analytic mode the policy hands back the engine's own weights and samples from them: the
// baseline whose reward and metrics training is compared with, and the source of the feature
// statistics that normalise the network's inputs.
// Not thread-safe; one per simulation.
#ifndef DAR_TRAIN_ROLLOUT_H_
#define DAR_TRAIN_ROLLOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "core/weight_policy.h"
#include "train/policy_net.h"
#include "train/train_config.h"

namespace dar::train {

struct Episode {
  struct Step {
    uint32_t first = 0;  // candidates [first, first + count) of `features`
    uint32_t count = 0;
    int action = 0;      // the sampled candidate, in [0, count)
    float log_prob = 0;  // of the action under the policy that acted
    float value = 0;     // value head's estimate of the row's return (0 in analytic mode)
    double reward = 0;   // valid if has_reward
    bool has_reward = false;
    int32_t next = -1;  // the row's step in the next cycle (set with the reward)
  };
  std::vector<float> features;  // kPolicyFeatures per candidate
  std::vector<Step> steps;      // in cycle order
  int64_t cycles = 0;
};

// The reward of a candidate as one cycle's batch sees it (train_config.h).
double Reward(const RewardConfig& reward, const PolicyRewardTerms& c);

class RolloutPolicy : public WeightPolicy {
 public:
  // Learned mode: `net` (a private copy; not updated during the episode) gives the weights.
  RolloutPolicy(PolicyNet net, const RewardConfig& reward, double min_weight, uint64_t seed);
  // Analytic mode: the engine's weights.
  RolloutPolicy(const RewardConfig& reward, uint64_t seed);

  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                     Executor& executor) override;
  std::string Describe() const override;

  const Episode& episode() const { return episode_; }
  Episode TakeEpisode() { return std::move(episode_); }

 private:
  // Rewards the previous cycle's decision of each row in `batch`.
  void RewardPrevious(const PolicyBatch& batch);

  PolicyNet net_;  // null in analytic mode
  RewardConfig reward_;
  double min_weight_ = 0;
  Random rng_;
  Episode episode_;
  struct LastDecision {
    uint64_t cycle;
    int32_t step;
    LinkId link;  // the sampled candidate
  };
  std::map<std::tuple<NodeId, NodeId, int>, LastDecision> last_;
  std::vector<float> logits_;  // scratch
};

}  // namespace dar::train

#endif  // DAR_TRAIN_ROLLOUT_H_
