#include "control/controller_session.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "control/controller_tables.h"
#include "control/controller_test_util.h"
#include "core/routing.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "security/key_ring.h"

namespace dar::control {
namespace {

// A square n1-n2-n3-n4-n1 and a route computer over it; snapshots are cut from its cycles.
class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    for (uint32_t i = 1; i <= 4; ++i) {
      config_.nodes.push_back({i, "n" + std::to_string(i), "10.77.0." + std::to_string(i)});
    }
    for (auto [a, b] : {std::pair{1, 2}, {2, 3}, {3, 4}, {4, 1}}) {
      config_.links.push_back(
          {"n" + std::to_string(a), "n" + std::to_string(b), DataRate::Gbps(1), std::nullopt});
    }
    overlay_ = MakeOverlay(config_);
    computer_ = std::make_unique<RouteComputer>(overlay_->topology, DefaultControllerRoutes());
  }

  std::shared_ptr<const RouteSnapshot> Cycle() {
    const RouteCycle c = computer_->Cycle(false);
    ++version_;
    return MakeSnapshot(overlay_, *computer_, c, version_, 1000 * version_);
  }
  LinkId Link(int a, int b) const { return overlay_->topology.FindLink(a - 1, b - 1); }

  ControllerConfig config_;
  std::shared_ptr<const Overlay> overlay_;
  std::unique_ptr<RouteComputer> computer_;
  uint64_t version_ = 0;
};

// A refresh of zero: every snapshot is sent, changed or not.
constexpr Duration kEverySnapshot{0};

// A route's next hops and weights, for comparing rows without their potentials.
std::vector<std::pair<uint32_t, double>> Hops(const v1::Route& r) {
  std::vector<std::pair<uint32_t, double>> out;
  for (const v1::NextHop& h : r.next_hops()) out.push_back({h.neighbor_id(), h.weight()});
  return out;
}

TEST_F(SessionTest, FullTableCoversEveryOtherNodeDownhill) {
  const auto snap = Cycle();
  v1::RouteTable t;
  BuildRouteTable(*snap, /*node=*/0, nullptr, t);
  EXPECT_EQ(t.version(), 1u);
  EXPECT_EQ(t.base_version(), 0u);
  EXPECT_EQ(t.computed_unix_ns(), 1000);
  ASSERT_EQ(t.routes_size(), 3 * kTrafficClasses);  // n2, n3, n4, two classes each
  for (const v1::Route& r : t.routes()) {
    EXPECT_NE(r.destination_id(), 1u);
    double sum = 0;
    for (const v1::NextHop& h : r.next_hops()) {
      EXPECT_LT(h.potential(), r.potential());
      EXPECT_TRUE(h.neighbor_id() == 2 || h.neighbor_id() == 4) << h.neighbor_id();
      sum += h.weight();
    }
    EXPECT_NEAR(sum, 1, 1e-9);
    if (r.destination_id() == 3) {
      EXPECT_EQ(r.next_hops_size(), 2);  // two equal ways
    }
  }
}

TEST_F(SessionTest, DeltaHoldsOnlyChangedRowsAndUnreachableOnes) {
  const auto a = Cycle();
  const auto b = Cycle();  // nothing changed
  v1::RouteTable t;
  BuildRouteTable(*b, 0, a.get(), t);
  EXPECT_EQ(t.base_version(), 1u);
  EXPECT_EQ(t.routes_size(), 0);
  EXPECT_EQ(t.removed_size(), 0);

  // n2 becomes unreachable: both its links down.
  for (auto [x, y] : {std::pair{1, 2}, {2, 1}, {2, 3}, {3, 2}})
    computer_->SetKnownDown(Link(x, y), true);
  const auto c = Cycle();
  BuildRouteTable(*c, 0, b.get(), t);
  EXPECT_EQ(t.base_version(), 2u);
  // n2's rows are sent as unreachable (no next hops, infinite potential), not dropped: the
  // agent, which sees only its own links, would otherwise think n2 reachable and refuse.
  EXPECT_EQ(t.removed_size(), 0);
  int unreachable = 0;
  for (const v1::Route& r : t.routes()) {
    if (r.destination_id() != 2) continue;
    ++unreachable;
    EXPECT_EQ(r.next_hops_size(), 0);
    EXPECT_EQ(r.potential(), std::numeric_limits<double>::infinity());
  }
  EXPECT_EQ(unreachable, kTrafficClasses);
  // The rows toward n3 lost their way over n2.
  bool saw_n3 = false;
  for (const v1::Route& r : t.routes()) {
    if (r.destination_id() != 3) continue;
    saw_n3 = true;
    ASSERT_EQ(r.next_hops_size(), 1);
    EXPECT_EQ(r.next_hops(0).neighbor_id(), 4u);
  }
  EXPECT_TRUE(saw_n3);

  // A delta applied to the full table equals the full table of the new version.
  testing::HeldRoutes held, full;
  v1::RouteTable ta, tc;
  BuildRouteTable(*b, 0, nullptr, ta);
  ASSERT_TRUE(testing::ApplyTable(ta, 0, held).ok());
  ASSERT_TRUE(testing::ApplyTable(t, 2, held).ok());
  BuildRouteTable(*c, 0, nullptr, tc);
  ASSERT_TRUE(testing::ApplyTable(tc, 0, full).ok());
  ASSERT_EQ(held.size(), full.size());
  for (const auto& [key, route] : full) {
    ASSERT_TRUE(held.contains(key));
    EXPECT_EQ(Hops(held[key]), Hops(route));
  }
}

