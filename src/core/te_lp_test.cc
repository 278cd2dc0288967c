#include "core/te_lp.h"

#include <algorithm>
#include <numeric>

#include "core/demand.h"
#include "core/fluid_test_util.h"
#include "core/routing.h"
#include "core/topology_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

using fluid_test::EcmpMaxUtilization;
using fluid_test::kUnit;
using fluid_test::Params;

// Two disjoint two-hop paths A - M1 - B (1 Gb/s) and A - M2 - B (3 Gb/s), 2 units A -> B: the
// optimum puts 0.5 on the first and 1.5 on the second, utilisation 0.5 on both. ECMP splits
// evenly: utilisation 1 on the first.
TEST(TeLpTest, TwoParallelPaths) {
  const Topology topo = fluid_test::TwoPaths(1, 3);
  const NodeId a = 0, m1 = 1, m2 = 2, b = 3;
  const std::vector<Demand> demand = {{a, b, 2.0}};
  for (bool delay_stage : {false, true}) {
    absl::StatusOr<TeLpResult> lp =
        SolveMinMaxUtilization(topo, demand, kUnit, TeLpOptions{.minimise_delay = delay_stage});
    ASSERT_TRUE(lp.ok()) << lp.status();
    EXPECT_NEAR(lp->lambda, 0.5, 1e-9);
    EXPECT_NEAR(lp->max_utilization, 0.5, 1e-4);
    EXPECT_NEAR(lp->loads[topo.FindLink(a, m1)], 0.5, 1e-4);
    EXPECT_NEAR(lp->loads[topo.FindLink(m1, b)], 0.5, 1e-4);
    EXPECT_NEAR(lp->loads[topo.FindLink(a, m2)], 1.5, 1e-4);
    EXPECT_NEAR(lp->loads[topo.FindLink(m2, b)], 1.5, 1e-4);
    EXPECT_NEAR(lp->loads[topo.FindLink(b, m2)], 0, 1e-9);
    ASSERT_EQ(lp->flows.size(), 1u);
    EXPECT_EQ(lp->flows[0].source, a);
  }
  EXPECT_DOUBLE_EQ(EcmpMaxUtilization(topo, demand), 1.0);
}

// A triangle of 1 Gb/s links, 3 units A -> B: 1.5 direct, 1.5 via C (the two-hop path uses
// two links, each at 1.5). ECMP sends all 3 direct.
TEST(TeLpTest, TriangleSplitsOverTheDetour) {
  const Topology topo = fluid_test::Triangle();
  const NodeId a = 0, b = 1, c = 2;
  const std::vector<Demand> demand = {{a, b, 3.0}};
  absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(topo, demand, kUnit);
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_NEAR(lp->lambda, 1.5, 1e-9);
  EXPECT_NEAR(lp->loads[topo.FindLink(a, b)], 1.5, 1e-3);
  EXPECT_NEAR(lp->loads[topo.FindLink(a, c)], 1.5, 1e-3);
  EXPECT_NEAR(lp->loads[topo.FindLink(c, b)], 1.5, 1e-3);
  EXPECT_DOUBLE_EQ(EcmpMaxUtilization(topo, demand), 3.0);

  // Path stretch of the optimum: half at 1 ms, half at 2 ms over a shortest 1 ms (a little
  // less: the delay stage may go to (1 + epsilon) * 1.5 on the direct link).
  absl::StatusOr<std::vector<PairRoute>> routes =
      PairRoutesFromSourceFlows(topo, demand, lp->flows);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_NEAR(ComputeStretch(topo, *routes).total, 1.5, 1e-3);

  // Uniform demand on the triangle: every pair direct, utilisation 1 (any detour uses two
  // links for one unit, and the six links already carry six units).
  lp = SolveMinMaxUtilization(topo, UniformDemand(topo), kUnit);
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_NEAR(lp->lambda, 1.0, 1e-9);
}

// A ring of five 1 Gb/s links, 3 units 0 -> 2: 1.5 over the two-hop side, 1.5 over the
// three-hop side. ECMP takes only the short side.
TEST(TeLpTest, RingUsesBothSides) {
  Topology topo;
  for (int i = 0; i < 5; ++i) topo.AddNode(std::to_string(i), NodeKind::kSwitch);
  for (int i = 0; i < 5; ++i) topo.AddDuplexLink(i, (i + 1) % 5, Params(1));
  const std::vector<Demand> demand = {{0, 2, 3.0}};
  absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(topo, demand, kUnit);
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_NEAR(lp->lambda, 1.5, 1e-9);
  EXPECT_NEAR(lp->loads[topo.FindLink(0, 1)], 1.5, 1e-3);
  EXPECT_NEAR(lp->loads[topo.FindLink(0, 4)], 1.5, 1e-3);
  EXPECT_NEAR(lp->loads[topo.FindLink(4, 3)], 1.5, 1e-3);
  EXPECT_DOUBLE_EQ(EcmpMaxUtilization(topo, demand), 3.0);
}

