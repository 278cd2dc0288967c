#include "core/route_computer.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/topology_gen.h"
#include "core/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

// Four routers: s reaches t over a or over b.
struct Diamond {
  explicit Diamond(DataRate capacity = DataRate::Gbps(10), Duration delay = Microseconds(10)) {
    s = topo.AddNode("s", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    t = topo.AddNode("t", NodeKind::kSwitch);
    LinkParams p;
    p.capacity = capacity;
    p.delay = delay;
    sa = topo.AddDuplexLink(s, a, p).first;
    sb = topo.AddDuplexLink(s, b, p).first;
    std::tie(at, ta) = topo.AddDuplexLink(a, t, p);
    std::tie(bt, tb) = topo.AddDuplexLink(b, t, p);
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
  LinkId sa, sb, at, ta, bt, tb;
};

LinkSample Sample(double utilisation, bool up = true) {
  LinkSample x;
  x.rtt_smoothed = Microseconds(25);
  x.utilisation = utilisation;
  x.up = up;
  return x;
}

// A sample as an agent reports it: RTT, loss and queue as measured.
LinkSample Measured(double utilisation, Duration rtt, double loss = 0, int64_t queue_bytes = 0) {
  LinkSample x;
  x.rtt_smoothed = rtt;
  x.utilisation = utilisation;
  x.loss = loss;
  x.queue_bytes = queue_bytes;
  return x;
}

// The controller's scale (1 ms of delay is a reference) on the lab's 100 Mb/s links.
RouteComputerConfig LabConfig() {
  RouteComputerConfig c;
  c.scales.reference_delay = Milliseconds(1);
  c.cost_decay_periods = 4;
  c.measured_links = true;
  return c;
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
          EXPECT_LT(rc.Potential(cls, d, view.link(h.link).dst), rc.Potential(cls, d, v));
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

// A cycle another layer decides takes the versions a cycle would and leaves the engines idle;
// the next cycle of the engines recomputes every destination.
TEST(RouteComputerTest, SkippedCyclesTakeVersionsAndTheNextIsFull) {
  Diamond g;
  RouteComputer rc(g.topo, RouteComputerConfig());
  rc.Cycle(false);
  rc.Cycle(false);  // versions 3 and 4, not full
  // A link down while cycles are skipped: its cost says so at once.
  ASSERT_TRUE(std::isfinite(rc.Cost(0, g.sa)));
  rc.SetKnownDown(g.sa, true);
  EXPECT_EQ(rc.SkipCycle(), 5u);
  EXPECT_EQ(rc.version(), 6u);
  EXPECT_FALSE(std::isfinite(rc.Cost(0, g.sa)));
  rc.SetKnownDown(g.sa, false);
  const RouteCycle next = rc.Cycle(false);
  EXPECT_TRUE(next.full);
  EXPECT_EQ(next.tables[0]->version(), 7u);
  ExpectValid(rc, next);
  EXPECT_EQ(rc.stats().cycles, 4);
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

// The lab's finding: the flow moved to a free branch fills it (utilisation 0.98, no queue, no
// loss); the branch it left is congested (40 ms of queue behind a shaper the agent does not
// report, 1% loss) though its utilisation looks low. The busy branch must not cost more.
TEST(RouteComputerTest, BusyLinkWithoutQueueIsCheaperThanMeasuredCongestion) {
  Diamond g(DataRate::Mbps(100), Microseconds(50));
  RouteComputer rc(g.topo, LabConfig());
  for (int i = 0; i < 50; ++i) {
    for (LinkId l = 0; l < g.topo.num_links(); ++l)
      rc.Observe(l, Measured(0.01, Microseconds(100)));
  }
  for (int i = 0; i < 50; ++i) {
    rc.Observe(g.at, Measured(0.98, Microseconds(100)));
    rc.Observe(g.sa, Measured(0.98, Microseconds(100)));
    // The probe's round trip crosses the queue whichever end sends it.
    rc.Observe(g.bt, Measured(0.1, Microseconds(40100), 0.01));
    rc.Observe(g.tb, Measured(0.01, Microseconds(40100), 0.01));
  }
  const RouteCycle c = rc.Cycle(false);
  EXPECT_EQ(rc.BaseRtt(g.bt), Microseconds(100));
  const LinkState busy = rc.StateOf(g.at), congested = rc.StateOf(g.bt);
  EXPECT_GE(busy.utilisation, 0.98);
  EXPECT_EQ(busy.queueing, Duration(0));
  EXPECT_EQ(busy.measured_congestion, 0);
  EXPECT_EQ(congested.queueing, Milliseconds(40));  // all of the inflation: none is reported
  EXPECT_NEAR(congested.measured_congestion, 40 + 1, 1e-9);  // 40 ms, 1% loss
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    EXPECT_LT(rc.Cost(cls, g.at), rc.Cost(cls, g.bt)) << "class " << cls;
    EXPECT_GT(g.Weight(*c.tables[cls], g.sa), 0.99) << "class " << cls;
  }
  // A queue confirms the prediction as far as it goes: 10 ms is charged as delay and lets
  // the utilisation term grow by as much.
  const double busy_cost = rc.Cost(0, g.at);
  rc.Observe(g.at, Measured(0.98, Microseconds(100), 0, /*queue_bytes=*/125000));  // 10 ms
  rc.Cycle(false);
  EXPECT_NEAR(rc.Cost(0, g.at), busy_cost + 0.3 * 10 + 0.3 * 10, 0.01);
  EXPECT_NEAR(rc.StateOf(g.at).measured_congestion, 10, 1e-9);
}

// A round trip crosses both directions: what the reverse direction's reported queue explains
// is not counted again in this one, what nobody reports counts in both.
TEST(RouteComputerTest, RttInflationIsQueueingNotPropagation) {
  Diamond g(DataRate::Mbps(100), Microseconds(50));
  RouteComputer rc(g.topo, LabConfig());
  rc.Observe(g.bt, Measured(0, Microseconds(100)));
  rc.Observe(g.tb, Measured(0, Microseconds(100)));
  // 12 ms more on the round trip; b -> t reports 125000 bytes (10 ms at 100 Mb/s) queued.
  rc.Observe(g.bt, Measured(0.9, Microseconds(12100), 0, 125000));
  rc.Observe(g.tb, Measured(0.1, Microseconds(12100)));
  EXPECT_EQ(rc.BaseRtt(g.bt), Microseconds(100));
  EXPECT_EQ(rc.StateOf(g.bt).queueing, Milliseconds(12));
  EXPECT_EQ(rc.StateOf(g.tb).queueing, Milliseconds(2));
  // A sample's own windowed minimum counts too (the simulator's agents report it).
  LinkSample with_min = Measured(0, Microseconds(300));
  with_min.rtt_min = Microseconds(80);
  rc.Observe(g.sa, with_min);
  EXPECT_EQ(rc.BaseRtt(g.sa), Microseconds(80));
  EXPECT_EQ(rc.BaseRtt(g.sb), Duration(0));  // never measured
}

TEST(RouteComputerTest, BaseRttIsTheMinimumOverTheWindow) {
  Diamond g;
  RouteComputerConfig config;
  config.base_rtt_periods = 100;
  RouteComputer rc(g.topo, config);
  rc.Observe(g.sa, Measured(0, Microseconds(50)));
  for (int i = 0; i < 99; ++i) rc.Observe(g.sa, Measured(0, Microseconds(90 + i % 7)));
  EXPECT_EQ(rc.BaseRtt(g.sa), Microseconds(50));  // congestion shorter than the window
  for (int i = 0; i < 200; ++i) rc.Observe(g.sa, Measured(0, Microseconds(90 + i % 7)));
  // A longer path for good: the base follows within a window.
  EXPECT_GE(rc.BaseRtt(g.sa), Microseconds(90));
  EXPECT_LE(rc.BaseRtt(g.sa), Microseconds(96));
  rc.Observe(g.sa, Measured(0, Microseconds(70)));
  EXPECT_EQ(rc.BaseRtt(g.sa), Microseconds(70));
}

TEST(RouteComputerTest, CostsRiseAtOnceAndFallSlowly) {
  Diamond g(DataRate::Mbps(100), Microseconds(50));
  RouteComputerConfig config = LabConfig();
  config.cost_decay_periods = 4;
  RouteComputer rc(g.topo, config);
  rc.Observe(g.at, Measured(0, Microseconds(100)));
  rc.Cycle(false);
  const double idle = rc.Cost(0, g.at);
  rc.Observe(g.at, Measured(0.5, Microseconds(20100), 0.02));
  rc.Cycle(false);
  const double high = rc.Cost(0, g.at);
  EXPECT_GT(high, idle + 6);  // 20 ms at 0.3 per ms, and the loss
  rc.Observe(g.at, Measured(0, Microseconds(100)));
  rc.Cycle(false);
  // A quarter of the way down (the forecast still remembers a little of the load).
  EXPECT_NEAR(rc.Cost(0, g.at), high - (high - idle) / 4, 0.01);
  for (int i = 0; i < 60; ++i) rc.Cycle(false);
  EXPECT_NEAR(rc.Cost(0, g.at), idle, 0.05 * idle);
  // A down link is unusable at once and usable again at once.
  rc.SetKnownDown(g.at, true);
  rc.Cycle(false);
  EXPECT_EQ(rc.Cost(0, g.at), kUnusable);
  rc.SetKnownDown(g.at, false);
  rc.Cycle(false);
  EXPECT_NEAR(rc.Cost(0, g.at), idle, 0.05 * idle);
}

// The cycles in which s's main next hop toward t changes, over `cycles` cycles, when the load
// each cycle is set by `load(cycle, via_a)` (via_a: s sent most traffic over a last cycle).
template <typename Load>
int MainNextHopChanges(RouteComputer& rc, const Diamond& g, int cycles, Load load) {
  int changes = 0;
  bool via_a = g.Weight(*rc.Cycle(false).tables[0], g.sa) > 0.5;
  for (int i = 0; i < cycles; ++i) {
    load(i, via_a);
    const bool now = g.Weight(*rc.Cycle(false).tables[0], g.sa) > 0.5;
    changes += now != via_a;
    via_a = now;
  }
  return changes;
}

// Load that comes and goes every cycle on one branch: the tables do not follow it each time.
TEST(RouteComputerTest, AlternatingLoadDoesNotFlipRoutesEveryCycle) {
  const auto run = [](int decay_periods) {
    Diamond g(DataRate::Mbps(100), Microseconds(50));
    RouteComputerConfig config = LabConfig();
    config.cost_decay_periods = decay_periods;
    RouteComputer rc(g.topo, config);
    for (LinkId l = 0; l < g.topo.num_links(); ++l) rc.Observe(l, Measured(0, Microseconds(100)));
    // b's branch is a little longer, so that an idle a is the better way.
    rc.Observe(g.bt, Measured(0, Microseconds(2100)));
    rc.Observe(g.tb, Measured(0, Microseconds(2100)));
    rc.SetLinkParams(g.bt, DataRate::Mbps(100), Microseconds(1050));
    return MainNextHopChanges(rc, g, 40, [&](int i, bool) {
      if (i % 2 == 0) {
        rc.Observe(g.at, Measured(0.95, Microseconds(20100), 0.01, 125000));
      } else {
        rc.Observe(g.at, Measured(0.05, Microseconds(100)));
      }
    });
  };
  EXPECT_LE(run(/*decay_periods=*/4), 1);
  EXPECT_GE(run(/*decay_periods=*/1), 30);  // undamped, the route follows every swing
}

// The lab's flap in miniature: one elastic flow fills whichever branch s sends it on, without
// a queue; b's branch is congested the whole time. The flow moves to a once and stays.
TEST(RouteComputerTest, ElasticFlowMovesOffCongestionAndStays) {
  const auto run = [](const RouteComputerConfig& config) {
    Diamond g(DataRate::Mbps(100), Microseconds(50));
    RouteComputer rc(g.topo, config);
    for (int i = 0; i < 20; ++i) {
      for (LinkId l = 0; l < g.topo.num_links(); ++l) {
        rc.Observe(l, Measured(0, Microseconds(100)));
      }
    }
    return MainNextHopChanges(rc, g, 100, [&](int, bool via_a) {
      const double on_a = via_a ? 0.98 : 0.0, on_b = via_a ? 0.0 : 0.98;
      rc.Observe(g.sa, Measured(on_a, Microseconds(100)));
      rc.Observe(g.at, Measured(on_a, Microseconds(100)));
      rc.Observe(g.sb, Measured(on_b, Microseconds(100)));
      // A shaper the agent does not know: utilisation low, 45 ms of queue, loss.
      rc.Observe(g.bt, Measured(0.1 + on_b / 10, Microseconds(45100), 0.01));
      rc.Observe(g.tb, Measured(0.01, Microseconds(45100), 0.01));
    });
  };
  EXPECT_LE(run(LabConfig()), 1);
  RouteComputerConfig before = LabConfig();  // utilisation trusted alone, no damping
  before.scales.unconfirmed_utilisation = 1;
  before.cost_decay_periods = 1;
  EXPECT_GE(run(before), 10);
}

// A sample with the link's throughput (utilisation against `capacity`).
LinkSample Delivering(DataRate throughput, DataRate capacity, Duration rtt, double loss = 0) {
  LinkSample x = Measured(static_cast<double>(throughput.bps()) / capacity.bps(), rtt, loss);
  x.throughput = throughput;
  return x;
}

// The lab's flap, round two: b -> t is configured at 100 Mb/s but shaped to 10. Queue-limited,
// it delivers 10 Mb/s: that is its capacity. Once the traffic has left it, it is idle and
// looks free, but it keeps the cost it had until the estimate has recovered, so the transfer
// on a (full, no queue) stays there.
TEST(RouteComputerTest, LinkFoundSlowStaysExpensiveAfterTrafficLeaves) {
  const DataRate configured = DataRate::Mbps(100), shaped = DataRate::Mbps(10);
  const auto run = [&](const RouteComputerConfig& config, int* changes) {
    Diamond g(configured, Microseconds(50));
    RouteComputer rc(g.topo, config);
    for (int i = 0; i < 20; ++i) {
      for (LinkId l = 0; l < g.topo.num_links(); ++l) {
        rc.Observe(l, Delivering(DataRate(), configured, Microseconds(100)));
      }
    }
    // The transfer is on b's branch when the shaper comes: 10 Mb/s get through, the RTT
    // rises to 45 ms, loss.
    for (int i = 0; i < 10; ++i) {
      const Duration rtt = Microseconds(100 + 4500 * (i + 1));
      rc.Observe(g.bt, Delivering(shaped, configured, rtt, 0.05));
      rc.Observe(g.tb, Delivering(DataRate(), configured, rtt, 0.05));
      rc.Cycle(false);
    }
    if (config.queue_limited_periods < 10) {
      EXPECT_EQ(rc.DeliveryCapacity(g.bt), shaped);
      EXPECT_TRUE(rc.Slow(g.bt));
      EXPECT_EQ(rc.StateOf(g.bt).capacity, shaped);
    }
    // From now on the transfer fills whichever branch s sends it on; b's branch without it
    // is idle: no queue, no loss.
    *changes = MainNextHopChanges(rc, g, 100, [&](int, bool via_a) {
      const DataRate on_a = via_a ? DataRate::Mbps(98) : DataRate();
      const DataRate on_b = via_a ? DataRate() : shaped;
      const Duration rtt_b = via_a ? Microseconds(100) : Microseconds(45100);
      rc.Observe(g.sa, Delivering(on_a, configured, Microseconds(100)));
      rc.Observe(g.at, Delivering(on_a, configured, Microseconds(100)));
      rc.Observe(g.sb, Delivering(on_b, configured, Microseconds(100)));
      rc.Observe(g.bt, Delivering(on_b, configured, rtt_b, via_a ? 0 : 0.05));
      rc.Observe(g.tb, Delivering(DataRate(), configured, rtt_b, via_a ? 0 : 0.05));
    });
    return rc.DeliveryCapacity(g.bt);
  };
  int changes = 0;
  // 10 s idle: the estimate has recovered by a sixth of the gap only.
  const DataRate after = run(LabConfig(), &changes);
  EXPECT_LE(changes, 1);
  EXPECT_GT(after, DataRate::Mbps(20));
  EXPECT_LT(after, DataRate::Mbps(30));
  RouteComputerConfig unheld = LabConfig();  // no estimate: the idle link looks free
  unheld.measured_links = true;
  unheld.queue_limited_periods = 1000000;
  run(unheld, &changes);
  EXPECT_GE(changes, 3);
}

// A full link the traffic leaves is not slow: its throughput falls to nothing while the
// smoothed RTT still remembers the queue, but the queue no longer stands.
TEST(RouteComputerTest, LoadLeavingAFullLinkIsNotASlowLink) {
  Diamond g(DataRate::Mbps(100), Microseconds(50));
  RouteComputer rc(g.topo, LabConfig());
  rc.Observe(g.at, Delivering(DataRate(), DataRate::Mbps(100), Microseconds(100)));
  for (int i = 0; i < 20; ++i) {
    rc.Observe(g.at, Delivering(DataRate::Mbps(99), DataRate::Mbps(100), Microseconds(20100)));
  }
  EXPECT_EQ(rc.DeliveryCapacity(g.at), DataRate::Mbps(99));
  for (int i = 1; i <= 20; ++i) {  // gain 1/8 per probe, a probe per sample
    const Duration rtt = Microseconds(100 + static_cast<int64_t>(20000 * std::pow(0.875, i)));
    rc.Observe(g.at, Delivering(DataRate::Mbps(i == 1 ? 30 : 0), DataRate::Mbps(100), rtt));
    EXPECT_FALSE(rc.Slow(g.at)) << i;
  }
  EXPECT_GE(rc.DeliveryCapacity(g.at), DataRate::Mbps(99));
  // The simulator's links are what they say: no estimate at all.
  RouteComputerConfig sim = LabConfig();
  sim.measured_links = false;
  RouteComputer plain(g.topo, sim);
  for (int i = 0; i < 30; ++i) {
    plain.Observe(g.at, Delivering(DataRate::Mbps(10), DataRate::Mbps(100), Microseconds(20100)));
  }
  EXPECT_EQ(plain.DeliveryCapacity(g.at), DataRate::Mbps(100));
}

// The lab's flap under CPU load: the transfer fills a -> t (the agent's queue stands) and
// leaves it within the next sample, whose smoothed RTT still rises from the queue. Those two
// samples are a queue-limited stretch; the link delivered 99 Mb/s in it, not the 26 of the
// sample the traffic left in. (Taken as 26, a -> t was slow, held for tens of seconds, and
// the lab's transfer went back to a congested branch and stayed there.)
TEST(RouteComputerTest, TrafficLeavingAFullLinkLeavesItsRateNotItsTail) {
  Diamond g(DataRate::Mbps(100), Microseconds(50));
  RouteComputer rc(g.topo, LabConfig());
  const DataRate configured = DataRate::Mbps(100);
  for (int i = 0; i < 20; ++i) {
    rc.Observe(g.at, Delivering(DataRate(), configured, Microseconds(100)));
  }
  LinkSample full = Delivering(DataRate::Mbps(99), configured, Microseconds(8100));
  full.queue_bytes = 330000;  // 26 ms at 100 Mb/s
  rc.Observe(g.at, full);
  rc.Observe(g.at, Delivering(DataRate::Mbps(26), configured, Microseconds(8700)));
  EXPECT_EQ(rc.DeliveryCapacity(g.at), DataRate::Mbps(99));
  EXPECT_FALSE(rc.Slow(g.at));
}

// A link carrying a trickle whose probes come back late (a busy CPU answering them): the RTT
// rises by 10 ms with no queue reported. At 0.2 Mb/s that is 250 bytes, no queue the link's
// own traffic could hold, so the trickle is not taken for what the link can deliver. The same
// inflation under 20 Mb/s (25 KB) is a queue, and the link is found slow.
TEST(RouteComputerTest, RttInflationUnderATrickleIsNoQueueOfItsOwn) {
  for (const DataRate carried : {DataRate::Mbps(0.2), DataRate::Mbps(20)}) {
    SCOPED_TRACE(testing::Message() << carried.bps() << " bit/s");
    Diamond g(DataRate::Mbps(100), Microseconds(50));
    RouteComputer rc(g.topo, LabConfig());
    const DataRate configured = DataRate::Mbps(100);
    for (int i = 0; i < 20; ++i) {
      rc.Observe(g.at, Delivering(DataRate(), configured, Microseconds(100)));
    }
    for (int i = 0; i < 5; ++i) {
      rc.Observe(g.at, Delivering(carried, configured, Microseconds(10'100 + 100 * i)));
    }
    if (carried < DataRate::Mbps(1)) {
      EXPECT_EQ(rc.DeliveryCapacity(g.at), configured);
      EXPECT_FALSE(rc.Slow(g.at));
    } else {
      EXPECT_EQ(rc.DeliveryCapacity(g.at), carried);
      EXPECT_TRUE(rc.Slow(g.at));
    }
  }
}

// A flow arriving is a step, as the agent's throughput average shows it: a new level, not a
// trend to extrapolate 30 s ahead. A slow ramp still is one.
TEST(RouteComputerTest, ForecastRestartsAtAStepButFollowsARamp) {
  const auto forecast = [](const RouteComputerConfig& config, auto series) {
    Diamond g;
    RouteComputer rc(g.topo, config);
    for (int i = 0; i < 300; ++i) rc.Observe(g.at, Sample(series(i)));
    return rc.ForecastOf(g.at).mean;
  };
  const auto step = [](int i) { return i < 100 ? 0.0 : 0.6 * (1 - std::exp(-(i - 100) / 10.0)); };
  const auto ramp = [](int i) { return 0.1 + 0.002 * i; };
  RouteComputerConfig restart = LabConfig(), holt = LabConfig();
  holt.forecast_restart_step = 2;
  EXPECT_GT(forecast(holt, step), 0.9);  // Holt alone reads the step as a climb
  EXPECT_LT(forecast(restart, step), 0.75);
  EXPECT_NEAR(forecast(restart, ramp), forecast(holt, ramp), 1e-9);
  EXPECT_GT(forecast(restart, ramp), 0.8);
}

// Liveness is the owner's verdict over both ends (CableUp), never one sample's.
TEST(RouteComputerTest, OnlyItsOwnerRulesALinkDown) {
  Diamond g;
  RouteComputer rc(g.topo, RouteComputerConfig());
  rc.Observe(g.sa, Sample(0, /*up=*/false));
  EXPECT_TRUE(rc.StateOf(g.sa).up);
  rc.SetKnownDown(g.sa, true);
  EXPECT_FALSE(rc.StateOf(g.sa).up);
  rc.SetKnownDown(g.sa, false);
  EXPECT_TRUE(rc.StateOf(g.sa).up);
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
  EXPECT_EQ(rc.engine_config().temperature, 0);
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
  c = RouteComputerConfig();
  c.cost_decay_periods = 0;
  EXPECT_NE(c.Validate().message().find("cost_decay_periods"), absl::string_view::npos);
  c = RouteComputerConfig();
  c.base_rtt_periods = 0;
  EXPECT_NE(c.Validate().message().find("base_rtt_periods"), absl::string_view::npos);
  c = RouteComputerConfig();
  c.scales.unconfirmed_utilisation = 1.5;
  EXPECT_NE(c.Validate().message().find("unconfirmed_utilisation"), absl::string_view::npos);
}

TEST(LinkCostTest, PresentLoadIsBoundedByMeasuredCongestionTheForecastRiseIsNot) {
  ClassWeights w;
  w.utilisation = 1;
  CostScales scales;  // unconfirmed_utilisation 0.5: u / (1 - u) = 1 allowed unmeasured
  LinkState s;
  s.utilisation = 0.9;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 0.9 / 0.1, 1e-9);  // not measured: trusted
  s.present_utilisation = 0.9;
  s.measured_congestion = 0;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 1, 1e-9);  // busy, but no queue and no loss
  s.measured_congestion = 3;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 1 + 3, 1e-9);
  s.measured_congestion = 100;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 0.9 / 0.1, 1e-9);  // confirmed in full
  // Load that is coming (the forecast above the present) is charged in full.
  s.measured_congestion = 0;
  s.present_utilisation = 0.5;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 1 + (0.9 / 0.1 - 1), 1e-9);
  s.utilisation = s.present_utilisation = 0.3;  // below the allowance: measurement is moot
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 0.3 / 0.7, 1e-9);
  scales.unconfirmed_utilisation = 1;  // off
  s.utilisation = s.present_utilisation = 0.9;
  EXPECT_NEAR(LinkCost(s, w, scales), 1 + 0.9 / 0.1, 1e-9);
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

// A weight policy for the tests: records the batch, answers with `weights_for` (a function of
// the candidate's index in its row), or fails.
class TestPolicy : public WeightPolicy {
 public:
  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                     Executor& executor) override {
    last = batch;
    ++calls;
    if (!error.ok()) return error;
    for (const PolicyDecision& d : batch.decisions) WeighRow(batch, d, weights);
    return absl::OkStatus();
  }
  virtual void WeighRow(const PolicyBatch&, const PolicyDecision& d, absl::Span<double> weights) {
    for (uint32_t i = 0; i < d.count; ++i) weights[d.first + i] = weight(i, d.count);
  }
  std::string Describe() const override { return "test policy"; }

