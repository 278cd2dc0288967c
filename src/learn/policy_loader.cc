#include "learn/policy_loader.h"

#include <memory>
#include <utility>

#include "learn/policy_audit.h"
#include "learn/policy_model.h"

namespace dar::learn {

WeightPolicyLoader LearnedPolicyLoader() {
  return [](const WeightPolicySpec& spec) -> absl::StatusOr<LoadedWeightPolicy> {
    absl::StatusOr<std::unique_ptr<LearnedPolicy>> policy = LearnedPolicy::Load(
        spec.path, spec.int8 ? LearnedPolicy::Precision::kInt8 : LearnedPolicy::Precision::kFloat);
    if (!policy.ok()) return policy.status();
    LoadedWeightPolicy out;
    if (!spec.audit) {
      out.policy = std::move(*policy);
      return out;
    }
    // The same model, in FP32 (not read from the file a second time).
    auto reference = std::make_unique<LearnedPolicy>((*policy)->model(), spec.path,
                                                     LearnedPolicy::Precision::kFloat);
    auto audited = std::make_shared<AuditedPolicy>(std::move(*policy), std::move(reference));
    out.policy = audited;
    out.audit = [audited] {
      const PolicyAgreement& a = audited->agreement();
      return nlohmann::json{{"decisions", a.rows},
                            {"same_argmax", a.same_argmax_share()},
                            {"clear_decisions", a.clear_rows},
                            {"clear_same_argmax", a.clear_same_argmax_share()},
                            {"same_next_hop_for_a_hash", a.same_hash_share()},
                            {"max_weight_error", a.max_weight_error},
                            {"mean_weight_error", a.mean_weight_error()},
                            {"float_failures", audited->reference_failures()}};
    };
    return out;
  };
}

}  // namespace dar::learn
