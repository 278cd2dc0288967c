// The diffusion engine: potentials, downhill weights, loop freedom, incremental recomputation
// and hysteresis. One file, as the engine is one algorithm (diffusion.cc says why that is
// one file too).
#include "core/diffusion.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/link_cost.h"
#include "core/random.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "core/validator.h"
#include "core/vector_exp.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

std::vector<double> UniformCosts(const Topology& topo, double c = 1.0) {
  std::vector<double> costs(topo.num_links(), c);
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    if (!topo.link(l).up) costs[l] = kUnusable;
  }
  return costs;
}

// Every next hop is strictly downhill and every node that can reach a destination has one.
void ExpectDownhill(const Topology& topo, const DiffusionEngine& engine, const RoutingTables& t) {
  for (NodeId d : t.destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      if (v == d) continue;
      for (const NextHop& h : t.Lookup(v, d)) {
        EXPECT_LT(engine.Potential(d, topo.link(h.link).dst), engine.Potential(d, v))
            << topo.node(v).name << " toward " << topo.node(d).name;
      }
    }
  }
}

// `got` has `want`'s potentials (to 1e-10 relative) and, in its tables, the same next hops
// with the same weights (to 1e-10), for every destination and node.
void ExpectSameTablesAndPotentials(const Topology& topo, const DiffusionEngine& got,
                                   const DiffusionEngine& want) {
  const RoutingTables x = got.Tables(1), y = want.Tables(1);
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const double p = want.Potential(d, v), q = got.Potential(d, v);
      if (std::isinf(p)) {
        EXPECT_EQ(q, p);
      } else {
        EXPECT_NEAR(q, p, 1e-10 * std::max(1.0, std::abs(p)));
      }
      const auto a = x.Lookup(v, d), b = y.Lookup(v, d);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].link, b[i].link);
        EXPECT_NEAR(a[i].weight, b[i].weight, 1e-10);
      }
    }
  }
}

// s -> {a, b} -> t, plus hosts on s and t.
struct DiffusionDiamond {
  DiffusionDiamond() {
    hs = topo.AddNode("hs", NodeKind::kHost);
    s = topo.AddNode("s", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    t = topo.AddNode("t", NodeKind::kSwitch);
    ht = topo.AddNode("ht", NodeKind::kHost);
    topo.AddDuplexLink(hs, s, LinkParams());
    sa = topo.AddDuplexLink(s, a, LinkParams()).first;
    sb = topo.AddDuplexLink(s, b, LinkParams()).first;
    at = topo.AddDuplexLink(a, t, LinkParams()).first;
    bt = topo.AddDuplexLink(b, t, LinkParams()).first;
    topo.AddDuplexLink(t, ht, LinkParams());
  }
  double Weight(const RoutingTables& tables, LinkId link) const {
    for (const NextHop& h : tables.Lookup(s, t)) {
      if (h.link == link) return h.weight;
    }
    return 0;
  }
  Topology topo;
  NodeId hs, s, a, b, t, ht;
  LinkId sa, sb, at, bt;
};

TEST(DiffusionTest, ZeroTemperatureIsEcmp) {
  FatTreeParams p;
  p.k = 4;
  const Topology topo = FatTree(p);
  DiffusionConfig config;
  config.temperature = 0;
  DiffusionEngine engine(topo, config);
  engine.ComputeAll(UniformCosts(topo));
  const RoutingTables dar = engine.Tables(1);
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const auto x = dar.Lookup(v, d);
      const auto y = ecmp.Lookup(v, d);
      ASSERT_EQ(x.size(), y.size()) << topo.node(v).name << " -> " << topo.node(d).name;
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(x[i].link, y[i].link);
        EXPECT_DOUBLE_EQ(x[i].weight, y[i].weight);
      }
    }
    EXPECT_DOUBLE_EQ(engine.Potential(d, d), 0);
  }
  EXPECT_TRUE(ValidateTables(topo, dar).ok());
}

