#include "core/marginal_routing.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/demand.h"
#include "core/fluid_test_util.h"
#include "core/route_computer_test_util.h"
#include "core/routing.h"
#include "core/te_lp.h"
#include "core/topology_gen.h"
#include "core/topology_json.h"
#include "core/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

using fluid_test::kUnit;
using fluid_test::Params;

double MaxUtil(const Topology& topo, const RoutingTables& tables,
               const std::vector<Demand>& demand) {
  return fluid_test::MaxUtilizationUnder(topo, tables, demand);
}

Topology Wan(const std::string& name) {
  return LoadNodeLinkJson(std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/" + name + ".json",
                          JsonImportOptions())
      .value();
}

std::vector<Demand> Scale(std::vector<Demand> demand, double by) {
  for (Demand& d : demand) d.amount *= by;
  return demand;
}

// Two disjoint two-hop paths of 1 and 3 Gb/s, 2 units across: the optimum splits 1:3, 0.5 on
// both (ECMP splits evenly: 1.0 on the narrow one).
TEST(MarginalRoutingTest, SplitsTwoPathsByCapacity) {
  const Topology topo = fluid_test::TwoPaths(1, 3);
  const NodeId a = 0, m2 = 2, b = 3;
  const std::vector<Demand> demand = {{a, b, 2.0}};
  absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->settled);
  EXPECT_NEAR(MaxUtil(topo, r->tables, demand), 0.5, 0.01);
  EXPECT_NEAR(test::WeightOf(r->tables, a, b, topo.FindLink(a, m2)), 0.75, 0.01);
  EXPECT_LE(r->lower_bound, r->objective);
  EXPECT_GE(r->lower_bound, r->objective * (1 - MarginalRoutingConfig().gap_tolerance) - 1e-12);
}

// A triangle of 1 Gb/s links, 3 units A -> B: half over the two-hop detour (1.5 everywhere);
// ECMP sends all 3 direct. The detour is a next hop only the marginal costs open: C is
// farther from B than A is by hops.
TEST(MarginalRoutingTest, OpensTheDetourOfATriangle) {
  const Topology topo = fluid_test::Triangle();
  const NodeId a = 0, b = 1, c = 2;
  const std::vector<Demand> demand = {{a, b, 3.0}};
  absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(MaxUtil(topo, r->tables, demand), 1.5, 0.02);
  EXPECT_NEAR(test::WeightOf(r->tables, a, b, topo.FindLink(a, c)), 0.5, 0.01);
  EXPECT_TRUE(ValidateTables(topo, r->tables).ok()) << ValidateTables(topo, r->tables).ToStatus();
}

// A symmetric, healthy fabric under uniform demand: ECMP is already optimal, and DAR keeps
// its tables exactly — equal weights, the same next hops, nothing moved.
TEST(MarginalRoutingTest, KeepsEcmpOnASymmetricFabric) {
  const Topology topo = LeafSpine({.leaves = 4,
                                   .spines = 4,
                                   .hosts_per_leaf = 4,
                                   .host_link = Params(10, 0),
                                   .fabric_link = Params(10, 0)});
  const std::vector<Demand> demand = Scale(UniformDemand(topo), 0.5);
  absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const auto got = r->tables.Lookup(v, d);
      const auto want = ecmp.Lookup(v, d);
      ASSERT_EQ(got.size(), want.size()) << topo.node(v).name << " -> " << topo.node(d).name;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].link, want[i].link);
        EXPECT_DOUBLE_EQ(got[i].weight, want[i].weight);
      }
    }
  }
}

