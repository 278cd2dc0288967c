#include "core/te_metrics.h"

#include <map>

#include "core/demand.h"
#include "core/fluid_test_util.h"
#include "core/routing.h"
#include "core/topology_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

using fluid_test::kUnit;
using fluid_test::Params;

// A and B joined by two disjoint two-hop paths, through M1 (capacity `c1`) and M2 (`c2`).
Topology TwoPaths(double c1, double c2, int delay1_ms = 1, int delay2_ms = 1) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId m1 = topo.AddNode("M1", NodeKind::kSwitch);
  const NodeId m2 = topo.AddNode("M2", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  topo.AddDuplexLink(a, m1, Params(c1, delay1_ms));
  topo.AddDuplexLink(m1, b, Params(c1, delay1_ms));
  topo.AddDuplexLink(a, m2, Params(c2, delay2_ms));
  topo.AddDuplexLink(m2, b, Params(c2, delay2_ms));
  return topo;
}

// A - B - C in a line, every link 1 Gb/s and 1 ms.
Topology Line3() {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  const NodeId c = topo.AddNode("C", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, Params(1, 1));
  topo.AddDuplexLink(b, c, Params(1, 1));
  return topo;
}

TEST(PairRoutesTest, EcmpSplitsAndMatchesTheLinkLoads) {
  const Topology topo = TwoPaths(1, 3);
  const std::vector<Demand> demand = UniformDemand(topo);
  const RoutingTables tables = ComputeEcmpTables(topo);
  absl::StatusOr<std::vector<PairRoute>> routes = ComputePairRoutes(topo, tables, demand);
  ASSERT_TRUE(routes.ok()) << routes.status();
  ASSERT_EQ(routes->size(), demand.size());
  // A (0) -> B (3): half over each path, two hops each.
  const PairRoute& ab = (*routes)[2];
  ASSERT_EQ(ab.src, 0);
  ASSERT_EQ(ab.dst, 3);
  ASSERT_EQ(ab.links.size(), 4u);
  for (const auto& [l, share] : ab.links) EXPECT_DOUBLE_EQ(share, 0.5);
  absl::StatusOr<std::vector<double>> loads = ComputeLinkLoads(topo, tables, demand);
  ASSERT_TRUE(loads.ok());
  std::vector<double> sum(topo.num_links(), 0.0);
  for (const PairRoute& r : *routes) {
    for (const auto& [l, share] : r.links) sum[l] += r.demand * share;
  }
  for (LinkId l = 0; l < topo.num_links(); ++l) EXPECT_NEAR(sum[l], (*loads)[l], 1e-12) << l;
}

TEST(PairRoutesTest, HostsAddTheirAccessLinks) {
  Topology topo = Line3();
  const NodeId h1 = topo.AddNode("h1", NodeKind::kHost);
  const NodeId h2 = topo.AddNode("h2", NodeKind::kHost);
  const auto [up1, down1] = topo.AddDuplexLink(h1, 0, Params(10, 0));
  const auto [up2, down2] = topo.AddDuplexLink(h2, 2, Params(10, 0));
  absl::StatusOr<std::vector<PairRoute>> routes =
      ComputePairRoutes(topo, ComputeEcmpTables(topo), {{h1, h2, 2.0}});
  ASSERT_TRUE(routes.ok()) << routes.status();
  ASSERT_EQ(routes->size(), 1u);
  std::vector<LinkId> links;
  for (const auto& [l, share] : (*routes)[0].links) {
    links.push_back(l);
    EXPECT_EQ(share, 1.0);
  }
  EXPECT_EQ(links, (std::vector<LinkId>{topo.FindLink(0, 1), topo.FindLink(1, 2), up1, down2}));
}