TEST(DiffusionTest, SoftMinSpreadsOverNearEqualPathsOnly) {
  DiffusionDiamond g;
  DiffusionConfig config;
  config.temperature = 0.5;
  config.min_weight = 0.05;
  config.hysteresis = 0;
  DiffusionEngine engine(g.topo, config);
  std::vector<double> costs = UniformCosts(g.topo);
  // Path via a costs 2, via b costs 2.2: both used, in proportion exp(-0.2 / 0.5).
  costs[g.bt] = 1.2;
  engine.ComputeAll(costs);
  RoutingTables t = engine.Tables(1);
  const double ratio = g.Weight(t, g.sb) / g.Weight(t, g.sa);
  EXPECT_NEAR(ratio, std::exp(-0.2 / 0.5), 1e-12);
  // Two ways on lower the potential below the cheapest path: phi = -T ln(e^-2/T + e^-2.2/T).
  const double expect = -0.5 * std::log(std::exp(-2 / 0.5) + std::exp(-2.2 / 0.5));
  EXPECT_NEAR(engine.Potential(g.t, g.s), expect, 1e-6);
  EXPECT_LT(engine.Potential(g.t, g.s), 2.0);
  // s -> b now costs 4 but b is close to t (0.2), so still downhill: it stays a next hop (a
  // flow pinned to it need not move), its share e^-4.4 floored at min_weight.
  costs[g.sb] = 4;
  costs[g.bt] = 0.2;
  engine.ComputeAll(costs);
  t = engine.Tables(2);
  ASSERT_EQ(t.Lookup(g.s, g.t).size(), 2u);
  const double a_share = 1 / (1 + std::exp(-2.2 / 0.5));  // before the floor
  EXPECT_NEAR(g.Weight(t, g.sb), 0.05 / (a_share + 0.05), 1e-6);
  EXPECT_GT(g.Weight(t, g.sa), 0.9);
  ExpectDownhill(g.topo, engine, t);
  costs[g.sb] = 1;
  // At 4, b is farther from t than s is (3 through s): not downhill, not a next hop.
  costs[g.bt] = 4;
  engine.ComputeAll(costs);
  t = engine.Tables(3);
  ASSERT_EQ(t.Lookup(g.s, g.t).size(), 1u);
  EXPECT_EQ(t.version(), 3u);
  ExpectDownhill(g.topo, engine, t);
}

TEST(DiffusionTest, UnusableLinksAreNeverNextHops) {
  DiffusionDiamond g;
  DiffusionEngine engine(g.topo, DiffusionConfig());
  std::vector<double> costs = UniformCosts(g.topo);
  costs[g.at] = kUnusable;
  engine.ComputeAll(costs);
  const RoutingTables t = engine.Tables(1);
  ASSERT_EQ(t.Lookup(g.s, g.t).size(), 1u);
  EXPECT_EQ(t.Lookup(g.s, g.t)[0].link, g.sb);
  // a reaches t only back through s.
  ASSERT_EQ(t.Lookup(g.a, g.t).size(), 1u);
  EXPECT_EQ(g.topo.link(t.Lookup(g.a, g.t)[0].link).dst, g.s);
  ExpectDownhill(g.topo, engine, t);
}

TEST(DiffusionTest, HysteresisKeepsRoutesUnderNoiseAndMovesOnRealChange) {
  DiffusionDiamond g;
  DiffusionConfig config;
  config.temperature = 0.5;
  config.hysteresis = 0.1;
  DiffusionEngine engine(g.topo, config);
  std::vector<double> costs = UniformCosts(g.topo);
  engine.ComputeAll(costs);
  const double before = g.Weight(engine.Tables(1), g.sa);
  EXPECT_NEAR(before, 0.5, 1e-12);
  Random rng(5);
  for (int i = 0; i < 50; ++i) {
    costs[g.at] = 1 + 0.02 * (rng.Uniform() - 0.5);
    costs[g.bt] = 1 + 0.02 * (rng.Uniform() - 0.5);
    const LinkId changed[] = {g.at, g.bt};
    engine.Update(costs, changed);
    EXPECT_EQ(engine.stats().route_changes, 0) << "round " << i;
  }
  EXPECT_EQ(g.Weight(engine.Tables(2), g.sa), before);
  costs[g.at] = 1.6;  // a real change: traffic moves toward b
  const LinkId changed[] = {g.at};
  engine.Update(costs, changed);
  EXPECT_GT(engine.stats().route_changes, 0);
  EXPECT_LT(g.Weight(engine.Tables(3), g.sa), 0.3);
}

