#include "core/dar_fluid.h"

#include "core/topology_json.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

DarFluidResult Trace(std::vector<double> max_utilization, bool settled) {
  DarFluidResult result;
  result.cycles = static_cast<int>(max_utilization.size());
  result.settled = settled;
  result.max_utilization = std::move(max_utilization);
  return result;
}

TEST(DarLoopReportTest, SettledLoopReportsBestAndLast) {
  const DarLoopReport report = DescribeDarLoop(Trace({0.9, 0.7, 0.75, 0.76}, true));
  EXPECT_TRUE(report.settled);
  EXPECT_FALSE(report.oscillating);
  EXPECT_EQ(report.cycles, 4);
  EXPECT_DOUBLE_EQ(report.best_max_utilization, 0.7);
  EXPECT_EQ(report.best_cycle, 2);
  EXPECT_DOUBLE_EQ(report.last_max_utilization, 0.76);
}

TEST(DarLoopReportTest, PeriodTwoIsAnOscillation) {
  std::vector<double> u = {1.0, 0.8};
  for (int i = 0; i < 60; ++i) u.push_back(i % 2 == 0 ? 0.6 : 0.9);
  const DarLoopReport report = DescribeDarLoop(Trace(u, false));
  EXPECT_FALSE(report.settled);
  EXPECT_TRUE(report.oscillating);
  EXPECT_EQ(report.period, 2);
  EXPECT_DOUBLE_EQ(report.best_max_utilization, 0.6);
  EXPECT_DOUBLE_EQ(report.last_max_utilization, 0.9);
}

TEST(DarLoopReportTest, PeriodThreeAndNoConvergence) {
  std::vector<double> u;
  for (int i = 0; i < 60; ++i) u.push_back(0.5 + 0.1 * (i % 3));
  DarLoopReport report = DescribeDarLoop(Trace(u, false));
  EXPECT_TRUE(report.oscillating);
  EXPECT_EQ(report.period, 3);

  u.clear();
  for (int i = 0; i < 60; ++i) u.push_back(0.5 + 0.01 * i);  // drifting
  report = DescribeDarLoop(Trace(u, false));
  EXPECT_TRUE(report.oscillating);
  EXPECT_EQ(report.period, 0);

  // Out of cycles, but the maximum stopped moving: not an oscillation.
  report = DescribeDarLoop(Trace(std::vector<double>(60, 0.7), false));
  EXPECT_FALSE(report.settled);
  EXPECT_FALSE(report.oscillating);
}

TEST(DarFluidTest, AbileneSettlesAndRecordsEveryCycle) {
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(
      std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json", JsonImportOptions());
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<DarFluidResult> result = SettleDarTables(*topo, UniformDemand(*topo), 0.5e9);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->settled);
  EXPECT_EQ(static_cast<int>(result->max_utilization.size()), result->cycles);
  const DarLoopReport report = DescribeDarLoop(*result);
  EXPECT_LE(report.best_max_utilization, report.last_max_utilization);
  EXPECT_GT(report.last_max_utilization, 0);
}

}  // namespace
}  // namespace dar