  std::function<double(uint32_t, uint32_t)> weight = [](uint32_t, uint32_t n) { return 1.0 / n; };
  absl::Status error;
  PolicyBatch last;
  int calls = 0;
};

// The weight `tables` gives `link` out of `node` toward `dest`; 0 if it is not a next hop.
double WeightOf(const RoutingTables& tables, NodeId node, NodeId dest, LinkId link) {
  for (const NextHop& h : tables.Lookup(node, dest)) {
    if (h.link == link) return h.weight;
  }
  return 0;
}

TEST(RouteComputerTest, WeightPolicyWeighsEveryRowWithAChoice) {
  // s -> t: over a (fast) or b (10x the delay and a quarter of the capacity, lossy).
  Diamond g;
  g.topo.mutable_link(g.sb).params.delay = Microseconds(100);
  g.topo.mutable_link(g.sb).params.capacity = DataRate::Gbps(2.5);
  RouteComputer analytic(g.topo, RouteComputerConfig());
  RouteComputer rc(g.topo, RouteComputerConfig());
  auto policy = std::make_shared<TestPolicy>();
  rc.set_weight_policy(policy);
  LinkSample lossy = Sample(0.2);
  lossy.loss = 0.02;
  for (RouteComputer* r : {&analytic, &rc}) r->Observe(g.sb, lossy);
  const RouteCycle engine = analytic.Cycle(false);
  const RouteCycle cycle = rc.Cycle(false);
  EXPECT_TRUE(cycle.policy_error.empty()) << cycle.policy_error;
  ExpectValid(rc, cycle);
  ASSERT_EQ(policy->calls, 1);
  const PolicyBatch& b = policy->last;
  EXPECT_EQ(b.cycle, 1u);
  EXPECT_EQ(rc.stats().policy_cycles, 1);
  EXPECT_EQ(rc.stats().policy_failures, 0);
  EXPECT_EQ(rc.stats().policy_decisions, static_cast<int64_t>(b.decisions.size()));
  const PolicyDecision* st = nullptr;
  int rows = 0;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    for (NodeId d : engine.tables[cls]->destinations()) {
      for (NodeId v = 0; v < g.topo.num_nodes(); ++v) {
        const auto hops = engine.tables[cls]->Lookup(v, d);
        const auto mine = cycle.tables[cls]->Lookup(v, d);
        ASSERT_EQ(hops.size(), mine.size());
        for (size_t k = 0; k < hops.size(); ++k) {
          EXPECT_EQ(hops[k].link, mine[k].link);
          // Rows with a choice take the policy's weights; the others are the engine's.
          EXPECT_DOUBLE_EQ(mine[k].weight, hops.size() >= 2 ? 1.0 / hops.size() : hops[k].weight);
        }
        if (hops.size() < 2) continue;
        ASSERT_LT(rows, static_cast<int>(b.decisions.size()));
        const PolicyDecision& dec = b.decisions[rows++];
        EXPECT_EQ(dec.cls, cls);
        EXPECT_EQ(dec.destination, d);
        EXPECT_EQ(dec.node, v);
        EXPECT_EQ(dec.count, hops.size());
        if (cls == 0 && v == g.s && d == g.t) st = &dec;
      }
    }
  }
  EXPECT_EQ(rows, static_cast<int>(b.decisions.size()));
  ASSERT_NE(st, nullptr);
  const uint32_t ia = st->first + (b.candidates[st->first].link == g.sa ? 0 : 1);
  const uint32_t ib = st->first + (b.candidates[st->first].link == g.sa ? 1 : 0);
  const PolicyCandidate& a = b.candidates[ia];
  const PolicyCandidate& bb = b.candidates[ib];
  // The test policy wants the reward terms (WeightPolicy's default).
  ASSERT_EQ(b.rewards.size(), b.candidates.size());
  ASSERT_EQ(a.link, g.sa);
  ASSERT_EQ(bb.link, g.sb);
  const double w_sa = WeightOf(*engine.tables[0], g.s, g.t, g.sa);
  EXPECT_EQ(a.analytic_weight, w_sa);
  EXPECT_FLOAT_EQ(a.features[kFeatAnalyticLogit], std::log(w_sa));
  // Via a: 10 us + 10 us; via b: 100 us + 10 us, and 2% lost on the way.
  EXPECT_NEAR(b.rewards[ia].path_delay_s, 20e-6, 1e-9);
  EXPECT_NEAR(b.rewards[ib].path_delay_s, 110e-6, 1e-9);
  EXPECT_FLOAT_EQ(a.features[kFeatPathDelayRatio], 0);
  EXPECT_FLOAT_EQ(bb.features[kFeatPathDelayRatio], std::log(110.0 / 20.0));
  EXPECT_NEAR(b.rewards[ib].path_loss, 0.02, 1e-12);
  EXPECT_EQ(b.rewards[ia].path_loss, 0);
  EXPECT_FLOAT_EQ(bb.features[kFeatLinkLoss], 2);                  // reference loss 1%
  EXPECT_FLOAT_EQ(bb.features[kFeatLinkDelay], std::log1p(10.0));  // reference delay 10 us
  EXPECT_FLOAT_EQ(bb.features[kFeatCapacityShare], 0.25);
  EXPECT_FLOAT_EQ(a.features[kFeatCapacityShare], 1);
  EXPECT_FLOAT_EQ(bb.features[kFeatLinkUtilisationNow], 0.2);
  EXPECT_GE(bb.features[kFeatLinkUtilisation], 0.2);
  EXPECT_FLOAT_EQ(a.features[kFeatInverseCount], 0.5);
  // No previous tables in the first cycle; the next cycle sees this one's weights.
  EXPECT_EQ(a.features[kFeatPreviousWeight], 0);
  const uint32_t st_first = st->first;
  rc.Cycle(false);
  EXPECT_FLOAT_EQ(policy->last.candidates[st_first].features[kFeatPreviousWeight], 0.5);
}

