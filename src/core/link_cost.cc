#include "core/link_cost.h"

#include <algorithm>

namespace dar {

double LinkCost(const LinkState& s, const ClassWeights& w, const CostScales& scales) {
  if (!s.up || s.capacity.is_zero()) return kUnusable;
  const double delay = ToSeconds(s.propagation + s.queueing) / ToSeconds(scales.reference_delay);
  const double u = std::clamp(s.utilisation, 0.0, scales.max_utilisation);
  const double capacity =
      static_cast<double>(scales.reference_capacity.bps()) / static_cast<double>(s.capacity.bps());
  return w.hop + w.latency * delay + w.loss * std::clamp(s.loss, 0.0, 1.0) / scales.reference_loss +
         w.utilisation * u / (1 - u) + w.capacity * capacity;
}

}  // namespace dar
