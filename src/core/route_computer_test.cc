#include "core/route_computer.h"

#include <cmath>

#include "core/topology_gen.h"
#include "core/validator.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

// Four routers: s reaches t over a or over b.
struct Diamond {
  Diamond() {
    s = topo.AddNode("s", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    t = topo.AddNode("t", NodeKind::kSwitch);
    LinkParams p;
    p.capacity = DataRate::Gbps(10);
    p.delay = Microseconds(10);
    sa = topo.AddDuplexLink(s, a, p).first;
    sb = topo.AddDuplexLink(s, b, p).first;
    topo.AddDuplexLink(a, t, p);
    topo.AddDuplexLink(b, t, p);
  }
  // The weight s gives to `link` toward t in `tables`, 0 if it is not a next hop.
  double Weight(const RoutingTables& tables, LinkId link) const {
    for (const NextHop& h : tables.Lookup(s, t)) {
      if (h.link == link) return h.weight;
    }
    return 0;
  }
  Topology topo;
  NodeId s, a, b, t;
  LinkId sa, sb;
};

LinkSample Sample(double utilisation, bool up = true) {
  LinkSample x;
  x.rtt_smoothed = Microseconds(25);
  x.utilisation = utilisation;
  x.up = up;
  return x;
}

// Every node reaches every destination downhill, and the validator finds nothing wrong.
void ExpectValid(const RouteComputer& rc, const RouteCycle& cycle) {
  Topology view = rc.topology();
  for (LinkId l = 0; l < view.num_links(); ++l) view.mutable_link(l).up = !rc.known_down(l);
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    const RoutingTables& t = *cycle.tables[cls];
    const ValidationReport report = ValidateTables(view, t);
    EXPECT_TRUE(report.ok()) << report.ToStatus();
    for (NodeId d : t.destinations()) {
      for (NodeId v = 0; v < view.num_nodes(); ++v) {
        for (const NextHop& h : t.Lookup(v, d)) {
          EXPECT_LT(rc.engine(cls).Potential(d, view.link(h.link).dst),
                    rc.engine(cls).Potential(d, v));
        }
      }
    }
  }
}

TEST(RouteComputerTest, FirstCycleIsFullAndVersionsGrowPerClass) {
  Diamond g;
  RouteComputer rc(g.topo, RouteComputerConfig());
  EXPECT_EQ(rc.version(), 0u);
  RouteCycle c1 = rc.Cycle(/*force_full=*/false);
  EXPECT_TRUE(c1.full);
  EXPECT_EQ(c1.tables[0]->version(), 1u);
  EXPECT_EQ(c1.tables[1]->version(), 2u);
  ExpectValid(rc, c1);
  // Every router is a destination and s splits evenly over the two equal ways.
  EXPECT_EQ(c1.tables[0]->destinations().size(), 4u);
  EXPECT_NEAR(g.Weight(*c1.tables[0], g.sa), 0.5, 1e-9);
  RouteCycle c2 = rc.Cycle(false);
  EXPECT_FALSE(c2.full);
  EXPECT_EQ(c2.tables[0]->version(), 3u);
  EXPECT_EQ(c2.changed_links[0], 0);
  EXPECT_EQ(rc.stats().cycles, 2);
  EXPECT_EQ(rc.stats().full_cycles, 1);
}

TEST(RouteComputerTest, KnownDownAndDrainedLinksCarryNothing) {
  Diamond g;
  RouteComputer rc(g.topo, RouteComputerConfig());
  rc.Cycle(false);
  rc.SetKnownDown(g.sa, true);
  RouteCycle down = rc.Cycle(false);
  EXPECT_GT(down.changed_links[0], 0);
  EXPECT_EQ(rc.Cost(0, g.sa), kUnusable);
  EXPECT_EQ(g.Weight(*down.tables[0], g.sa), 0);
  EXPECT_NEAR(g.Weight(*down.tables[1], g.sb), 1, 1e-9);
  ExpectValid(rc, down);

  rc.SetKnownDown(g.sa, false);
  rc.SetDrained(g.sb, true);
  RouteCycle drained = rc.Cycle(false);
  EXPECT_TRUE(rc.drained(g.sb));
  EXPECT_EQ(rc.Cost(1, g.sb), kUnusable);
  EXPECT_EQ(g.Weight(*drained.tables[0], g.sb), 0);
  EXPECT_NEAR(g.Weight(*drained.tables[0], g.sa), 1, 1e-9);
  // A drained link is up; it just must not carry traffic.
  EXPECT_TRUE(rc.StateOf(g.sb).up);

  rc.SetDrained(g.sb, false);
  RouteCycle back = rc.Cycle(false);
  EXPECT_GT(g.Weight(*back.tables[0], g.sb), 0.3);
}

