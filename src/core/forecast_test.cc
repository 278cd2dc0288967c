#include "core/forecast.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/units.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

TEST(HorizonStepsTest, RoundsUp) {
  EXPECT_EQ(HorizonSteps(Seconds(30), Milliseconds(100)), 300);
  EXPECT_EQ(HorizonSteps(Seconds(60), Milliseconds(100)), 600);
  EXPECT_EQ(HorizonSteps(Milliseconds(250), Milliseconds(100)), 3);
  EXPECT_EQ(HorizonSteps(Nanoseconds(1), Milliseconds(100)), 1);
  EXPECT_EQ(HorizonSteps(Duration::zero(), Milliseconds(100)), 1);
}

// A default config with one field changed.
template <typename F>
HoltConfig With(F change) {
  HoltConfig config;
  change(config);
  return config;
}

TEST(HoltConfigTest, Validate) {
  EXPECT_TRUE(HoltConfig().Validate().ok());
  EXPECT_THAT(With([](HoltConfig& c) { c.alpha = 0; }).Validate().message(), HasSubstr("alpha"));
  EXPECT_THAT(With([](HoltConfig& c) { c.alpha = std::nan(""); }).Validate().message(),
              HasSubstr("alpha"));
  EXPECT_THAT(With([](HoltConfig& c) { c.beta = -0.1; }).Validate().message(), HasSubstr("beta"));
  EXPECT_THAT(With([](HoltConfig& c) { c.phi = 1.01; }).Validate().message(), HasSubstr("phi"));
  EXPECT_THAT(With([](HoltConfig& c) { c.residual_gain = 0; }).Validate().message(),
              HasSubstr("residual_gain"));
  EXPECT_THAT(With([](HoltConfig& c) { c.bounds = {.lower = 1, .upper = 0}; }).Validate().message(),
              HasSubstr("bounds"));
}

TEST(HoltForecasterTest, NothingObserved) {
  HoltForecaster f(With([](HoltConfig& c) { c.bounds = {.lower = 1, .upper = 2}; }));
  const Forecast fc = f.Predict(10);
  EXPECT_EQ(fc.mean, 1);
  EXPECT_EQ(fc.stddev, kInfinity);
  EXPECT_EQ(f.observations(), 0);
}

TEST(HoltForecasterTest, ConstantSeries) {
  HoltForecaster f;
  for (int i = 0; i < 1000; ++i) f.Observe(7.5);
  const Forecast fc = f.Predict(600);
  EXPECT_DOUBLE_EQ(fc.mean, 7.5);
  EXPECT_EQ(fc.stddev, 0);
  EXPECT_EQ(f.observations(), 1000);
}

TEST(HoltForecasterTest, NonFiniteValuesAreIgnored) {
  HoltForecaster f;
  f.Observe(3);
  f.Observe(std::nan(""));
  f.Observe(kInfinity);
  EXPECT_EQ(f.observations(), 1);
  EXPECT_EQ(f.Predict(1).mean, 3);
}

// alpha = beta = 1: the level is the last value, the trend the last change; phi = 0.5 damps
// the extrapolated trend to 1/2 + 1/4 + ...
TEST(HoltForecasterTest, DampedTrendKnownAnswer) {
  HoltForecaster f(With([](HoltConfig& c) {
    c.alpha = 1;
    c.beta = 1;
    c.phi = 0.5;
  }));
  f.Observe(0);
  f.Observe(1);
  EXPECT_DOUBLE_EQ(f.level(), 1);
  EXPECT_DOUBLE_EQ(f.trend(), 1);
  EXPECT_DOUBLE_EQ(f.Predict(1).mean, 1.5);
  EXPECT_DOUBLE_EQ(f.Predict(2).mean, 1.75);
  EXPECT_NEAR(f.Predict(100).mean, 2, 1e-12);
  EXPECT_DOUBLE_EQ(f.Predict(0).mean, 1.5);  // treated as 1
}