// A policy that does not want the reward terms gets a batch without them, with the same
// rows and features as one that does.
TEST(RouteComputerTest, RewardTermsOnlyForAPolicyThatWantsThem) {
  class Lean : public TestPolicy {
   public:
    bool wants_reward_terms() const override { return false; }
  };
  LeafSpineParams p;
  p.leaves = 4;
  p.spines = 3;
  p.hosts_per_leaf = 2;
  const Topology topo = LeafSpine(p);
  RouteComputer with(topo, RouteComputerConfig()), without(topo, RouteComputerConfig());
  auto full = std::make_shared<TestPolicy>();
  auto lean = std::make_shared<Lean>();
  with.set_weight_policy(full);
  without.set_weight_policy(lean);
  for (int i = 0; i < 3; ++i) {
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      LinkSample x = Measured(0.3 + 0.3 * std::sin(0.9 * l + i), Microseconds(30 + l % 7),
                              l % 5 == 0 ? 0.01 : 0, l % 3 == 0 ? 20'000 : 0);
      with.Observe(l, x);
      without.Observe(l, x);
    }
    with.Cycle(false);
    without.Cycle(false);
    const PolicyBatch& a = full->last;
    const PolicyBatch& b = lean->last;
    ASSERT_FALSE(a.candidates.empty());
    EXPECT_EQ(a.rewards.size(), a.candidates.size());
    EXPECT_TRUE(b.rewards.empty());
    ASSERT_EQ(a.decisions.size(), b.decisions.size());
    ASSERT_EQ(a.candidates.size(), b.candidates.size());
    for (size_t k = 0; k < a.candidates.size(); ++k) {
      EXPECT_EQ(a.candidates[k].link, b.candidates[k].link);
      EXPECT_EQ(a.candidates[k].analytic_weight, b.candidates[k].analytic_weight);
      EXPECT_EQ(a.candidates[k].features, b.candidates[k].features) << "candidate " << k;
    }
  }
}