TEST_F(SessionTest, PotentialsMovingAloneAreNotResent) {
  const auto a = Cycle();
  // Load on n1-n2 moves potentials; hysteresis keeps most rows' next hops and weights.
  LinkSample s;
  s.rtt_smoothed = Microseconds(300);
  s.utilisation = 0.3;
  computer_->Observe(Link(1, 2), s);
  const auto b = Cycle();
  v1::RouteTable delta, old_full, new_full;
  BuildRouteTable(*b, 0, a.get(), delta);
  BuildRouteTable(*a, 0, nullptr, old_full);
  BuildRouteTable(*b, 0, nullptr, new_full);
  ASSERT_EQ(old_full.routes_size(), new_full.routes_size());
  int moved_alone = 0, changed = 0;
  for (int i = 0; i < new_full.routes_size(); ++i) {
    const v1::Route& before = old_full.routes(i);
    const v1::Route& after = new_full.routes(i);
    if (Hops(before) != Hops(after)) {
      ++changed;
    } else if (before.potential() != after.potential()) {
      ++moved_alone;
    }
  }
  EXPECT_GT(moved_alone, 0);
  EXPECT_EQ(delta.routes_size(), changed);
  for (const v1::Route& r : delta.routes()) {
    for (const v1::Route& o : old_full.routes()) {
      if (o.destination_id() == r.destination_id() && o.traffic_class() == r.traffic_class()) {
        EXPECT_NE(Hops(o), Hops(r));
      }
    }
  }
}

// Ranked potentials (the marginal layer's tables): a node's rank is the most hops of its
// paths; a destination table the last snapshot has too keeps that snapshot's potentials, and
// one the classes share is ranked once.
TEST_F(SessionTest, RankedSnapshotsRankOnceAndKeepWhatTheLastSnapshotHas) {
  const auto ecmp = std::make_shared<const RoutingTables>(ComputeEcmpTables(overlay_->topology));
  const std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> tables = {ecmp, ecmp};
  const std::shared_ptr<const RouteSnapshot> first =
      MakeRankedSnapshot(overlay_, overlay_->topology, tables, 1, 1000);
  // Toward n1: n2 and n4 one hop, n3 two (both ways are two hops).
  EXPECT_EQ(first->Potential(0, 0, 0), 0);
  EXPECT_EQ(first->Potential(0, 0, 1), 1);
  EXPECT_EQ(first->Potential(0, 0, 2), 2);
  EXPECT_EQ(first->Potential(1, 0, 2), 2);
  // A last snapshot with other potentials for the same table objects: they are kept.
  auto marked = std::make_shared<RouteSnapshot>(*first);
  for (std::vector<RouteSnapshot::PotentialRow>& rows : marked->potentials) {
    for (RouteSnapshot::PotentialRow& row : rows) {
      auto shifted = std::make_shared<std::vector<double>>(*row);
      for (double& x : *shifted) x += 10;
      row = std::move(shifted);
    }
  }
  const std::shared_ptr<const RouteSnapshot> kept =
      MakeRankedSnapshot(overlay_, overlay_->topology, tables, 2, 2000, marked.get());
  EXPECT_EQ(kept->Potential(0, 0, 2), 12);
  EXPECT_EQ(kept->Potential(1, 0, 2), 12);
  // Shared, not copied: the same row objects.
  EXPECT_EQ(kept->potentials[0][0], marked->potentials[0][0]);
  EXPECT_EQ(kept->potentials[1][0], kept->potentials[0][0]);
  // New table objects (the same contents) are ranked afresh.
  const auto copy = std::make_shared<const RoutingTables>(ComputeEcmpTables(overlay_->topology));
  const std::shared_ptr<const RouteSnapshot> fresh =
      MakeRankedSnapshot(overlay_, overlay_->topology, {{copy, copy}}, 3, 3000, marked.get());
  EXPECT_EQ(fresh->Potential(0, 0, 2), 2);
}

