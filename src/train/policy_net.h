// The network dar-train trains: the policy MLP of learn/policy_model.h (it scores each
// candidate of a row on its own, features -> hidden ReLU layers -> 1 logit; the row's weights
// are the softmax of its candidates' logits) and, for training only, a value head that
// estimates a row's return from its candidates' features pooled (mean and max over the row),
// so it too is size-independent. Feature normalisation x' = (x - mean) / scale is part of the
// network (buffers, not trained) and is exported with it.
#ifndef DAR_TRAIN_POLICY_NET_H_
#define DAR_TRAIN_POLICY_NET_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "learn/policy_model.h"

namespace dar::train {

// The network's view of a set of rows, padded to the widest row.
struct NetOutput {
  torch::Tensor log_probs;  // [rows, width]: log softmax over each row's candidates; 0 at padding
  torch::Tensor values;     // [rows]
};

class PolicyNetImpl : public torch::nn::Module {
 public:
  // `hidden`: widths of the hidden layers, shared by the policy MLP and the value head.
  explicit PolicyNetImpl(const std::vector<int>& hidden);

  // Sets the feature normalisation. REQUIRES: kPolicyFeatures entries each, scale > 0.
  void SetNormalisation(const std::vector<float>& mean, const std::vector<float>& scale);
  // Makes the policy start as the analytic engine: two units of every hidden layer carry
  // feature 0 (ln of the engine's weight) through the ReLUs (as relu(x) - relu(-x)), the
  // output reads it back, and the output's other weights are made small. Call after
  // SetNormalisation.
  void InitFromAnalytic();

  // Starts the value head at `value` for every row (e.g. the analytic engine's mean return),
  // so its first updates fit the differences between rows rather than the offset.
  void SetValueBias(float value);

  // Raw features [rows, width, kPolicyFeatures] and a mask [rows, width] (true: a candidate)
  // -> per-candidate log-probabilities and per-row values.
  NetOutput Forward(const torch::Tensor& features, const torch::Tensor& mask);

  // The policy MLP as a model file's network (FP32), with the normalisation.
  learn::PolicyModel Export() const;

  const std::vector<int>& hidden() const { return hidden_; }

 private:
  torch::Tensor Normalise(const torch::Tensor& x) const;

  std::vector<int> hidden_;
  std::vector<torch::nn::Linear> policy_;
  std::vector<torch::nn::Linear> value_;
  torch::Tensor mean_, scale_;  // buffers, [kPolicyFeatures]
};
TORCH_MODULE(PolicyNet);

// A deep copy (parameters and buffers) for a rollout that must not see later updates.
PolicyNet ClonePolicyNet(const PolicyNet& net);

}  // namespace dar::train

#endif  // DAR_TRAIN_POLICY_NET_H_