// The refined tables keep the engine's layout: a block without a decision is the engine's
// own; a block whose rows all come out as last cycle's (the policy's weights within the
// hysteresis) is last cycle's block, shared; any other is new. Either way every row holds
// what a row-by-row build gives (WeightPolicyWeighsEveryRowWithAChoice).
TEST(RouteComputerTest, RefinedTablesShareBlocksThatDidNotChange) {
  LeafSpineParams p;
  p.leaves = 20;  // more than one block of rows
  p.spines = 3;
  p.hosts_per_leaf = 2;
  const Topology topo = LeafSpine(p);
  RouteComputer rc(topo, RouteComputerConfig());
  auto policy = std::make_shared<TestPolicy>();
  rc.set_weight_policy(policy);
  // Each row's weights: `skew` more on the first candidate than the rest, summing to 1.
  double skew = 0;
  policy->weight = [&skew](uint32_t i, uint32_t n) {
    return i == 0 ? 1.0 / n + skew : 1.0 / n - skew / (n - 1);
  };
  for (LinkId l = 0; l < topo.num_links(); ++l) rc.Observe(l, Sample(0.2));
  // Counts the blocks of `now`, and those that are the same object in `last`.
  struct Shared {
    int last = 0, blocks = 0;
  };
  auto shared = [](const RoutingTables& now, const RoutingTables& last) {
    Shared s;
    for (NodeId d : now.destinations()) {
      const auto& blocks = now.Table(d)->blocks();
      for (size_t b = 0; b < blocks.size(); ++b) {
        ++s.blocks;
        s.last += blocks[b] == last.Table(d)->blocks()[b];
      }
    }
    return s;
  };
  // What a table holds, row by row.
  auto expect_rows = [&](const RoutingTables& t, double weight_first) {
    for (NodeId d : t.destinations()) {
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        const auto row = t.Lookup(v, d);
        if (row.size() < 2) continue;
        EXPECT_DOUBLE_EQ(row[0].weight, weight_first) << v << " -> " << d;
      }
    }
  };
  const RouteCycle first = rc.Cycle(false);
  ExpectValid(rc, first);
  ASSERT_FALSE(policy->last.decisions.empty());
  expect_rows(*first.tables[0], 1.0 / 3);  // 3 spines: 3 candidates
  // The same inputs and weights: every block is the engine's or last cycle's.
  RouteCycle second = rc.Cycle(false);
  ExpectValid(rc, second);
  const Shared same = shared(*second.tables[0], *first.tables[0]);
  EXPECT_EQ(same.last, same.blocks);
  for (NodeId d : second.tables[0]->destinations()) {  // and so the tables are last cycle's
    EXPECT_EQ(second.tables[0]->SharedTable(d), first.tables[0]->SharedTable(d));
  }
  expect_rows(*second.tables[0], 1.0 / 3);
  // Other weights, beyond the hysteresis: the blocks with a decision are new.
  skew = 0.3;
  const RouteCycle third = rc.Cycle(false);
  ExpectValid(rc, third);
  expect_rows(*third.tables[0], 1.0 / 3 + 0.3);
  const Shared moved = shared(*third.tables[0], *second.tables[0]);
  EXPECT_LT(moved.last, moved.blocks);
  const NodeId d0 = third.tables[0]->destinations().front();
  EXPECT_NE(third.tables[0]->SharedTable(d0), second.tables[0]->SharedTable(d0));
  for (NodeId d : third.tables[0]->destinations()) {
    const auto& now = third.tables[0]->Table(d)->blocks();
    const auto& before = second.tables[0]->Table(d)->blocks();
    ASSERT_EQ(now.size(), before.size());
    for (size_t b = 0; b < now.size(); ++b) {
      bool decided = false;
      for (uint32_t r = 0; r < DestinationTable::kRowsPerBlock; ++r) {
        const DestinationTable::Block& block = *now[b];
        if (block.offsets[r + 1] >= block.offsets[r] + 2) decided = true;
      }
      EXPECT_EQ(now[b] == before[b], !decided) << "destination " << d << " block " << b;
    }
  }
}