TEST_F(SessionTest, ConfigFirstThenStopAndWaitTables) {
  AgentSession s(/*wire_id=*/1, /*delta_tables=*/true, /*installed_version=*/0, Seconds(1),
                 kEverySnapshot);
  v1::ControllerMessage m;
  EXPECT_FALSE(s.Next(Time(0), m));
  s.SetConfig(std::make_shared<v1::AgentConfig>());
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_TRUE(m.has_config());
  ASSERT_TRUE(s.Next(Time(0), m));
  ASSERT_TRUE(m.has_table());
  EXPECT_EQ(m.table().version(), 1u);
  EXPECT_EQ(m.table().base_version(), 0u);
  EXPECT_EQ(s.in_flight_version(), 1u);

  // Newer snapshots wait for the ack; only the newest is sent then, as a delta.
  s.SetSnapshot(Cycle());
  s.SetSnapshot(Cycle());
  EXPECT_FALSE(s.Next(Time(0), m));
  v1::TableAck ack;
  ack.set_version(1);
  ack.set_accepted(true);
  EXPECT_EQ(s.OnAck(ack), AckOutcome::kAccepted);
  EXPECT_EQ(s.acked_version(), 1u);
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_EQ(m.table().version(), 3u);
  EXPECT_EQ(m.table().base_version(), 1u);
  EXPECT_EQ(s.delta_tables_sent(), 1);

  // A stale ack changes nothing; a refusal makes the next table full.
  ack.set_version(2);
  EXPECT_EQ(s.OnAck(ack), AckOutcome::kStale);
  ack.set_version(3);
  ack.set_accepted(false);
  EXPECT_EQ(s.OnAck(ack), AckOutcome::kRefused);
  EXPECT_EQ(s.acked_version(), 1u);
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_EQ(m.table().version(), 4u);
  EXPECT_EQ(m.table().base_version(), 0u);
  EXPECT_EQ(s.full_tables_sent(), 2);
}

// The config an agent is sent carries its own row of each epoch, never a secret: the same row
// at every push (made once), the active flag as the ring says now, and a new epoch's row when
// one is added.
TEST_F(SessionTest, TheConfigCarriesTheNodesRowNotTheSecrets) {
  auto config = std::make_shared<v1::AgentConfig>();
  for (uint32_t id : {1u, 2u, 3u}) config->add_nodes()->set_node_id(id);
  v1::OverlayKey* k = config->add_keys();
  k->set_key_id(5);
  k->set_key(std::string(32, '\x07'));
  k->set_active(true);
  AgentSession s(/*wire_id=*/2, true, 0, Seconds(1), kEverySnapshot);
  s.SetConfig(config);
  v1::ControllerMessage first;
  ASSERT_TRUE(s.Next(Time(0), first));
  ASSERT_EQ(first.config().keys_size(), 1);
  const v1::OverlayKey& row = first.config().keys(0);
  EXPECT_TRUE(row.row());
  EXPECT_TRUE(row.key().empty());
  EXPECT_EQ(row.SerializeAsString(),
            security::RowFor(*k, 2, std::vector<uint32_t>{1, 2, 3}).SerializeAsString());
  EXPECT_EQ(first.config().SerializeAsString().find(std::string(32, '\x07')), std::string::npos);

  // The next step of a rotation: epoch 6 added and sealing.
  auto next = std::make_shared<v1::AgentConfig>(*config);
  next->mutable_keys(0)->set_active(false);
  v1::OverlayKey* k6 = next->add_keys();
  k6->set_key_id(6);
  k6->set_key(std::string(32, '\x08'));
  k6->set_active(true);
  s.SetConfig(next);
  v1::ControllerMessage second;
  ASSERT_TRUE(s.Next(Time(0), second));
  ASSERT_EQ(second.config().keys_size(), 2);
  EXPECT_FALSE(second.config().keys(0).active());
  EXPECT_EQ(second.config().keys(0).peers(0).key(), row.peers(0).key());
  EXPECT_TRUE(second.config().keys(1).active());
  EXPECT_EQ(second.config().keys(1).peers_size(), 2);
  EXPECT_NE(second.config().keys(1).peers(0).key(), row.peers(0).key());
}