// Without damping Holt follows a straight line exactly once it has converged.
TEST(HoltForecasterTest, UndampedFollowsLine) {
  HoltForecaster f(With([](HoltConfig& c) {
    c.alpha = 0.5;
    c.beta = 0.3;
    c.phi = 1;
  }));
  // The residual EWMA forgets the start-up transient slowly (gain 0.01).
  for (int i = 0; i < 3000; ++i) f.Observe(2 + 0.25 * i);
  EXPECT_NEAR(f.trend(), 0.25, 1e-9);
  EXPECT_NEAR(f.Predict(600).mean, 2 + 0.25 * (2999 + 600), 1e-6);
  EXPECT_NEAR(f.residual_stddev(), 0, 1e-6);
}

// The closed-form stddev against the sum it stands for, damped and undamped.
TEST(HoltForecasterTest, StddevMatchesSum) {
  for (const double phi : {0.9, 0.999, 1.0}) {
    const HoltConfig config = With([phi](HoltConfig& c) {
      c.alpha = 0.3;
      c.beta = 0.2;
      c.phi = phi;
    });
    HoltForecaster f(config);
    f.Observe(0);
    f.Observe(2);  // one residual of 2: s^2 = 4
    ASSERT_DOUBLE_EQ(f.residual_stddev(), 2);
    for (const int h : {1, 2, 10, 300, 600}) {
      double sum = 1, phi_j = 0, phi_power = 1;
      for (int j = 1; j < h; ++j) {
        phi_power *= phi;
        phi_j += phi_power;
        const double c = config.alpha + config.alpha * config.beta * phi_j;
        sum += c * c;
      }
      EXPECT_NEAR(f.Predict(h).stddev, 2 * std::sqrt(sum), 1e-9 * 2 * std::sqrt(sum))
          << "phi " << phi << " h " << h;
    }
  }
}

TEST(HoltForecasterTest, BoundsClampTheMean) {
  HoltForecaster f(With([](HoltConfig& c) { c.bounds = {.lower = 0, .upper = 1}; }));
  for (int i = 0; i < 400; ++i) f.Observe(0.5 + 0.001 * i);
  EXPECT_EQ(f.Predict(600).mean, 1);
  EXPECT_GT(f.Predict(600).stddev, 0);
  EXPECT_LT(f.Predict(1).mean, 1);
}

TEST(NaiveForecasterTest, LastValueAndRandomWalkSpread) {
  NaiveForecaster f(ForecastBounds{.lower = 0, .upper = 10}, /*residual_gain=*/1);
  EXPECT_EQ(f.Predict(5).stddev, kInfinity);
  f.Observe(4);
  EXPECT_EQ(f.Predict(5).mean, 4);
  EXPECT_EQ(f.Predict(5).stddev, 0);
  f.Observe(12);
  f.Observe(std::nan(""));
  EXPECT_EQ(f.observations(), 2);
  EXPECT_EQ(f.Predict(4).mean, 10);       // clamped
  EXPECT_EQ(f.Predict(4).stddev, 8 * 2);  // change 8, sqrt(4) steps
}

// Evaluation on synthetic series ---------------------------------------------------------------

