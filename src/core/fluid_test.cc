#include "core/fluid.h"

#include <algorithm>
#include <fstream>
#include <memory>

#include "core/random.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "core/topology_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar {
namespace {

using ::testing::HasSubstr;

const std::string kAbilene = std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json";

TEST(FluidTest, UniformDemand) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  const std::vector<Demand> demand = UniformDemand(topo);
  EXPECT_EQ(demand.size(), 16u * 15u);
  EXPECT_EQ(demand[0].src, 0);
  EXPECT_EQ(demand[0].dst, 1);
  EXPECT_EQ(demand[0].amount, 1.0);
}

// ECMP loads on Abilene match the hop-count ECMP loads published with the file.
TEST(FluidTest, AbileneEcmpMatchesReference) {
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(kAbilene, JsonImportOptions());
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<std::vector<double>> loads =
      ComputeLinkLoads(*topo, ComputeEcmpTables(*topo), UniformDemand(*topo));
  ASSERT_TRUE(loads.ok()) << loads.status();
  const double busiest = *std::max_element(loads->begin(), loads->end());
  ASSERT_GT(busiest, 0);

  std::ifstream in(kAbilene);
  const nlohmann::json doc = nlohmann::json::parse(in);
  const nlohmann::json& edges = doc["edges"];
  ASSERT_EQ(static_cast<int>(edges.size()) * 2, topo->num_links());
  for (size_t i = 0; i < edges.size(); ++i) {
    const NodeId src = topo->FindNode(edges[i]["source"].get<std::string>()).value();
    const NodeId dst = topo->FindNode(edges[i]["target"].get<std::string>()).value();
    const double fwd = (*loads)[topo->FindLink(src, dst)] * 100 / busiest;
    const double bwd = (*loads)[topo->FindLink(dst, src)] * 100 / busiest;
    EXPECT_NEAR(fwd, edges[i]["ecmp_fwd"]["uni"].get<double>(), 0.5) << "edges[" << i << "]";
    EXPECT_NEAR(bwd, edges[i]["ecmp_bwd"]["uni"].get<double>(), 0.5) << "edges[" << i << "]";
  }
}

TEST(FluidTest, EcmpSpreadsLoadOnAFatTree) {
  FatTreeParams params{.k = 4};
  const Topology topo = FatTree(params);
  const std::vector<Demand> demand = UniformDemand(topo);
  absl::StatusOr<std::vector<double>> fixed =
      ComputeLinkLoads(topo, ComputeStaticTables(topo), demand);
  absl::StatusOr<std::vector<double>> ecmp =
      ComputeLinkLoads(topo, ComputeEcmpTables(topo), demand);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_TRUE(ecmp.ok()) << ecmp.status();
  const double max_fixed = *std::max_element(fixed->begin(), fixed->end());
  const double max_ecmp = *std::max_element(ecmp->begin(), ecmp->end());
  EXPECT_LT(max_ecmp, max_fixed);
  // Host links carry 15 units each way under both; every host sends 15 and receives 15.
  EXPECT_DOUBLE_EQ((*ecmp)[topo.node(0).out_links[0]], 15);
  EXPECT_DOUBLE_EQ((*fixed)[topo.node(0).in_links[0]], 15);
  // The fat-tree has full bisection: under ECMP no fabric link carries more than a host link.
  EXPECT_LE(max_ecmp, 15 + 1e-9);
  // Total load is the same: every path is shortest in both.
  double sum_fixed = 0, sum_ecmp = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    sum_fixed += (*fixed)[l];
    sum_ecmp += (*ecmp)[l];
  }
  EXPECT_NEAR(sum_fixed, sum_ecmp, 1e-6);
}

