#include "learn/policy_audit.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dar::learn {
namespace {

// A batch of rows with the given candidate counts (features are not read here).
PolicyBatch Rows(const std::vector<uint32_t>& counts) {
  PolicyBatch batch;
  uint32_t first = 0;
  for (uint32_t n : counts) {
    batch.decisions.push_back({.node = 0, .destination = 1, .cls = 0, .first = first, .count = n});
    first += n;
  }
  batch.candidates.resize(first);
  return batch;
}

TEST(CompareWeightsTest, SameWeightsAgreeEverywhere) {
  const PolicyBatch batch = Rows({2, 3});
  const std::vector<double> w = {0.25, 0.75, 0.2, 0.3, 0.5};
  const PolicyAgreement a = CompareWeights(batch, w, w);
  EXPECT_EQ(a.rows, 2);
  EXPECT_EQ(a.same_argmax, 2);
  EXPECT_EQ(a.clear_rows, 2);
  EXPECT_DOUBLE_EQ(a.same_hash_share(), 1.0);
  EXPECT_DOUBLE_EQ(a.max_weight_error, 0.0);
}

TEST(CompareWeightsTest, CountsArgmaxClearRowsAndHashesByHand) {
  const PolicyBatch batch = Rows({2, 3, 2, 2});
  const std::vector<double> w = {0.5, 0.5, 0.2, 0.3, 0.5, 0.7, 0.3, 0.5, 0.5};
  const std::vector<double> r = {0.6, 0.4, 0.3, 0.2, 0.5, 0.3, 0.7, 0.501, 0.499};
  const PolicyAgreement a = CompareWeights(batch, w, r);
  EXPECT_EQ(a.rows, 4);
  // Row 1: a tie in w goes to the first, r's best; row 2: both on the third; row 3: apart;
  // row 4: r leads by 0.002, not clear, and w's tie goes to r's best.
  EXPECT_EQ(a.same_argmax, 3);
  EXPECT_EQ(a.clear_rows, 3);
  EXPECT_EQ(a.clear_same_argmax, 2);
  // Hashes sent elsewhere: 0.1, 0.1 (boundaries 0.2|0.3 and 0.5|0.5), 0.4, 0.001.
  EXPECT_NEAR(a.differing_hashes, 0.601, 1e-12);
  EXPECT_NEAR(a.same_hash_share(), 1 - 0.601 / 4, 1e-12);
  EXPECT_NEAR(a.max_weight_error, 0.4, 1e-12);
  EXPECT_EQ(a.candidates, 9);
  EXPECT_NEAR(a.mean_weight_error(), (0.2 + 0.2 + 0.8 + 0.002) / 9, 1e-12);
}

// The share of hashes sent elsewhere against a count over a fine grid of draws, as a
// forwarder picks: the first candidate whose cumulative weight exceeds the draw.
TEST(CompareWeightsTest, DifferingHashesMatchAGridOfDraws) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(0.01, 1.0);
  auto pick = [](const std::vector<double>& w, double u) {
    double c = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      c += w[i];
      if (u < c) return i;
    }
    return w.size() - 1;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t n = 2 + trial % 7;
    std::vector<double> w(n), r(n);
    double sw = 0, sr = 0;
    for (uint32_t i = 0; i < n; ++i) sw += w[i] = uniform(rng), sr += r[i] = uniform(rng);
    for (uint32_t i = 0; i < n; ++i) w[i] /= sw, r[i] /= sr;
    const PolicyAgreement a = CompareWeights(Rows({n}), w, r);
    constexpr int kDraws = 100000;
    int differ = 0;
    for (int k = 0; k < kDraws; ++k) {
      const double u = (k + 0.5) / kDraws;
      differ += pick(w, u) != pick(r, u);
    }
    EXPECT_NEAR(a.differing_hashes, static_cast<double>(differ) / kDraws, 2.0 * n / kDraws)
        << "trial " << trial;
  }
}