TEST_F(SessionTest, NoAckWithinTheTimeoutSendsAFullTable) {
  AgentSession s(1, true, 0, Seconds(1), kEverySnapshot);
  v1::ControllerMessage m;
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));
  v1::TableAck ack;
  ack.set_version(1);
  ack.set_accepted(true);
  s.OnAck(ack);
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_EQ(m.table().base_version(), 1u);
  s.SetSnapshot(Cycle());
  EXPECT_FALSE(s.Next(Milliseconds(999), m));
  ASSERT_TRUE(s.Next(Seconds(1), m));
  EXPECT_EQ(m.table().version(), 3u);
  EXPECT_EQ(m.table().base_version(), 0u);
}

TEST_F(SessionTest, VersionsStayAboveTheInstalledOneAndAgentsWithoutDeltasGetFullTables) {
  AgentSession s(2, /*delta_tables=*/false, /*installed_version=*/2, Seconds(1), kEverySnapshot);
  v1::ControllerMessage m;
  s.SetSnapshot(Cycle());  // v1
  s.SetSnapshot(Cycle());  // v2
  EXPECT_FALSE(s.Next(Time(0), m));
  s.SetSnapshot(Cycle());  // v3
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_EQ(m.table().version(), 3u);
  v1::TableAck ack;
  ack.set_version(3);
  ack.set_accepted(true);
  s.OnAck(ack);
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));
  EXPECT_EQ(m.table().base_version(), 0u);
  // An older snapshot offered late is ignored.
  const uint64_t v = s.in_flight_version();
  s.OnAck([&] {
    v1::TableAck a;
    a.set_version(v);
    a.set_accepted(true);
    return a;
  }());
  s.SetSnapshot(MakeSnapshot(overlay_, *computer_, computer_->Cycle(false), 1, 0));
  EXPECT_FALSE(s.Next(Time(0), m));
}

// A snapshot that changes none of the node's rows is held while the refresh can wait for the
// next one; one that changes a row goes at once, as a delta against the acked table. A
// configuration's staleness timeout (a reload) sets the refresh.
TEST_F(SessionTest, UnchangedRowsAreSentOnlyAsARefresh) {
  AgentSession s(/*wire_id=*/1, /*delta_tables=*/true, 0, Seconds(1), Milliseconds(500));
  v1::ControllerMessage m;
  const auto ack = [&](uint64_t version) {
    v1::TableAck a;
    a.set_version(version);
    a.set_accepted(true);
    return s.OnAck(a);
  };
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Time(0), m));  // the first table is full and always goes
  ASSERT_EQ(ack(1), AckOutcome::kAccepted);

  // Snapshots 100 ms apart that change nothing (v2..v4) are held...
  for (int t = 100; t <= 300; t += 100) {
    s.SetSnapshot(Cycle());
    EXPECT_FALSE(s.Next(Milliseconds(t), m)) << t;
  }
  EXPECT_EQ(s.unchanged_tables_held(), 3);
  EXPECT_EQ(s.in_flight_version(), 0u);
  // ...until the next would come 500 ms after the last table: v5 goes, an empty delta against
  // what the agent holds.
  s.SetSnapshot(Cycle());
  ASSERT_TRUE(s.Next(Milliseconds(400), m));
  EXPECT_EQ(m.table().version(), 5u);
  EXPECT_EQ(m.table().base_version(), 1u);
  EXPECT_EQ(m.table().routes_size(), 0);
  ASSERT_EQ(ack(5), AckOutcome::kAccepted);

  // The link n1-n2 goes down: n1's rows change, and the delta goes before the next refresh.
  computer_->SetKnownDown(Link(1, 2), true);
  computer_->SetKnownDown(Link(2, 1), true);
  s.SetSnapshot(Cycle());  // v6
  ASSERT_TRUE(s.Next(Milliseconds(500), m));
  EXPECT_EQ(m.table().version(), 6u);
  EXPECT_EQ(m.table().base_version(), 5u);
  EXPECT_GT(m.table().routes_size(), 0);
  EXPECT_EQ(s.unchanged_tables_held(), 3);
  ASSERT_EQ(ack(6), AckOutcome::kAccepted);

  // A reload to a 30 s staleness timeout: the refresh is 5 s.
  auto config = std::make_shared<v1::AgentConfig>();
  config->set_table_stale_ms(30000);
  s.SetConfig(config);
  ASSERT_TRUE(s.Next(Milliseconds(550), m));
  EXPECT_TRUE(m.has_config());
  for (int t = 600; t <= 5300; t += 100) {
    s.SetSnapshot(Cycle());
    EXPECT_FALSE(s.Next(Milliseconds(t), m)) << t;
  }
  s.SetSnapshot(Cycle());
  EXPECT_TRUE(s.Next(Milliseconds(5400), m));
}

