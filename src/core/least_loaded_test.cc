#include "core/least_loaded.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "core/units.h"
#include "core/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

LeastLoadedConfig LeastLoaded(double tolerance, double cost_slack,
                              std::optional<double> max_stretch = std::nullopt) {
  LeastLoadedConfig c;
  c.tolerance = tolerance;
  c.cost_slack = cost_slack;
  c.max_stretch = max_stretch;
  return c;
}

std::vector<LinkId> Links(absl::Span<const NextHop> hops) {
  std::vector<LinkId> out;
  for (const NextHop& h : hops) out.push_back(h.link);
  return out;
}

// A diamond h0 - s0 - {a, b} - s1 - h1 of unit-cost links.
struct LeastLoadedDiamond {
  LeastLoadedDiamond() {
    h0 = topo.AddNode("h0", NodeKind::kHost);
    h1 = topo.AddNode("h1", NodeKind::kHost);
    s0 = topo.AddNode("s0", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    s1 = topo.AddNode("s1", NodeKind::kSwitch);
    topo.AddDuplexLink(h0, s0, LinkParams());
    topo.AddDuplexLink(h1, s1, LinkParams());
    s0a = topo.AddDuplexLink(s0, a, LinkParams()).first;
    s0b = topo.AddDuplexLink(s0, b, LinkParams()).first;
    as1 = topo.AddDuplexLink(a, s1, LinkParams()).first;
    bs1 = topo.AddDuplexLink(b, s1, LinkParams()).first;
    cost.assign(topo.num_links(), 1.0);
    util.assign(topo.num_links(), 0.0);
  }
  RoutingTables Compute(const LeastLoadedConfig& config = {}) const {
    RoutingTables t = ComputeLeastLoadedTables(topo, cost, util, config);
    const ValidationReport r = ValidateTables(topo, t);
    EXPECT_TRUE(r.ok()) << r.ToStatus();
    return t;
  }
  Topology topo;
  NodeId h0, h1, s0, a, b, s1;
  LinkId s0a, s0b, as1, bs1;
  std::vector<double> cost, util;
};

TEST(LeastLoadedTest, EqualBranchesSplitEvenly) {
  LeastLoadedDiamond d;
  const RoutingTables t = d.Compute();
  ASSERT_EQ(t.destinations(), (std::vector<NodeId>{d.s0, d.s1}));
  const auto hops = t.Lookup(d.s0, d.s1);
  EXPECT_THAT(Links(hops), ::testing::ElementsAre(d.s0a, d.s0b));
  EXPECT_DOUBLE_EQ(hops[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(hops[1].weight, 0.5);
  // Stub hosts have no rows; the destination has none either.
  EXPECT_TRUE(t.Lookup(d.h0, d.s1).empty());
  EXPECT_TRUE(t.Lookup(d.s1, d.s1).empty());
}

TEST(LeastLoadedTest, LoadedBranchGetsNoTraffic) {
  LeastLoadedDiamond d;
  d.util[d.s0a] = 0.7;
  RoutingTables t = d.Compute();
  EXPECT_THAT(Links(t.Lookup(d.s0, d.s1)), ::testing::ElementsAre(d.s0b));
  EXPECT_DOUBLE_EQ(t.Lookup(d.s0, d.s1)[0].weight, 1.0);
  // A bottleneck further down the path counts as much as the first link.
  d.util[d.s0a] = 0;
  d.util[d.as1] = 0.7;
  t = d.Compute();
  EXPECT_THAT(Links(t.Lookup(d.s0, d.s1)), ::testing::ElementsAre(d.s0b));
}

TEST(LeastLoadedTest, NearEqualLoadsShareWithinTolerance) {
  LeastLoadedDiamond d;
  d.util[d.s0a] = 0.53;
  d.util[d.s0b] = 0.50;
  EXPECT_THAT(Links(d.Compute().Lookup(d.s0, d.s1)), ::testing::ElementsAre(d.s0a, d.s0b));
  EXPECT_THAT(Links(d.Compute(LeastLoaded(0.01, 0.1)).Lookup(d.s0, d.s1)),
              ::testing::ElementsAre(d.s0b));
  // Path load is the bottleneck, not the sum: 0.5 then 0.3 is a 0.5 path, not worse than 0.52.
  d.util[d.s0a] = 0.3;
  d.util[d.as1] = 0.5;
  d.util[d.s0b] = 0.52;
  EXPECT_THAT(Links(d.Compute(LeastLoaded(0.01, 0.1)).Lookup(d.s0, d.s1)),
              ::testing::ElementsAre(d.s0a));
}

TEST(LeastLoadedTest, UnusableLinksAreNeverNextHops) {
  LeastLoadedDiamond d;
  d.cost[d.s0b] = kInfinity;  // drained
  d.util[d.s0a] = 0.9;
  RoutingTables t = ComputeLeastLoadedTables(d.topo, d.cost, d.util, {});
  EXPECT_THAT(Links(t.Lookup(d.s0, d.s1)), ::testing::ElementsAre(d.s0a));
  d.cost[d.s0b] = 1;
  d.topo.mutable_link(d.s0a).up = false;  // down
  t = ComputeLeastLoadedTables(d.topo, d.cost, d.util, {});
  EXPECT_THAT(Links(t.Lookup(d.s0, d.s1)), ::testing::ElementsAre(d.s0b));
  EXPECT_TRUE(ValidateTables(d.topo, t).ok());
}

// A WAN-like ring r0 .. r4 with delays as costs. Toward r2, r0 has a short path r0-r1-r2
// (cost 2) and a longer one r0-r4-r3-r2 (cost 2.5) whose first hop r4 (1.5 away) is still
// strictly closer than r0.
struct Ring {
  Ring() {
    for (int i = 0; i < 5; ++i) topo.AddNode("r" + std::to_string(i), NodeKind::kSwitch);
    r01 = topo.AddDuplexLink(0, 1, LinkParams()).first;
    r12 = topo.AddDuplexLink(1, 2, LinkParams()).first;
    r23 = topo.AddDuplexLink(2, 3, LinkParams());
    r34 = topo.AddDuplexLink(3, 4, LinkParams());
    r40 = topo.AddDuplexLink(4, 0, LinkParams());
    cost.assign(topo.num_links(), 1.0);
    cost[r34.first] = cost[r34.second] = 0.5;
    util.assign(topo.num_links(), 0.0);
  }
  Topology topo;
  LinkId r01, r12;
  std::pair<LinkId, LinkId> r23, r34, r40;
  std::vector<double> cost, util;
};

TEST(LeastLoadedTest, LongerIdlePathBeatsShortCongestedOne) {
  Ring r;
  const LinkId r04 = r.r40.second;
  // Idle: the short path only (the longer one is 25% longer, past cost_slack).
  RoutingTables t = ComputeLeastLoadedTables(r.topo, r.cost, r.util, {});
  EXPECT_THAT(Links(t.Lookup(0, 2)), ::testing::ElementsAre(r.r01));
  // With no cost preference an idle network spreads over both.
  t = ComputeLeastLoadedTables(r.topo, r.cost, r.util, LeastLoaded(0.05, kInfinity));
  EXPECT_THAT(Links(t.Lookup(0, 2)), ::testing::ElementsAre(r.r01, r04));
  // The short path congested (on its second link): the long one takes everything.
  r.util[r.r12] = 0.8;
  t = ComputeLeastLoadedTables(r.topo, r.cost, r.util, {});
  EXPECT_THAT(Links(t.Lookup(0, 2)), ::testing::ElementsAre(r04));
  EXPECT_TRUE(ValidateTables(r.topo, t).ok());
  // r1 itself has no way around: r0 is further from r2 than r1 is.
  EXPECT_THAT(Links(t.Lookup(1, 2)), ::testing::ElementsAre(r.r12));
  // A stretch limit below 1.25 rules the detour out.
  t = ComputeLeastLoadedTables(r.topo, r.cost, r.util, LeastLoaded(0.05, 0.1, 1.2));
  EXPECT_THAT(Links(t.Lookup(0, 2)), ::testing::ElementsAre(r.r01));
}

TEST(LeastLoadedTest, HostsNeverTransit) {
  // s0 and s1 are joined only through a dual-homed host and through a long switch path.
  Topology topo;
  const NodeId s0 = topo.AddNode("s0", NodeKind::kSwitch);
  const NodeId s1 = topo.AddNode("s1", NodeKind::kSwitch);
  const NodeId m = topo.AddNode("m", NodeKind::kSwitch);
  const NodeId h = topo.AddNode("h", NodeKind::kHost);
  const NodeId h0 = topo.AddNode("h0", NodeKind::kHost);
  const NodeId h1 = topo.AddNode("h1", NodeKind::kHost);
  const LinkId hs0 = topo.AddDuplexLink(h, s0, LinkParams()).first;
  topo.AddDuplexLink(h, s1, LinkParams());
  const LinkId s0m = topo.AddDuplexLink(s0, m, LinkParams()).first;
  topo.AddDuplexLink(m, s1, LinkParams());
  topo.AddDuplexLink(h0, s0, LinkParams());
  topo.AddDuplexLink(h1, s1, LinkParams());
  std::vector<double> cost(topo.num_links(), 1.0), util(topo.num_links(), 0.0);
  util[s0m] = 1.0;
  const RoutingTables t = ComputeLeastLoadedTables(topo, cost, util, LeastLoaded(0.05, kInfinity));
  EXPECT_TRUE(ValidateTables(topo, t).ok()) << ValidateTables(topo, t).ToStatus();
  EXPECT_THAT(Links(t.Lookup(s0, s1)), ::testing::ElementsAre(s0m));
  // The dual-homed host is a destination and a source with rows of its own.
  EXPECT_THAT(Links(t.Lookup(s0, h)), ::testing::ElementsAre(topo.FindLink(s0, h)));
  EXPECT_EQ(t.Lookup(h, s1).size(), 1u);
  EXPECT_NE(t.Lookup(h, s1)[0].link, hs0);  // straight to s1, not via s0
}

TEST(LeastLoadedTest, FatTreeIdleIsEcmp) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  std::vector<double> cost(topo.num_links(), 1.0), util(topo.num_links(), 0.0);
  const RoutingTables adaptive = ComputeLeastLoadedTables(topo, cost, util, {});
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      EXPECT_EQ(Links(adaptive.Lookup(v, d)), Links(ecmp.Lookup(v, d)));
    }
  }
}