// A spine's uplink from one leaf at a tenth of its capacity: ECMP overloads it, DAR moves
// that leaf's traffic to the other spines and matches the LP.
TEST(MarginalRoutingTest, RoutesAroundADegradedUplink) {
  Topology topo = LeafSpine({.leaves = 4,
                             .spines = 4,
                             .hosts_per_leaf = 4,
                             .host_link = Params(10, 0),
                             .fabric_link = Params(10, 0)});
  const NodeId leaf0 = topo.FindNode("leaf0").value(), spine0 = topo.FindNode("spine0").value();
  for (LinkId l : {topo.FindLink(leaf0, spine0), topo.FindLink(spine0, leaf0)}) {
    topo.mutable_link(l).params.capacity = DataRate::Gbps(1);
  }
  const std::vector<Demand> demand = Scale(UniformDemand(topo), 0.5);
  absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  const double ecmp = MaxUtil(topo, ComputeEcmpTables(topo), demand);
  const double lp = SolveMinMaxUtilization(topo, demand, kUnit).value().lambda;
  const double dar = MaxUtil(topo, r->tables, demand);
  EXPECT_GT(ecmp, 2 * lp);
  EXPECT_LE(dar, 1.05 * lp) << "ECMP " << ecmp << ", LP " << lp << " settled " << r->settled
                            << " iterations " << r->iterations << " J " << r->objective << " LB "
                            << r->lower_bound << " U " << r->reference_utilization;
  EXPECT_TRUE(ValidateTables(topo, r->tables).ok());
}

// On real WANs, at ECMP's saturation and at twice it: loop-free, settled, never above ECMP,
// within 5% of the LP's optimum and within 2% of the optimum of its own objective; J never
// rises within a minimisation.
TEST(MarginalRoutingTest, WansSettleNearTheOptimum) {
  for (const char* name : {"Abilene", "Sprint", "Internode"}) {
    const Topology topo = Wan(name);
    for (bool gravity : {false, true}) {
      const std::vector<Demand> base = gravity ? GravityDemand(topo).value() : UniformDemand(topo);
      const double ecmp_at_unit = MaxUtil(topo, ComputeEcmpTables(topo), base);
      const double lp_at_unit = SolveMinMaxUtilization(topo, base, kUnit).value().lambda;
      for (double ecmp_level : {1.0, 2.0}) {
        SCOPED_TRACE(testing::Message()
                     << name << (gravity ? " gravity" : " uniform") << ", ECMP at " << ecmp_level);
        const std::vector<Demand> demand = Scale(base, ecmp_level / ecmp_at_unit);
        absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_TRUE(r->settled);
        EXPECT_FALSE(r->oscillated);
        EXPECT_GE(r->reference_trace.size(), 1u);
        EXPECT_TRUE(ValidateTables(topo, r->tables).ok());
        const double dar = MaxUtil(topo, r->tables, demand);
        EXPECT_LE(dar, ecmp_level * (1 + 1e-9));
        EXPECT_LE(dar, 1.05 * lp_at_unit * ecmp_level / ecmp_at_unit);
        EXPECT_LE(r->objective - r->lower_bound, 0.02 * r->objective);
        MarginalRoutingConfig one_round;
        one_round.reference_rounds = 1;
        r = MinimiseRoutingObjective(topo, demand, kUnit, one_round);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_FALSE(r->objective_trace.empty());
        EXPECT_TRUE(std::is_sorted(r->objective_trace.rbegin(), r->objective_trace.rend()));
      }
    }
  }
}

// The objective does not depend on the scale of the demand: a matrix scaled by 1 +- 1e-7 (or
// doubled) gives the same tables, within 1e-6 in every weight.
TEST(MarginalRoutingTest, ScaledDemandGivesTheSameTables) {
  const Topology topo = Wan("Abilene");
  const std::vector<Demand> demand = GravityDemand(topo).value();
  absl::StatusOr<MarginalRoutingResult> base = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(base.ok()) << base.status();
  for (double by : {1 + 1e-7, 1 - 1e-7, 2.0}) {
    absl::StatusOr<MarginalRoutingResult> r =
        MinimiseRoutingObjective(topo, Scale(demand, by), kUnit);
    ASSERT_TRUE(r.ok()) << r.status();
    double worst = 0;
    for (NodeId d : topo.Destinations()) {
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        for (const NextHop& hop : base->tables.Lookup(v, d)) {
          worst = std::max(worst, std::abs(hop.weight - test::WeightOf(r->tables, v, d, hop.link)));
        }
        for (const NextHop& hop : r->tables.Lookup(v, d)) {
          worst =
              std::max(worst, std::abs(hop.weight - test::WeightOf(base->tables, v, d, hop.link)));
        }
      }
    }
    EXPECT_LE(worst, 1e-6) << "scaled by " << by;
  }
}

