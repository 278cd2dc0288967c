#include "core/routing.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/registry.h"
#include "core/topology_gen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

// A diamond: s -> {a, b} -> t, plus a direct s - t link of metric 3.
struct RoutingDiamond {
  RoutingDiamond() {
    s = topo.AddNode("s", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    t = topo.AddNode("t", NodeKind::kSwitch);
    sb = topo.AddDuplexLink(s, b, LinkParams()).first;  // added first: lower link id than s->a
    sa = topo.AddDuplexLink(s, a, LinkParams()).first;
    topo.AddDuplexLink(a, t, LinkParams());
    topo.AddDuplexLink(b, t, LinkParams());
    st = topo.AddDuplexLink(s, t, LinkParams{.metric = 3}).first;
  }
  Topology topo;
  NodeId s, a, b, t;
  LinkId sa, sb, st;
};

TEST(RoutingTest, ShortestDistancesUseMetricsAndUpLinks) {
  RoutingDiamond d;
  std::vector<double> dist = ShortestDistances(d.topo, d.t);
  EXPECT_EQ(dist, (std::vector<double>{2, 1, 1, 0}));
  d.topo.mutable_link(d.topo.FindLink(d.a, d.t)).up = false;
  d.topo.mutable_link(d.topo.FindLink(d.b, d.t)).up = false;
  dist = ShortestDistances(d.topo, d.t);
  EXPECT_EQ(dist[d.s], 3);
  EXPECT_EQ(dist[d.a], 4);  // a -> s -> t
  d.topo.mutable_link(d.st).up = false;
  dist = ShortestDistances(d.topo, d.t);
  EXPECT_TRUE(std::isinf(dist[d.s]));
}

TEST(RoutingTest, ReachesDestinationIsWhereShortestDistancesAreFinite) {
  RoutingDiamond d;
  // A host hanging off a and b: it reaches t, but nothing reaches t through it.
  const NodeId h = d.topo.AddNode("h", NodeKind::kHost);
  d.topo.AddDuplexLink(h, d.a, LinkParams());
  d.topo.AddDuplexLink(h, d.b, LinkParams());
  const auto agrees = [&](NodeId dest) {
    const std::vector<double> dist = ShortestDistances(d.topo, dest);
    const std::vector<bool> reaches = ReachesDestination(d.topo, dest);
    for (NodeId v = 0; v < d.topo.num_nodes(); ++v) {
      if (reaches[v] != std::isfinite(dist[v])) return false;
    }
    return true;
  };
  EXPECT_TRUE(ReachesDestination(d.topo, d.t)[h]);
  // Cut a off from everything but h: h must not carry it to b.
  d.topo.mutable_link(d.topo.FindLink(d.a, d.t)).up = false;
  d.topo.mutable_link(d.topo.FindLink(d.a, d.s)).up = false;
  EXPECT_FALSE(ReachesDestination(d.topo, d.t)[d.a]);
  for (NodeId dest = 0; dest < d.topo.num_nodes(); ++dest) EXPECT_TRUE(agrees(dest)) << dest;
  d.topo.mutable_link(d.st).up = false;
  d.topo.mutable_link(d.topo.FindLink(d.b, d.t)).up = false;
  EXPECT_FALSE(ReachesDestination(d.topo, d.t)[d.s]);
  for (NodeId dest = 0; dest < d.topo.num_nodes(); ++dest) EXPECT_TRUE(agrees(dest)) << dest;
}

TEST(RoutingTest, EcmpSplitsEquallyAndStaticPicksOnePerDestination) {
  RoutingDiamond d;
  const RoutingTables ecmp = ComputeEcmpTables(d.topo);
  ASSERT_EQ(ecmp.destinations(), (std::vector<NodeId>{0, 1, 2, 3}));
  auto hops = ecmp.Lookup(d.s, d.t);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(hops[0].link, d.sb);  // link-id order
  EXPECT_EQ(hops[1].link, d.sa);
  EXPECT_DOUBLE_EQ(hops[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(hops[1].weight, 0.5);
  EXPECT_TRUE(ecmp.Lookup(d.t, d.t).empty());

  const RoutingTables fixed = ComputeStaticTables(d.topo);
  hops = fixed.Lookup(d.s, d.t);
  ASSERT_EQ(hops.size(), 1u);
  // t is destination #3; candidates in node-id order are (a, b), so it takes 3 mod 2 = b.
  EXPECT_EQ(hops[0].link, d.sb);
  EXPECT_DOUBLE_EQ(hops[0].weight, 1.0);
  // Destination #2 (b) is a neighbour of s: one shortest path only.
  EXPECT_EQ(fixed.Lookup(d.s, d.b)[0].link, d.sb);
}

TEST(RoutingTest, StaticSpreadsDestinationsOverEqualPaths) {
  FatTreeParams p;
  p.k = 4;
  const Topology topo = FatTree(p);
  const RoutingTables fixed = ComputeStaticTables(topo);
  const NodeId e0 = *topo.FindNode("e0");
  std::set<LinkId> uplinks;
  for (NodeId d : topo.Destinations()) {
    if (d == e0) continue;
    auto hops = fixed.Lookup(e0, d);
    ASSERT_EQ(hops.size(), 1u);
    uplinks.insert(hops[0].link);
  }
  EXPECT_EQ(uplinks.size(), 2u);  // both aggregation switches carry some destinations
}

TEST(RoutingTest, StaticBreaksParallelLinkTiesByLinkIdPerDestination) {
  Topology topo;
  const NodeId x = topo.AddNode("x", NodeKind::kSwitch);
  const NodeId y = topo.AddNode("y", NodeKind::kSwitch);
  topo.AddLink(x, y, LinkParams());
  const LinkId second = topo.AddLink(x, y, LinkParams());
  topo.AddLink(y, x, LinkParams());
  EXPECT_EQ(ComputeStaticTables(topo).Lookup(x, y)[0].link, second);  // y is destination #1
  EXPECT_EQ(ComputeEcmpTables(topo).Lookup(x, y).size(), 2u);
}

TEST(RoutingTest, MetricsAndFailuresChangeThePath) {
  RoutingDiamond d;
  d.topo.mutable_link(d.topo.FindLink(d.a, d.t)).params.metric = 2.5;
  RoutingTables tables = ComputeEcmpTables(d.topo);
  auto hops = tables.Lookup(d.s, d.t);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_EQ(hops[0].link, d.sb);
  d.topo.mutable_link(d.topo.FindLink(d.b, d.t)).up = false;
  tables = ComputeEcmpTables(d.topo);
  hops = tables.Lookup(d.s, d.t);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_EQ(hops[0].link, d.st);  // metric 3 beats 1 + 2.5
}

TEST(RoutingTest, PathsNeverTransitHosts) {
  // x - h - y where h is a host, plus a long switch path x - m1 - m2 - m3 - y.
  Topology topo;
  const NodeId x = topo.AddNode("x", NodeKind::kSwitch);
  const NodeId y = topo.AddNode("y", NodeKind::kSwitch);
  const NodeId h = topo.AddNode("h", NodeKind::kHost);
  const NodeId g = topo.AddNode("g", NodeKind::kHost);
  topo.AddDuplexLink(h, x, LinkParams());
  topo.AddDuplexLink(h, y, LinkParams());
  topo.AddDuplexLink(g, y, LinkParams());
  NodeId prev = x;
  for (int i = 1; i <= 3; ++i) {
    const NodeId m = topo.AddNode(absl::StrCat("m", i), NodeKind::kSwitch);
    topo.AddDuplexLink(prev, m, LinkParams());
    prev = m;
  }
  topo.AddDuplexLink(prev, y, LinkParams());
  // h is multi-homed, so it is its own destination; g hangs off y.
  ASSERT_EQ(topo.Destinations(), (std::vector<NodeId>{y, h}));
  const std::vector<double> dist = ShortestDistances(topo, y);
  EXPECT_EQ(dist[x], 4);  // not 2 through h
  EXPECT_EQ(dist[h], 1);
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  ASSERT_EQ(ecmp.Lookup(x, y).size(), 1u);
  EXPECT_EQ(topo.link(ecmp.Lookup(x, y)[0].link).dst, topo.FindNode("m1").value());
  // A stub host (g) has no rows: it sends on its only link. A multi-homed host gets rows.
  EXPECT_TRUE(ecmp.Lookup(g, h).empty());
  ASSERT_EQ(ecmp.Lookup(h, y).size(), 1u);
  EXPECT_EQ(ecmp.Lookup(h, y)[0].link, topo.FindLink(h, y));
  // Toward the host h, x goes straight to it.
  EXPECT_EQ(ecmp.Lookup(x, h)[0].link, topo.FindLink(x, h));
}

TEST(RoutingTest, FatTreeEcmpFansOut) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  const NodeId e0 = topo.FindNode("e0").value();
  const NodeId e7 = topo.FindNode("e7").value();  // another pod
  const NodeId h0 = topo.FindNode("h0").value();
  EXPECT_EQ(ecmp.Lookup(e0, e7).size(), 2u);  // up to both aggregation switches
  EXPECT_EQ(ecmp.Lookup(topo.FindNode("a0").value(), e7).size(), 2u);  // both its cores
  EXPECT_TRUE(ecmp.Lookup(h0, e7).empty());  // a stub: its uplink is its route
  EXPECT_EQ(ComputeStaticTables(topo).Lookup(e0, e7).size(), 1u);
}

// WCMP weighs each ECMP next hop by the capacity behind it: the narrowest link of every
// downstream stage counts, so a degraded link two hops away shifts traffic at the first hop.
TEST(RoutingTest, WcmpWeighsNextHopsByTheCapacityTheyLeadTo) {
  RoutingDiamond d;
  const auto set_capacity = [&](NodeId x, NodeId y, double gbps) {
    d.topo.mutable_link(d.topo.FindLink(x, y)).params.capacity = DataRate::Gbps(gbps);
  };
  set_capacity(d.a, d.t, 2.5);  // s -> a -> t is four times narrower than s -> b -> t
  const RoutingTables wcmp = ComputeWcmpTables(d.topo);
  auto hops = wcmp.Lookup(d.s, d.t);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(hops[0].link, d.sb);  // the same next hops as ECMP, in the same order
  EXPECT_EQ(hops[1].link, d.sa);
  EXPECT_DOUBLE_EQ(hops[0].weight, 0.8);
  EXPECT_DOUBLE_EQ(hops[1].weight, 0.2);
  // The first link's own capacity bounds what lies behind it.
  set_capacity(d.s, d.b, 5);
  const RoutingTables narrower = ComputeWcmpTables(d.topo);
  hops = narrower.Lookup(d.s, d.t);
  EXPECT_DOUBLE_EQ(hops[0].weight, 5 / 7.5);
  // Equal capacities: ECMP's weights.
  RoutingDiamond even;
  const RoutingTables equal = ComputeWcmpTables(even.topo);
  EXPECT_DOUBLE_EQ(equal.Lookup(even.s, even.t)[0].weight, 0.5);

  // In a fat-tree, a degraded aggregation-core link moves the aggregation switch's traffic to
  // its other core; the edge below is bounded by its own uplinks and still splits evenly.
  Topology topo = FatTree(FatTreeParams{.k = 4});
  const NodeId a0 = topo.FindNode("a0").value();
  const NodeId e0 = topo.FindNode("e0").value();
  const NodeId e7 = topo.FindNode("e7").value();
  LinkId degraded = kNoLink;
  for (LinkId l : topo.node(a0).out_links) {
    if (topo.node(topo.link(l).dst).name[0] == 'c') degraded = l;  // a core above a0
  }
  ASSERT_NE(degraded, kNoLink);
  topo.mutable_link(degraded).params.capacity = topo.link(degraded).params.capacity.Scaled(0.25);
  const RoutingTables fat = ComputeWcmpTables(topo);
  for (const NextHop& h : fat.Lookup(a0, e7)) {
    EXPECT_DOUBLE_EQ(h.weight, h.link == degraded ? 0.2 : 0.8);
  }
  for (const NextHop& h : fat.Lookup(e0, e7)) EXPECT_DOUBLE_EQ(h.weight, 0.5);
}

TEST(RoutingTest, PoliciesAreRegistered) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  for (const char* name : {"static", "ecmp", "wcmp"}) {
    const TablePolicy* policy = Registry<TablePolicy>::Find(name);
    ASSERT_NE(policy, nullptr) << name;
    absl::StatusOr<RoutingTables> tables = (*policy)(topo);
    ASSERT_TRUE(tables.ok());
    EXPECT_EQ(tables->destinations(), topo.Destinations());
  }
  EXPECT_EQ(Registry<TablePolicy>::Find("ospf"), nullptr);
}

// The one rule for a row's weights (the route computer, the validator and the agent's store).
TEST(RowWeightsTest, FiniteAndPositiveSummingToOneWithinTheTolerance) {
  const auto judge = [](std::initializer_list<double> ws) {
    RowWeights w;
    for (double x : ws) w.Add(x);
    return w;
  };
  EXPECT_TRUE(judge({0.5, 0.5}).ok());
  EXPECT_TRUE(judge({1.0 + 0.9 * kWeightSumTolerance}).ok());
  EXPECT_FALSE(judge({1.0 + 2 * kWeightSumTolerance}).ok());
  EXPECT_FALSE(judge({}).ok());  // nothing to judge
  const RowWeights bad = judge({0.6, -0.1, 0.5});
  EXPECT_EQ(bad.first_bad(), 1);
  EXPECT_TRUE(bad.sums_to_one());
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(judge({0.5, std::nan(""), 0.5}).first_bad(), 1);
  EXPECT_EQ(judge({0.0, 1.0}).first_bad(), 0);
  EXPECT_FALSE(judge({0.25, 0.25}).sums_to_one());
}

}  // namespace
}  // namespace dar
