#include "core/link_cost.h"

#include <algorithm>

namespace dar {

double LinkCost(const LinkState& s, const ClassWeights& w, const CostScales& scales) {
  if (!s.up || s.capacity.is_zero()) return kUnusable;
  const double delay = ToSeconds(s.propagation + s.queueing) / ToSeconds(scales.reference_delay);
  // u / (1 - u) up to max_utilisation, then on along its tangent, so overloaded links still
  // rank by how overloaded they are.
  const double um = scales.max_utilisation;
  const double u = std::max(s.utilisation, 0.0);
  const double congestion =
      u <= um ? u / (1 - u) : um / (1 - um) + (u - um) / ((1 - um) * (1 - um));
  const double capacity =
      static_cast<double>(scales.reference_capacity.bps()) / static_cast<double>(s.capacity.bps());
  return w.hop + w.latency * delay + w.loss * std::clamp(s.loss, 0.0, 1.0) / scales.reference_loss +
         w.utilisation * congestion + w.capacity * capacity;
}

}  // namespace dar