// Started from its own result, the minimisation has next to nothing left to do and keeps the
// tables; a start that routes over a link now down is replaced by ECMP for that destination.
TEST(MarginalRoutingTest, WarmStartKeepsGoodTablesAndDropsStaleOnes) {
  Topology topo = Wan("Abilene");
  const std::vector<Demand> demand = GravityDemand(topo).value();
  absl::StatusOr<MarginalRoutingResult> cold = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(cold.ok()) << cold.status();
  absl::StatusOr<MarginalRoutingResult> warm =
      MinimiseRoutingObjective(topo, demand, kUnit, MarginalRoutingConfig(), &cold->tables);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_LT(warm->iterations, cold->iterations / 4 + 5);
  EXPECT_NEAR(MaxUtil(topo, warm->tables, demand), MaxUtil(topo, cold->tables, demand), 1e-3);

  // Take down a cable the optimum uses; the old tables are a start only where they avoid it.
  LinkId used = kNoLink;
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes() && used == kNoLink; ++v) {
      if (cold->tables.Lookup(v, d).size() > 1) used = cold->tables.Lookup(v, d)[0].link;
    }
  }
  ASSERT_NE(used, kNoLink);
  topo.mutable_link(used).up = false;
  topo.mutable_link(topo.link(used).reverse).up = false;
  absl::StatusOr<MarginalRoutingResult> after =
      MinimiseRoutingObjective(topo, demand, kUnit, MarginalRoutingConfig(), &cold->tables);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(ValidateTables(topo, after->tables).ok())
      << ValidateTables(topo, after->tables).ToStatus();
}

// What a router keeps from one Minimise spares the next the rebuilding of its start and
// changes nothing else: resumed by the router or by a fresh call, from the same tables under a
// new demand, the result is the same. With a link down, the held weights are not taken (they
// may use the link). LoadsUnder gives ComputeLinkLoads' loads, for the tables started from
// (held) and for others (routed).
TEST(MarginalRoutingTest, TheRouterSparesWorkAndChangesNothingElse) {
  Topology topo = Wan("Abilene");
  const std::vector<Demand> demand = GravityDemand(topo).value();
  MarginalRouter router;
  ASSERT_TRUE(router.Start(topo, demand, kUnit).ok());
  absl::StatusOr<MarginalRoutingResult> first = router.Minimise(MarginalRoutingConfig());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(router.Minimise(MarginalRoutingConfig()).status().message(),
              HasSubstr("no demand started"));
  const auto same = [&](const RoutingTables& a, const RoutingTables& b) {
    for (NodeId d : topo.Destinations()) {
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        const absl::Span<const NextHop> x = a.Lookup(v, d), y = b.Lookup(v, d);
        if (x.size() != y.size()) return false;
        for (size_t i = 0; i < x.size(); ++i) {
          if (x[i].link != y[i].link || std::abs(x[i].weight - y[i].weight) > 1e-9) return false;
        }
      }
    }
    return true;
  };
  const auto near = [&](const std::vector<double>& a, const std::vector<double>& b) {
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      if (std::abs(a[l] - b[l]) > 1e-9 * std::max(1.0, std::abs(b[l]))) return false;
    }
    return true;
  };
  const std::vector<Demand> more = Scale(demand, 1.3);
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  RoutingTables from = first->tables;  // what the router holds the weights of
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      // A link down: the tables are stale where they use it, and so are the held weights.
      LinkId used = kNoLink;
      for (NodeId v = 0; v < topo.num_nodes() && used == kNoLink; ++v) {
        const absl::Span<const NextHop> hops = from.Lookup(v, demand.front().dst);
        if (hops.size() > 1) used = hops[0].link;
      }
      ASSERT_NE(used, kNoLink);
      topo.mutable_link(used).up = false;
      topo.mutable_link(topo.link(used).reverse).up = false;
    }
    ASSERT_TRUE(router.Start(topo, more, kUnit, &from).ok()) << "round " << round;
    if (round == 1) {
      // The old tables route over the link now down: no loads under them (and the started
      // demand is still there to minimise).
      EXPECT_THAT(router.LoadsUnder(from).status().message(), HasSubstr("unusable link"));
    }
    if (round == 0) {
      absl::StatusOr<std::vector<double>> held = router.LoadsUnder(from);
      absl::StatusOr<std::vector<double>> routed = router.LoadsUnder(ecmp);
      ASSERT_TRUE(held.ok()) << held.status();
      ASSERT_TRUE(routed.ok()) << routed.status();
      EXPECT_TRUE(near(*held, ComputeLinkLoads(topo, from, more).value()));
      EXPECT_TRUE(near(*routed, ComputeLinkLoads(topo, ecmp, more).value()));
    }
    absl::StatusOr<MarginalRoutingResult> with = router.Minimise(MarginalRoutingConfig());
    absl::StatusOr<MarginalRoutingResult> without =
        MinimiseRoutingObjective(topo, more, kUnit, MarginalRoutingConfig(), &from);
    ASSERT_TRUE(with.ok()) << with.status();
    ASSERT_TRUE(without.ok()) << without.status();
    EXPECT_GT(with->iterations, 0);
    EXPECT_EQ(with->iterations, without->iterations) << "round " << round;
    EXPECT_TRUE(same(with->tables, without->tables)) << "round " << round;
    EXPECT_TRUE(ValidateTables(topo, with->tables).ok()) << "round " << round;
    EXPECT_NEAR(with->objective, without->objective, 1e-9 * without->objective);
    from = with->tables;
  }
}