using testing::FatTreeConfig;

// A route's next hops by wire id, with weights.
std::vector<std::pair<uint32_t, double>> WireHops(const Overlay& o,
                                                  absl::Span<const NextHop> hops) {
  std::vector<std::pair<uint32_t, double>> out;
  for (const NextHop& h : hops) out.push_back({o.wire_id[o.topology.link(h.link).dst], h.weight});
  return out;
}

// Every node's full table from `s` is what agents accept: a route toward every other node
// in both classes, weights summing to one, every next hop strictly downhill, and the rows,
// followed from any node, reach the destination without a loop.
void ExpectAcceptableTables(const RouteSnapshot& s) {
  const Overlay& o = *s.overlay;
  const int n = o.topology.num_nodes();
  for (NodeId v = 0; v < n; ++v) {
    v1::RouteTable t;
    BuildRouteTable(s, v, nullptr, t);
    ASSERT_EQ(t.routes_size(), (n - 1) * kTrafficClasses) << o.name(v);
    for (const v1::Route& r : t.routes()) {
      double sum = 0;
      if (r.next_hops_size() > 0) {
        EXPECT_TRUE(std::isfinite(r.potential()));
      }
      for (const v1::NextHop& h : r.next_hops()) {
        EXPECT_LT(h.potential(), r.potential()) << o.name(v) << " -> " << r.destination_id();
        sum += h.weight();
      }
      if (r.next_hops_size() > 0) {
        EXPECT_NEAR(sum, 1, 1e-9);
      }
    }
  }
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    for (NodeId d = 0; d < n; ++d) {
      // 0 unseen, 1 on the walk, 2 reaches d.
      std::vector<int> state(static_cast<size_t>(n), 0);
      state[d] = 2;
      const std::function<void(NodeId)> walk = [&](NodeId v) {
        state[v] = 1;
        const absl::Span<const NextHop> hops = s.Row(cls, v, d);
        ASSERT_FALSE(hops.empty()) << o.name(v) << " has no way to " << o.name(d);
        for (const NextHop& h : hops) {
          const NodeId u = o.topology.link(h.link).dst;
          ASSERT_NE(state[u], 1) << "a loop toward " << o.name(d) << " at " << o.name(u);
          if (state[u] == 0) walk(u);
        }
        state[v] = 2;
      };
      for (NodeId v = 0; v < n; ++v) {
        if (state[v] == 0) walk(v);
      }
    }
  }
}

