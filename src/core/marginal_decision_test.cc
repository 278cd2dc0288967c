#include "core/marginal_decision.h"

#include <cmath>

#include "core/route_computer_test_util.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "core/validator.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

LinkParams FabricLink(double gbps) {
  LinkParams p;
  p.capacity = DataRate::Gbps(gbps);
  p.delay = Microseconds(1);
  return p;
}

Topology Fabric() {
  return LeafSpine({.leaves = 2,
                    .spines = 2,
                    .hosts_per_leaf = 2,
                    .host_link = FabricLink(10),
                    .fabric_link = FabricLink(10)});
}

// The layer's defaults, cycling every millisecond (the tests' period).
MarginalDecisionConfig EveryMillisecond() {
  MarginalDecisionConfig config;
  config.period = Milliseconds(1);
  return config;
}

// One period of traffic: every host sends `bytes` to the host on the other leaf.
void SendAcross(const Topology& topo, MarginalDecision& d, int64_t bytes) {
  const NodeId h0 = *topo.FindNode("h0"), h1 = *topo.FindNode("h1");
  const NodeId h2 = *topo.FindNode("h2"), h3 = *topo.FindNode("h3");
  d.CountSent(h0, h2, bytes);
  d.CountSent(h1, h3, bytes);
  d.CountSent(h2, h0, bytes);
  d.CountSent(h3, h1, bytes);
}

// The demand estimate is each pair's rate averaged over demand_periods periods.
TEST(MarginalDecisionTest, DemandIsTheSmoothedRate) {
  const Topology topo = Fabric();
  MarginalDecisionConfig config = EveryMillisecond();
  config.demand_periods = 4;
  MarginalDecision d(topo, config);
  d.Decide(Time(0), topo);
  SendAcross(topo, d, 1000);  // 1 MB/s for 1 ms
  d.Decide(Time(Milliseconds(1)), topo);
  const std::vector<Demand> demand = d.DemandEstimate();
  ASSERT_EQ(demand.size(), 4u);
  for (const Demand& x : demand) EXPECT_NEAR(x.amount, 1e6 * (1 - std::exp(-0.25)), 1);
}