// A destination the demand does not use keeps the start's table itself (the same object):
// nothing of it moved, so nothing of it is rebuilt or resent. One that moved is rebuilt.
TEST(MarginalRoutingTest, UnmovedDestinationsKeepTheirTables) {
  const Topology topo = Wan("Abilene");
  const std::vector<Demand> gravity = GravityDemand(topo).value();
  // The gravity matrix's traffic toward one destination only.
  const NodeId moved = gravity.front().dst;
  std::vector<Demand> demand;
  for (const Demand& d : gravity) {
    if (d.dst == moved) demand.push_back(d);
  }
  ASSERT_GT(demand.size(), 2u);
  const RoutingTables ecmp = ComputeEcmpTables(topo);
  absl::StatusOr<MarginalRoutingResult> r =
      MinimiseRoutingObjective(topo, Scale(demand, 4), kUnit, MarginalRoutingConfig(), &ecmp);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->iterations, 0);
  for (NodeId d : topo.Destinations()) {
    if (d == moved) {
      EXPECT_NE(r->tables.Table(d), ecmp.Table(d));
    } else {
      EXPECT_EQ(r->tables.Table(d), ecmp.Table(d)) << topo.node(d).name;
    }
  }
}

// max_link_scans bounds a call's work: a bound of one iteration's scans stops the call after
// its first iteration, and a call resumed from its tables goes on toward the same optimum.
TEST(MarginalRoutingTest, MaxLinkScansBoundsACallAndResumes) {
  const Topology topo = Wan("Abilene");
  const std::vector<Demand> demand = UniformDemand(topo);
  absl::StatusOr<MarginalRoutingResult> full = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_GT(full->iterations, 3);
  EXPECT_FALSE(full->out_of_scans);
  const int64_t one_iteration = static_cast<int64_t>(topo.Destinations().size()) * topo.num_links();
  MarginalRoutingConfig capped;
  capped.max_link_scans = one_iteration;
  absl::StatusOr<MarginalRoutingResult> step =
      MinimiseRoutingObjective(topo, demand, kUnit, capped);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->out_of_scans);
  EXPECT_EQ(step->iterations, 1);
  EXPECT_GE(step->link_scans, one_iteration);
  // Resumed cycle after cycle, it reaches the uncapped optimum's maximum utilisation.
  absl::StatusOr<MarginalRoutingResult> resumed = step;
  for (int cycle = 0; cycle < 5 * full->iterations && resumed->out_of_scans; ++cycle) {
    const RoutingTables tables = resumed->tables;
    resumed = MinimiseRoutingObjective(topo, demand, kUnit, capped, &tables);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
  }
  EXPECT_NEAR(MaxUtil(topo, resumed->tables, demand), MaxUtil(topo, full->tables, demand),
              0.02 * MaxUtil(topo, full->tables, demand));
}