// Hosts decided through their switch get the tables the engine gives when every host is a
// destination of its own: the same next hops and weights, the same potentials.
TEST(StubHostsTest, DerivedRowsMatchTheEngineOverEveryNode) {
  const auto flat = MakeOverlay(FatTreeConfig(false));
  const auto stub = MakeOverlay(FatTreeConfig(true));
  EXPECT_EQ(flat->topology.Destinations().size(), 36u);
  EXPECT_EQ(stub->topology.Destinations().size(), 20u);  // the switches
  RouteComputer flat_computer(flat->topology, DefaultControllerRoutes());
  RouteComputer stub_computer(stub->topology, DefaultControllerRoutes());
  const auto a = MakeSnapshot(flat, flat_computer, flat_computer.Cycle(false), 1, 0);
  const auto b = MakeSnapshot(stub, stub_computer, stub_computer.Cycle(false), 1, 0);
  const int n = flat->topology.num_nodes();
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    for (NodeId v = 0; v < n; ++v) {
      for (NodeId d = 0; d < n; ++d) {
        if (v == d) continue;
        const auto x = WireHops(*flat, a->Row(cls, v, d));
        const auto y = WireHops(*stub, b->Row(cls, v, d));
        ASSERT_EQ(x.size(), y.size()) << flat->name(v) << " -> " << flat->name(d);
        for (size_t i = 0; i < x.size(); ++i) {
          EXPECT_EQ(x[i].first, y[i].first);
          EXPECT_NEAR(x[i].second, y[i].second, 1e-9);
        }
        EXPECT_NEAR(a->Potential(cls, d, v), b->Potential(cls, d, v),
                    1e-9 * std::abs(a->Potential(cls, d, v)))
            << flat->name(v) << " -> " << flat->name(d);
      }
    }
  }
  ExpectAcceptableTables(*b);
}

// The marginal layer's tables, ranked: a host is one hop above its switch, and every table is
// acceptable.
TEST(StubHostsTest, RankedSnapshotsOfStubHostsAreAcceptable) {
  const auto stub = MakeOverlay(FatTreeConfig(true));
  RouteComputer computer(stub->topology, DefaultControllerRoutes());
  const RouteCycle c = computer.Cycle(false);
  const auto s = MakeRankedSnapshot(stub, stub->topology, c.tables, 1, 0);
  ExpectAcceptableTables(*s);
  const Topology& topo = stub->topology;
  const NodeId h0 = *topo.FindNode("h0"), h1 = *topo.FindNode("h1");
  const NodeId e0 = topo.RouteTarget(h0);
  ASSERT_NE(e0, h0);
  EXPECT_EQ(s->Potential(0, h1, e0), 1);  // its switch, one hop
  EXPECT_EQ(s->Potential(0, h1, h0), 2);  // its rack neighbour: up and down
  EXPECT_EQ(s->Potential(0, e0, h0), 1);
}

// A host's cable down: the rows toward it and its own rows say it cannot be reached, and a
// delta to any other node carries only the rows toward it.
TEST(StubHostsTest, AHostCableDownEmptiesOnlyItsRows) {
  const auto stub = MakeOverlay(FatTreeConfig(true));
  const Topology& topo = stub->topology;
  RouteComputer computer(topo, DefaultControllerRoutes());
  const auto before = MakeSnapshot(stub, computer, computer.Cycle(false), 1, 0);
  const NodeId h0 = *topo.FindNode("h0");
  const LinkId up = topo.StubUplink(h0);
  ASSERT_NE(up, kNoLink);
  computer.SetKnownDown(up, true);
  computer.SetKnownDown(topo.link(up).reverse, true);
  const auto after = MakeSnapshot(stub, computer, computer.Cycle(false), 2, 0);
  for (NodeId v = 0; v < topo.num_nodes(); ++v) {
    if (v == h0) continue;
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      EXPECT_TRUE(after->Row(cls, v, h0).empty()) << topo.node(v).name;
      EXPECT_TRUE(std::isinf(after->Potential(cls, h0, v)));
      EXPECT_TRUE(after->Row(cls, h0, v).empty());
    }
    v1::RouteTable delta;
    BuildRouteTable(*after, v, before.get(), delta);
    ASSERT_EQ(delta.routes_size(), kTrafficClasses) << topo.node(v).name;
    for (const v1::Route& r : delta.routes()) {
      EXPECT_EQ(r.destination_id(), stub->wire_id[h0]);
      EXPECT_EQ(r.next_hops_size(), 0);
      EXPECT_TRUE(std::isinf(r.potential()));
    }
  }
}

TEST_F(SessionTest, ANodeMissingFromTheOverlayGetsNothing) {
  AgentSession s(/*wire_id=*/99, true, 0, Seconds(1), kEverySnapshot);
  v1::ControllerMessage m;
  s.SetSnapshot(Cycle());
  EXPECT_FALSE(s.Next(Time(0), m));
}

}  // namespace
}  // namespace dar::control
