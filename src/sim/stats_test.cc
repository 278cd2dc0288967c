#include "sim/stats.h"

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

}  // namespace
}  // namespace dar::sim
