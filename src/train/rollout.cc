#include "train/rollout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dar::train {

double Reward(const RewardConfig& r, const PolicyRewardTerms& c) {
  const double delay = std::max(0.0, c.path_delay_s);
  const double loss = std::clamp(c.path_loss, 0.0, 1.0);
  const double queue = std::max(0.0, c.queue_s);
  return r.alpha * r.reference_delay_s / (r.reference_delay_s + delay) + r.beta * (1 - loss) +
         r.gamma * r.reference_queue_s / (r.reference_queue_s + queue);
}

RolloutPolicy::RolloutPolicy(PolicyNet net, const RewardConfig& reward, double min_weight,
                             uint64_t seed)
    : net_(std::move(net)), reward_(reward), min_weight_(min_weight), rng_(seed) {}

RolloutPolicy::RolloutPolicy(const RewardConfig& reward, uint64_t seed)
    : net_(nullptr), reward_(reward), rng_(seed) {}

std::string RolloutPolicy::Describe() const {
  return net_ ? "dar-train rollout (learned, sampling)" : "dar-train rollout (analytic)";
}

absl::Status RolloutPolicy::Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                                  Executor& executor) {
  const size_t rows = batch.decisions.size();
  if (weights.size() != batch.candidates.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dar-train: ", weights.size(), " weights for ",
                                                   batch.candidates.size(), " candidates"));
  }
  if (batch.rewards.size() != batch.candidates.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dar-train: the batch has reward terms for ",
                                                   batch.rewards.size(), " of ",
                                                   batch.candidates.size(), " candidates"));
  }
  ++episode_.cycles;
  if (rows == 0) return absl::OkStatus();

  // Per candidate: the log-probability of being sampled. Per row: the value estimate.
  std::vector<float> log_probs(batch.candidates.size());
  std::vector<float> values(rows, 0.0f);
  if (net_) {
    uint32_t width = 0;
    for (const PolicyDecision& d : batch.decisions) width = std::max(width, d.count);
    torch::Tensor x = torch::zeros({static_cast<int64_t>(rows), width, kPolicyFeatures});
    torch::Tensor mask = torch::zeros({static_cast<int64_t>(rows), width}, torch::kBool);
    float* xp = x.data_ptr<float>();
    bool* mp = mask.data_ptr<bool>();
    for (size_t r = 0; r < rows; ++r) {
      const PolicyDecision& d = batch.decisions[r];
      for (uint32_t j = 0; j < d.count; ++j) {
        const auto& f = batch.candidates[d.first + j].features;
        std::copy(f.begin(), f.end(), xp + (r * width + j) * kPolicyFeatures);
        mp[r * width + j] = true;
      }
    }
    torch::NoGradGuard no_grad;
    const NetOutput out = net_->Forward(x, mask);
    const float* lp = out.log_probs.data_ptr<float>();
    for (size_t r = 0; r < rows; ++r) {
      const PolicyDecision& d = batch.decisions[r];
      for (uint32_t j = 0; j < d.count; ++j) log_probs[d.first + j] = lp[r * width + j];
    }
    std::copy(out.values.data_ptr<float>(), out.values.data_ptr<float>() + rows, values.begin());
    // The weights the engine would give from the same logits (log-probabilities differ from
    // the logits by a per-row constant, which a softmax ignores).
    learn::WeightsFromLogits(batch, log_probs, min_weight_, weights);
  } else {
    for (size_t i = 0; i < batch.candidates.size(); ++i) {
      weights[i] = batch.candidates[i].analytic_weight;
      log_probs[i] = static_cast<float>(std::log(std::max(weights[i], 1e-30)));
    }
  }

  const int32_t base = static_cast<int32_t>(episode_.steps.size());
  for (size_t r = 0; r < rows; ++r) {
    const PolicyDecision& d = batch.decisions[r];
    Episode::Step step;
    step.first = static_cast<uint32_t>(episode_.features.size() / kPolicyFeatures);
    step.count = d.count;
    // Sample the action from the row's distribution (inverse CDF).
    double u = rng_.Uniform();
    step.action = static_cast<int>(d.count) - 1;
    for (uint32_t j = 0; j < d.count; ++j) {
      u -= std::exp(static_cast<double>(log_probs[d.first + j]));
      if (u < 0) {
        step.action = static_cast<int>(j);
        break;
      }
    }
    step.log_prob = log_probs[d.first + step.action];
    step.value = values[r];
    for (uint32_t j = 0; j < d.count; ++j) {
      const auto& f = batch.candidates[d.first + j].features;
      episode_.features.insert(episode_.features.end(), f.begin(), f.end());
    }
    episode_.steps.push_back(step);
  }
  RewardPrevious(batch);
  for (size_t r = 0; r < rows; ++r) {
    const PolicyDecision& d = batch.decisions[r];
    const int32_t s = base + static_cast<int32_t>(r);
    last_[{d.node, d.destination, d.cls}] =
        LastDecision{batch.cycle, s, batch.candidates[d.first + episode_.steps[s].action].link};
  }
  return absl::OkStatus();
}

void RolloutPolicy::RewardPrevious(const PolicyBatch& batch) {
  const int32_t base = static_cast<int32_t>(episode_.steps.size() - batch.decisions.size());
  for (size_t r = 0; r < batch.decisions.size(); ++r) {
    const PolicyDecision& d = batch.decisions[r];
    auto it = last_.find({d.node, d.destination, d.cls});
    if (it == last_.end() || it->second.cycle + 1 != batch.cycle) continue;
    for (uint32_t j = 0; j < d.count; ++j) {
      if (batch.candidates[d.first + j].link != it->second.link) continue;
      Episode::Step& prev = episode_.steps[it->second.step];
      prev.reward = Reward(reward_, batch.rewards[d.first + j]);
      prev.has_reward = true;
      prev.next = base + static_cast<int32_t>(r);
      break;
    }
  }
}

}  // namespace dar::train