TEST(RouteComputerTest, FailingWeightPolicyLeavesTheEngineTables) {
  Diamond g;
  RouteComputer analytic(g.topo, RouteComputerConfig());
  RouteComputer rc(g.topo, RouteComputerConfig());
  auto policy = std::make_shared<TestPolicy>();
  rc.set_weight_policy(policy);
  auto expect_engine_tables = [&](const RouteCycle& mine, const RouteCycle& engine) {
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      for (NodeId d : engine.tables[cls]->destinations()) {
        for (NodeId v = 0; v < g.topo.num_nodes(); ++v) {
          const auto a = engine.tables[cls]->Lookup(v, d);
          const auto b = mine.tables[cls]->Lookup(v, d);
          ASSERT_EQ(a.size(), b.size());
          for (size_t k = 0; k < a.size(); ++k) {
            EXPECT_EQ(a[k].link, b[k].link);
            EXPECT_EQ(a[k].weight, b[k].weight);
          }
        }
      }
    }
  };
  policy->error = absl::InternalError("boom");
  RouteCycle c = rc.Cycle(false);
  expect_engine_tables(c, analytic.Cycle(false));
  EXPECT_THAT(c.policy_error, ::testing::HasSubstr("test policy: boom"));
  policy->error = absl::OkStatus();
  for (auto bad : {std::numeric_limits<double>::quiet_NaN(), -0.5, 0.0, 0.4}) {
    policy->weight = [bad](uint32_t i, uint32_t n) { return i == 0 ? bad : (1 - bad) / (n - 1); };
    if (bad == 0.4) policy->weight = [](uint32_t, uint32_t) { return 0.4; };  // sums to 0.8
    c = rc.Cycle(false);
    expect_engine_tables(c, analytic.Cycle(false));
    EXPECT_FALSE(c.policy_error.empty());
  }
  EXPECT_EQ(rc.stats().policy_cycles, 5);
  EXPECT_EQ(rc.stats().policy_failures, 5);
  EXPECT_EQ(rc.stats().policy_decisions, 0);
  // Back to good weights: used again.
  policy->weight = [](uint32_t i, uint32_t n) { return i == 0 ? 0.9 : 0.1 / (n - 1); };
  c = rc.Cycle(false);
  EXPECT_TRUE(c.policy_error.empty());
  EXPECT_EQ(rc.stats().policy_failures, 5);
  ExpectValid(rc, c);
}

