#include "sim/dar_routing.h"

#include "core/routing.h"
#include "core/table_manager.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "sim/runner.h"
#include "sim/scenario.h"
#include "sim/sim_test_util.h"

namespace dar::sim {
namespace {

absl::StatusOr<nlohmann::json> RunYaml(const std::string& yaml) {
  ASSIGN_OR_RETURN(Scenario s, ParseScenario(yaml, std::string(DAR_SOURCE_DIR) + "/x.yaml"));
  return RunScenario(s, {});
}

// A leaf-spine under constant background load on two fabric links, and one small transfer
// at the end: link costs are steady, so after the first cycles routes must hold still.
std::string SteadyScenario(double hysteresis, double min_cost_change, int end_ms) {
  return fmt::format(R"(
duration_ms: 1
topology:
  type: leaf_spine
  leaves: 4
  spines: 4
  hosts_per_leaf: 2
events:
  - {{at_ms: 0, load: {{link: [leaf0, spine0], to: 0.6}}}}
  - {{at_ms: 0, load: {{link: [leaf1, spine2], to: 0.3}}}}
workloads:
  - {{type: bulk, size_kb: 64, transfers: [{{src: h0, dst: h7}}], start_ms: {}}}
policies:
  - {{name: dar, decision: diffusion, period_ms: 1, hysteresis: {}, min_cost_change: {}}}
)",
                     end_ms, hysteresis, min_cost_change);
}

// Route changes per control cycle between 200 and 600 cycles in, once the estimators have
// settled.
double SteadyChangesPerCycle(double hysteresis, double min_cost_change) {
  double changes[2], cycles[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<nlohmann::json> r =
        RunYaml(SteadyScenario(hysteresis, min_cost_change, i == 0 ? 200 : 600));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    const auto& m = (*r)["policies"][0]["metrics"];
    EXPECT_EQ(m["routing_loops"], 0);
    EXPECT_EQ(m["fallbacks_to_static"], 0);
    changes[i] = m["route_changes"].get<double>();
    cycles[i] = m["control_cycles"].get<double>();
  }
  return (changes[1] - changes[0]) / (cycles[1] - cycles[0]);
}

TEST(DarRoutingTest, RoutesHoldStillOnASteadyNetwork) {
  const double calm = SteadyChangesPerCycle(0.3, 0.05);  // the defaults
  const double jumpy = SteadyChangesPerCycle(0, 0);
  std::printf("route changes per cycle on a steady network: %.3f with hysteresis, %.3f without\n",
              calm, jumpy);
  // Measurement noise (probe timing, queue samples) must not move routes cycle after cycle.
  EXPECT_LT(calm, 0.1);
  EXPECT_GT(jumpy, 10 * calm);
}

// A fabric link at a quarter of its capacity: the bulk class (which weighs free capacity)
// sends little toward it, ECMP would send half.
TEST(DarRoutingTest, BulkClassAvoidsADegradedLink) {
  FatTreeParams p;
  p.k = 4;
  Topology topo = FatTree(p);
  const NodeId a0 = *topo.FindNode("a0");
  const LinkId slow = topo.FindLink(a0, *topo.FindNode("c0"));
  const LinkId fast = topo.FindLink(a0, *topo.FindNode("c1"));
  topo.mutable_link(slow).params.capacity = DataRate::Gbps(2.5);
  const NodeId remote = *topo.FindNode("e7");
  const auto weights = [&](const RoutingTables* t) {
    std::pair<double, double> w{0, 0};  // slow, fast
    for (const NextHop& hop : t->Lookup(a0, remote)) {
      if (hop.link == slow) w.first = hop.weight;
      if (hop.link == fast) w.second = hop.weight;
    }
    return w;
  };
  // The tables DAR installs at its start, before any traffic, with `decision`.
  const auto started = [&](DarConfig::Decision decision, auto&& check) {
    testing::Harness h(topo, ForwardingMode::kPerFlowlet);
    ControlContext ctx{h.loop, h.net, h.rng};
    DarConfig config;
    config.decision = decision;
    DarRouting dar{config};
    dar.Start(ctx);
    ASSERT_NE(h.net.tables(0), nullptr);
    ASSERT_NE(h.net.tables(1), nullptr);
    check(h.net);
  };
  started(DarConfig::Decision::kDiffusion, [&](const Network& net) {
    const auto [w_slow, w_fast] = weights(net.tables(1));
    EXPECT_GT(w_fast, 0.8);
    EXPECT_LT(w_slow, 0.2);
    // The latency class does not weigh capacity: both cores stay in use.
    EXPECT_EQ(net.tables(0)->Lookup(a0, remote).size(), 2u);
  });
  // The marginal layer starts from WCMP: a quarter of the capacity gets a fifth of the new
  // traffic (2.5 of 12.5 Gb/s), in both classes.
  started(DarConfig::Decision::kMarginal, [&](const Network& net) {
    for (int cls = 0; cls < 2; ++cls) {
      const auto [w_slow, w_fast] = weights(net.tables(cls));
      EXPECT_NEAR(w_slow, 0.2, 1e-9);
      EXPECT_NEAR(w_fast, 0.8, 1e-9);
    }
  });
}

// A gray failure (a link that loses everything but keeps carrier): nothing local sees it, so
// the link-state baseline keeps sending into it; DAR's agents miss three probes, the forwarder
// stops using the link at once, and the transfer completes.
TEST(DarRoutingTest, MissedProbesRouteAroundASilentFailure) {
  absl::StatusOr<nlohmann::json> r = RunYaml(R"(
duration_ms: 1
drain_limit_ms: 100
topology: {type: leaf_spine, leaves: 2, spines: 2, hosts_per_leaf: 1}
events:
  - {at_ms: 3, link_fail_silent: [leaf0, spine0]}
workloads:
  - {type: bulk, size_mb: 20, transfers: [{src: h0, dst: h1}]}
policies:
  - {name: ecmp, forwarding: per_packet}
  - {name: dar, forwarding: per_packet, period_ms: 1}
)");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& ecmp = (*r)["policies"][0]["metrics"];
  const auto& dar = (*r)["policies"][1]["metrics"];
  // ECMP never learns: it keeps losing half its packets and does not finish in time.
  EXPECT_FALSE(ecmp["completed"].get<bool>());
  EXPECT_GT(ecmp["drops_by_reason"]["silent_failure"].get<int64_t>(), 0);
  EXPECT_TRUE(dar["completed"].get<bool>());
  EXPECT_EQ(dar["transfers_completed"], 1);
  EXPECT_GE(dar["local_liveness_changes"].get<int64_t>(), 2);             // both directions
  EXPECT_GT(dar["drops_by_reason"]["silent_failure"].get<int64_t>(), 0);  // data, not probes
  // 16 ms of data at line rate; the failure costs about three probe periods more, not tens.
  EXPECT_LT(dar["completion_mean_s"].get<double>(), 0.030);
  EXPECT_EQ(dar["routing_loops"], 0);
}

// Invalid tables offered to the forwarders are refused and never forward a packet: the
// network keeps the last good tables, and traffic flows without loops.
TEST(DarRoutingTest, InvalidTablesNeverForward) {
  FatTreeParams p;
  p.k = 4;
  const Topology topo = FatTree(p);
  testing::Harness h(topo, ForwardingMode::kPerFlow);
  TableManager manager(topo, TableManagerConfig());
  auto good = std::make_shared<RoutingTables>(ComputeEcmpTables(topo));
  good->set_version(1);
  ASSERT_TRUE(manager.Offer(good, h.loop.now()).ok());
  // A loop between e0 and a0 toward every destination.
  const NodeId e0 = *topo.FindNode("e0"), a0 = *topo.FindNode("a0");
  auto looped = std::make_shared<RoutingTables>(topo.num_nodes(), topo.Destinations());
  for (NodeId d : topo.Destinations()) {
    std::vector<std::vector<NextHop>> rows(topo.num_nodes());
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const auto hops = good->Lookup(v, d);
      rows[v].assign(hops.begin(), hops.end());
    }
    if (d != e0) rows[e0] = {NextHop{topo.FindLink(e0, a0), 1.0}};
    if (d != a0 && d != e0) rows[a0] = {NextHop{topo.FindLink(a0, e0), 1.0}};
    looped->Set(std::make_shared<const DestinationTable>(d, rows));
  }
  looped->set_version(2);
  EXPECT_FALSE(manager.Offer(looped, h.loop.now()).ok());
  auto old = std::make_shared<RoutingTables>(ComputeEcmpTables(topo));
  old->set_version(1);
  EXPECT_FALSE(manager.Offer(old, h.loop.now()).ok());
  h.net.InstallTables(manager.ActiveShared(h.loop.now()));
  EXPECT_EQ(h.net.tables(), good.get());
  int done = 0;
  for (int i = 0; i < 4; ++i) {
    h.transport.Send(*topo.FindNode("h0"), *topo.FindNode("h" + std::to_string(12 + i)), 100'000, 0,
                     [&](const MessageResult&) { ++done; });
  }
  h.loop.Run();
  EXPECT_EQ(done, 4);
  EXPECT_EQ(h.net.drops(DropReason::kHopLimit), 0);
  EXPECT_EQ(manager.counters().refused_loop, 1);
  EXPECT_EQ(manager.counters().refused_version, 1);
}

