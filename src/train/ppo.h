// PPO (Schulman et al. 2017) over the decisions of one iteration's episodes: the clipped
// surrogate objective, a value loss and an entropy bonus, minimised with Adam over shuffled
// minibatches for a few epochs. Gradients come from LibTorch's autograd.
#ifndef DAR_TRAIN_PPO_H_
#define DAR_TRAIN_PPO_H_

#include <torch/torch.h>

#include <vector>

#include "train/policy_net.h"
#include "train/rollout.h"
#include "train/train_config.h"

namespace dar::train {

// Every rewarded decision of some episodes, padded to the widest row.
struct DecisionBatch {
  torch::Tensor features;       // [n, width, kPolicyFeatures], raw
  torch::Tensor mask;           // [n, width], true at a candidate
  torch::Tensor actions;        // [n], int64
  torch::Tensor old_log_probs;  // [n]
  torch::Tensor advantages;     // [n], GAE over each row's trajectory (not normalised)
  torch::Tensor returns;        // [n], the value head's targets
  int64_t size() const { return actions.defined() ? actions.size(0) : 0; }
};

// GAE(discount, lambda) along each row's trajectory (a chain of rewarded steps; the chain's
// last step bootstraps from the value of the step that rewarded it), then the tensors.
DecisionBatch MakeDecisionBatch(const std::vector<Episode>& episodes, const PpoConfig& ppo);

struct PpoStats {
  double policy_loss = 0;  // the clipped surrogate, negated (as minimised), mean over updates
  double value_loss = 0;
  double entropy = 0;        // mean over decisions, nats
  double approx_kl = 0;      // E[log pi_old - log pi_new] after the last epoch run
  double clip_fraction = 0;  // share of decisions whose ratio was clipped, last epoch run
  int epochs = 0;            // epochs run (fewer than configured when target_kl stopped them)
};

// One PPO update of `net` on `batch`. Minibatch order comes from torch's global generator.
PpoStats PpoUpdate(PolicyNet& net, torch::optim::Optimizer& optimizer, const DecisionBatch& batch,
                   const PpoConfig& ppo);

}  // namespace dar::train

#endif  // DAR_TRAIN_PPO_H_
