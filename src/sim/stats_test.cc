#include "sim/stats.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace dar::sim {
namespace {

TEST(StatsTest, MeanAndPopulationStdDev) {
  const std::vector<double> x = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(Mean(x), 5.0);
  EXPECT_DOUBLE_EQ(StdDev(x), 2.0);
  EXPECT_DOUBLE_EQ(StdDev(std::vector<double>{3.5}), 0.0);
}

TEST(StatsTest, QuantileInterpolatesBetweenRanks) {
  const std::vector<double> x = {5, 1, 4, 2, 3};  // any order
  EXPECT_DOUBLE_EQ(Quantile(x, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(x, 0.25), 2.0);
  EXPECT_DOUBLE_EQ(Quantile(x, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(Quantile(x, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(Quantile(x, 1.0), 5.0);
  EXPECT_DOUBLE_EQ(Quantile({7.0}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(Quantile({1.0, 2.0}, 0.5), 1.5);
}

TEST(StatsTest, QuantilesSortOnceAndMatchQuantile) {
  std::vector<double> x;
  for (int i = 0; i < 1000; ++i) x.push_back((i * 7919) % 1000);
  const std::vector<double> qs = {0.5, 0.99, 0.999};
  const std::vector<double> got = Quantiles(x, qs);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < qs.size(); ++i) EXPECT_DOUBLE_EQ(got[i], Quantile(x, qs[i]));
  EXPECT_LE(got[0], got[1]);
  EXPECT_LE(got[1], got[2]);
  EXPECT_DOUBLE_EQ(got[0], 499.5);
}

TEST(StudentTTest, MatchesTheTableAndTendsToTheNormal) {
  EXPECT_DOUBLE_EQ(StudentT975(1), 12.706);
  EXPECT_DOUBLE_EQ(StudentT975(9), 2.262);
  EXPECT_NEAR(StudentT975(31), 2.0395, 1e-4);
  EXPECT_NEAR(StudentT975(60), 2.0003, 1e-4);
  EXPECT_NEAR(StudentT975(120), 1.9799, 1e-4);
  EXPECT_NEAR(StudentT975(100000), 1.95998, 1e-4);
  for (int df = 1; df < 200; ++df) EXPECT_GT(StudentT975(df), StudentT975(df + 1)) << df;
}

TEST(MeanCi95Test, IsTheStudentIntervalOfTheSamples) {
  // n = 10, mean 5.5, sample sd sqrt(55/6): half-width 2.262 * 3.0277 / sqrt(10).
  std::vector<double> x;
  for (int i = 1; i <= 10; ++i) x.push_back(i);
  const MeanInterval m = MeanCi95(x);
  const double half = 2.262 * std::sqrt(55.0 / 6) / std::sqrt(10.0);
  EXPECT_DOUBLE_EQ(m.mean, 5.5);
  EXPECT_NEAR(m.low, 5.5 - half, 1e-12);
  EXPECT_NEAR(m.high, 5.5 + half, 1e-12);
  EXPECT_TRUE(m.ExcludesZero());
  EXPECT_FALSE(MeanCi95(std::vector<double>{-1, 1, -1, 1}).ExcludesZero());
  const MeanInterval one = MeanCi95(std::vector<double>{3});
  EXPECT_TRUE(std::isnan(one.low) && std::isnan(one.high));
  EXPECT_FALSE(one.ExcludesZero());
}

}  // namespace
}  // namespace dar::sim