// The engine decides hysteresis from a float copy of the installed weights where that is
// unambiguous; at the threshold itself it must still decide exactly as on the table's doubles.
TEST(DiffusionTest, HysteresisIsExactAtTheThreshold) {
  DiffusionDiamond g;
  std::vector<double> before = UniformCosts(g.topo), after = before;
  after[g.at] = 1.3;
  DiffusionConfig config;
  config.hysteresis = 0;
  DiffusionEngine probe(g.topo, config);
  probe.ComputeAll(before);
  const RoutingTables old_rows = probe.Tables(1);
  probe.ComputeAll(after);
  const RoutingTables new_rows = probe.Tables(2);
  // The difference hysteresis measures at s toward t, summed as the engine sums it.
  const auto x = old_rows.Lookup(g.s, g.t), y = new_rows.Lookup(g.s, g.t);
  ASSERT_EQ(x.size(), 2u);
  ASSERT_EQ(y.size(), 2u);
  double diff = 0;
  for (size_t i = 0; i < 2; ++i) diff += std::abs(x[i].weight - y[i].weight);
  ASSERT_GT(diff, 0.05);
  for (const double h : {diff, std::nextafter(diff, 1.0)}) {
    config.hysteresis = h;
    DiffusionEngine engine(g.topo, config);
    for (int cycle = 0; cycle < 3; ++cycle) engine.ComputeAll(before);  // rows mirrored
    engine.ComputeAll(after);
    // A difference of exactly the threshold moves the route; one just below it does not.
    const bool keeps = diff < h;
    EXPECT_EQ(g.Weight(engine.Tables(3), g.sa), keeps ? x[0].weight : y[0].weight) << h;
    EXPECT_EQ(engine.stats().route_changes, keeps ? 0 : 1) << h;
  }
}

TEST(DiffusionTest, IncrementalUpdateMatchesFullRecompute) {
  FatTreeParams p;
  p.k = 8;
  const Topology topo = FatTree(p);
  DiffusionConfig config;
  config.hysteresis = 0;
  DiffusionEngine incremental(topo, config);
  std::vector<double> costs = UniformCosts(topo);
  incremental.ComputeAll(costs);
  // Raise one aggregation->core link (it stays downhill: order unchanged).
  const LinkId l = topo.FindLink(*topo.FindNode("a0"), *topo.FindNode("c0"));
  costs[l] = 1.7;
  const LinkId changed[] = {l};
  incremental.Update(costs, changed);
  EXPECT_EQ(incremental.stats().destinations_full, 0);
  EXPECT_GT(incremental.stats().destinations_incremental, 0);
  EXPECT_LT(incremental.stats().nodes_relaxed, 10 * topo.num_nodes());
  DiffusionEngine full(topo, config);
  full.ComputeAll(costs);
  const RoutingTables a = incremental.Tables(2), b = full.Tables(2);
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      EXPECT_NEAR(incremental.Potential(d, v), full.Potential(d, v), 1e-9);
      const auto x = a.Lookup(v, d), y = b.Lookup(v, d);
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(x[i].link, y[i].link);
        EXPECT_NEAR(x[i].weight, y[i].weight, 1e-12);
      }
    }
  }
}