// The source-aggregated flow of A: 2 units over A->B, 1 of them on over B->C.
TEST(PairRoutesTest, ProportionalDecompositionOfASourceFlow) {
  const Topology topo = Line3();
  SourceFlow flow{.source = 0, .link_flow = std::vector<double>(topo.num_links(), 0.0)};
  flow.link_flow[topo.FindLink(0, 1)] = 2;
  flow.link_flow[topo.FindLink(1, 2)] = 1;
  absl::StatusOr<std::vector<PairRoute>> routes =
      PairRoutesFromSourceFlows(topo, {{0, 1, 1.0}, {0, 2, 1.0}}, {flow});
  ASSERT_TRUE(routes.ok()) << routes.status();
  ASSERT_EQ(routes->size(), 2u);
  using Links = std::vector<std::pair<LinkId, double>>;
  EXPECT_EQ((*routes)[0].links, (Links{{topo.FindLink(0, 1), 1.0}}));
  EXPECT_EQ((*routes)[1].links, (Links{{topo.FindLink(0, 1), 1.0}, {topo.FindLink(1, 2), 1.0}}));
}

TEST(PairRoutesTest, RefusesACycleAndAMissingSource) {
  const Topology topo = Line3();
  SourceFlow flow{.source = 0, .link_flow = std::vector<double>(topo.num_links(), 0.0)};
  flow.link_flow[topo.FindLink(0, 1)] = 1;
  flow.link_flow[topo.FindLink(1, 2)] = 1;
  flow.link_flow[topo.FindLink(2, 1)] = 1;
  absl::StatusOr<std::vector<PairRoute>> routes =
      PairRoutesFromSourceFlows(topo, {{0, 2, 1.0}}, {flow});
  ASSERT_FALSE(routes.ok());
  EXPECT_THAT(routes.status().message(), HasSubstr("cycle"));
  routes = PairRoutesFromSourceFlows(topo, {{1, 2, 1.0}}, {flow});
  ASSERT_FALSE(routes.ok());
  EXPECT_THAT(routes.status().message(), HasSubstr("no flow from source 'B'"));
}

TEST(StretchTest, MeanDelayOverTheShortest) {
  // Path 1: 1 ms a hop; path 2: 3 ms a hop. Half the traffic on each: mean 4 ms over 2 ms.
  const Topology topo = TwoPaths(1, 1, 1, 3);
  const RoutingTables ecmp = ComputeEcmpTables(topo);  // hop count: both paths equal
  absl::StatusOr<std::vector<PairRoute>> routes = ComputePairRoutes(topo, ecmp, {{0, 3, 2.0}});
  ASSERT_TRUE(routes.ok());
  StretchReport stretch = ComputeStretch(topo, *routes);
  ASSERT_EQ(stretch.stretch.size(), 1u);
  EXPECT_EQ(stretch.path_delay[0], Milliseconds(4));
  EXPECT_EQ(stretch.shortest_delay[0], Milliseconds(2));
  EXPECT_DOUBLE_EQ(stretch.stretch[0], 2.0);
  EXPECT_DOUBLE_EQ(stretch.total, 2.0);

  // Weighted by demand: A -> M1 has stretch 1 (one hop of 1 ms, shortest).
  routes = ComputePairRoutes(topo, ecmp, {{0, 3, 2.0}, {0, 1, 6.0}});
  ASSERT_TRUE(routes.ok());
  stretch = ComputeStretch(topo, *routes);
  EXPECT_DOUBLE_EQ(stretch.stretch[1], 1.0);
  EXPECT_DOUBLE_EQ(stretch.total, (2.0 * 2 + 6.0 * 1) / 8);
}

TEST(StretchTest, CoLocatedPairsHaveNoStretch) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, Params(1, 0));
  absl::StatusOr<std::vector<PairRoute>> routes =
      ComputePairRoutes(topo, ComputeEcmpTables(topo), UniformDemand(topo));
  ASSERT_TRUE(routes.ok());
  const StretchReport stretch = ComputeStretch(topo, *routes);
  EXPECT_EQ(stretch.stretch, (std::vector<double>{0, 0}));
  EXPECT_EQ(stretch.total, 1.0);
}

