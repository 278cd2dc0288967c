#include "core/validator.h"

#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/random.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

// A random graph of switches with random metrics, failed links and (sometimes) hosts hanging
// off one or two switches. `connected` adds a random spanning tree of up links first.
Topology RandomTopology(Random& rng, bool connected) {
  Topology topo;
  const int n = 2 + static_cast<int>(rng.Below(11));
  for (int i = 0; i < n; ++i) topo.AddNode(absl::StrCat("s", i), NodeKind::kSwitch);
  const int metric_kind = static_cast<int>(rng.Below(3));
  auto random_params = [&] {
    LinkParams p;
    if (metric_kind == 1) p.metric = 1 + static_cast<double>(rng.Below(3));
    if (metric_kind == 2) p.metric = 0.5 + 2.5 * rng.Uniform();
    return p;
  };
  const int tree_links = connected ? n - 1 : 0;
  for (int i = 1; i <= tree_links; ++i) {
    topo.AddDuplexLink(i, static_cast<NodeId>(rng.Below(i)), random_params());
  }
  const double p_edge = rng.Uniform() * 0.5;
  const double p_down = connected ? 0 : rng.Uniform() * 0.4;
  for (NodeId a = 0; a < n; ++a) {
    for (NodeId b = a + 1; b < n; ++b) {
      if (rng.Uniform() >= p_edge) continue;
      const auto [ab, ba] = topo.AddDuplexLink(a, b, random_params());
      if (rng.Uniform() < 0.2) topo.mutable_link(ba).params.metric += 1;  // asymmetric
      if (rng.Uniform() < p_down) topo.mutable_link(ab).up = false;
      if (rng.Uniform() < p_down) topo.mutable_link(ba).up = false;
    }
  }
  if (!connected && n > 2 && rng.Uniform() < 0.3) {
    topo.AddLink(0, n - 1, random_params());  // a one-way link
  }
  const int hosts = rng.Below(2) == 0 ? 0 : static_cast<int>(rng.Below(2 * n));
  for (int h = 0; h < hosts; ++h) {
    const NodeId host = topo.AddNode(absl::StrCat("h", h), NodeKind::kHost);
    const int homes = rng.Below(4) == 0 ? 2 : 1;
    for (int i = 0; i < homes; ++i) {
      const NodeId sw = static_cast<NodeId>(rng.Below(n));
      if (topo.FindLink(host, sw) != kNoLink) continue;
      const auto [up, down] = topo.AddDuplexLink(host, sw, random_params());
      if (rng.Uniform() < p_down) topo.mutable_link(up).up = false;
      if (rng.Uniform() < p_down) topo.mutable_link(down).up = false;
    }
  }
  return topo;
}

TEST(ValidatorPropertyTest, BaselineTablesAlwaysValidate) {
  Random rng(20240601);
  for (int iteration = 0; iteration < 600; ++iteration) {
    const bool connected = iteration % 2 == 0;
    const Topology topo = RandomTopology(rng, connected);
    for (const auto& [name, tables] : {std::pair("static", ComputeStaticTables(topo)),
                                       std::pair("ecmp", ComputeEcmpTables(topo))}) {
      const ValidationReport report = ValidateTables(topo, tables);
      ASSERT_TRUE(report.ok()) << name << " tables, iteration " << iteration << ", "
                               << topo.Summary() << ": " << report.ToStatus();
    }
  }
}

TEST(ValidatorTest, FatTreeTablesValidate) {
  Topology topo = FatTree(FatTreeParams{.k = 8});
  ASSERT_TRUE(ApplyLinkOverrides(topo, {{.a = "e0", .b = "a1", .down = true},
                                        {.a = "a9", .b = "c4", .down = true}})
                  .ok());
  EXPECT_TRUE(ValidateTables(topo, ComputeStaticTables(topo)).ok());
  EXPECT_TRUE(ValidateTables(topo, ComputeEcmpTables(topo)).ok());
}