// Engines over the parts of a split of the destinations compute what one engine over all
// computes, bit for bit, whole and in part; toward another part's destination an engine has
// no table and an infinite potential.
TEST(DiffusionTest, EnginesOverPartsComputeWhatOneComputes) {
  FatTreeParams p;
  p.k = 4;
  const Topology topo = FatTree(p);
  const DiffusionConfig config;
  const std::vector<NodeId> all = topo.Destinations();
  ASSERT_GE(all.size(), 3u);
  const std::vector<NodeId> front(all.begin(), all.begin() + 3), back(all.begin() + 3, all.end());
  DiffusionEngine whole(topo, config), first(topo, config, front), second(topo, config, back);
  Random rng(17);
  std::vector<double> costs(topo.num_links());
  for (double& c : costs) c = 1 + rng.Uniform();
  std::vector<LinkId> changed;
  for (int round = 0; round < 4; ++round) {
    if (round == 0) {
      for (DiffusionEngine* e : {&whole, &first, &second}) e->ComputeAll(costs);
    } else {
      changed.clear();
      for (LinkId l = 0; l < topo.num_links(); ++l) {
        if (rng.Uniform() < 0.2) {
          costs[l] = rng.Uniform() < 0.1 ? kUnusable : 1 + rng.Uniform();
          changed.push_back(l);
        }
      }
      for (DiffusionEngine* e : {&whole, &first, &second}) e->Update(costs, changed);
    }
    const RoutingTables w = whole.Tables(round + 1);
    const RoutingTables f = first.Tables(round + 1), s = second.Tables(round + 1);
    EXPECT_EQ(f.destinations(), front);
    EXPECT_EQ(s.destinations(), back);
    EXPECT_EQ(whole.stats().route_changes,
              first.stats().route_changes + second.stats().route_changes);
    for (NodeId d : all) {
      const bool in_first = first.Computes(d);
      EXPECT_NE(in_first, second.Computes(d));
      const DiffusionEngine& part = in_first ? first : second;
      const DiffusionEngine& other = in_first ? second : first;
      const RoutingTables& t = in_first ? f : s;
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        EXPECT_EQ(whole.Potential(d, v), part.Potential(d, v)) << "round " << round;
        EXPECT_EQ(other.Potential(d, v), std::numeric_limits<double>::infinity());
        const auto x = w.Lookup(v, d), y = t.Lookup(v, d);
        ASSERT_EQ(x.size(), y.size());
        for (size_t i = 0; i < x.size(); ++i) {
          EXPECT_EQ(x[i].link, y[i].link);
          EXPECT_EQ(x[i].weight, y[i].weight);
        }
      }
    }
  }
}

// Regression: a cost rise on a downhill link can make a node cheaper through a neighbour
// settled after it. The incremental update must notice and reorder, not keep the old way.
TEST(DiffusionTest, IncrementalUpdateReordersWhenACostRises) {
  Topology topo;
  const NodeId d = topo.AddNode("d", NodeKind::kSwitch);
  const NodeId s = topo.AddNode("s", NodeKind::kSwitch);
  const NodeId w = topo.AddNode("w", NodeKind::kSwitch);
  const LinkId sd = topo.AddDuplexLink(s, d, LinkParams()).first;
  topo.AddDuplexLink(w, d, LinkParams());
  topo.AddDuplexLink(s, w, LinkParams());
  std::vector<double> costs(topo.num_links(), 1.0);
  costs[topo.FindLink(s, w)] = costs[topo.FindLink(w, s)] = 0.5;
  DiffusionConfig config;
  config.hysteresis = 0;
  DiffusionEngine incremental(topo, config);
  incremental.ComputeAll(costs);
  costs[sd] = 10;
  const LinkId changed[] = {sd};
  incremental.Update(costs, changed);
  DiffusionEngine full(topo, config);
  full.ComputeAll(costs);
  EXPECT_NEAR(incremental.Potential(d, s), full.Potential(d, s), 1e-9);
  const auto hops = incremental.Tables(2).Lookup(s, d);
  ASSERT_FALSE(hops.empty());
  double via_w = 0;
  for (const NextHop& h : hops) {
    if (h.link == topo.FindLink(s, w)) via_w = h.weight;
  }
  EXPECT_GT(via_w, 0.99);
}