TEST(FluidTest, LoadsConserveHopsOnRandomGraphs) {
  Random rng(7);
  for (int iteration = 0; iteration < 100; ++iteration) {
    // A random connected graph of switches with hosts on some of them; unit metrics.
    Topology topo;
    const int n = 2 + static_cast<int>(rng.Below(10));
    for (int i = 0; i < n; ++i) topo.AddNode(absl::StrCat("s", i), NodeKind::kSwitch);
    for (int i = 1; i < n; ++i) topo.AddDuplexLink(i, static_cast<NodeId>(rng.Below(i)), {});
    for (int i = 0; i < n; ++i) {
      const NodeId a = static_cast<NodeId>(rng.Below(n)), b = static_cast<NodeId>(rng.Below(n));
      if (a != b) topo.AddDuplexLink(a, b, {});
    }
    if (rng.Below(2) == 1) AttachHosts(topo, 1 + static_cast<int>(rng.Below(2)), {});
    const std::vector<Demand> demand = UniformDemand(topo);
    double expected = 0;
    for (const Demand& d : demand) {
      const NodeId target = topo.RouteTarget(d.dst);
      expected += ShortestDistances(topo, target)[d.src] + (target != d.dst ? 1 : 0);
    }
    for (const RoutingTables& tables : {ComputeStaticTables(topo), ComputeEcmpTables(topo)}) {
      absl::StatusOr<std::vector<double>> loads = ComputeLinkLoads(topo, tables, demand);
      ASSERT_TRUE(loads.ok()) << loads.status();
      double total = 0;
      for (double load : *loads) total += load;
      EXPECT_NEAR(total, expected, 1e-6 * expected) << "iteration " << iteration;
    }
  }
}

TEST(FluidTest, MaxUtilization) {
  Topology topo;
  const NodeId a = topo.AddNode("a", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("b", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, LinkParams{.capacity = DataRate::Gbps(10)});
  EXPECT_DOUBLE_EQ(MaxUtilization(topo, {0, 0}), 0);
  EXPECT_DOUBLE_EQ(MaxUtilization(topo, {2.5e9, 5e9}), 0.5);
  absl::StatusOr<std::vector<double>> loads =
      ComputeLinkLoads(topo, ComputeEcmpTables(topo), {{a, b, 4e9}});
  ASSERT_TRUE(loads.ok());
  EXPECT_DOUBLE_EQ(MaxUtilization(topo, *loads), 0.4);
}

// Faults in the tables are errors, not crashes.
class FluidFaultTest : public ::testing::Test {
 protected:
  FluidFaultTest() {
    for (const char* name : {"x", "y", "z"}) topo_.AddNode(name, NodeKind::kSwitch);
    topo_.AddDuplexLink(0, 1, {});
    topo_.AddDuplexLink(1, 2, {});
  }
  absl::Status LoadsWith(NodeId dest, std::vector<std::vector<NextHop>> per_node) {
    RoutingTables tables = ComputeEcmpTables(topo_);
    tables.Set(std::make_shared<const DestinationTable>(dest, per_node));
    return ComputeLinkLoads(topo_, tables, {{0, 2, 1.0}}).status();
  }
  Topology topo_;
};

TEST_F(FluidFaultTest, Loop) {
  const absl::Status s =
      LoadsWith(2, {{{topo_.FindLink(0, 1), 1}}, {{topo_.FindLink(1, 0), 1}}, {}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("forwarding loop through 'x' toward 'z'"));
}

TEST_F(FluidFaultTest, BlackHole) {
  const absl::Status s = LoadsWith(2, {{{topo_.FindLink(0, 1), 1}}, {}, {}});
  EXPECT_THAT(s.message(), HasSubstr("traffic reaches node 'y' with no next hop toward 'z'"));
}

TEST_F(FluidFaultTest, DownLink) {
  topo_.mutable_link(topo_.FindLink(1, 2)).up = false;
  const absl::Status s =
      LoadsWith(2, {{{topo_.FindLink(0, 1), 1}}, {{topo_.FindLink(1, 2), 1}}, {}});
  EXPECT_THAT(s.message(), HasSubstr("node 'y' forwards over a bad or down link"));
}

TEST_F(FluidFaultTest, BadDemandAndMissingTable) {
  absl::StatusOr<std::vector<double>> loads =
      ComputeLinkLoads(topo_, ComputeEcmpTables(topo_), {{0, 7, 1.0}});
  EXPECT_EQ(loads.status().code(), absl::StatusCode::kInvalidArgument);
  loads = ComputeLinkLoads(topo_, ComputeEcmpTables(topo_), {{0, 1, -1.0}});
  EXPECT_EQ(loads.status().code(), absl::StatusCode::kInvalidArgument);
  loads = ComputeLinkLoads(topo_, RoutingTables(), {{0, 1, 1.0}});
  EXPECT_THAT(loads.status().message(), HasSubstr("no routing table toward 'y'"));
}

}  // namespace
}  // namespace dar