// A bad weight in the second class's rows alone leaves the first class the engine's tables
// too (the classes are checked side by side on a pool of 2 threads; either way, none is
// refined).
TEST(RouteComputerTest, BadWeightInOneClassLeavesEveryClassTheEngines) {
  class BadInBulk : public TestPolicy {
   public:
    absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                       Executor& executor) override {
      for (const PolicyDecision& d : batch.decisions) {
        for (uint32_t i = 0; i < d.count; ++i) {
          weights[d.first + i] = d.cls == 1 && i == 0 ? -1 : i == 0 ? 0.9 : 0.1 / (d.count - 1);
        }
      }
      return absl::OkStatus();
    }
  };
  Diamond g;
  for (int threads : {1, 2}) {
    RouteComputerConfig config;
    ThreadPool pool(threads);
    RouteComputer analytic(g.topo, config), rc(g.topo, config, &pool);
    rc.set_weight_policy(std::make_shared<BadInBulk>());
    const RouteCycle engine = analytic.Cycle(false);
    const RouteCycle c = rc.Cycle(false);
    EXPECT_THAT(c.policy_error, ::testing::HasSubstr("not finite or not > 0"));
    EXPECT_EQ(rc.stats().policy_failures, 1);
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      EXPECT_EQ(WeightOf(*c.tables[cls], g.s, g.t, g.sa),
                WeightOf(*engine.tables[cls], g.s, g.t, g.sa))
          << "class " << cls << ", " << threads << " threads";
    }
    // The engine's weight is not the policy's 0.9 or 0.1: the check is not vacuous.
    EXPECT_NE(WeightOf(*c.tables[0], g.s, g.t, g.sa), 0.9);
    EXPECT_NE(WeightOf(*c.tables[0], g.s, g.t, g.sa), 0.1);
  }
}

