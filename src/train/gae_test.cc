#include "train/gae.h"

#include <vector>

#include "gtest/gtest.h"
#include "train/ppo.h"

namespace dar::train {
namespace {

// rewards 1, 0, 2; values 0.5, 1, 0 and a bootstrap of 3; discount 0.9, lambda 0.8:
//   delta = 1 + 0.9 * 1 - 0.5 = 1.4,  0 + 0.9 * 0 - 1 = -1,  2 + 0.9 * 3 - 0 = 4.7
//   A_2 = 4.7;  A_1 = -1 + 0.72 * 4.7 = 2.384;  A_0 = 1.4 + 0.72 * 2.384 = 3.11648
TEST(GaeTest, MatchesHandComputedValues) {
  const std::vector<double> rewards = {1, 0, 2};
  const std::vector<double> values = {0.5, 1.0, 0.0, 3.0};
  const GaeResult g = ComputeGae(rewards, values, 0.9, 0.8);
  ASSERT_EQ(g.advantages.size(), 3u);
  EXPECT_NEAR(g.advantages[2], 4.7, 1e-12);
  EXPECT_NEAR(g.advantages[1], 2.384, 1e-12);
  EXPECT_NEAR(g.advantages[0], 3.11648, 1e-12);
  EXPECT_NEAR(g.returns[0], 3.61648, 1e-12);
  EXPECT_NEAR(g.returns[1], 3.384, 1e-12);
  EXPECT_NEAR(g.returns[2], 4.7, 1e-12);
}

// lambda = 1: the advantage is the discounted return (with the bootstrap) minus the value;
// lambda = 0: the one-step TD error.
TEST(GaeTest, LambdaOneIsMonteCarloAndZeroIsTd) {
  const std::vector<double> rewards = {1, 0, 2};
  const std::vector<double> values = {0.5, 1.0, 0.0, 3.0};
  const GaeResult mc = ComputeGae(rewards, values, 0.9, 1.0);
  EXPECT_NEAR(mc.advantages[0], 1 + 0.81 * 2 + 0.729 * 3 - 0.5, 1e-12);
  EXPECT_NEAR(mc.advantages[1], 0.9 * 2 + 0.81 * 3 - 1.0, 1e-12);
  const GaeResult td = ComputeGae(rewards, values, 0.9, 0.0);
  EXPECT_NEAR(td.advantages[0], 1.4, 1e-12);
  EXPECT_NEAR(td.advantages[1], -1.0, 1e-12);
  EXPECT_NEAR(td.advantages[2], 4.7, 1e-12);
}

TEST(GaeTest, EmptyTrajectory) {
  const GaeResult g = ComputeGae({}, std::vector<double>{2.0}, 0.9, 0.9);
  EXPECT_TRUE(g.advantages.empty());
}

// Two rows over three cycles: row A decides at cycles 0, 1, 2 (rewarded at 0 and 1; its
// cycle-2 step bootstraps); row B decides at cycle 0 only and is rewarded by nothing. The
// batch holds A's two rewarded steps with GAE along A's chain.
TEST(GaeTest, DecisionBatchFollowsEachRowsChain) {
  Episode e;
  auto add = [&](float value, int action) {
    Episode::Step s;
    s.first = static_cast<uint32_t>(e.features.size() / kPolicyFeatures);
    s.count = 2;
    s.action = action;
    s.value = value;
    s.log_prob = -0.7f;
    e.features.resize(e.features.size() + 2 * kPolicyFeatures, 0.5f);
    e.steps.push_back(s);
    return static_cast<int32_t>(e.steps.size() - 1);
  };
  const int32_t a0 = add(0.5f, 1), b0 = add(9.0f, 0), a1 = add(1.0f, 0), a2 = add(3.0f, 1);
  (void)b0;
  e.steps[a0].has_reward = true;
  e.steps[a0].reward = 1.0;
  e.steps[a0].next = a1;
  e.steps[a1].has_reward = true;
  e.steps[a1].reward = 0.0;
  e.steps[a1].next = a2;
  PpoConfig ppo;
  ppo.discount = 0.9;
  ppo.gae_lambda = 0.8;
  const DecisionBatch b = MakeDecisionBatch({e}, ppo);
  ASSERT_EQ(b.size(), 2);
  // values 0.5, 1 and the bootstrap 3: delta_1 = 0 + 2.7 - 1 = 1.7, delta_0 = 1 + 0.9 - 0.5
  const double a_1 = 1.7, a_0 = 1.4 + 0.72 * 1.7;
  EXPECT_NEAR(b.advantages[0].item<double>(), a_0, 1e-5);
  EXPECT_NEAR(b.advantages[1].item<double>(), a_1, 1e-5);
  EXPECT_NEAR(b.returns[0].item<double>(), a_0 + 0.5, 1e-5);
  EXPECT_EQ(b.actions[0].item<int64_t>(), 1);
  EXPECT_EQ(b.actions[1].item<int64_t>(), 0);
  EXPECT_EQ(b.mask.sum().item<int64_t>(), 4);
}

}  // namespace
}  // namespace dar::train
