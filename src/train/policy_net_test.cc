#include "train/policy_net.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "train/rollout.h"

namespace dar::train {
namespace {

// Rows of `counts` candidates with random features; feature 0 is ln of a weight.
struct Rows {
  torch::Tensor features, mask;
};
Rows MakeRows(const std::vector<int>& counts, int width) {
  torch::manual_seed(7);
  Rows r;
  const int64_t n = static_cast<int64_t>(counts.size());
  r.features = torch::rand({n, width, kPolicyFeatures});
  r.mask = torch::zeros({n, width}, torch::kBool);
  for (int64_t i = 0; i < n; ++i) {
    r.mask.index_put_({i, torch::indexing::Slice(0, counts[i])}, true);
    torch::Tensor w = torch::rand({counts[i]}) + 0.05;
    w = w / w.sum();
    r.features.index_put_({i, torch::indexing::Slice(0, counts[i]), kFeatAnalyticLogit},
                          torch::log(w));
  }
  return r;
}

TEST(PolicyNetTest, StartsAsTheAnalyticEngine) {
  torch::manual_seed(1);
  PolicyNet net(std::vector<int>{32, 32});
  std::vector<float> mean(kPolicyFeatures, 0.3f), scale(kPolicyFeatures, 0.7f);
  net->SetNormalisation(mean, scale);
  net->InitFromAnalytic();
  const Rows r = MakeRows({2, 3, 4}, 4);
  torch::NoGradGuard no_grad;
  const NetOutput out = net->Forward(r.features, r.mask);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      if (!r.mask[i][j].item<bool>()) {
        EXPECT_EQ(out.log_probs[i][j].item<float>(), 0.0f);
        continue;
      }
      // The engine's weight, up to the other units' small contribution.
      EXPECT_NEAR(out.log_probs[i][j].item<float>(), r.features[i][j][0].item<float>(), 0.1)
          << i << "," << j;
    }
  }
  EXPECT_EQ(out.values.size(0), 3);
}

// The exported model computes the same logits as the torch network (the file's layout:
// weights row-major by output, normalisation applied by learn::LogitsFloat).
TEST(PolicyNetTest, ExportMatchesTheNetwork) {
  torch::manual_seed(2);
  PolicyNet net(std::vector<int>{16, 8});
  std::vector<float> mean(kPolicyFeatures), scale(kPolicyFeatures);
  for (int k = 0; k < kPolicyFeatures; ++k) {
    mean[k] = 0.1f * k;
    scale[k] = 0.5f + 0.1f * k;
  }
  net->SetNormalisation(mean, scale);
  const Rows r = MakeRows({3}, 3);
  torch::NoGradGuard no_grad;
  const NetOutput out = net->Forward(r.features, r.mask);
  learn::PolicyModel model = net->Export();
  ASSERT_EQ(model.layers.size(), 3u);
  EXPECT_EQ(model.layers[0].in, kPolicyFeatures);
  EXPECT_EQ(model.layers[0].out, 16);
  EXPECT_EQ(model.layers[2].out, 1);
  ASSERT_TRUE(model.Validate().ok()) << model.Validate();
  const torch::Tensor x = r.features[0].contiguous();
  std::vector<float> logits(3);
  learn::LogitsFloat(model, absl::MakeConstSpan(x.data_ptr<float>(), 3 * kPolicyFeatures),
                     absl::MakeSpan(logits));
  // Log-softmax of the exported logits equals the network's log-probabilities.
  const double lse = std::log(std::exp(logits[0]) + std::exp(logits[1]) + std::exp(logits[2]));
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(logits[j] - lse, out.log_probs[0][j].item<float>(), 1e-4);
  }
}

TEST(PolicyNetTest, CloneIsIndependent) {
  PolicyNet net(std::vector<int>{8});
  PolicyNet copy = ClonePolicyNet(net);
  const Rows r = MakeRows({2}, 2);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(net->Forward(r.features, r.mask).log_probs,
                           copy->Forward(r.features, r.mask).log_probs));
  for (auto& p : net->parameters()) p.add_(1.0);
  EXPECT_FALSE(torch::equal(net->Forward(r.features, r.mask).values,
                            copy->Forward(r.features, r.mask).values));
}

TEST(RewardTest, FiniteAtZeroAndFallingWithDelayLossAndQueue) {
  RewardConfig cfg;
  PolicyRewardTerms ideal;
  EXPECT_DOUBLE_EQ(Reward(cfg, ideal), 3.0);
  PolicyRewardTerms slow = ideal;
  slow.path_delay_s = cfg.reference_delay_s;
  EXPECT_DOUBLE_EQ(Reward(cfg, slow), 2.5);
  PolicyRewardTerms lossy = ideal;
  lossy.path_loss = 0.25;
  EXPECT_DOUBLE_EQ(Reward(cfg, lossy), 2.75);
  PolicyRewardTerms queued = ideal;
  queued.queue_s = 3 * cfg.reference_queue_s;
  EXPECT_DOUBLE_EQ(Reward(cfg, queued), 2.25);
}

}  // namespace
}  // namespace dar::train