// Regression: a cost drop can make a node cheaper through a neighbour settled after it (here
// a, settled before b, now reaches d more cheaply through b). The incremental update must
// reorder, so that it ends where a full recompute does.
TEST(DiffusionTest, IncrementalUpdateReordersWhenACostDrops) {
  Topology topo;
  const NodeId d = topo.AddNode("d", NodeKind::kSwitch);
  const NodeId a = topo.AddNode("a", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("b", NodeKind::kSwitch);
  const LinkId ad = topo.AddDuplexLink(a, d, LinkParams()).first;
  const LinkId bd = topo.AddDuplexLink(b, d, LinkParams()).first;
  const auto [ab, ba] = topo.AddDuplexLink(a, b, LinkParams());
  std::vector<double> costs(topo.num_links(), 1.0);
  costs[ad] = 2;
  costs[bd] = 5;
  costs[ab] = costs[ba] = 0.5;  // b is settled after a, through a (2.5)
  DiffusionConfig config;
  config.hysteresis = 0;
  DiffusionEngine incremental(topo, config);
  incremental.ComputeAll(costs);
  costs[bd] = 1;  // b now 1, and a through b 1.5 < 2
  const LinkId changed[] = {bd};
  incremental.Update(costs, changed);
  EXPECT_EQ(incremental.stats().destinations_full, 1);
  DiffusionEngine full(topo, config);
  full.ComputeAll(costs);
  for (NodeId v : {a, b}) {
    EXPECT_NEAR(incremental.Potential(d, v), full.Potential(d, v), 1e-12);
    const auto x = incremental.Tables(2).Lookup(v, d), y = full.Tables(2).Lookup(v, d);
    ASSERT_EQ(x.size(), y.size()) << topo.node(v).name;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].link, y[i].link);
      EXPECT_NEAR(x[i].weight, y[i].weight, 1e-12);
    }
  }
  // a now sends through b too.
  bool via_b = false;
  for (const NextHop& h : incremental.Tables(2).Lookup(a, d)) via_b |= h.link == ab;
  EXPECT_TRUE(via_b);
}

// min_weight 0: a share that underflows to 0 is dropped, never emitted as a 0 weight.
TEST(DiffusionTest, ZeroMinWeightNeverEmitsZeroWeights) {
  DiffusionDiamond g;
  DiffusionConfig config;
  config.min_weight = 0;
  config.temperature = 0.01;
  DiffusionEngine engine(g.topo, config);
  std::vector<double> costs = UniformCosts(g.topo);
  costs[g.sb] = 50;
  costs[g.bt] = 0.01;
  engine.ComputeAll(costs);
  const RoutingTables t = engine.Tables(1);
  EXPECT_TRUE(ValidateTables(g.topo, t).ok()) << ValidateTables(g.topo, t).ToStatus();
  for (const NextHop& h : t.Lookup(g.s, g.t)) EXPECT_GT(h.weight, 0);
}

TEST(DiffusionTest, UnaffectedDestinationsKeepTheirTables) {
  FatTreeParams p;
  p.k = 8;
  const Topology topo = FatTree(p);
  DiffusionEngine engine(topo, DiffusionConfig());
  std::vector<double> costs = UniformCosts(topo);
  engine.ComputeAll(costs);
  const RoutingTables before = engine.Tables(1);
  const LinkId l = topo.FindLink(*topo.FindNode("a0"), *topo.FindNode("c0"));
  costs[l] = 3;
  const LinkId changed[] = {l};
  engine.Update(costs, changed);
  const RoutingTables after = engine.Tables(2);
  // a0 -> c0 leads away from pod 0's edge switches (e0..e3): their tables are untouched and
  // shared; toward every other edge switch it is a way down, so those are re-relaxed.
  for (NodeId d : topo.Destinations()) {
    const bool pod0 = d < *topo.FindNode("e4");
    EXPECT_EQ(before.SharedTable(d) == after.SharedTable(d), pod0) << topo.node(d).name;
  }
  EXPECT_EQ(engine.stats().destinations_incremental, 28);
  EXPECT_EQ(engine.stats().destinations_full, 0);
}