// A symmetric fabric under even demand: ECMP's tables stay in force, cycle after cycle.
TEST(MarginalDecisionTest, HoldsEcmpOnASymmetricFabric) {
  const Topology topo = Fabric();
  MarginalDecisionConfig config = EveryMillisecond();
  MarginalDecision d(topo, config);
  const auto first = d.Decide(Time(0), topo);
  for (int i = 1; i <= 20; ++i) {
    SendAcross(topo, d, 500'000);  // 4 Gb/s per pair
    EXPECT_EQ(d.Decide(Time(Milliseconds(i)), topo), first);
  }
  EXPECT_EQ(d.stats().publishes, 1);
  EXPECT_EQ(d.stats().holds, 20);
  EXPECT_EQ(d.stats().route_changes, 0);
}

// A fabric link slows to a tenth: the next cycle moves the traffic off it (it pays); a link
// going down forces new tables at once.
TEST(MarginalDecisionTest, MovesOffASlowLinkAndOffADownOne) {
  Topology topo = Fabric();
  MarginalDecisionConfig config = EveryMillisecond();
  MarginalDecision d(topo, config);
  d.Decide(Time(0), topo);
  for (int i = 1; i <= 5; ++i) {
    SendAcross(topo, d, 500'000);
    d.Decide(Time(Milliseconds(i)), topo);
  }
  const NodeId leaf0 = *topo.FindNode("leaf0"), leaf1 = *topo.FindNode("leaf1");
  const LinkId slow = topo.FindLink(leaf0, *topo.FindNode("spine0"));
  topo.mutable_link(slow).params.capacity = DataRate::Gbps(1);
  SendAcross(topo, d, 500'000);
  auto tables = d.Decide(Time(Milliseconds(6)), topo);
  EXPECT_EQ(d.stats().publishes, 2);
  EXPECT_LT(test::WeightOf(*tables, leaf0, leaf1, slow), 0.2);
  EXPECT_GT(d.stats().route_changes, 0);

  const LinkId other = topo.FindLink(leaf0, *topo.FindNode("spine1"));
  topo.mutable_link(other).up = false;
  SendAcross(topo, d, 500'000);
  tables = d.Decide(Time(Milliseconds(7)), topo);
  EXPECT_EQ(d.stats().forced, 1);
  EXPECT_EQ(test::WeightOf(*tables, leaf0, leaf1, other), 0);
  EXPECT_TRUE(ValidateTables(topo, *tables).ok());
}

// Other load that ramps is routed around before it peaks when the layer forecasts it: after
// the same ramp (spine0 -> leaf1 from 1 toward 8 Gb/s), the layer with a horizon has moved
// more of leaf0's traffic off spine0 than the one without.
TEST(MarginalDecisionTest, ARampingOtherLoadIsForecast) {
  const Topology topo = Fabric();
  const NodeId leaf0 = *topo.FindNode("leaf0"), leaf1 = *topo.FindNode("leaf1");
  const LinkId busy = topo.FindLink(*topo.FindNode("spine0"), leaf1);
  const LinkId via_busy = topo.FindLink(leaf0, *topo.FindNode("spine0"));
  const auto weight_after_ramp = [&](int horizon) {
    MarginalDecisionConfig config = EveryMillisecond();
    config.demand_periods = 1;
    config.other_load_horizon_periods = horizon;
    config.other_load_forecast.alpha = 0.5;
    config.other_load_forecast.beta = 0.5;
    MarginalDecision d(topo, config);
    d.Decide(Time(0), topo);
    std::shared_ptr<const RoutingTables> tables;
    for (int i = 1; i <= 8; ++i) {
      SendAcross(topo, d, 250'000);  // 2 Gb/s per pair
      for (LinkId l = 0; l < topo.num_links(); ++l) {
        d.ObserveThroughput(l, l == busy ? DataRate::Gbps(1.0 + 0.5 * i) : DataRate::Gbps(0));
      }
      tables = d.Decide(Time(Milliseconds(i)), topo);
    }
    return test::WeightOf(*tables, leaf0, leaf1, via_busy);
  };
  const double now = weight_after_ramp(0), ahead = weight_after_ramp(10);
  EXPECT_LT(ahead, now - 0.05) << "without a horizon " << now << ", with " << ahead;
}

// A link that comes back up is used again at once, by destinations with traffic and without:
// the minimisation restarts from ECMP and its tables are put in force.
TEST(MarginalDecisionTest, ALinkBackUpIsUsedAgainWithOrWithoutTraffic) {
  const Topology base = LeafSpine({.leaves = 3,
                                   .spines = 2,
                                   .hosts_per_leaf = 1,
                                   .host_link = FabricLink(10),
                                   .fabric_link = FabricLink(10)});
  Topology topo = base;
  MarginalDecisionConfig config = EveryMillisecond();
  MarginalDecision d(base, config);
  const NodeId h0 = *topo.FindNode("h0"), h1 = *topo.FindNode("h1");
  const NodeId leaf0 = *topo.FindNode("leaf0"), leaf1 = *topo.FindNode("leaf1");
  const NodeId leaf2 = *topo.FindNode("leaf2");
  const LinkId link = topo.FindLink(leaf0, *topo.FindNode("spine0"));
  d.Decide(Time(0), topo);
  topo.mutable_link(link).up = false;
  auto tables = d.Decide(Time(Milliseconds(1)), topo);
  EXPECT_EQ(test::WeightOf(*tables, leaf0, leaf1, link), 0);
  topo.mutable_link(link).up = true;
  for (int i = 2; i <= 4; ++i) {
    d.CountSent(h0, h1, 500'000);  // only toward leaf1 is there traffic
    tables = d.Decide(Time(Milliseconds(i)), topo);
  }
  EXPECT_NEAR(test::WeightOf(*tables, leaf0, leaf1, link), 0.5, 1e-6);
  EXPECT_NEAR(test::WeightOf(*tables, leaf0, leaf2, link), 0.5, 1e-6);
  EXPECT_EQ(d.stats().forced, 2);  // the link down, then up
  EXPECT_TRUE(ValidateTables(topo, *tables).ok());
}

// Throughput the demand does not explain, well beyond the slack, is held as load no routing
// moves: traffic leaves the link that carries it.
TEST(MarginalDecisionTest, UnexplainedLoadIsRoutedAround) {
  const Topology topo = Fabric();
  MarginalDecisionConfig config = EveryMillisecond();
  config.demand_periods = 1;
  MarginalDecision d(topo, config);
  d.Decide(Time(0), topo);
  const NodeId leaf0 = *topo.FindNode("leaf0"), leaf1 = *topo.FindNode("leaf1");
  const LinkId busy = topo.FindLink(*topo.FindNode("spine0"), leaf1);
  for (int i = 1; i <= 10; ++i) {
    SendAcross(topo, d, 250'000);  // 2 Gb/s per pair
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      d.ObserveThroughput(l, l == busy ? DataRate::Gbps(8) : DataRate::Gbps(0));
    }
    d.Decide(Time(Milliseconds(i)), topo);
  }
  const LinkId via_busy = topo.FindLink(leaf0, *topo.FindNode("spine0"));
  auto tables = d.Decide(Time(Milliseconds(11)), topo);
  EXPECT_LT(test::WeightOf(*tables, leaf0, leaf1, via_busy), 0.3);
}

// A host cut off (its only link down) while others keep sending to it: its pairs are left
// out, the rest is still minimised, nothing fails.
TEST(MarginalDecisionTest, APartitionedPairLeavesTheRestRouted) {
  Topology topo = Fabric();
  MarginalDecisionConfig config = EveryMillisecond();
  MarginalDecision d(topo, config);
  d.Decide(Time(0), topo);
  const NodeId h3 = *topo.FindNode("h3");
  const NodeId leaf1 = *topo.FindNode("leaf1");
  const LinkId slow = topo.FindLink(*topo.FindNode("leaf0"), *topo.FindNode("spine0"));
  topo.mutable_link(slow).params.capacity = DataRate::Gbps(1);
  for (LinkId l : {topo.FindLink(leaf1, h3), topo.FindLink(h3, leaf1)}) {
    topo.mutable_link(l).up = false;
  }
  for (int i = 1; i <= 5; ++i) {
    SendAcross(topo, d, 500'000);  // h1 -> h3 and h3 -> h1 among them
    d.Decide(Time(Milliseconds(i)), topo);
  }
  EXPECT_EQ(d.stats().failures, 0) << d.last_error();
  EXPECT_GE(d.stats().publishes, 2);
}

}  // namespace
}  // namespace dar