// Injects faults into ECMP tables of a diamond s -> {a, b} -> t with a host on s and on t.
class FaultTest : public ::testing::Test {
 protected:
  FaultTest() {
    s_ = topo_.AddNode("s", NodeKind::kSwitch);
    a_ = topo_.AddNode("a", NodeKind::kSwitch);
    b_ = topo_.AddNode("b", NodeKind::kSwitch);
    t_ = topo_.AddNode("t", NodeKind::kSwitch);
    hs_ = topo_.AddNode("hs", NodeKind::kHost);
    ht_ = topo_.AddNode("ht", NodeKind::kHost);
    topo_.AddDuplexLink(s_, a_, LinkParams());
    topo_.AddDuplexLink(s_, b_, LinkParams());
    topo_.AddDuplexLink(a_, t_, LinkParams());
    topo_.AddDuplexLink(b_, t_, LinkParams());
    topo_.AddDuplexLink(hs_, s_, LinkParams());
    topo_.AddDuplexLink(ht_, t_, LinkParams());
    tables_ = ComputeEcmpTables(topo_);
    per_node_.resize(topo_.num_nodes());
    for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
      const auto hops = tables_.Lookup(v, t_);
      per_node_[v].assign(hops.begin(), hops.end());
    }
  }

  // Validates with per_node_ installed as the table toward t.
  ValidationReport Validate() {
    tables_.Set(std::make_shared<const DestinationTable>(t_, per_node_));
    return ValidateTables(topo_, tables_);
  }

  std::string Messages(const ValidationReport& r) { return absl::StrJoin(r.messages, "\n"); }

  Topology topo_;
  NodeId s_, a_, b_, t_, hs_, ht_;
  RoutingTables tables_;
  std::vector<std::vector<NextHop>> per_node_;
};

TEST_F(FaultTest, UnchangedTablesAreValid) {
  const ValidationReport r = Validate();
  EXPECT_TRUE(r.ok()) << r.ToStatus();
  EXPECT_TRUE(r.ToStatus().ok());
  EXPECT_EQ(tables_.destinations(), (std::vector<NodeId>{s_, t_}));
}

TEST_F(FaultTest, TwoNodeLoop) {
  per_node_[a_] = {{topo_.FindLink(a_, s_), 1.0}};
  const ValidationReport r = Validate();
  EXPECT_EQ(r.loops, 1);
  EXPECT_EQ(r.dead_links + r.black_holes + r.bad_weights + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("loop toward 't': s -> a -> s"));
  EXPECT_EQ(r.ToStatus().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.ToStatus().message(), HasSubstr("1 loops"));
}

TEST_F(FaultTest, NextHopOverDownLink) {
  topo_.mutable_link(topo_.FindLink(s_, a_)).up = false;
  const ValidationReport r = Validate();
  EXPECT_EQ(r.dead_links, 1);
  EXPECT_EQ(r.loops + r.black_holes + r.bad_weights + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("node 's' toward 't' uses link"));
  EXPECT_THAT(Messages(r), HasSubstr("which is down"));
}

TEST_F(FaultTest, NextHopOverAnotherNodesLinkOrNoLink) {
  per_node_[a_] = {{topo_.FindLink(b_, t_), 1.0}};
  per_node_[b_] = {{12345, 1.0}};
  const ValidationReport r = Validate();
  EXPECT_EQ(r.dead_links, 2);
  EXPECT_THAT(Messages(r), HasSubstr("leaves another node"));
  EXPECT_THAT(Messages(r), HasSubstr("link 12345 which does not exist"));
}

TEST_F(FaultTest, RemovedNextHopIsABlackHole) {
  per_node_[b_].clear();
  ValidationReport r = Validate();
  EXPECT_EQ(r.black_holes, 1);
  EXPECT_EQ(r.loops + r.dead_links + r.bad_weights + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("black hole: node 'b' has no next hop toward 't'"));
  // With every row empty, every switch that can reach the destination is a black hole; the
  // stub hosts (hs, ht) need no rows, they send on their only link.
  for (auto& hops : per_node_) hops.clear();
  r = Validate();
  EXPECT_EQ(r.black_holes, 3);  // s, a, b
}