// Random graphs with random costs, failed links and disconnected parts: every table the engine
// emits passes the validator and goes strictly downhill, after full and incremental passes.
TEST(DiffusionTest, PropertyRandomGraphsAlwaysValid) {
  Random rng(2024);
  for (int trial = 0; trial < 150; ++trial) {
    Topology topo;
    const int switches = 3 + static_cast<int>(rng.Below(14));
    for (int i = 0; i < switches; ++i) topo.AddNode("s" + std::to_string(i), NodeKind::kSwitch);
    const int hosts = static_cast<int>(rng.Below(6));
    for (int i = 0; i < hosts; ++i) {
      const NodeId h = topo.AddNode("h" + std::to_string(i), NodeKind::kHost);
      topo.AddDuplexLink(h, static_cast<NodeId>(rng.Below(switches)), LinkParams());
      if (rng.Uniform() < 0.2) {  // a multi-homed host
        topo.AddDuplexLink(h, static_cast<NodeId>(rng.Below(switches)), LinkParams());
      }
    }
    const int cables = switches + static_cast<int>(rng.Below(2 * switches));
    for (int i = 0; i < cables; ++i) {
      const NodeId a = static_cast<NodeId>(rng.Below(switches));
      const NodeId b = static_cast<NodeId>(rng.Below(switches));
      if (a != b) topo.AddDuplexLink(a, b, LinkParams());
    }
    std::vector<double> costs(topo.num_links());
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      if (rng.Uniform() < 0.1) {
        topo.mutable_link(l).up = false;
        costs[l] = kUnusable;
      } else {
        costs[l] = 0.5 + 3 * rng.Uniform();
      }
    }
    DiffusionConfig config;
    config.temperature = rng.Uniform() < 0.2 ? 0 : 2 * rng.Uniform();
    config.min_weight = 0.2 * rng.Uniform();
    config.hysteresis = 0.3 * rng.Uniform();
    DiffusionEngine engine(topo, config);
    engine.ComputeAll(costs);
    RoutingTables t = engine.Tables(1);
    ValidationReport r = ValidateTables(topo, t);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.ToStatus();
    ExpectDownhill(topo, engine, t);
    for (int round = 0; round < 5; ++round) {
      std::vector<LinkId> changed;
      for (int k = 0; k < 3; ++k) {
        const LinkId l = static_cast<LinkId>(rng.Below(topo.num_links()));
        if (!topo.link(l).up) continue;
        costs[l] = 0.5 + 3 * rng.Uniform();
        changed.push_back(l);
      }
      engine.Update(costs, changed);
      t = engine.Tables(2 + round);
      r = ValidateTables(topo, t);
      ASSERT_TRUE(r.ok()) << "trial " << trial << " round " << round << ": " << r.ToStatus();
      ExpectDownhill(topo, engine, t);
    }
  }
}

// The factored weights (one exp per arc) against the direct ones (one exp per arc and
// destination) over random graphs: the same next hops, weights and potentials to rounding,
// through full and incremental passes. Costly links push psi / T past the factored range, so
// part of the nodes fall back to the direct way, which must agree as well. A min_weight just
// below kShareMinWeightFloor turns the factored way off and changes no weight beyond rounding.
TEST(DiffusionTest, FactoredWeightsMatchDirectOnes) {
  Random rng(4242);
  int64_t relaxed = 0, direct = 0;
  for (int trial = 0; trial < 80; ++trial) {
    Topology topo;
    const int switches = 3 + static_cast<int>(rng.Below(20));
    for (int i = 0; i < switches; ++i) topo.AddNode("s" + std::to_string(i), NodeKind::kSwitch);
    for (int i = 0; i < 3; ++i) {
      const NodeId h = topo.AddNode("h" + std::to_string(i), NodeKind::kHost);
      topo.AddDuplexLink(h, static_cast<NodeId>(rng.Below(switches)), LinkParams());
    }
    const int cables = switches + static_cast<int>(rng.Below(3 * switches));
    for (int i = 0; i < cables; ++i) {
      const NodeId a = static_cast<NodeId>(rng.Below(switches));
      const NodeId b = static_cast<NodeId>(rng.Below(switches));
      if (a != b) topo.AddDuplexLink(a, b, LinkParams());
    }
    // Half the trials have costly links (a congested link's cost runs into the hundreds).
    const double costly = trial % 2 == 0 ? 0 : 0.3;
    auto cost = [&] {
      return rng.Uniform() < costly ? 100 + 300 * rng.Uniform() : 0.5 + 3 * rng.Uniform();
    };
    std::vector<double> costs(topo.num_links());
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      costs[l] = cost();
      if (rng.Uniform() < 0.05) costs[l] = kUnusable;
    }
    DiffusionConfig config;
    config.temperature = 0.3 + 1.7 * rng.Uniform();
    config.hysteresis = 0;
    config.min_weight = kShareMinWeightFloor;
    DiffusionConfig direct_config = config;
    direct_config.min_weight = std::nextafter(kShareMinWeightFloor, 0);
    DiffusionEngine factored(topo, config);
    DiffusionEngine reference(topo, direct_config);
    for (int round = 0; round < 4; ++round) {
      std::vector<LinkId> changed;
      if (round == 0) {
        factored.ComputeAll(costs);
        reference.ComputeAll(costs);
      } else {
        for (int k = 0; k < 3; ++k) {
          const LinkId l = static_cast<LinkId>(rng.Below(topo.num_links()));
          costs[l] = cost();
          changed.push_back(l);
        }
        factored.Update(costs, changed);
        reference.Update(costs, changed);
      }
      relaxed += factored.stats().nodes_relaxed;
      direct += factored.stats().nodes_direct;
      if (costly == 0) {
        EXPECT_EQ(factored.stats().nodes_direct, 0) << "trial " << trial;
      }
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " round " << round);
      ExpectSameTablesAndPotentials(topo, factored, reference);
      if (HasFatalFailure()) return;
    }
  }
  // Both ways were taken.
  EXPECT_GT(direct, 0);
  EXPECT_LT(direct, relaxed / 2);
}