TEST(AdmissionTest, EverythingFitsOrOneBottleneckAdmitsOneOverItsUtilisation) {
  const Topology topo = TwoPaths(1, 3);
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  // 2 units: ECMP puts 1 on the 1 Gb/s path: utilisation 1, everything admitted.
  absl::StatusOr<std::vector<PairRoute>> routes = ComputePairRoutes(topo, ecmp, {{0, 3, 2.0}});
  ASSERT_TRUE(routes.ok());
  AdmissionReport admission = MaxMinAdmission(topo, *routes, kUnit);
  EXPECT_DOUBLE_EQ(admission.admitted_fraction, 1.0);
  EXPECT_DOUBLE_EQ(admission.min_pair_fraction, 1.0);
  // 4 units: utilisation 2 on the slow path; the pair's fixed split admits half.
  routes = ComputePairRoutes(topo, ecmp, {{0, 3, 4.0}});
  ASSERT_TRUE(routes.ok());
  admission = MaxMinAdmission(topo, *routes, kUnit);
  EXPECT_DOUBLE_EQ(admission.admitted_fraction, 0.5);
  EXPECT_DOUBLE_EQ(admission.min_pair_fraction, 0.5);
}

// Line A - B - C at 1 Gb/s: A -> C 2 units, B -> C 1 unit, A -> B 0.5 units. B -> C fills
// first, at 1/3 of every demand; then A -> B grows alone until A -> B's link is full:
// 2/3 + 0.5 f = 1, f = 2/3.
TEST(AdmissionTest, ProgressiveFillingOnALine) {
  const Topology topo = Line3();
  absl::StatusOr<std::vector<PairRoute>> routes =
      ComputePairRoutes(topo, ComputeEcmpTables(topo), {{0, 2, 2.0}, {1, 2, 1.0}, {0, 1, 0.5}});
  ASSERT_TRUE(routes.ok());
  const AdmissionReport admission = MaxMinAdmission(topo, *routes, kUnit);
  ASSERT_EQ(admission.pair_fraction.size(), 3u);
  EXPECT_NEAR(admission.pair_fraction[0], 1.0 / 3, 1e-12);
  EXPECT_NEAR(admission.pair_fraction[1], 1.0 / 3, 1e-12);
  EXPECT_NEAR(admission.pair_fraction[2], 2.0 / 3, 1e-12);
  EXPECT_NEAR(admission.min_pair_fraction, 1.0 / 3, 1e-12);
  EXPECT_NEAR(admission.admitted_fraction, (2.0 / 3 + 1.0 / 3 + 0.5 * 2 / 3) / 3.5, 1e-12);
}

// Regression: a link whose routes were all frozen kept a rounding residue of rate and was
// chosen as the bottleneck forever (ECMP on Abilene under gravity looped).
TEST(AdmissionTest, TerminatesOnAWanWithManyBottlenecks) {
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(
      std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/Abilene.json", JsonImportOptions());
  ASSERT_TRUE(topo.ok()) << topo.status();
  const std::vector<Demand> demand = GravityDemand(*topo).value();
  const RoutingTables ecmp = ComputeEcmpTables(*topo);
  std::vector<double> loads = ComputeLinkLoads(*topo, ecmp, demand).value();
  for (double& l : loads) l *= kUnit;
  const double util = MaxUtilization(*topo, loads);
  ASSERT_GT(util, 1);
  const AdmissionReport admission =
      MaxMinAdmission(*topo, ComputePairRoutes(*topo, ecmp, demand).value(), kUnit);
  EXPECT_NEAR(admission.min_pair_fraction, 1 / util, 1e-9);
  EXPECT_GT(admission.admitted_fraction, 1 / util);
  EXPECT_LT(admission.admitted_fraction, 1);
}

}  // namespace
}  // namespace dar