// Random switch graphs with hosts (some dual-homed), random costs, failed and drained links,
// disconnected parts and random loads.
struct RandomCase {
  Topology topo;
  std::vector<double> cost;
  std::vector<double> util;
  LeastLoadedConfig config;
};

RandomCase MakeRandomCase(Random& rng) {
  RandomCase c;
  Topology& topo = c.topo;
  const int switches = 2 + static_cast<int>(rng.Below(14));
  for (int i = 0; i < switches; ++i) topo.AddNode("s" + std::to_string(i), NodeKind::kSwitch);
  const int hosts = static_cast<int>(rng.Below(6));
  for (int i = 0; i < hosts; ++i) {
    const NodeId h = topo.AddNode("h" + std::to_string(i), NodeKind::kHost);
    topo.AddDuplexLink(h, static_cast<NodeId>(rng.Below(switches)), LinkParams());
    if (rng.Uniform() < 0.25) {
      topo.AddDuplexLink(h, static_cast<NodeId>(rng.Below(switches)), LinkParams());
    }
  }
  const int cables = static_cast<int>(rng.Below(3 * switches));
  for (int i = 0; i < cables; ++i) {
    const NodeId a = static_cast<NodeId>(rng.Below(switches));
    const NodeId b = static_cast<NodeId>(rng.Below(switches));
    if (a == b) continue;
    if (rng.Uniform() < 0.1) {
      topo.AddLink(a, b, LinkParams());  // one-way
    } else {
      topo.AddDuplexLink(a, b, LinkParams());
    }
  }
  const bool integer_costs = rng.Below(2) == 0;
  const bool coarse_loads = rng.Below(2) == 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    c.cost.push_back(integer_costs ? 1.0 + static_cast<double>(rng.Below(3))
                                   : 0.5 + 3 * rng.Uniform());
    c.util.push_back(coarse_loads ? 0.25 * static_cast<double>(rng.Below(5)) : 1.2 * rng.Uniform());
    const double u = rng.Uniform();
    if (u < 0.08)
      topo.mutable_link(l).up = false;
    else if (u < 0.16)
      c.cost.back() = kInfinity;
  }
  c.config.tolerance = rng.Below(3) == 0 ? 0 : 0.2 * rng.Uniform();
  c.config.cost_slack = rng.Below(3) == 0 ? kInfinity : 0.5 * rng.Uniform();
  if (rng.Below(3) == 0) c.config.max_stretch = 1 + rng.Uniform();
  return c;
}

