#include "train/rollout.h"

#include <vector>

#include "gtest/gtest.h"

namespace dar::train {
namespace {

// One row (node 0 -> destination 5, class 0) with candidates over links 10 and 11.
PolicyBatch Row(uint64_t cycle, double delay10, double delay11) {
  PolicyBatch b;
  b.cycle = cycle;
  b.decisions.push_back({.node = 0, .destination = 5, .cls = 0, .first = 0, .count = 2});
  PolicyCandidate c10, c11;
  c10.link = 10;
  c10.analytic_weight = 0.7;
  c11.link = 11;
  c11.analytic_weight = 0.3;
  c10.features.fill(0.25f);
  c11.features.fill(0.5f);
  b.candidates = {c10, c11};
  b.rewards = {{.path_delay_s = delay10}, {.path_delay_s = delay11}};
  return b;
}

TEST(RolloutPolicyTest, RewardsEachDecisionFromTheRowsNextCycle) {
  RewardConfig reward;
  RolloutPolicy policy(reward, /*seed=*/3);
  std::vector<double> w(2);
  ASSERT_TRUE(policy.Weigh(Row(1, 0, 0), absl::MakeSpan(w), InlineExecutorInstance()).ok());
  EXPECT_DOUBLE_EQ(w[0], 0.7);  // analytic mode: the engine's weights
  EXPECT_DOUBLE_EQ(w[1], 0.3);
  ASSERT_TRUE(policy.Weigh(Row(2, 1e-4, 2e-4), absl::MakeSpan(w), InlineExecutorInstance()).ok());
  // A gap in cycles ends the row's trajectory: cycle 2's decision gets no reward from 4.
  ASSERT_TRUE(policy.Weigh(Row(4, 0, 0), absl::MakeSpan(w), InlineExecutorInstance()).ok());

  const Episode& e = policy.episode();
  ASSERT_EQ(e.steps.size(), 3u);
  EXPECT_EQ(e.features.size(), 3u * 2 * kPolicyFeatures);
  const Episode::Step& s0 = e.steps[0];
  ASSERT_TRUE(s0.has_reward);
  EXPECT_EQ(s0.next, 1);
  PolicyBatch next = Row(2, 1e-4, 2e-4);
  EXPECT_DOUBLE_EQ(s0.reward, Reward(reward, next.rewards[s0.action]));
  EXPECT_NEAR(s0.log_prob, std::log(s0.action == 0 ? 0.7 : 0.3), 1e-6);
  EXPECT_FALSE(e.steps[1].has_reward);
  EXPECT_FALSE(e.steps[2].has_reward);
}

// The rollout rewards from the batch's reward terms: a batch without them is refused.
TEST(RolloutPolicyTest, RefusesABatchWithoutRewardTerms) {
  RolloutPolicy policy(RewardConfig(), /*seed=*/3);
  EXPECT_TRUE(policy.wants_reward_terms());
  PolicyBatch b = Row(1, 0, 0);
  b.rewards.clear();
  std::vector<double> w(2);
  EXPECT_EQ(policy.Weigh(b, absl::MakeSpan(w), InlineExecutorInstance()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RolloutPolicyTest, LearnedWeightsAreASoftmax) {
  PolicyNet net(std::vector<int>{8});
  RolloutPolicy policy(net, RewardConfig(), /*min_weight=*/0.001, /*seed=*/3);
  std::vector<double> w(2);
  ASSERT_TRUE(policy.Weigh(Row(1, 0, 0), absl::MakeSpan(w), InlineExecutorInstance()).ok());
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-9);
  EXPECT_GE(w[0], 0.001);
  EXPECT_GE(w[1], 0.001);
  const Episode::Step& s = policy.episode().steps[0];
  EXPECT_NEAR(std::exp(s.log_prob), w[s.action], 1e-4);
}

}  // namespace
}  // namespace dar::train
