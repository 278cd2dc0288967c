#include "train/gae.h"

#include <cassert>

namespace dar::train {

GaeResult ComputeGae(absl::Span<const double> rewards, absl::Span<const double> values,
                     double discount, double lambda) {
  assert(values.size() == rewards.size() + 1);
  const size_t n = rewards.size();
  GaeResult out;
  out.advantages.resize(n);
  out.returns.resize(n);
  double next_advantage = 0;
  for (size_t i = n; i-- > 0;) {
    const double delta = rewards[i] + discount * values[i + 1] - values[i];
    next_advantage = delta + discount * lambda * next_advantage;
    out.advantages[i] = next_advantage;
    out.returns[i] = next_advantage + values[i];
  }
  return out;
}

}  // namespace dar::train
