// The load balancers from the literature (docs/baselines.md), each by its defining behaviour.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/routing.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/conga.h"
#include "sim/runner.h"
#include "sim/scenario.h"

namespace dar::sim {
namespace {

using ::testing::HasSubstr;

// A leaf-spine fabric with transport, forwarding with ECMP's tables unless a control plane
// installs others.
struct Fabric {
  Fabric(const LeafSpineParams& params, ForwardingConfig forwarding, const NetworkConfig& nc,
         const TransportConfig& tc = {})
      : Fabric(LeafSpine(params), forwarding, nc, tc) {}
  Fabric(Topology t, ForwardingConfig forwarding, const NetworkConfig& nc,
         const TransportConfig& tc = {})
      : topo(std::move(t)), rng(3), net(loop, rng, topo, nc), transport(net, tc) {
    net.set_forwarding(forwarding);
    net.InstallTables(std::make_shared<const RoutingTables>(ComputeEcmpTables(topo)));
  }
  NodeId Node(const std::string& name) const { return topo.FindNode(name).value(); }
  LinkId Link(const std::string& a, const std::string& b) const {
    return topo.FindLink(Node(a), Node(b));
  }

  Topology topo;
  EventLoop loop;
  Random rng;
  Network net;
  Transport transport;
};

ForwardingConfig Mode(ForwardingMode mode) {
  ForwardingConfig f;
  f.mode = mode;
  return f;
}

// DRILL keeps the queues of a symmetric stage within a few packets of each other: eight long
// flows from one leaf's hosts into its four uplinks (2:1 oversubscribed). Per-flow ECMP puts
// colliding flows on one uplink and leaves another short; DRILL evens them out packet by packet.
TEST(BaselinesTest, DrillKeepsASymmetricStagesQueuesLevel) {
  auto mean_spread = [](ForwardingMode mode) {
    NetworkConfig nc;
    nc.ecn_threshold_bytes = 64 << 10;
    Fabric f({.leaves = 2, .spines = 4, .hosts_per_leaf = 8}, Mode(mode), nc);
    for (int i = 0; i < 8; ++i) {
      f.transport.Send(f.Node(fmt::format("h{}", i)), f.Node(fmt::format("h{}", 8 + i)),
                       int64_t{50} << 20, 0, nullptr);
    }
    std::vector<LinkId> uplinks;
    for (int s = 0; s < 4; ++s) uplinks.push_back(f.Link("leaf0", fmt::format("spine{}", s)));
    double spread = 0;
    int samples = 0;
    f.loop.RunUntil(Time(0) + Milliseconds(1));
    for (Time t = Time(0) + Milliseconds(1); t < Time(0) + Milliseconds(4); t += Microseconds(5)) {
      f.loop.RunUntil(t);
      int64_t lo = INT64_MAX, hi = 0;
      for (LinkId l : uplinks) {
        lo = std::min(lo, f.net.QueuedBytes(l));
        hi = std::max(hi, f.net.QueuedBytes(l));
      }
      spread += static_cast<double>(hi - lo);
      ++samples;
    }
    return spread / samples;
  };
  const double drill = mean_spread(ForwardingMode::kDrill);
  const double ecmp = mean_spread(ForwardingMode::kPerFlow);
  std::printf("mean queue spread over a leaf's 4 uplinks: DRILL %.0f B, ECMP %.0f B\n", drill,
              ecmp);
  EXPECT_LT(drill, 3 * 1500);
  EXPECT_GT(ecmp, 4 * drill);
}

// CONGA moves flowlets off a path that is congested beyond the first hop: the source leaf's
// uplinks are alike, but one spine's link down to the destination leaf runs at an eighth of
// its capacity, which only the feedback from the destination leaf reveals. Halfway, the
// degraded link switches to the other spine, and the traffic follows within a fraction of a
// millisecond. LetFlow, blind to load, splits far more evenly.
TEST(BaselinesTest, CongaMovesFlowletsOffADegradedPath) {
  struct Shares {
    double first, second;  // of the bytes leaf0 sent up through spine1
    int64_t feedback;
  };
  auto run = [](bool conga, Topology topo) {
    NetworkConfig nc;
    nc.ecn_threshold_bytes = 64 << 10;
    ForwardingConfig forwarding = Mode(ForwardingMode::kPerFlowlet);
    forwarding.flowlet_gap = Microseconds(500);
    Fabric f(std::move(topo), forwarding, nc);
    CongaRouting cp{CongaConfig(), LinkStateConfig()};
    Random control_rng(11);
    ControlContext ctx{f.loop, f.net, control_rng};
    if (conga) cp.Start(ctx);
    const LinkId down0 = f.Link("spine0", "leaf1");
    const LinkId down1 = f.Link("spine1", "leaf1");
    const DataRate full = f.topo.link(down1).params.capacity;
    f.net.SetLinkCapacity(down1, full.Scaled(0.125));
    // A new 20 KB message every 20 us from leaf0's hosts to leaf1's: 8 Gb/s offered.
    int i = 0;
    Timer gen(f.loop, [&] {
      f.transport.Send(f.Node(fmt::format("h{}", i % 4)),
                       f.Node(fmt::format("h{}", 4 + (i * 3) % 4)), 20000, 0, nullptr);
      ++i;
      if (f.loop.now() < Time(0) + Milliseconds(10)) gen.ScheduleIn(Microseconds(20));
    });
    gen.ScheduleAt(Time(0));
    const LinkId up0 = f.Link("leaf0", "spine0");
    const LinkId up1 = f.Link("leaf0", "spine1");
    auto bytes = [&] {
      return std::pair(f.net.counters(up0).tx_bytes, f.net.counters(up1).tx_bytes);
    };
    auto share = [](std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
      const double via0 = static_cast<double>(b.first - a.first);
      const double via1 = static_cast<double>(b.second - a.second);
      return via1 / (via0 + via1);
    };
    f.loop.RunUntil(Time(0) + Milliseconds(1));
    const auto a = bytes();
    f.loop.RunUntil(Time(0) + Milliseconds(5));
    const auto b = bytes();
    f.net.SetLinkCapacity(down1, full);
    f.net.SetLinkCapacity(down0, full.Scaled(0.125));
    f.loop.RunUntil(Time(0) + Microseconds(5500));
    const auto c = bytes();
    f.loop.RunUntil(Time(0) + Milliseconds(10));
    const auto d = bytes();
    nlohmann::json m;
    if (conga) cp.Report(m);
    return Shares{share(a, b), share(c, d), conga ? m["conga_feedback"].get<int64_t>() : 0};
  };
  const Topology even = LeafSpine({.leaves = 2, .spines = 2, .hosts_per_leaf = 4});
  const Shares conga = run(true, even);
  const Shares letflow = run(false, even);
  std::printf("share of bytes via the spine1 path: CONGA %.2f then %.2f, LetFlow %.2f then %.2f\n",
              conga.first, conga.second, letflow.first, letflow.second);
  EXPECT_LT(conga.first, 0.3);
  EXPECT_GT(conga.second, 0.7);
  EXPECT_GT(conga.feedback, 1000);
  // LetFlow splits new flows blindly (its flowlets drift off a congested path only as their
  // gaps grow), far less decisively.
  EXPECT_GT(letflow.first, conga.first + 0.25);
  EXPECT_LT(letflow.second, conga.second - 0.25);

  // Leaves of unequal size, links added in another order: the path tags are the leaves' own
  // uplink numbers, so the feedback still reaches the slots the source leaf reads.
  Topology uneven;
  for (int i = 0; i < 4; ++i) uneven.AddNode(fmt::format("h{}", i), NodeKind::kHost);
  for (int i = 4; i < 8; ++i) uneven.AddNode(fmt::format("h{}", i), NodeKind::kHost);
  for (const char* n : {"leaf0", "leaf1", "spine0", "spine1"}) uneven.AddNode(n, NodeKind::kSwitch);
  auto id = [&](const std::string& n) { return uneven.FindNode(n).value(); };
  for (int i = 0; i < 4; ++i) uneven.AddDuplexLink(id(fmt::format("h{}", i)), id("leaf0"), {});
  for (int i = 0; i < 4; ++i) {  // idle hosts: leaf0 has ten ports, leaf1 six
    uneven.AddNode(fmt::format("idle{}", i), NodeKind::kHost);
    uneven.AddDuplexLink(id(fmt::format("idle{}", i)), id("leaf0"), {});
  }
  for (const char* sp : {"spine0", "spine1"}) uneven.AddDuplexLink(id("leaf0"), id(sp), {});
  for (const char* sp : {"spine1", "spine0"}) uneven.AddDuplexLink(id("leaf1"), id(sp), {});
  for (int i = 4; i < 8; ++i) uneven.AddDuplexLink(id("leaf1"), id(fmt::format("h{}", i)), {});
  uneven.AddNode("leaf2", NodeKind::kSwitch);  // a third leaf with more ports and one host
  uneven.AddNode("h8", NodeKind::kHost);
  for (const char* sp : {"spine0", "spine1"}) uneven.AddDuplexLink(id("leaf2"), id(sp), {});
  uneven.AddDuplexLink(id("h8"), id("leaf2"), {});
  const Shares skewed = run(true, uneven);
  std::printf("unequal leaves, CONGA: %.2f then %.2f\n", skewed.first, skewed.second);
  EXPECT_LT(skewed.first, 0.3);
  EXPECT_GT(skewed.second, 0.7);
}

// A flow on a path that fails silently (every packet lost, carrier kept, no routing protocol
// told) never finishes under ECMP hashing; with rehash_on_timeout (Linux's txrehash, PLB's
// default) its first timeout moves it to a new hash and it completes.
TEST(BaselinesTest, RehashOnTimeoutLeavesASilentlyFailedPath) {
  auto finishes = [](bool rehash) {
    TransportConfig tc;
    tc.rehash_on_timeout = rehash;
    Fabric f({.leaves = 2, .spines = 4, .hosts_per_leaf = 2}, Mode(ForwardingMode::kPerFlow), {},
             tc);
    for (int s = 0; s < 4; ++s) {
      f.net.SetLinkSilentFailure(f.Link("leaf0", fmt::format("spine{}", s)), s == 0);
    }
    int done = 0;
    for (int i = 0; i < 32; ++i) {  // of 32 flows, about a quarter hash onto spine0
      f.transport.Send(f.Node("h0"), f.Node("h2"), 100000, 0,
                       [&done](const MessageResult&) { ++done; });
    }
    f.loop.RunUntil(Time(0) + Milliseconds(200));
    return std::pair(done, f.transport.counters().repaths);
  };
  const auto [stuck, no_repaths] = finishes(false);
  const auto [all, repaths] = finishes(true);
  EXPECT_LT(stuck, 30);
  EXPECT_EQ(no_repaths, 0);
  EXPECT_EQ(all, 32);
  EXPECT_GT(repaths, 0);
}

// PLB repaths a flow whose path stays marked: sixteen long flows from one leaf to another, one
// spine's link down to the destination at an eighth of its capacity, so that the flows ECMP
// hashes onto it keep its queue above the marking threshold even at their smallest windows.
// ECMP leaves them there for good; PLB moves them after twelve congested rounds in a row, so
// fewer bytes take the slow spine and the last flow finishes sooner.
TEST(BaselinesTest, PlbRepathsFlowsWhosePathStaysMarked) {
  struct Outcome {
    double slow_share;
    Time last;
    int64_t repaths;
  };
  auto run = [](bool plb) {
    NetworkConfig nc;
    nc.ecn_threshold_bytes = 16 << 10;
    Fabric f({.leaves = 2, .spines = 2, .hosts_per_leaf = 4}, Mode(ForwardingMode::kPerFlow), nc);
    if (plb) f.transport.EnablePlb(PlbConfig());
    const LinkId slow = f.Link("spine1", "leaf1");
    f.net.SetLinkCapacity(slow, f.topo.link(slow).params.capacity.Scaled(0.125));
    Time last{0};
    for (int i = 0; i < 16; ++i) {
      f.transport.Send(f.Node(fmt::format("h{}", i % 4)), f.Node(fmt::format("h{}", 4 + i % 4)),
                       int64_t{4} << 20, 0,
                       [&last](const MessageResult& r) { last = std::max(last, r.finish); });
    }
    f.loop.RunUntil(Time(0) + Seconds(1));
    const double via0 = static_cast<double>(f.net.counters(f.Link("leaf0", "spine0")).tx_bytes);
    const double via1 = static_cast<double>(f.net.counters(f.Link("leaf0", "spine1")).tx_bytes);
    EXPECT_EQ(f.transport.active(), 0);
    return Outcome{via1 / (via0 + via1), last, f.transport.counters().repaths};
  };
  const Outcome ecmp = run(false);
  const Outcome plb = run(true);
  std::printf(
      "bytes via the slow spine: ECMP %.2f, PLB %.2f (%lld repaths); last flow done at "
      "%.2f vs %.2f ms\n",
      ecmp.slow_share, plb.slow_share, static_cast<long long>(plb.repaths),
      ToSeconds(ecmp.last) * 1e3, ToSeconds(plb.last) * 1e3);
  EXPECT_EQ(ecmp.repaths, 0);
  EXPECT_GT(plb.repaths, 0);
  EXPECT_LT(plb.slow_share, 0.9 * ecmp.slow_share);
  EXPECT_LT(ToSeconds(plb.last), 0.95 * ToSeconds(ecmp.last));
}

constexpr char kLeafSpine[] = R"(
duration_ms: 4
topology:
  type: leaf_spine
  leaves: 2
  spines: 2
  hosts_per_leaf: 4
  host_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
  fabric_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
  overrides:
    - {link: [spine1, leaf1], capacity_fraction: 0.25}
network: {ecn_threshold_kb: 64}
workloads:
  - {type: background, cdf: websearch, load: 0.4}
policies:
)";

// Every baseline is a policy name usable as it is in any scenario, with its paper's defaults,
// and its keys override them.
TEST(BaselinesTest, EveryBaselineIsAPolicyNameWithItsDefaults) {
  std::string flat = std::string(kLeafSpine);
  for (const char* p : {"spray", "letflow", "drill", "wcmp", "conga", "ecmp", "static"}) {  // + plb
    flat += fmt::format("  - {}\n", p);
  }
  flat += "  - {name: letflow-50, routing: letflow, flowlet_gap_us: 50}\n";
  flat += "  - {name: drill-3, routing: drill, drill_samples: 3, drill_memory: 0}\n";
  flat +=
      "  - {name: drill-fl, routing: ecmp, forwarding: drill_flowlet, reroute_threshold_kb: 4}\n";
  flat += "  - {name: conga-fast, routing: conga, dre_period_us: 8, flowlet_gap_us: 100}\n";
  flat += "  - plb\n";
  flat += "  - {name: plb-6, routing: plb, rehash_rounds: 6, congested_fraction: 0.3}\n";
  absl::StatusOr<Scenario> s = ParseScenario(flat, "baselines.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  auto policy = [&](const std::string& name) {
    return *std::find_if(s->policies.begin(), s->policies.end(),
                         [&](const PolicySpec& p) { return p.name == name; });
  };
  EXPECT_EQ(policy("spray").routing, "ecmp");
  EXPECT_EQ(policy("spray").forwarding.mode, ForwardingMode::kPerPacket);
  EXPECT_EQ(policy("letflow").forwarding.mode, ForwardingMode::kPerFlowlet);
  EXPECT_EQ(policy("letflow").forwarding.flowlet_gap, Microseconds(500));
  EXPECT_EQ(policy("letflow").forwarding.queue_bias_bytes, 0);
  EXPECT_EQ(policy("letflow-50").forwarding.flowlet_gap, Microseconds(50));
  EXPECT_EQ(policy("drill").forwarding.mode, ForwardingMode::kDrill);
  EXPECT_EQ(policy("drill").forwarding.drill_samples, 2);
  EXPECT_EQ(policy("drill").forwarding.drill_memory, 1);
  EXPECT_EQ(policy("drill-3").forwarding.drill_samples, 3);
  EXPECT_EQ(policy("drill-3").forwarding.drill_memory, 0);
  EXPECT_EQ(policy("drill-fl").forwarding.mode, ForwardingMode::kDrillFlowlet);
  EXPECT_EQ(policy("drill-fl").forwarding.reroute_threshold_bytes, 4096);
  EXPECT_EQ(policy("drill").forwarding.reroute_threshold_bytes, 15 * 1024);
  EXPECT_EQ(policy("wcmp").routing, "wcmp");
  EXPECT_EQ(policy("conga").routing, "conga");

  // Each runs the scenario to the end without a loop.
  RunOptions options;
  options.jobs = 2;
  absl::StatusOr<nlohmann::json> r = RunScenario(*s, options);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const auto& p : (*r)["policies"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    EXPECT_TRUE(p["metrics"]["completed"].get<bool>());
    EXPECT_EQ(p["metrics"]["routing_loops"], 0);
    EXPECT_GT(p["metrics"]["flows_completed"].get<int64_t>(), 0);
    if (p["routing"] == "conga") {
      EXPECT_GT(p["metrics"]["conga_feedback"].get<int64_t>(), 0);
    }
    if (p["routing"] == "plb") {
      EXPECT_TRUE(p["metrics"]["plb_repaths"].is_number_integer());
    }
  }
  // A bad key value is refused with the policy and the key.
  absl::StatusOr<Scenario> bad = ParseScenario(
      std::string(kLeafSpine) + "  - {name: d, routing: drill, drill_memory: 3}\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("policies[0].drill_memory"));
  bad = ParseScenario(
      std::string(kLeafSpine) + "  - {name: d, routing: ecmp, reroute_threshold_kb: -1}\n",
      "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("policies[0].reroute_threshold_kb"));
  bad = ParseScenario(std::string(kLeafSpine) + "  - {name: c, routing: conga, dre_alpha: 1.5}\n",
                      "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("dre_alpha"));
}

}  // namespace
}  // namespace dar::sim
