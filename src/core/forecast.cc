#include "core/forecast.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "core/units.h"

namespace dar {
namespace {

double Clamp(double v, const ForecastBounds& bounds) {
  return std::clamp(v, bounds.lower, bounds.upper);
}

// Below this 1 - phi the damped sums are evaluated as undamped ones: the closed forms divide
// by 1 - phi and lose precision.
constexpr double kUndampedEpsilon = 1e-9;

// phi + phi^2 + ... + phi^h.
double DampedSum(double phi, int h) {
  if (1 - phi < kUndampedEpsilon) return h;
  return phi * (1 - std::pow(phi, h)) / (1 - phi);
}

// sum_{j=1}^{n} (alpha + alpha * beta * DampedSum(phi, j))^2, in closed form.
double SumOfSquaredWeights(double alpha, double beta, double phi, int n) {
  if (n <= 0) return 0;
  const double nd = n;
  if (1 - phi < kUndampedEpsilon) {
    // (alpha * (1 + beta * j))^2 summed with sum j = n(n+1)/2, sum j^2 = n(n+1)(2n+1)/6.
    const double sum_j = nd * (nd + 1) / 2;
    const double sum_j2 = nd * (nd + 1) * (2 * nd + 1) / 6;
    return alpha * alpha * (nd + 2 * beta * sum_j + beta * beta * sum_j2);
  }
  // c_j = a - g * phi^j with g = alpha * beta * phi / (1 - phi), a = alpha + g.
  const double g = alpha * beta * phi / (1 - phi);
  const double a = alpha + g;
  const double sum_phi = DampedSum(phi, n);
  const double sum_phi2 = DampedSum(phi * phi, n);
  return nd * a * a - 2 * a * g * sum_phi + g * g * sum_phi2;
}

}  // namespace

int HorizonSteps(Duration horizon, Duration sample_period) {
  assert(sample_period > Duration::zero());
  const int64_t steps = (horizon.count() + sample_period.count() - 1) / sample_period.count();
  return static_cast<int>(std::clamp<int64_t>(steps, 1, std::numeric_limits<int>::max()));
}

// HoltForecaster -----------------------------------------------------------------------------

absl::Status HoltConfig::Validate() const {
  if (!(alpha > 0 && alpha <= 1)) return absl::InvalidArgumentError("alpha must be in (0, 1]");
  if (!(beta >= 0 && beta <= 1)) return absl::InvalidArgumentError("beta must be in [0, 1]");
  if (!(phi > 0 && phi <= 1)) return absl::InvalidArgumentError("phi must be in (0, 1]");
  if (!(residual_gain > 0 && residual_gain <= 1)) {
    return absl::InvalidArgumentError("residual_gain must be in (0, 1]");
  }
  if (!(bounds.lower <= bounds.upper)) {
    return absl::InvalidArgumentError("bounds.lower must not exceed bounds.upper");
  }
  return absl::OkStatus();
}

HoltForecaster::HoltForecaster(const HoltConfig& config) : config_(config) {
  assert(config.Validate().ok());
}

void HoltForecaster::Observe(double value) {
  if (!std::isfinite(value)) return;
  if (observations_ == 0) {
    level_ = value;
    trend_ = 0;
    observations_ = 1;
    return;
  }
  const double predicted = level_ + config_.phi * trend_;
  const double residual = value - predicted;
  residual_var_ = observations_ == 1 ? residual * residual
                                     : residual_var_ + config_.residual_gain *
                                                           (residual * residual - residual_var_);
  const double level = predicted + config_.alpha * residual;
  trend_ = config_.beta * (level - level_) + (1 - config_.beta) * config_.phi * trend_;
  level_ = level;
  ++observations_;
}

double HoltForecaster::residual_stddev() const { return std::sqrt(residual_var_); }

Forecast HoltForecaster::Predict(int steps_ahead) const {
  if (observations_ == 0) return Forecast{.mean = Clamp(0, config_.bounds), .stddev = kInfinity};
  const int h = std::max(steps_ahead, 1);
  const double mean = level_ + DampedSum(config_.phi, h) * trend_;
  const double var =
      residual_var_ * (1 + SumOfSquaredWeights(config_.alpha, config_.beta, config_.phi, h - 1));
  return Forecast{.mean = Clamp(mean, config_.bounds), .stddev = std::sqrt(var)};
}

// NaiveForecaster ----------------------------------------------------------------------------

NaiveForecaster::NaiveForecaster(const ForecastBounds& bounds, double residual_gain)
    : bounds_(bounds), residual_gain_(residual_gain) {
  assert(residual_gain > 0 && residual_gain <= 1 && bounds.lower <= bounds.upper);
}

void NaiveForecaster::Observe(double value) {
  if (!std::isfinite(value)) return;
  if (observations_ > 0) {
    const double change = value - last_;
    change_var_ = observations_ == 1
                      ? change * change
                      : change_var_ + residual_gain_ * (change * change - change_var_);
  }
  last_ = value;
  ++observations_;
}

Forecast NaiveForecaster::Predict(int steps_ahead) const {
  if (observations_ == 0) return Forecast{.mean = Clamp(0, bounds_), .stddev = kInfinity};
  const int h = std::max(steps_ahead, 1);
  return Forecast{.mean = Clamp(last_, bounds_), .stddev = std::sqrt(change_var_ * h)};
}

}  // namespace dar