// `topo` with links of infinite cost marked down and metrics set to the costs: the network
// as the computation sees it.
Topology Believed(const RandomCase& c) {
  Topology t = c.topo;
  for (LinkId l = 0; l < t.num_links(); ++l) {
    if (std::isinf(c.cost[l]))
      t.mutable_link(l).up = false;
    else
      t.mutable_link(l).params.metric = c.cost[l];
  }
  return t;
}

TEST(LeastLoadedPropertyTest, RandomGraphsAlwaysValidate) {
  Random rng(20250101);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomCase c = MakeRandomCase(rng);
    const RoutingTables t = ComputeLeastLoadedTables(c.topo, c.cost, c.util, c.config);
    const Topology believed = Believed(c);
    const ValidationReport r = ValidateTables(believed, t);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ", " << c.topo.Summary() << ": " << r.ToStatus();
    // Every next hop leads strictly closer to the destination, within the stretch limit.
    for (NodeId d : believed.Destinations()) {
      const std::vector<double> dist = ShortestDistances(believed, d);
      for (NodeId v = 0; v < believed.num_nodes(); ++v) {
        for (const NextHop& h : t.Lookup(v, d)) {
          const Link& link = believed.link(h.link);
          ASSERT_LT(dist[link.dst], dist[v]) << "trial " << trial;
          if (c.config.max_stretch) {
            ASSERT_LE(c.cost[h.link] + dist[link.dst], *c.config.max_stretch * dist[v] * (1 + 1e-9))
                << "trial " << trial;
          }
        }
      }
    }
  }
}