// A bound below one iteration stops within the sweep: the destinations after the bound keep
// their starting tables, and the next call, started where this one stopped, moves them; resumed
// so, the calls reach the optimum as whole iterations do.
TEST(MarginalRoutingTest, ABoundWithinAnIterationResumesWithTheNextDestination) {
  const Topology topo = Wan("Abilene");
  const std::vector<Demand> demand = UniformDemand(topo);
  const std::vector<NodeId> targets = topo.Destinations();
  ASSERT_GT(targets.size(), 4u);
  MarginalRoutingConfig capped;
  capped.max_link_scans = 3 * topo.num_links();
  MarginalRouter router;
  ASSERT_TRUE(router.Start(topo, demand, kUnit).ok());
  absl::StatusOr<MarginalRoutingResult> part = router.Minimise(capped);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_TRUE(part->out_of_scans);
  EXPECT_EQ(part->iterations, 0);
  const RoutingTables wcmp = ComputeWcmpTables(topo);
  const auto same = [&](const RoutingTables& a, const RoutingTables& b, NodeId d) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      if (topo.StubUplink(v) != kNoLink) continue;
      const absl::Span<const NextHop> x = a.Lookup(v, d), y = b.Lookup(v, d);
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].link != y[i].link || std::abs(x[i].weight - y[i].weight) > 1e-12) return false;
      }
    }
    return true;
  };
  // The destinations stepped are the first few (each moves: none is at its optimum yet).
  size_t next = 0;
  while (next < targets.size() && !same(part->tables, wcmp, targets[next])) ++next;
  EXPECT_GE(next, 1u);
  ASSERT_LT(next, targets.size());
  for (size_t t = next; t < targets.size(); ++t) {
    EXPECT_TRUE(same(part->tables, wcmp, targets[t])) << topo.node(targets[t]).name;
  }
  // The next call starts with the first destination left.
  RoutingTables tables = part->tables;
  ASSERT_TRUE(router.Start(topo, demand, kUnit, &tables).ok());
  absl::StatusOr<MarginalRoutingResult> resumed = router.Minimise(capped);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(same(resumed->tables, wcmp, targets[next]));
  absl::StatusOr<MarginalRoutingResult> full = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(full.ok()) << full.status();
  for (int call = 0; call < 100 * full->iterations && resumed->out_of_scans; ++call) {
    tables = resumed->tables;
    ASSERT_TRUE(router.Start(topo, demand, kUnit, &tables).ok());
    resumed = router.Minimise(capped);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
  }
  EXPECT_NEAR(MaxUtil(topo, resumed->tables, demand), MaxUtil(topo, full->tables, demand),
              0.02 * MaxUtil(topo, full->tables, demand));
}

// Load that no routing moves (other traffic on a link) counts: two equal paths, half of one
// taken by other traffic, and the demand balances the two at 0.75.
TEST(MarginalRoutingTest, OtherLoadsAreRoutedAround) {
  const Topology topo = fluid_test::TwoPaths(1, 1);
  const NodeId a = 0, m1 = 1, m2 = 2, b = 3;
  const std::vector<Demand> demand = {{a, b, 1.0}};
  std::vector<double> other(topo.num_links(), 0.0);
  other[topo.FindLink(m1, b)] = 0.5;
  absl::StatusOr<MarginalRoutingResult> r =
      MinimiseRoutingObjective(topo, demand, kUnit, MarginalRoutingConfig(), nullptr, &other);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(test::WeightOf(r->tables, a, b, topo.FindLink(a, m2)), 0.75, 0.01);
}

// A down link carries nothing; a destination cut off is an error that names it; a bad demand
// is refused.
TEST(MarginalRoutingTest, DownLinksAndBadDemands) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  const NodeId c = topo.AddNode("C", NodeKind::kSwitch);
  const auto [ab, ba] = topo.AddDuplexLink(a, b, Params(1));
  topo.AddDuplexLink(b, c, Params(1));
  topo.AddDuplexLink(c, a, Params(1));
  topo.mutable_link(ab).up = false;
  const std::vector<Demand> demand = {{a, b, 0.5}};
  absl::StatusOr<MarginalRoutingResult> r = MinimiseRoutingObjective(topo, demand, kUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(test::WeightOf(r->tables, a, b, ab), 0);
  EXPECT_NEAR(MaxUtil(topo, r->tables, demand), 0.5, 1e-9);

  topo.mutable_link(topo.FindLink(c, b)).up = false;
  r = MinimiseRoutingObjective(topo, demand, kUnit);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("cannot reach 'B'"));

  r = MinimiseRoutingObjective(topo, {{a, 7, 1.0}}, kUnit);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = MinimiseRoutingObjective(topo, {{a, c, -1.0}}, kUnit);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dar