TEST_F(FaultTest, StubHostWithRowsIsRefused) {
  per_node_[hs_] = {{topo_.FindLink(hs_, s_), 1.0}};
  const ValidationReport r = Validate();
  EXPECT_EQ(r.dead_links, 1);
  EXPECT_THAT(Messages(r), HasSubstr("stub host 'hs'"));
}

TEST_F(FaultTest, TrafficSentIntoADeadEndIsABlackHole) {
  const NodeId x = topo_.AddNode("x", NodeKind::kSwitch);
  const LinkId sx = topo_.AddLink(s_, x, LinkParams());
  tables_ = ComputeEcmpTables(topo_);
  per_node_.emplace_back();
  per_node_[s_] = {{sx, 1.0}};
  const ValidationReport r = Validate();
  EXPECT_EQ(r.black_holes, 1);
  EXPECT_EQ(r.loops + r.dead_links + r.bad_weights + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("node 'x' has no next hop toward 't'"));
}

TEST_F(FaultTest, TransitThroughHost) {
  // b sends to the host hs, which does not forward.
  const LinkId b_hs = topo_.AddLink(b_, hs_, LinkParams());
  per_node_[b_] = {{b_hs, 1.0}};
  per_node_[s_] = {{topo_.FindLink(s_, a_), 1.0}};  // else s -> b -> hs -> s is a loop
  const ValidationReport r = Validate();
  EXPECT_EQ(r.black_holes, 1);
  EXPECT_EQ(r.loops + r.dead_links + r.bad_weights + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("host 'hs' is sent transit traffic toward 't'"));
}

TEST_F(FaultTest, WeightsSummingTo07) {
  per_node_[s_][0].weight = 0.2;
  const ValidationReport r = Validate();
  EXPECT_EQ(r.bad_weights, 1);
  EXPECT_EQ(r.loops + r.dead_links + r.black_holes + r.missing, 0);
  EXPECT_THAT(Messages(r), HasSubstr("bad weights: node 's' toward 't': weights sum to 0.7"));
}

TEST_F(FaultTest, NanNegativeAndInfiniteWeights) {
  per_node_[s_][0].weight = std::numeric_limits<double>::quiet_NaN();
  per_node_[a_][0].weight = std::numeric_limits<double>::infinity();
  per_node_[s_][1].weight = 1.5;
  per_node_[s_].push_back({per_node_[s_][1].link, -0.5});
  ValidationReport r = Validate();
  EXPECT_EQ(r.bad_weights, 2);
  // Negative weights are bad even when the sum is 1.
  per_node_[s_] = {{topo_.FindLink(s_, a_), 1.5}, {topo_.FindLink(s_, b_), -0.5}};
  per_node_[a_][0].weight = 1;
  r = Validate();
  EXPECT_EQ(r.bad_weights, 1);
  EXPECT_THAT(Messages(r), HasSubstr("include a bad weight"));
}

TEST_F(FaultTest, MissingTable) {
  RoutingTables partial(topo_.num_nodes(), topo_.Destinations());
  partial.Set(tables_.SharedTable(t_));
  ValidationReport r = ValidateTables(topo_, partial);
  EXPECT_EQ(r.missing, 1);
  EXPECT_THAT(absl::StrJoin(r.messages, "\n"), HasSubstr("missing: no table toward 's'"));
  r = ValidateTables(topo_, RoutingTables());
  EXPECT_EQ(r.missing, 2);
}

TEST(ValidatorTest, MessagesAreCapped) {
  const Topology big = FatTree(FatTreeParams{.k = 8});
  const ValidationReport r =
      ValidateTables(big, RoutingTables(big.num_nodes(), big.Destinations()));
  EXPECT_EQ(r.missing, 32);
  EXPECT_EQ(r.messages.size(), static_cast<size_t>(ValidationReport::kMaxMessages));
}

}  // namespace
}  // namespace dar
