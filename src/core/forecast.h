// Forecasts of one link metric (RTT, loss, utilisation, queue depth) 30-60 s ahead from
// samples taken at a fixed period (100 ms by default).
//
// Forecaster is the seam: the controller keeps one per link and metric and asks for a
// forecast with an uncertainty. HoltForecaster (damped trend) is the one DAR uses;
// NaiveForecaster (the last value) is the baseline it is measured against
// (forecast_test.cc, ForecastEvaluation). Pure computation: O(1) time and no allocation per
// observation or forecast. Not thread-safe; one instance per thread.
#ifndef DAR_CORE_FORECAST_H_
#define DAR_CORE_FORECAST_H_

#include <cstdint>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "core/units.h"

namespace dar {

// A forecast of one future value: its expected value and the standard deviation of the
// forecast error. stddev is +infinity when nothing has been observed yet.
struct Forecast {
  double mean = 0;
  double stddev = 0;
};

// The range a metric cannot leave (e.g. [0, 1] for utilisation and loss). Forecast means are
// clamped into it; stddev is not changed. Unbounded by default.
struct ForecastBounds {
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();

  friend bool operator==(const ForecastBounds&, const ForecastBounds&) = default;
};

// The number of sample periods covering `horizon`, rounded up; at least 1.
// REQUIRES: sample_period > 0.
int HorizonSteps(Duration horizon, Duration sample_period);

// Predicts a metric sampled at a fixed period.
class Forecaster {
 public:
  virtual ~Forecaster() = default;

  // Adds the next sample. Non-finite values (NaN, infinity) are ignored.
  virtual void Observe(double value) = 0;

  // The forecast `steps_ahead` sample periods after the last observation
  // (HorizonSteps(horizon, period) converts a duration). Before the first observation:
  // mean 0 (clamped into the bounds), stddev +infinity.
  // REQUIRES: steps_ahead >= 1 (smaller values are treated as 1).
  virtual Forecast Predict(int steps_ahead) const = 0;

  // The number of samples observed (non-finite ones excluded).
  virtual int64_t observations() const = 0;
};

using ForecasterPtr = std::unique_ptr<Forecaster>;

// Parameters of HoltForecaster. The defaults were chosen for a 100 ms sample period and
// 30-60 s horizons by a sweep over the synthetic series of forecast_test.cc
// (ForecastEvaluation, 8 seeds): about 0.35-0.4x the last value's error on ramps, 0.75x on
// pure noise, and mean +- stddev holding ~73% of realised values on Gaussian noise. A larger
// alpha or beta follows ramps a little better but overstates the uncertainty on noise and
// overshoots more after steps and at the top of a saturating ramp. At another sample period,
// keep the time constants: alpha ~ period / 5 s, beta ~ period / 20 s, 1 - phi ~ period / 100 s.
struct HoltConfig {
  // Level smoothing, in (0, 1]: the level remembers ~1 / alpha samples (5 s).
  double alpha = 0.02;
  // Trend smoothing, in [0, 1] (Holt's beta*, applied to level changes): the trend remembers
  // ~1 / beta samples (20 s). Small, so that noise does not become a slope that is then
  // extrapolated for a minute.
  double beta = 0.005;
  // Trend damping per sample (Gardner & McKenzie), in (0, 1]: the trend extrapolated h steps
  // ahead adds up to phi + phi^2 + ... + phi^h times the current slope (259 at 30 s, 451 at
  // 60 s) and never more than phi / (1 - phi) = 999 samples (100 s). 1 is Holt's undamped
  // linear trend.
  double phi = 0.999;
  // Gain of the EWMA of squared one-step residuals that gives the uncertainty, in (0, 1]:
  // memory ~ 10 s.
  double residual_gain = 0.01;
  ForecastBounds bounds;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;

  friend bool operator==(const HoltConfig&, const HoltConfig&) = default;
};

// Holt's linear trend method with a damped trend (Gardner & McKenzie 1985):
//   level_t = alpha * y_t + (1 - alpha) * (level_{t-1} + phi * trend_{t-1})
//   trend_t = beta * (level_t - level_{t-1}) + (1 - beta) * phi * trend_{t-1}
//   mean(h) = level_t + (phi + phi^2 + ... + phi^h) * trend_t
// The first observation sets the level; the trend starts at 0.
// stddev(h) is the analytic forecast error of the equivalent state-space model ETS(A,Ad,N)
// (Hyndman, Koehler, Ord & Snyder, "Forecasting with Exponential Smoothing", 2008; its
// trend gain is alpha * beta here):
//   stddev(h)^2 = s^2 * (1 + sum_{j=1}^{h-1} (alpha + alpha * beta * phi_j)^2),
//   phi_j = phi + ... + phi^j,
// where s^2 is an EWMA of squared one-step residuals (0 after a single observation). It is
// evaluated in closed form, O(1) in h. It is exact only if the series follows that model: it
// holds about 73% within mean +- stddev on white noise, and fewer where the series breaks
// the model (steps, periodic load); see ForecastEvaluation.
class HoltForecaster final : public Forecaster {
 public:
  // REQUIRES: config.Validate().ok().
  explicit HoltForecaster(const HoltConfig& config = HoltConfig());

  void Observe(double value) override;
  Forecast Predict(int steps_ahead) const override;
  int64_t observations() const override { return observations_; }

  double level() const { return level_; }
  // The current slope per sample (before damping).
  double trend() const { return trend_; }
  // The standard deviation of one-step residuals (s above).
  double residual_stddev() const;

 private:
  HoltConfig config_;
  double level_ = 0;
  double trend_ = 0;
  double residual_var_ = 0;
  int64_t observations_ = 0;
};

// The last value observed, as the forecast for every horizon: the baseline. Its stddev
// treats the series as a random walk: sqrt(h) times an EWMA estimate of the standard
// deviation of one-step changes (gain `residual_gain`).
class NaiveForecaster final : public Forecaster {
 public:
  // REQUIRES: 0 < residual_gain <= 1.
  explicit NaiveForecaster(const ForecastBounds& bounds = ForecastBounds(),
                           double residual_gain = 0.01);

  void Observe(double value) override;
  Forecast Predict(int steps_ahead) const override;
  int64_t observations() const override { return observations_; }

 private:
  ForecastBounds bounds_;
  double residual_gain_;
  double last_ = 0;
  double change_var_ = 0;
  int64_t observations_ = 0;
};

}  // namespace dar

#endif  // DAR_CORE_FORECAST_H_