TEST(RouteComputerTest, SmallCostMovesAreIgnoredLargeOnesRecomputed) {
  Diamond g;
  RouteComputerConfig config;
  config.min_cost_change = 0.05;
  config.full_every = 1000;
  RouteComputer rc(g.topo, config);
  rc.Observe(g.sa, Sample(0.1));
  rc.Cycle(false);
  rc.Observe(g.sa, Sample(0.1001));  // a cost move far below 5%
  EXPECT_EQ(rc.Cycle(false).changed_links[1], 0);
  for (int i = 0; i < 20; ++i) rc.Observe(g.sa, Sample(0.9));
  RouteCycle loaded = rc.Cycle(false);
  EXPECT_FALSE(loaded.full);
  EXPECT_EQ(loaded.changed_links[1], 1);
  // The bulk class weighs utilisation: s moves most new traffic to b.
  EXPECT_LT(g.Weight(*loaded.tables[1], g.sa), 0.3);
}

TEST(RouteComputerTest, ManyChangedLinksRecomputeAClassWhole) {
  Diamond g;
  RouteComputerConfig config;
  config.full_above_changed_fraction = 0.5;
  RouteComputer rc(g.topo, config);
  rc.Cycle(false);
  rc.Observe(g.sa, Sample(0.9));  // one link of eight: incremental
  RouteCycle few = rc.Cycle(false);
  EXPECT_EQ(few.classes_recomputed, 0);
  for (LinkId l = 0; l < g.topo.num_links(); ++l) rc.Observe(l, Sample(0.5));
  RouteCycle many = rc.Cycle(false);
  EXPECT_FALSE(many.full);
  EXPECT_GT(many.changed_links[1], 4);
  EXPECT_EQ(many.classes_recomputed, 2);
  ExpectValid(rc, many);
  // By default never: the simulator's cycles stay as they were.
  EXPECT_GT(RouteComputerConfig().full_above_changed_fraction, 1);
}

TEST(RouteComputerTest, FullEveryCycles) {
  Diamond g;
  RouteComputerConfig config;
  config.full_every = 3;
  RouteComputer rc(g.topo, config);
  std::vector<bool> full;
  for (int i = 0; i < 7; ++i) full.push_back(rc.Cycle(false).full);
  EXPECT_EQ(full, (std::vector<bool>{true, false, false, true, false, false, true}));
  EXPECT_TRUE(rc.Cycle(/*force_full=*/true).full);
}

TEST(RouteComputerTest, StateComesFromSampleForecastAndParams) {
  Diamond g;
  RouteComputerConfig config;
  config.horizon_periods = 100;
  RouteComputer rc(g.topo, config);
  // A ramp: the forecast runs ahead of the last sample.
  for (int i = 0; i <= 200; ++i) rc.Observe(g.sa, Sample(0.2 + 0.002 * i));
  const LinkState s = rc.StateOf(g.sa);
  EXPECT_GT(rc.ForecastOf(g.sa).mean, 0.6);
  EXPECT_GE(s.utilisation, 0.6);
  EXPECT_LE(s.utilisation, 1.0);
  // A falling load: the state never plans for less than the load there is now.
  for (int i = 0; i <= 200; ++i) rc.Observe(g.sb, Sample(0.8 - 0.002 * i));
  EXPECT_NEAR(rc.StateOf(g.sb).utilisation, 0.4, 1e-9);

  LinkSample q = Sample(0);
  q.queue_bytes = 125000;  // 1 ms at 1 Gb/s
  q.loss = 0.02;
  rc.Observe(g.sa, q);
  rc.SetLinkParams(g.sa, DataRate::Gbps(1), Microseconds(300));
  const LinkState t = rc.StateOf(g.sa);
  EXPECT_EQ(t.capacity, DataRate::Gbps(1));
  EXPECT_EQ(t.propagation, Microseconds(300));
  EXPECT_EQ(t.queueing, Milliseconds(1));
  EXPECT_DOUBLE_EQ(t.loss, 0.02);
}