// The marginal decision layer on a symmetric, healthy fabric under an even all-to-all: ECMP
// is already the objective's optimum for any measured demand, so the first tables hold and
// not one route changes. With one uplink at a tenth of its capacity the layer publishes new
// tables that take the leaf's traffic off it, and the all-to-all finishes sooner than under
// ECMP.
TEST(DarRoutingTest, MarginalDecisionHoldsOnASymmetricFabricAndMovesOffASlowLink) {
  const auto run = [](bool degraded) {
    return RunYaml(
        fmt::format(R"(
duration_ms: 20
drain_limit_ms: 200
topology:
  type: leaf_spine
  leaves: 4
  spines: 4
  hosts_per_leaf: 4
{degraded}
workloads:
  - {{type: alltoall, jobs: 1, job_size: 16, placement: spread, message_mb: 4, iterations: 4}}
policies:
  - {{name: ecmp, forwarding: per_flowlet, flowlet_gap_us: 500}}
  - {{name: dar-m, routing: dar, decision: marginal, forwarding: per_flowlet, flowlet_gap_us: 500, period_ms: 1}}
)",
                    fmt::arg("degraded", degraded ? "  overrides: [{link: [leaf0, spine0], "
                                                    "capacity_fraction: 0.1}]"
                                                  : "")));
  };
  absl::StatusOr<nlohmann::json> healthy = run(false);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  const auto& even = (*healthy)["policies"][1]["metrics"];
  EXPECT_GT(even["control_cycles"].get<int64_t>(), 10);
  EXPECT_EQ(even["route_changes"], 0);
  EXPECT_EQ(even["marginal"]["publishes"], 1);  // the first tables, ECMP's
  EXPECT_EQ(even["routing_loops"], 0) << even.dump(1);

  absl::StatusOr<nlohmann::json> slow = run(true);
  ASSERT_TRUE(slow.ok()) << slow.status();
  const auto& ecmp = (*slow)["policies"][0]["metrics"];
  const auto& dar = (*slow)["policies"][1]["metrics"];
  EXPECT_GE(dar["marginal"]["publishes"].get<int64_t>(), 2);
  EXPECT_GT(dar["route_changes"].get<int64_t>(), 0);
  EXPECT_EQ(dar["routing_loops"], 0);
  EXPECT_EQ(dar["marginal"]["failures"], 0);
  std::printf("all-to-all with leaf0-spine0 at a tenth: iteration time ECMP %.2f ms, DAR %.2f ms\n",
              ecmp["alltoall_iteration_time_s"].get<double>() * 1e3,
              dar["alltoall_iteration_time_s"].get<double>() * 1e3);
  EXPECT_LT(dar["alltoall_iteration_time_s"].get<double>(),
            0.8 * ecmp["alltoall_iteration_time_s"].get<double>());
}

// The marginal layer's settings are checked like every other key.
TEST(DarRoutingTest, MarginalDecisionKeysAreChecked) {
  const auto run = [](const std::string& keys) {
    return RunYaml(fmt::format(R"(
duration_ms: 1
topology: {{type: leaf_spine, leaves: 2, spines: 2, hosts_per_leaf: 1}}
workloads:
  - {{type: bulk, size_kb: 64, transfers: [{{src: h0, dst: h1}}]}}
policies:
  - {{name: dar, {}}}
)",
                               keys));
  };
  EXPECT_TRUE(run("decision: marginal, objective_power: 16, publish_gain: 0.05").ok());
  for (const char* bad :
       {"decision: greedy", "decision: marginal, objective_power: 1",
        "decision: marginal, publish_gain: 2", "decision: marginal, demand_periods: 0"}) {
    absl::StatusOr<nlohmann::json> r = run(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace dar::sim
