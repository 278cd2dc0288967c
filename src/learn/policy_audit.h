// How far a policy's weights are from a reference's on the same decisions, and a policy that
// runs a reference beside it to count that on every cycle: the INT8 model against its FP32
// original (issue 5: "same chosen next hop in at least 99% of decisions, weights within a
// stated error"), measured on the decisions of a real run, not on a fixed sample.
//
// "The chosen next hop" of a weighted row is not one candidate: a forwarder hashes a flow (or
// draws per packet or per flowlet) into the row's cumulative weights. So two things are
// counted: whether the largest weight is on the same candidate (the argmax; with ties broken
// toward the first, which is arbitrary where weights tie, hence also counted over "clear" rows
// only, where the reference's best leads its second by a margin), and the share of flow
// hashes that land on the same candidate under both (the forwarder's real choice: for a
// uniform draw u, the measure of u whose candidate differs).
#ifndef DAR_LEARN_POLICY_AUDIT_H_
#define DAR_LEARN_POLICY_AUDIT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/weight_policy.h"

namespace dar::learn {

struct PolicyAgreement {
  int64_t rows = 0;
  int64_t same_argmax = 0;  // rows whose largest weight is on the same candidate
  int64_t clear_rows = 0;   // rows where the reference's best leads by >= clear_margin
  int64_t clear_same_argmax = 0;
  double differing_hashes = 0;  // sum over rows of the share of hashes sent elsewhere
  double max_weight_error = 0;  // largest |weight difference| of any candidate
  int64_t candidates = 0;
  double sum_weight_error = 0;  // of |weight difference| over the candidates

  // Shares, 1 when there are no rows.
  double same_argmax_share() const;
  double clear_same_argmax_share() const;
  double same_hash_share() const;    // mean over rows of the share of hashes on the same candidate
  double mean_weight_error() const;  // per candidate, 0 when there are none

  void Add(const PolicyAgreement& other);
};

// Compares `weights` with `reference` (both one per candidate of `batch`).
PolicyAgreement CompareWeights(const PolicyBatch& batch, absl::Span<const double> weights,
                               absl::Span<const double> reference, double clear_margin = 0.01);

// Acts as `acting` (its weights, its errors) and runs `reference` on every batch beside it,
// adding up the agreement. A reference error leaves that batch out of the counts.
class AuditedPolicy : public WeightPolicy {
 public:
  AuditedPolicy(std::unique_ptr<WeightPolicy> acting, std::unique_ptr<WeightPolicy> reference);

  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                     Executor& executor) override;
  // The batch carries the reward terms if either policy reads them.
  bool wants_reward_terms() const override {
    return acting_->wants_reward_terms() || reference_->wants_reward_terms();
  }
  std::string Describe() const override;

  const PolicyAgreement& agreement() const { return agreement_; }
  int64_t reference_failures() const { return reference_failures_; }

 private:
  std::unique_ptr<WeightPolicy> acting_;
  std::unique_ptr<WeightPolicy> reference_;
  std::vector<double> reference_weights_;  // scratch
  PolicyAgreement agreement_;
  int64_t reference_failures_ = 0;
};

}  // namespace dar::learn

#endif  // DAR_LEARN_POLICY_AUDIT_H_
