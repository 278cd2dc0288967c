#include "train/ppo.h"

#include <algorithm>

#include "train/gae.h"

namespace dar::train {

DecisionBatch MakeDecisionBatch(const std::vector<Episode>& episodes, const PpoConfig& ppo) {
  // Rewarded steps, as (episode, step), with their advantage and return.
  struct Sample {
    size_t episode;
    int32_t step;
    double advantage;
    double ret;
  };
  std::vector<Sample> samples;
  uint32_t width = 0;
  for (size_t e = 0; e < episodes.size(); ++e) {
    const std::vector<Episode::Step>& steps = episodes[e].steps;
    // A chain starts at a rewarded step that no rewarded step leads to.
    std::vector<bool> continued(steps.size(), false);
    for (const Episode::Step& s : steps) {
      if (s.has_reward) continued[s.next] = true;
    }
    std::vector<int32_t> chain;
    std::vector<double> rewards, values;
    for (int32_t head = 0; head < static_cast<int32_t>(steps.size()); ++head) {
      if (!steps[head].has_reward || continued[head]) continue;
      chain.clear();
      rewards.clear();
      values.clear();
      int32_t i = head;
      while (steps[i].has_reward) {
        chain.push_back(i);
        rewards.push_back(steps[i].reward);
        values.push_back(steps[i].value);
        i = steps[i].next;
      }
      values.push_back(steps[i].value);  // bootstrap: the trajectory was cut, not ended
      const GaeResult gae = ComputeGae(rewards, values, ppo.discount, ppo.gae_lambda);
      for (size_t k = 0; k < chain.size(); ++k) {
        samples.push_back({e, chain[k], gae.advantages[k], gae.returns[k]});
        width = std::max(width, steps[chain[k]].count);
      }
    }
  }
  // Chains are found in order of their heads; sort back into episode and cycle order so the
  // batch does not depend on how chains interleave.
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) {
    return a.episode != b.episode ? a.episode < b.episode : a.step < b.step;
  });

  const int64_t n = static_cast<int64_t>(samples.size());
  DecisionBatch b;
  b.features = torch::zeros({n, width, kPolicyFeatures});
  b.mask = torch::zeros({n, width}, torch::kBool);
  b.actions = torch::zeros({n}, torch::kLong);
  b.old_log_probs = torch::zeros({n});
  b.advantages = torch::zeros({n});
  b.returns = torch::zeros({n});
  float* f = b.features.data_ptr<float>();
  bool* m = b.mask.data_ptr<bool>();
  int64_t* a = b.actions.data_ptr<int64_t>();
  float* lp = b.old_log_probs.data_ptr<float>();
  float* adv = b.advantages.data_ptr<float>();
  float* ret = b.returns.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const Episode& ep = episodes[samples[i].episode];
    const Episode::Step& s = ep.steps[samples[i].step];
    std::copy(ep.features.begin() + static_cast<int64_t>(s.first) * kPolicyFeatures,
              ep.features.begin() + static_cast<int64_t>(s.first + s.count) * kPolicyFeatures,
              f + i * width * kPolicyFeatures);
    std::fill(m + i * width, m + i * width + s.count, true);
    a[i] = s.action;
    lp[i] = s.log_prob;
    adv[i] = static_cast<float>(samples[i].advantage);
    ret[i] = static_cast<float>(samples[i].ret);
  }
  return b;
}

PpoStats PpoUpdate(PolicyNet& net, torch::optim::Optimizer& optimizer, const DecisionBatch& batch,
                   const PpoConfig& ppo) {
  PpoStats stats;
  const int64_t n = batch.size();
  if (n == 0) return stats;
  // Advantages normalised over the whole batch: the reward's scale then sets no step size.
  const torch::Tensor centred = batch.advantages - batch.advantages.mean();
  const torch::Tensor advantages = n > 1 ? centred / (batch.advantages.std() + 1e-8) : centred;
  int updates = 0;
  for (int epoch = 0; epoch < ppo.epochs; ++epoch) {
    const torch::Tensor order = torch::randperm(n, torch::kLong);
    double kl_sum = 0, clipped_sum = 0;
    for (int64_t start = 0; start < n; start += ppo.minibatch) {
      const torch::Tensor idx = order.slice(0, start, std::min(n, start + ppo.minibatch));
      const torch::Tensor mask = batch.mask.index_select(0, idx);
      const NetOutput out = net->Forward(batch.features.index_select(0, idx), mask);
      const torch::Tensor log_prob =
          out.log_probs.gather(1, batch.actions.index_select(0, idx).unsqueeze(1)).squeeze(1);
      const torch::Tensor old_log_prob = batch.old_log_probs.index_select(0, idx);
      const torch::Tensor adv = advantages.index_select(0, idx);
      const torch::Tensor ratio = torch::exp(log_prob - old_log_prob);
      const torch::Tensor surrogate =
          torch::min(ratio * adv, torch::clamp(ratio, 1 - ppo.clip, 1 + ppo.clip) * adv);
      const torch::Tensor policy_loss = -surrogate.mean();
      const torch::Tensor value_loss =
          (out.values - batch.returns.index_select(0, idx)).pow(2).mean();
      // Padding has log-probability 0 and probability exp(0) masked away.
      const torch::Tensor probs = torch::exp(out.log_probs) * mask.to(torch::kFloat);
      const torch::Tensor entropy = -(probs * out.log_probs).sum(1).mean();
      const torch::Tensor loss =
          policy_loss + ppo.value_coef * value_loss - ppo.entropy_coef * entropy;
      optimizer.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(net->parameters(), ppo.max_grad_norm);
      optimizer.step();

      stats.policy_loss += policy_loss.item<double>();
      stats.value_loss += value_loss.item<double>();
      stats.entropy += entropy.item<double>();
      ++updates;
      const torch::Tensor log_ratio = (log_prob - old_log_prob).detach();
      kl_sum += (-log_ratio).sum().item<double>();
      clipped_sum += ((ratio.detach() - 1).abs() > ppo.clip).to(torch::kFloat).sum().item<double>();
    }
    stats.epochs = epoch + 1;
    stats.approx_kl = kl_sum / static_cast<double>(n);
    stats.clip_fraction = clipped_sum / static_cast<double>(n);
    if (ppo.target_kl > 0 && stats.approx_kl > ppo.target_kl) break;
  }
  stats.policy_loss /= updates;
  stats.value_loss /= updates;
  stats.entropy /= updates;
  return stats;
}

}  // namespace dar::train