// On a fat-tree a node's downhill arcs are mostly runs of slots to consecutive nodes, which the
// engine relaxes four arcs at a time (RunWeights). Against the direct way (no factoring, one
// arc at a time): the same next hops, weights and potentials to rounding, through warm and
// reordering full passes and incremental ones, with failed links (a node with one leaves the
// run path) and costly ones (psi / T out of the factored range: the direct fallback in a run).
TEST(DiffusionTest, FatTreeRunsMatchDirectWeights) {
  FatTreeParams p;
  p.k = 8;
  const Topology topo = FatTree(p);
  Random rng(808);
  int64_t direct = 0;  // relaxations that fell back to the direct way (costly trials)
  for (int trial = 0; trial < 4; ++trial) {
    auto cost = [&] {
      return trial >= 2 && rng.Uniform() < 0.2 ? 150 + 200 * rng.Uniform() : 1 + rng.Uniform();
    };
    std::vector<double> costs(topo.num_links());
    for (double& c : costs) c = cost();
    if (trial % 2 == 1) {
      for (int k = 0; k < 6; ++k) costs[rng.Below(topo.num_links())] = kUnusable;
    }
    DiffusionConfig config;
    config.temperature = 0.3 + rng.Uniform();
    config.hysteresis = trial % 2 == 0 ? 0 : 0.05;
    DiffusionConfig direct_config = config;
    direct_config.min_weight = std::nextafter(kShareMinWeightFloor, 0);
    config.min_weight = kShareMinWeightFloor;
    DiffusionEngine runs(topo, config);
    DiffusionEngine reference(topo, direct_config);
    for (int round = 0; round < 5; ++round) {
      if (round < 3) {
        runs.ComputeAll(costs, /*reorder=*/round == 2);
        reference.ComputeAll(costs, /*reorder=*/round == 2);
        for (double& c : costs) {
          if (c < kUnusable) c *= 1 + 0.05 * rng.Uniform();
        }
      } else {
        std::vector<LinkId> changed;
        for (int k = 0; k < 4; ++k) {
          const LinkId l = static_cast<LinkId>(rng.Below(topo.num_links()));
          costs[l] = cost();
          changed.push_back(l);
        }
        runs.Update(costs, changed);
        reference.Update(costs, changed);
      }
      if (trial < 2) {
        EXPECT_EQ(runs.stats().nodes_direct, 0) << "trial " << trial;
      } else {
        direct += runs.stats().nodes_direct;
      }
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " round " << round);
      ExpectDownhill(topo, runs, runs.Tables(1));
      ExpectSameTablesAndPotentials(topo, runs, reference);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(direct, 0);
}

// Cheapest-path costs to d over usable links (Bellman-Ford): a reference for the settling order.
std::vector<double> DistancesTo(const Topology& topo, NodeId d, const std::vector<double>& costs) {
  std::vector<double> dist(topo.num_nodes(), kUnusable);
  dist[d] = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      const double via = costs[l] + dist[topo.link(l).dst];
      if (via < dist[topo.link(l).src]) {
        dist[topo.link(l).src] = via;
        moved = true;
      }
    }
  }
  return dist;
}

