// The learned policy's part of a route computer's cycle: which rows it weighs, the check of
// its weights, refined tables.
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
using test::ExpectValid;
using test::FeatureSum;
using test::LabConfig;
using test::Measured;
using test::Sample;
using test::TestPolicy;

// The weight `tables` gives `link` out of `node` toward `dest`; 0 if it is not a next hop.
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
  const double w_sa = test::WeightOf(*engine.tables[0], g.s, g.t, g.sa);
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
      EXPECT_EQ(test::WeightOf(*c.tables[cls], g.s, g.t, g.sa),
                test::WeightOf(*engine.tables[cls], g.s, g.t, g.sa))
          << "class " << cls << ", " << threads << " threads";
    }
    // The engine's weight is not the policy's 0.9 or 0.1: the check is not vacuous.
    EXPECT_NE(test::WeightOf(*c.tables[0], g.s, g.t, g.sa), 0.9);
    EXPECT_NE(test::WeightOf(*c.tables[0], g.s, g.t, g.sa), 0.1);
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
  EXPECT_DOUBLE_EQ(test::WeightOf(*c.tables[0], g.s, g.t, first), 0.5);
  c = split(0.6);  // moves 0.2 in all: kept
  EXPECT_DOUBLE_EQ(test::WeightOf(*c.tables[0], g.s, g.t, first), 0.5);
  c = split(0.7);  // 0.4 from what is installed: taken
  EXPECT_DOUBLE_EQ(test::WeightOf(*c.tables[0], g.s, g.t, first), 0.7);
  c = split(0.6);
  EXPECT_DOUBLE_EQ(test::WeightOf(*c.tables[0], g.s, g.t, first), 0.7);
}

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

}  // namespace
}  // namespace dar
