// The learned policy behind core's WeightPolicyLoader seam (core/weight_policy.h): what dar-sim
// hands the simulator so that its `dar-learned` can load a model without the simulator
// depending on this library.
#ifndef DAR_LEARN_POLICY_LOADER_H_
#define DAR_LEARN_POLICY_LOADER_H_

#include "core/weight_policy.h"

namespace dar::learn {

// Loads LearnedPolicy models (learn/policy_model.h) at the precision asked; with an audit, the
// same model in FP32 runs beside the INT8 one (learn/policy_audit.h) and `audit` reports their
// agreement ("int8_vs_float"). Errors: the model's refusal, naming the file.
WeightPolicyLoader LearnedPolicyLoader();

}  // namespace dar::learn

#endif  // DAR_LEARN_POLICY_LOADER_H_