TEST(RouteComputerTest, SamplesRuleALinkDownOnlyWhenConfiguredTo) {
  Diamond g;
  RouteComputer sim(g.topo, RouteComputerConfig());
  LinkSample never_answered = Sample(0, /*up=*/false);
  never_answered.rtt_smoothed = Duration(0);
  sim.Observe(g.sa, never_answered);
  EXPECT_TRUE(sim.StateOf(g.sa).up);  // a link that never answered is not ruled out
  sim.Observe(g.sa, Sample(0, /*up=*/false));
  EXPECT_FALSE(sim.StateOf(g.sa).up);

  RouteComputerConfig config;
  config.down_from_samples = false;
  RouteComputer controller(g.topo, config);
  controller.Observe(g.sa, Sample(0, /*up=*/false));
  EXPECT_TRUE(controller.StateOf(g.sa).up);
  controller.SetKnownDown(g.sa, true);
  EXPECT_FALSE(controller.StateOf(g.sa).up);
}

TEST(RouteComputerTest, TopologyLinksDownAtConstructionStartKnownDown) {
  Diamond g;
  g.topo.mutable_link(g.sb).up = false;
  RouteComputer rc(g.topo, RouteComputerConfig());
  EXPECT_TRUE(rc.known_down(g.sb));
  RouteCycle c = rc.Cycle(false);
  EXPECT_EQ(g.Weight(*c.tables[0], g.sb), 0);
  ExpectValid(rc, c);
}

TEST(RouteComputerTest, NewPolicyMakesTheNextCycleFull) {
  Diamond g;
  RouteComputerConfig config;
  config.full_every = 1000;
  RouteComputer rc(g.topo, config);
  rc.Cycle(false);
  EXPECT_FALSE(rc.Cycle(false).full);
  config.latency.utilisation = 2;
  rc.SetConfig(config);
  EXPECT_TRUE(rc.Cycle(false).full);
  config.diffusion.temperature = 0;  // rebuilds the engines
  rc.SetConfig(config);
  RouteCycle c = rc.Cycle(false);
  EXPECT_TRUE(c.full);
  EXPECT_EQ(rc.engine(0).config().temperature, 0);
  ExpectValid(rc, c);
  EXPECT_GT(c.tables[0]->version(), 4u);
}

TEST(RouteComputerTest, ValidateNamesTheBadField) {
  RouteComputerConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.full_every = 0;
  EXPECT_NE(c.Validate().message().find("full_every"), absl::string_view::npos);
  c = RouteComputerConfig();
  c.bulk.hop = 0;
  EXPECT_NE(c.Validate().message().find("bulk.hop"), absl::string_view::npos);
  c = RouteComputerConfig();
  c.min_cost_change = std::nan("");
  EXPECT_NE(c.Validate().message().find("min_cost_change"), absl::string_view::npos);
  c = RouteComputerConfig();
  c.forecast.alpha = 0;
  EXPECT_NE(c.Validate().message().find("forecast"), absl::string_view::npos);
}

// A larger fabric through many noisy cycles: tables stay valid and downhill.
TEST(RouteComputerTest, NoisyFabricStaysValid) {
  LeafSpineParams p;
  p.leaves = 6;
  p.spines = 3;
  p.hosts_per_leaf = 2;
  Topology topo = LeafSpine(p);
  RouteComputerConfig config;
  config.full_every = 7;
  RouteComputer rc(topo, config);
  uint64_t last_version = 0;
  for (int i = 0; i < 30; ++i) {
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      rc.Observe(l, Sample(0.5 + 0.4 * std::sin(0.7 * l + 1.3 * i)));
    }
    if (i == 10)
      rc.SetKnownDown(topo.FindLink(*topo.FindNode("leaf0"), *topo.FindNode("spine0")), true);
    RouteCycle c = rc.Cycle(false);
    EXPECT_GT(c.tables[0]->version(), last_version);
    last_version = c.tables[1]->version();
    ExpectValid(rc, c);
  }
}

}  // namespace
}  // namespace dar