TEST(RouteComputerTest, WeightPolicyHysteresisKeepsSmallMoves) {
  Diamond g;
  RouteComputerConfig config;
  config.diffusion.hysteresis = 0.3;
  RouteComputer rc(g.topo, config);
  auto policy = std::make_shared<TestPolicy>();
  rc.set_weight_policy(policy);
  auto split = [&](double first) {
    policy->weight = [first](uint32_t i, uint32_t) { return i == 0 ? first : 1 - first; };
    return rc.Cycle(false);
  };
  RouteCycle c = split(0.5);
  const LinkId first = c.tables[0]->Lookup(g.s, g.t)[0].link;
  EXPECT_DOUBLE_EQ(WeightOf(*c.tables[0], g.s, g.t, first), 0.5);
  c = split(0.6);  // moves 0.2 in all: kept
  EXPECT_DOUBLE_EQ(WeightOf(*c.tables[0], g.s, g.t, first), 0.5);
  c = split(0.7);  // 0.4 from what is installed: taken
  EXPECT_DOUBLE_EQ(WeightOf(*c.tables[0], g.s, g.t, first), 0.7);
  c = split(0.6);
  EXPECT_DOUBLE_EQ(WeightOf(*c.tables[0], g.s, g.t, first), 0.7);
}

// Softmax of the sum of a candidate's features: any feature out of place moves a weight.
class FeatureSum : public TestPolicy {
 public:
  void WeighRow(const PolicyBatch& batch, const PolicyDecision& d,
                absl::Span<double> weights) override {
    double sum = 0;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      double x = 0;
      for (float f : batch.candidates[i].features) x += f;
      weights[i] = std::exp(x / 4);
      sum += weights[i];
    }
    for (uint32_t i = d.first; i < d.first + d.count; ++i) weights[i] /= sum;
  }
};

// A fat-tree's links, all moving: cycle i's sample of every link.
void ObserveFabric(const Topology& topo, int i, std::initializer_list<RouteComputer*> rcs) {
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const LinkSample x =
        Measured(0.4 + 0.4 * std::sin(0.7 * l + 1.3 * i), Microseconds(300 + (l * 37 + i) % 500),
                 (l + i) % 7 == 0 ? 0.02 : 0, (l + 2 * i) % 5 == 0 ? 30'000 : 0);
    for (RouteComputer* rc : rcs) rc->Observe(l, x);
  }
}

// Whether two tables have the same next hops toward `d` from every node.
bool SameNextHopsToward(const RoutingTables& a, const RoutingTables& b, NodeId d, int nodes) {
  for (NodeId v = 0; v < nodes; ++v) {
    const auto x = a.Lookup(v, d);
    const auto y = b.Lookup(v, d);
    if (x.size() != y.size()) return false;
    for (size_t h = 0; h < x.size(); ++h) {
      if (x[h].link != y[h].link) return false;
    }
  }
  return true;
}

// policy_refresh_cycles 3: each cycle the policy weighs every row toward a turn of the
// destinations (index modulo 3), and toward the others the rows whose next hops changed; the
// other rows keep last cycle's weights. The first cycle, and the first after the policy
// failed, weigh every row.
TEST(RouteComputerTest, PolicyWeighsEachRowInTurnAndAtOnceOnNewNextHops) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  const int nodes = topo.num_nodes();
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    RouteComputerConfig config = LabConfig();
    config.policy_refresh_cycles = 3;
    ThreadPool pool(threads);
    // The engine alone, in step: its tables are the next hops the refined ones must have.
    RouteComputer engine(topo, config), rc(topo, config, &pool);
    auto policy = std::make_shared<FeatureSum>();
    rc.set_weight_policy(policy);
    RouteCycle last;
    int64_t held = 0, out_of_turn = 0, tables_shared = 0, rows_with_choice = 0;
    // By (class, destination, node): cycles since the row was last weighed.
    std::map<std::tuple<int, NodeId, NodeId>, int> age;
    for (int i = 0; i < 12; ++i) {
      ObserveFabric(topo, i, {&engine, &rc});
      if (i == 4 || i == 8) {
        // A link down (i 4) and up again (i 8): next hops change toward some destinations.
        engine.SetKnownDown(5, i == 4);
        rc.SetKnownDown(5, i == 4);
      }
      policy->error = i == 9 ? absl::InternalError("boom") : absl::OkStatus();
      const RouteCycle e = engine.Cycle(false);
      const RouteCycle c = rc.Cycle(false);
      if (i == 9) {
        EXPECT_FALSE(c.policy_error.empty());
        last = c;
        continue;
      }
      ASSERT_TRUE(c.policy_error.empty()) << c.policy_error;
      ExpectValid(rc, c);
      std::set<std::tuple<int, NodeId, NodeId>> weighed;
      for (const PolicyDecision& d : policy->last.decisions) {
        weighed.insert({d.cls, d.destination, d.node});
      }
      const bool first = i == 0 || i == 10;  // no policy tables before these cycles
      for (int cls = 0; cls < kTrafficClasses; ++cls) {
        const std::vector<NodeId>& dests = c.tables[cls]->destinations();
        for (size_t k = 0; k < dests.size(); ++k) {
          const NodeId d = dests[k];
          SCOPED_TRACE(testing::Message() << "cycle " << i << " class " << cls << " dest " << d);
          // The refined tables have the engine's next hops, weighed or not.
          ASSERT_TRUE(SameNextHopsToward(*c.tables[cls], *e.tables[cls], d, nodes));
          const bool in_turn = static_cast<int64_t>(k % 3) == rc.stats().policy_cycles % 3;
          for (NodeId v = 0; v < nodes; ++v) {
            const auto row = c.tables[cls]->Lookup(v, d);
            if (row.size() < 2) continue;
            ++rows_with_choice;
            const auto was = first ? absl::Span<const NextHop>() : last.tables[cls]->Lookup(v, d);
            bool moved = was.size() != row.size();
            for (size_t h = 0; h < row.size() && !moved; ++h) moved = row[h].link != was[h].link;
            const bool is_weighed = weighed.count({cls, d, v}) != 0;
            EXPECT_EQ(is_weighed, first || in_turn || moved) << "node " << v;
            out_of_turn += is_weighed && !first && !in_turn;
            int& a = age[{cls, d, v}];
            a = is_weighed ? 0 : a + 1;
            EXPECT_LT(a, 3) << "node " << v;  // weighed in one of any 3 cycles in a row
            if (is_weighed) continue;
            ++held;
            // Kept: last cycle's row, weights and all.
            for (size_t h = 0; h < row.size(); ++h) EXPECT_EQ(row[h].weight, was[h].weight);
          }
          if (!first && !in_turn &&
              SameNextHopsToward(*last.tables[cls], *e.tables[cls], d, nodes)) {
            // No row toward d weighed: last cycle's table itself.
            EXPECT_EQ(c.tables[cls]->SharedTable(d), last.tables[cls]->SharedTable(d));
            ++tables_shared;
          }
        }
      }
      last = c;
    }
    EXPECT_GT(held, 0);
    EXPECT_GT(tables_shared, 0);
    EXPECT_GT(out_of_turn, 0) << "no row was weighed for new next hops";
    const RouteComputerStats& s = rc.stats();
    EXPECT_EQ(s.policy_rows_held, held);
    EXPECT_EQ(s.policy_decisions + s.policy_rows_held, rows_with_choice);
  }
}