// Standard normal deviate (Box-Muller) from the seeded generator.
double Gaussian(Random& rng) {
  const double u1 = 1 - rng.Uniform();  // (0, 1]
  const double u2 = rng.Uniform();
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

constexpr double kPeriodS = 0.1;     // 100 ms samples
constexpr int kSamples = 3000;       // 300 s
constexpr int kWarmupSamples = 100;  // forecasts are scored from 10 s on

struct Series {
  std::string name;
  std::vector<double> values;
  ForecastBounds bounds;
};

std::vector<Series> MakeSeries(uint64_t seed) {
  Random rng(seed);
  std::vector<Series> all;
  auto make = [&](std::string name, auto f, double noise, ForecastBounds bounds = {}) {
    Series s{.name = std::move(name), .values = {}, .bounds = bounds};
    for (int i = 0; i < kSamples; ++i) {
      s.values.push_back(f(i * kPeriodS) + noise * Gaussian(rng));
    }
    all.push_back(std::move(s));
  };
  // RTT in ms rising 1 ms per 10 s, noise 0.5 ms.
  make(
      "ramp", [](double t) { return 10 + 0.1 * t; }, 0.5);
  // RTT in ms jumping from 10 to 20 at 150 s (a reroute in the underlay).
  make(
      "step", [](double t) { return t < 150 ? 10.0 : 20.0; }, 0.5);
  // Load with a period of 60 s, amplitude 5, noise 0.5.
  make(
      "periodic", [](double t) { return 10 + 5 * std::sin(2 * M_PI * t / 60); }, 0.5);
  // Pure Gaussian noise around a constant.
  make(
      "noise", [](double) { return 10.0; }, 1.0);
  // Utilisation flat at 0.2, rising to 0.9 between 60 s and 100 s, then flat; noise 0.02.
  make(
      "saturating",
      [](double t) { return t < 60    ? 0.2
                            : t < 100 ? 0.2 + 0.7 * (t - 60) / 40
                                      : 0.9; }, 0.02,
      ForecastBounds{.lower = 0, .upper = 1});
  return all;
}

struct Score {
  double mae = 0;
  double within_one_stddev = 0;  // fraction of realised values within mean +- stddev
};

// Feeds `values` to `f` one by one; after each observation from kWarmupSamples on, forecasts
// `steps` ahead and scores the forecast against the realised value.
Score Evaluate(Forecaster& f, const std::vector<double>& values, int steps) {
  double abs_error = 0;
  int within = 0, n = 0;
  for (int t = 0; t + steps < static_cast<int>(values.size()); ++t) {
    f.Observe(values[t]);
    if (t < kWarmupSamples) continue;
    const Forecast fc = f.Predict(steps);
    const double error = values[t + steps] - fc.mean;
    abs_error += std::abs(error);
    if (std::abs(error) <= fc.stddev) ++within;
    ++n;
  }
  return Score{.mae = abs_error / n, .within_one_stddev = static_cast<double>(within) / n};
}

// Default HoltForecaster against the last value, 30 s and 60 s ahead. Prints the table.
TEST(ForecastEvaluation, HoltVersusNaive) {
  constexpr uint64_t kSeed = 1;
  fmt::print("Forecast evaluation, seed {}, {} samples at {} ms, scored from {} s\n", kSeed,
             kSamples, kPeriodS * 1000, kWarmupSamples * kPeriodS);
  fmt::print("{:<11} {:>7} {:>10} {:>10} {:>7} {:>10} {:>10}\n", "series", "horizon", "holt MAE",
             "naive MAE", "ratio", "holt +-1sd", "naive +-1sd");
  for (const Series& s : MakeSeries(kSeed)) {
    for (const Duration horizon : {Seconds(30), Seconds(60)}) {
      const int steps = HorizonSteps(horizon, Milliseconds(100));
      HoltForecaster holt(With([&s](HoltConfig& c) { c.bounds = s.bounds; }));
      NaiveForecaster naive(s.bounds);
      const Score h = Evaluate(holt, s.values, steps);
      const Score n = Evaluate(naive, s.values, steps);
      const double ratio = h.mae / n.mae;
      fmt::print("{:<11} {:>6.0f}s {:>10.4f} {:>10.4f} {:>7.2f} {:>10.2f} {:>10.2f}\n", s.name,
                 ToSeconds(horizon), h.mae, n.mae, ratio, h.within_one_stddev, n.within_one_stddev);
      if (s.name == "ramp") {
        EXPECT_LT(ratio, 0.5) << "ramp, " << steps << " steps";
      }
      if (s.name == "noise") {
        EXPECT_LE(ratio, 1.25) << "noise, " << steps << " steps";
        if (steps == 300) {
          EXPECT_GE(h.within_one_stddev, 0.55);
          EXPECT_LE(h.within_one_stddev, 0.80);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dar
