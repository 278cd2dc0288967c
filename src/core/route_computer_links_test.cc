// What the route computer knows of each link: state from samples, forecasts and parameters,
// measured congestion, base RTT, damping, slow links.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/route_computer.h"
#include "core/route_computer_test_util.h"
#include "core/topology_gen.h"
#include "core/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using test::Diamond;
using test::LabConfig;
using test::Measured;
using test::Sample;

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

}  // namespace
}  // namespace dar