// lambda is set by a single link elsewhere (D -> A, 2 units on 1 Gb/s); A -> B could go any
// way at that utilisation. The delay stage sends it over the 1 ms direct link, not the
// 10 ms + 10 ms detour.
TEST(TeLpTest, DelayStagePicksTheFastestAmongOptimalRoutings) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  const NodeId c = topo.AddNode("C", NodeKind::kSwitch);
  const NodeId d = topo.AddNode("D", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, Params(10, 1));
  topo.AddDuplexLink(a, c, Params(10, 10));
  topo.AddDuplexLink(c, b, Params(10, 10));
  topo.AddDuplexLink(d, a, Params(1, 1));
  const std::vector<Demand> demand = {{d, a, 2.0}, {a, b, 1.0}};
  absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(topo, demand, kUnit);
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_NEAR(lp->lambda, 2.0, 1e-9);
  EXPECT_NEAR(lp->loads[topo.FindLink(a, b)], 1.0, 1e-9);
  EXPECT_NEAR(lp->loads[topo.FindLink(a, c)], 0.0, 1e-9);
  absl::StatusOr<std::vector<PairRoute>> routes =
      PairRoutesFromSourceFlows(topo, demand, lp->flows);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_NEAR(ComputeStretch(topo, *routes).total, 1.0, 1e-9);
}

TEST(TeLpTest, UnreachableDestinationIsAnErrorNotANumber) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  const NodeId c = topo.AddNode("C", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, Params(1));
  absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(topo, {{a, b, 1.0}, {a, c, 1.0}}, kUnit);
  ASSERT_FALSE(lp.ok());
  EXPECT_EQ(lp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lp.status().message(), HasSubstr("infeasible"));
  EXPECT_THAT(lp.status().message(), HasSubstr("'A' cannot reach 'C'"));

  // A down link is no path either.
  topo.AddDuplexLink(b, c, Params(1));
  topo.mutable_link(topo.FindLink(b, c)).up = false;
  lp = SolveMinMaxUtilization(topo, {{a, c, 1.0}}, kUnit);
  ASSERT_FALSE(lp.ok());
  EXPECT_THAT(lp.status().message(), HasSubstr("'A' cannot reach 'C'"));
}

TEST(TeLpTest, SolverStoppedEarlyIsAnError) {
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(
      std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/Iij.json", JsonImportOptions());
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<TeLpResult> lp =
      SolveMinMaxUtilization(*topo, UniformDemand(*topo), kUnit, TeLpOptions{.iteration_limit = 1});
  ASSERT_FALSE(lp.ok());
  EXPECT_EQ(lp.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(lp.status().message(), HasSubstr("iteration limit"));
}

TEST(TeLpTest, NoDemandNeedsNoSolver) {
  Topology topo;
  topo.AddNode("A", NodeKind::kSwitch);
  absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(topo, {}, kUnit);
  ASSERT_TRUE(lp.ok());
  EXPECT_EQ(lp->lambda, 0);
  EXPECT_TRUE(lp->flows.empty());
}

// On real WANs: never above ECMP, strictly below it on Abilene; the flows carry every demand
// and add up to the loads.
TEST(TeLpTest, WanOptimumBeatsEcmpAndIsConsistent) {
  for (const char* name : {"Abilene", "Sprint", "Internode"}) {
    absl::StatusOr<Topology> topo =
        LoadNodeLinkJson(std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/" + name + ".json",
                         JsonImportOptions());
    ASSERT_TRUE(topo.ok()) << topo.status();
    for (bool gravity : {false, true}) {
      const std::vector<Demand> demand =
          gravity ? GravityDemand(*topo).value() : UniformDemand(*topo);
      absl::StatusOr<TeLpResult> lp = SolveMinMaxUtilization(*topo, demand, kUnit);
      ASSERT_TRUE(lp.ok()) << lp.status();
      const double ecmp = EcmpMaxUtilization(*topo, demand);
      EXPECT_LE(lp->max_utilization, ecmp * (1 + 1e-6)) << name;
      EXPECT_LE(lp->max_utilization, lp->lambda * (1 + 1e-4) + 1e-9) << name;
      if (std::string(name) == "Abilene") {
        EXPECT_LT(lp->lambda, ecmp * 0.95) << name;
      }
      absl::StatusOr<std::vector<PairRoute>> routes =
          PairRoutesFromSourceFlows(*topo, demand, lp->flows);
      ASSERT_TRUE(routes.ok()) << routes.status();
      std::vector<double> sum(topo->num_links(), 0.0);
      for (const PairRoute& r : *routes) {
        double leaving = 0;  // shares on the source's out-links add up to 1
        for (const auto& [l, share] : r.links) {
          sum[l] += r.demand * share;
          if (topo->link(l).src == r.src) leaving += share;
        }
        EXPECT_NEAR(leaving, 1.0, 1e-6) << name << " " << r.src << "->" << r.dst;
      }
      for (LinkId l = 0; l < topo->num_links(); ++l) {
        EXPECT_NEAR(sum[l], lp->loads[l], 1e-6 * (1 + lp->loads[l])) << name << " link " << l;
      }
      EXPECT_GE(ComputeStretch(*topo, *routes).total, 1.0 - 1e-9);
    }
  }
}

}  // namespace
}  // namespace dar