// A pool of 2 threads runs the classes side by side: the same batches, tables and counts as
// the caller's thread alone, bit for bit, cycle after cycle, with every link moving, a link
// down and a policy whose weights depend on every feature.
TEST(RouteComputerTest, TwoThreadsGiveWhatOneGives) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  // Two threads: each class's destinations in halves; three: in thirds of unequal size.
  for (const int threads : {2, 3}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    ThreadPool pool(threads);
    ASSERT_EQ(pool.concurrency(), threads);
    RouteComputer one(topo, LabConfig()), two(topo, LabConfig(), &pool);
    auto one_policy = std::make_shared<FeatureSum>(), two_policy = std::make_shared<FeatureSum>();
    one.set_weight_policy(one_policy);
    two.set_weight_policy(two_policy);
    bool in_part = false;  // a class updated in part (not recomputed whole) in some cycle
    for (int i = 0; i < 10; ++i) {
      for (LinkId l = 0; l < topo.num_links(); ++l) {
        // Every link moves in the first cycles, one in nine in the last ones.
        if (i >= 7 && l % 9 != i % 9) continue;
        const LinkSample x = Measured(
            0.4 + 0.4 * std::sin(0.7 * l + 1.3 * i), Microseconds(300 + (l * 37 + i) % 500),
            (l + i) % 7 == 0 ? 0.02 : 0, (l + 2 * i) % 5 == 0 ? 30'000 : 0);
        one.Observe(l, x);
        two.Observe(l, x);
      }
      if (i == 3) {
        one.SetKnownDown(5, true);
        two.SetKnownDown(5, true);
      }
      const RouteCycle a = one.Cycle(false);
      const RouteCycle b = two.Cycle(false);
      ASSERT_TRUE(a.policy_error.empty()) << a.policy_error;
      ASSERT_TRUE(b.policy_error.empty()) << b.policy_error;
      EXPECT_EQ(a.full, b.full);
      EXPECT_EQ(a.changed_links, b.changed_links);
      EXPECT_EQ(a.classes_recomputed, b.classes_recomputed);
      EXPECT_EQ(a.route_changes, b.route_changes);
      in_part = in_part || (a.classes_recomputed < kTrafficClasses &&
                            (a.changed_links[0] > 0 || a.changed_links[1] > 0));
      const PolicyBatch& pa = one_policy->last;
      const PolicyBatch& pb = two_policy->last;
      ASSERT_EQ(pa.decisions.size(), pb.decisions.size());
      for (size_t k = 0; k < pa.decisions.size(); ++k) {
        const PolicyDecision& x = pa.decisions[k];
        const PolicyDecision& y = pb.decisions[k];
        EXPECT_EQ(std::tie(x.node, x.destination, x.cls, x.first, x.count),
                  std::tie(y.node, y.destination, y.cls, y.first, y.count))
            << "decision " << k;
      }
      ASSERT_EQ(pa.candidates.size(), pb.candidates.size());
      ASSERT_EQ(pa.rewards.size(), pb.rewards.size());
      // Both classes have rows with a choice in every cycle (a fat-tree has many).
      std::array<int, kTrafficClasses> rows_of{};
      for (const PolicyDecision& d : pb.decisions) ++rows_of[d.cls];
      EXPECT_GT(rows_of[0], 20) << "cycle " << i;
      EXPECT_GT(rows_of[1], 20) << "cycle " << i;
      EXPECT_EQ(pa.link_features, pb.link_features);
      for (size_t k = 0; k < pa.candidates.size(); ++k) {
        EXPECT_EQ(pa.candidates[k].link, pb.candidates[k].link);
        EXPECT_EQ(pa.candidates[k].features, pb.candidates[k].features) << "candidate " << k;
        EXPECT_EQ(pa.candidates[k].analytic_weight, pb.candidates[k].analytic_weight);
        EXPECT_EQ(pa.rewards[k].path_delay_s, pb.rewards[k].path_delay_s);
        EXPECT_EQ(pa.rewards[k].path_loss, pb.rewards[k].path_loss);
        EXPECT_EQ(pa.rewards[k].queue_s, pb.rewards[k].queue_s);
      }
      for (int cls = 0; cls < kTrafficClasses; ++cls) {
        EXPECT_EQ(a.tables[cls]->version(), b.tables[cls]->version());
        for (NodeId d : a.tables[cls]->destinations()) {
          for (NodeId v = 0; v < topo.num_nodes(); ++v) {
            const auto x = a.tables[cls]->Lookup(v, d);
            const auto y = b.tables[cls]->Lookup(v, d);
            ASSERT_EQ(x.size(), y.size());
            for (size_t h = 0; h < x.size(); ++h) {
              EXPECT_EQ(x[h].link, y[h].link);
              EXPECT_EQ(x[h].weight, y[h].weight);
            }
            EXPECT_EQ(one.Potential(cls, d, v), two.Potential(cls, d, v));
          }
        }
      }
      ExpectValid(two, b);
    }
    EXPECT_TRUE(in_part) << "no cycle updated a class in part";
    EXPECT_EQ(two.stats().policy_failures, 0);
  }
}

// An executor of another concurrency cuts the destinations otherwise: the engines are
// rebuilt and the next cycle is full; one of the same concurrency changes nothing: the
// tables stay those of a computer that never changed executor. (Rebuilt engines forget their
// last weights, which the diffusion's hysteresis holds to, so from then on the tables are
// only checked valid.)
TEST(RouteComputerTest, AnotherExecutorRebuildsTheEnginesOnlyIfItsConcurrencyDiffers) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  ThreadPool two_a(2), two_b(2);
  RouteComputer rc(topo, LabConfig(), &two_a), inline_rc(topo, LabConfig());
  for (int i = 0; i < 6; ++i) {
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      const LinkSample x = Measured(0.3 + 0.3 * std::sin(0.5 * l + i), Microseconds(400), 0, 0);
      rc.Observe(l, x);
      inline_rc.Observe(l, x);
    }
    if (i == 2) rc.set_executor(&two_b);   // the same concurrency: kept
    if (i == 4) rc.set_executor(nullptr);  // the caller's thread: rebuilt
    const RouteCycle a = rc.Cycle(false);
    const RouteCycle b = inline_rc.Cycle(false);
    EXPECT_EQ(a.full, i == 0 || i == 4) << "cycle " << i;
    ExpectValid(rc, a);
    if (i >= 4) continue;
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      for (NodeId d : a.tables[cls]->destinations()) {
        for (NodeId v = 0; v < topo.num_nodes(); ++v) {
          const auto x = a.tables[cls]->Lookup(v, d);
          const auto y = b.tables[cls]->Lookup(v, d);
          ASSERT_EQ(x.size(), y.size());
          for (size_t h = 0; h < x.size(); ++h) EXPECT_EQ(x[h].weight, y[h].weight);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dar
