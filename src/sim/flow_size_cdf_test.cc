#include "sim/flow_size_cdf.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::sim {
namespace {

using ::testing::HasSubstr;

TEST(FlowSizeCdfTest, MeanOfPiecewiseLinearCdf) {
  // Uniform on [0, 100] for half the flows, on [100, 200] for the other half.
  absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Parse("# tiny\n0 0\n100 50\n\n200 100\n", "t");
  ASSERT_TRUE(cdf.ok()) << cdf.status();
  EXPECT_DOUBLE_EQ(cdf->MeanBytes(), 100.0);
  EXPECT_DOUBLE_EQ(cdf->Quantile(0.25), 50.0);
  EXPECT_DOUBLE_EQ(cdf->Quantile(0.75), 150.0);
  EXPECT_DOUBLE_EQ(cdf->Cdf(150), 0.75);
  EXPECT_DOUBLE_EQ(cdf->Cdf(1000), 1.0);
}

TEST(FlowSizeCdfTest, FirstPointAboveZeroIsAPointMass) {
  // 20% of flows are exactly 100 bytes, the rest uniform on [100, 200]: mean 0.2*100 + 0.8*150.
  absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Parse("100 20\n200 100 # comment\n", "t");
  ASSERT_TRUE(cdf.ok()) << cdf.status();
  EXPECT_DOUBLE_EQ(cdf->MeanBytes(), 140.0);
  EXPECT_DOUBLE_EQ(cdf->Quantile(0.1), 100.0);
  EXPECT_DOUBLE_EQ(cdf->Quantile(0.6), 150.0);
  EXPECT_DOUBLE_EQ(cdf->Cdf(99), 0.0);
  EXPECT_DOUBLE_EQ(cdf->Cdf(100), 0.2);
}

TEST(FlowSizeCdfTest, StepInsideTheCdfIsAPointMass) {
  // 0..100 uniform (50%), then a step to 90% at 100 (40% exactly 100), then 100..300 (10%).
  absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Parse("0 0\n100 50\n100 90\n300 100\n", "t");
  ASSERT_TRUE(cdf.ok()) << cdf.status();
  EXPECT_DOUBLE_EQ(cdf->MeanBytes(), 0.5 * 50 + 0.4 * 100 + 0.1 * 200);
  EXPECT_DOUBLE_EQ(cdf->Quantile(0.7), 100.0);
  EXPECT_DOUBLE_EQ(cdf->Cdf(100), 0.9);
}

TEST(FlowSizeCdfTest, SamplesFollowTheShippedCdfs) {
  for (const std::string name : {"websearch", "fb-hadoop"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Load(FlowSizeCdf::ResolvePath(name, ""));
    ASSERT_TRUE(cdf.ok()) << cdf.status();
    Random rng(42);
    constexpr int kSamples = 100000;
    std::vector<double> samples;
    double sum = 0;
    for (int i = 0; i < kSamples; ++i) {
      const int64_t s = cdf->Sample(rng);
      ASSERT_GE(s, 1);
      samples.push_back(static_cast<double>(s));
      sum += static_cast<double>(s);
    }
    std::sort(samples.begin(), samples.end());
    // The empirical CDF at every point of the file matches the file's percent.
    for (const FlowSizeCdf::Point& p : cdf->points()) {
      const double frac =
          static_cast<double>(std::upper_bound(samples.begin(), samples.end(), p.bytes + 0.5) -
                              samples.begin()) /
          kSamples;
      EXPECT_NEAR(frac, p.percent / 100, 0.006) << "at " << p.bytes << " bytes";
    }
    // Quantiles of the samples sit where the CDF says (compared as probabilities: where the
    // density is low, a tiny change in probability moves the size a lot).
    for (double q : {0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
      const double got = samples[static_cast<size_t>(q * kSamples)];
      EXPECT_NEAR(cdf->Cdf(got), q, 0.006) << "quantile " << q;
    }
    EXPECT_NEAR(sum / kSamples, cdf->MeanBytes(), 0.03 * cdf->MeanBytes());
  }
}

TEST(FlowSizeCdfTest, ZeroByteSamplesBecomeOneByte) {
  absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Parse("0 50\n1 100\n", "t");
  ASSERT_TRUE(cdf.ok()) << cdf.status();
  Random rng(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cdf->Sample(rng), 1);
}

TEST(FlowSizeCdfTest, RejectsMalformedFiles) {
  EXPECT_THAT(FlowSizeCdf::Parse("0 0\n100 60\n50 100\n", "f.cdf").status().message(),
              HasSubstr("must not decrease"));
  EXPECT_THAT(FlowSizeCdf::Parse("0 0\n100 90\n", "f.cdf").status().message(),
              HasSubstr("100 percent"));
  EXPECT_THAT(FlowSizeCdf::Parse("0 0\nabc 10\n1 100\n", "f.cdf").status().message(),
              HasSubstr("f.cdf:2"));
  EXPECT_THAT(FlowSizeCdf::Parse("0 0\n100 50 7\n", "f.cdf").status().message(),
              HasSubstr("f.cdf:2"));
  EXPECT_THAT(FlowSizeCdf::Parse("0 0\n100 150\n", "f.cdf").status().message(),
              HasSubstr("[0, 100]"));
  EXPECT_THAT(FlowSizeCdf::Parse("# nothing\n", "f.cdf").status().message(),
              HasSubstr("no points"));
  EXPECT_EQ(FlowSizeCdf::Load("/nonexistent/x.cdf").status().code(), absl::StatusCode::kNotFound);
}

TEST(FlowSizeCdfTest, ResolvesNamesAndPaths) {
  EXPECT_THAT(FlowSizeCdf::ResolvePath("websearch", "/scen"),
              ::testing::EndsWith("/flow-sizes/websearch.cdf"));
  EXPECT_EQ(FlowSizeCdf::ResolvePath("cdfs/my.cdf", "/scen"), "/scen/cdfs/my.cdf");
  EXPECT_EQ(FlowSizeCdf::ResolvePath("/abs/my.cdf", "/scen"), "/abs/my.cdf");
  EXPECT_EQ(FlowSizeCdf::ResolvePath("my.cdf", ""), "my.cdf");
}

}  // namespace
}  // namespace dar::sim
