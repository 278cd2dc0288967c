// The route computer's cycle: versions, full and incremental cycles, marks, configuration,
// executors. What it knows of links: route_computer_links_test.cc; the policy:
// route_computer_policy_test.cc.
#include "core/route_computer.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/route_computer_test_util.h"
#include "core/topology_gen.h"
#include "core/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using test::Diamond;
using test::ExpectValid;
using test::FeatureSum;
using test::LabConfig;
using test::Measured;
using test::Sample;

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
