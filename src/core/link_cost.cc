#include "core/link_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dar {

double LinkCost(const LinkState& s, const ClassWeights& w, const CostScales& scales) {
  if (!s.up || s.capacity.is_zero()) return kUnusable;
  const double delay = ToSeconds(s.propagation + s.queueing) / ToSeconds(scales.reference_delay);
  // u / (1 - u) up to max_utilisation, then on along its tangent, so overloaded links still
  // rank by how overloaded they are.
  const double um = scales.max_utilisation;
  const auto queue = [um](double u) {
    u = std::max(u, 0.0);
    return u <= um ? u / (1 - u) : um / (1 - um) + (u - um) / ((1 - um) * (1 - um));
  };
  const double predicted = queue(s.utilisation);
  double congestion = predicted;
  if (std::isfinite(s.measured_congestion)) {
    // The present load beyond the unconfirmed allowance only as far as it is measured; the
    // forecast's rise above it in full.
    const double uc = scales.unconfirmed_utilisation;
    const double allowance = uc < 1 ? uc / (1 - uc) : std::numeric_limits<double>::infinity();
    const double present = queue(std::min(s.present_utilisation, s.utilisation));
    congestion =
        std::min(present, allowance + std::max(s.measured_congestion, 0.0)) + (predicted - present);
  }
  const double capacity =
      static_cast<double>(scales.reference_capacity.bps()) / static_cast<double>(s.capacity.bps());
  return w.hop + w.latency * delay + w.loss * std::clamp(s.loss, 0.0, 1.0) / scales.reference_loss +
         w.utilisation * congestion + w.capacity * capacity;
}

}  // namespace dar
