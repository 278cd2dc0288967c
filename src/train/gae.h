// Generalised advantage estimation (Schulman et al. 2016) over one trajectory.
#ifndef DAR_TRAIN_GAE_H_
#define DAR_TRAIN_GAE_H_

#include <vector>

#include "absl/types/span.h"

namespace dar::train {

struct GaeResult {
  std::vector<double> advantages;  // A_t
  std::vector<double> returns;     // A_t + V(s_t): the value head's target
};

// One trajectory of n steps: rewards r_0..r_{n-1} and values V(s_0)..V(s_n), the last being
// the bootstrap value of the state after the last step (0 if the trajectory really ended).
//   delta_t = r_t + discount * V(s_{t+1}) - V(s_t)
//   A_t     = delta_t + discount * lambda * A_{t+1},   A_{n-1} = delta_{n-1}
// REQUIRES: values.size() == rewards.size() + 1.
GaeResult ComputeGae(absl::Span<const double> rewards, absl::Span<const double> values,
                     double discount, double lambda);

}  // namespace dar::train

#endif  // DAR_TRAIN_GAE_H_