// After a fresh settling, with every share floored above 0 and no hysteresis, a node's next
// hops are exactly its usable links to cheaper neighbours: what a plain scan of the out-links
// finds. Checks the engine's per-destination downhill arc sets, over graphs with hundreds of
// arcs (node ranges straddle the 64-arc words of the sets) and parallel links.
TEST(DiffusionTest, NextHopsAreExactlyTheDownhillNeighbours) {
  Random rng(99);
  for (int trial = 0; trial < 30; ++trial) {
    Topology topo;
    const int switches = 10 + static_cast<int>(rng.Below(40));
    for (int i = 0; i < switches; ++i) topo.AddNode("s" + std::to_string(i), NodeKind::kSwitch);
    const int cables = 2 * switches + static_cast<int>(rng.Below(4 * switches));
    for (int i = 0; i < cables; ++i) {
      const NodeId a = static_cast<NodeId>(rng.Below(switches));
      const NodeId b = static_cast<NodeId>(rng.Below(switches));
      if (a != b) topo.AddDuplexLink(a, b, LinkParams());
    }
    std::vector<double> costs(topo.num_links());
    for (double& c : costs) c = rng.Uniform() < 0.05 ? kUnusable : 0.5 + 3 * rng.Uniform();
    DiffusionConfig config;
    config.temperature = 0.2 + rng.Uniform();
    config.min_weight = 1e-3;
    config.hysteresis = 0;
    DiffusionEngine engine(topo, config);
    for (int round = 0; round < 3; ++round) {
      engine.ComputeAll(costs, /*reorder=*/true);
      const RoutingTables t = engine.Tables(1 + round);
      for (NodeId d : topo.Destinations()) {
        const std::vector<double> dist = DistancesTo(topo, d, costs);
        for (NodeId v = 0; v < topo.num_nodes(); ++v) {
          std::vector<LinkId> expect;
          for (LinkId l : topo.node(v).out_links) {
            if (v != d && costs[l] < kUnusable && dist[topo.link(l).dst] < dist[v]) {
              expect.push_back(l);
            }
          }
          std::vector<LinkId> got;
          for (const NextHop& h : t.Lookup(v, d)) got.push_back(h.link);
          ASSERT_EQ(got, expect) << "trial " << trial << " round " << round << ": "
                                 << topo.node(v).name << " toward " << topo.node(d).name;
        }
      }
      for (double& c : costs) c = rng.Uniform() < 0.05 ? kUnusable : 0.5 + 3 * rng.Uniform();
    }
  }
}

TEST(LinkCostTest, TermsAndDownLinks) {
  LinkState s;
  ClassWeights w;
  CostScales scales;
  EXPECT_DOUBLE_EQ(LinkCost(s, w, scales), 1.0);  // just the hop
  w.latency = 1;
  s.propagation = Microseconds(5);
  s.queueing = Microseconds(15);
  EXPECT_DOUBLE_EQ(LinkCost(s, w, scales), 3.0);  // 1 + 20 us / 10 us
  w = ClassWeights();
  w.utilisation = 1;
  s.utilisation = 0.5;
  EXPECT_DOUBLE_EQ(LinkCost(s, w, scales), 2.0);  // 1 + 0.5 / 0.5
  s.utilisation = 1.5;                            // past 0.98: along the tangent
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 0.98 / 0.02 + 0.52 / (0.02 * 0.02), 1e-6);
  w = ClassWeights();
  w.capacity = 1;
  s.capacity = DataRate::Gbps(2.5);
  EXPECT_DOUBLE_EQ(LinkCost(s, w, scales), 5.0);  // 1 + 10 / 2.5
  s.up = false;
  EXPECT_TRUE(std::isinf(LinkCost(s, w, scales)));
}

}  // namespace
}  // namespace dar