class FixedPolicy : public WeightPolicy {
 public:
  FixedPolicy(std::vector<double> weights, absl::Status status)
      : weights_(std::move(weights)), status_(std::move(status)) {}
  absl::Status Weigh(const PolicyBatch&, absl::Span<double> weights, Executor& executor) override {
    ++calls;
    if (!status_.ok()) return status_;
    std::copy(weights_.begin(), weights_.end(), weights.begin());
    return absl::OkStatus();
  }
  std::string Describe() const override { return "fixed"; }
  bool wants_reward_terms() const override { return wants_rewards; }
  int calls = 0;
  bool wants_rewards = false;

 private:
  std::vector<double> weights_;
  absl::Status status_;
};

TEST(AuditedPolicyTest, ActsAsTheActingPolicyAndCountsAgainstTheReference) {
  const PolicyBatch batch = Rows({2});
  AuditedPolicy audited(
      std::make_unique<FixedPolicy>(std::vector<double>{0.7, 0.3}, absl::OkStatus()),
      std::make_unique<FixedPolicy>(std::vector<double>{0.3, 0.7}, absl::OkStatus()));
  std::vector<double> out(2);
  ASSERT_TRUE(audited.Weigh(batch, absl::MakeSpan(out), InlineExecutorInstance()).ok());
  ASSERT_TRUE(audited.Weigh(batch, absl::MakeSpan(out), InlineExecutorInstance()).ok());
  EXPECT_EQ(out, (std::vector<double>{0.7, 0.3}));
  EXPECT_EQ(audited.agreement().rows, 2);
  EXPECT_EQ(audited.agreement().same_argmax, 0);
  EXPECT_NEAR(audited.agreement().same_hash_share(), 0.6, 1e-12);
  EXPECT_EQ(audited.Describe(), "fixed, audited against fixed");
}

TEST(AuditedPolicyTest, AReferenceFailureIsCountedAndLeavesTheBatchOut) {
  const PolicyBatch batch = Rows({2});
  AuditedPolicy audited(
      std::make_unique<FixedPolicy>(std::vector<double>{0.7, 0.3}, absl::OkStatus()),
      std::make_unique<FixedPolicy>(std::vector<double>{}, absl::InternalError("no")));
  std::vector<double> out(2);
  EXPECT_TRUE(audited.Weigh(batch, absl::MakeSpan(out), InlineExecutorInstance()).ok());
  EXPECT_EQ(audited.reference_failures(), 1);
  EXPECT_EQ(audited.agreement().rows, 0);
}

TEST(AuditedPolicyTest, AnActingFailureIsReturned) {
  const PolicyBatch batch = Rows({2});
  AuditedPolicy audited(
      std::make_unique<FixedPolicy>(std::vector<double>{}, absl::InternalError("broken")),
      std::make_unique<FixedPolicy>(std::vector<double>{0.5, 0.5}, absl::OkStatus()));
  std::vector<double> out(2);
  EXPECT_EQ(audited.Weigh(batch, absl::MakeSpan(out), InlineExecutorInstance()).message(),
            "broken");
  EXPECT_EQ(audited.agreement().rows, 0);
}

// The batch has the reward terms (PolicyBatch::rewards) if either policy wants them.
TEST(AuditedPolicyTest, WantsRewardTermsIfEitherPolicyDoes) {
  for (int acting = 0; acting < 2; ++acting) {
    for (int reference = 0; reference < 2; ++reference) {
      auto a = std::make_unique<FixedPolicy>(std::vector<double>{}, absl::OkStatus());
      auto r = std::make_unique<FixedPolicy>(std::vector<double>{}, absl::OkStatus());
      a->wants_rewards = acting == 1;
      r->wants_rewards = reference == 1;
      const AuditedPolicy audited(std::move(a), std::move(r));
      EXPECT_EQ(audited.wants_reward_terms(), acting == 1 || reference == 1)
          << acting << " " << reference;
    }
  }
}

}  // namespace
}  // namespace dar::learn