// With no tolerance and no cost preference, every path the tables can send traffic on has
// the smallest bottleneck of all strictly-descending paths (the minimax path), computed here
// independently by thresholding: the least t such that v reaches d over links loaded <= t.
TEST(LeastLoadedPropertyTest, ZeroToleranceFollowsMinimaxPaths) {
  Random rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    RandomCase c = MakeRandomCase(rng);
    c.config = LeastLoaded(0, kInfinity);
    const RoutingTables t = ComputeLeastLoadedTables(c.topo, c.cost, c.util, c.config);
    const Topology believed = Believed(c);
    std::vector<double> levels = c.util;
    std::sort(levels.begin(), levels.end());
    for (NodeId d : believed.Destinations()) {
      const std::vector<double> dist = ShortestDistances(believed, d);
      auto forwards = [&](NodeId n) { return n == d || believed.node(n).kind != NodeKind::kHost; };
      // reach[v]: v reaches d over descending links loaded <= level.
      auto reaches = [&](double level) {
        std::vector<NodeId> order;
        for (NodeId v = 0; v < believed.num_nodes(); ++v) {
          if (!std::isinf(dist[v])) order.push_back(v);
        }
        std::sort(order.begin(), order.end(),
                  [&](NodeId a, NodeId b) { return dist[a] < dist[b]; });
        std::vector<bool> reach(believed.num_nodes(), false);
        reach[d] = true;
        for (NodeId v : order) {
          for (LinkId l : believed.node(v).out_links) {
            const Link& link = believed.link(l);
            if (link.up && forwards(link.dst) && dist[link.dst] < dist[v] && reach[link.dst] &&
                c.util[l] <= level) {
              reach[v] = true;
            }
          }
        }
        return reach;
      };
      std::vector<double> minimax(believed.num_nodes(), kInfinity);
      for (double level : levels) {
        const std::vector<bool> reach = reaches(level);
        for (NodeId v = 0; v < believed.num_nodes(); ++v) {
          if (reach[v]) minimax[v] = std::min(minimax[v], level);
        }
      }
      // worst[v]: the largest bottleneck over the table's paths from v.
      std::vector<double> worst(believed.num_nodes(), -1);
      std::function<double(NodeId)> worst_from = [&](NodeId v) -> double {
        if (v == d) return 0;
        if (worst[v] >= 0) return worst[v];
        double w = 0;
        for (const NextHop& h : t.Lookup(v, d)) {
          w = std::max(w, std::max(c.util[h.link], worst_from(believed.link(h.link).dst)));
        }
        return worst[v] = w;
      };
      for (NodeId v = 0; v < believed.num_nodes(); ++v) {
        if (v == d || t.Lookup(v, d).empty()) continue;
        ASSERT_NEAR(worst_from(v), minimax[v], 1e-12)
            << "trial " << trial << " node " << believed.node(v).name << " toward "
            << believed.node(d).name;
      }
    }
  }
}

}  // namespace
}  // namespace dar
