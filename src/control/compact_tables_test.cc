// RouteTable's compact form against a real agent's table store: on a fat-tree with hosts as
// stubs, what an agent forwards with from a compact table (full or delta) is what it forwards
// with from the whole table, row for row, while a host's table holds no row at all.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/table_store.h"
#include "control/controller_session.h"
#include "control/controller_tables.h"
#include "control/controller_test_util.h"
#include "core/routing.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

namespace dar::control {
namespace {

// Node `self`'s agent configuration of the same overlay, as far as its table store reads it.
agent::AgentConfig AgentConfigOf(const ControllerConfig& c, NodeId self) {
  agent::AgentConfig a;
  a.self = self;
  std::map<std::string, NodeId> index;
  for (const ControllerNodeConfig& n : c.nodes) {
    index[n.name] = static_cast<NodeId>(a.nodes.size());
    a.nodes.push_back({n.id, n.name, {}});
  }
  for (size_t i = 0; i < c.links.size(); ++i) {
    const NodeId x = index.at(c.links[i].a), y = index.at(c.links[i].b);
    a.links.push_back({x, y, c.links[i].capacity});
    for (const auto& [from, to, out] : {std::tuple{x, y, 2 * i}, std::tuple{y, x, 2 * i + 1}}) {
      if (from != self) continue;
      agent::NeighbourConfig nb;
      nb.id = c.nodes[to].id;
      nb.node = to;
      nb.link = static_cast<int>(i);
      nb.out_link = static_cast<LinkId>(out);
      nb.in_link = static_cast<LinkId>(out ^ 1);
      nb.interface = fmt::format("l{}", i);
      a.neighbours.push_back(nb);
    }
  }
  return a;
}

// One node's agent twice: one store takes whole tables, the other compact ones.
struct TwoStores {
  TwoStores(const ControllerConfig& c, NodeId self)
      : config(AgentConfigOf(c, self)),
        topology(agent::BuildAgentTopology(config)),
        whole(config, topology, Seconds(3), nullptr),
        compact(config, topology, Seconds(3), nullptr) {}
  agent::AgentConfig config;
  Topology topology;
  agent::TableStore whole;
  agent::TableStore compact;
};

// Both stores forward every (class, destination) over the same links with the same weights.
void ExpectSameForwarding(TwoStores& s, const std::string& where) {
  const std::shared_ptr<const agent::AgentTables> a = s.whole.Active(Time(0));
  const std::shared_ptr<const agent::AgentTables> b = s.compact.Active(Time(0));
  ASSERT_FALSE(a->is_static) << where;
  ASSERT_FALSE(b->is_static) << where;
  for (int cls = 0; cls < agent::kTrafficClasses; ++cls) {
    for (NodeId d = 0; d < s.topology.num_nodes(); ++d) {
      const absl::Span<const NextHop> x = a->Lookup(cls, d);
      const absl::Span<const NextHop> y = b->Lookup(cls, d);
      ASSERT_EQ(x.size(), y.size()) << where << " toward " << s.config.nodes[d].name;
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(x[i].link, y[i].link) << where << " toward " << s.config.nodes[d].name;
        EXPECT_EQ(x[i].weight, y[i].weight) << where << " toward " << s.config.nodes[d].name;
      }
    }
  }
}

class CompactTablesTest : public ::testing::Test {
 protected:
  CompactTablesTest()
      : config_(testing::FatTreeConfig(/*stub_hosts=*/true)),
        overlay_(MakeOverlay(config_)),
        computer_(overlay_->topology, DefaultControllerRoutes()) {
    for (NodeId v = 0; v < overlay_->topology.num_nodes(); ++v) {
      stores_.push_back(std::make_unique<TwoStores>(config_, v));
    }
  }

  std::shared_ptr<const RouteSnapshot> Cycle() {
    ++version_;
    return MakeSnapshot(overlay_, computer_, computer_.Cycle(false), version_, 0);
  }

  // Offers every node the snapshot: whole tables to one store, compact ones (a delta against
  // `base` if given) to the other; both must accept, and forward alike. Returns the compact
  // tables' rows and removals summed over the nodes.
  int OfferToAll(const RouteSnapshot& s, const RouteSnapshot* base) {
    int rows = 0;
    for (NodeId v = 0; v < overlay_->topology.num_nodes(); ++v) {
      TwoStores& st = *stores_[v];
      v1::RouteTable whole, compact;
      BuildRouteTable(s, v, nullptr, whole);
      BuildRouteTable(s, v, base, compact, /*compact=*/true);
      rows += compact.routes_size() + compact.removed_size();
      const absl::Status a = st.whole.Offer(whole, Time(0));
      EXPECT_TRUE(a.ok()) << overlay_->name(v) << ": " << a;
      const absl::Status b = st.compact.Offer(compact, Time(0));
      EXPECT_TRUE(b.ok()) << overlay_->name(v) << ": " << b;
      ExpectSameForwarding(st, fmt::format("{} v{}", overlay_->name(v), s.version));
    }
    return rows;
  }

  ControllerConfig config_;
  std::shared_ptr<const Overlay> overlay_;
  RouteComputer computer_;
  uint64_t version_ = 0;
  std::vector<std::unique_ptr<TwoStores>> stores_;
};

TEST_F(CompactTablesTest, AHostGetsItsUplinkAndASwitchNoRowsTowardOtherRacksHosts) {
  const auto s = Cycle();
  const Topology& topo = overlay_->topology;
  ASSERT_NE(overlay_->stub_digest, 0u);
  const NodeId h0 = *topo.FindNode("h0");
  const NodeId e0 = topo.RouteTarget(h0);
  v1::RouteTable t;
  BuildRouteTable(*s, h0, nullptr, t, /*compact=*/true);
  EXPECT_EQ(t.routes_size(), 0);
  EXPECT_EQ(t.default_route().neighbor_id(), overlay_->wire_id[e0]);
  EXPECT_EQ(t.stub_digest(), overlay_->stub_digest);
  // Its switch: rows toward the 19 other switches and down to its own 2 hosts, both classes.
  BuildRouteTable(*s, e0, nullptr, t, /*compact=*/true);
  EXPECT_FALSE(t.has_default_route());
  EXPECT_EQ(t.routes_size(), (19 + 2) * kTrafficClasses);
  // Without the compact form, every node gets a row toward every other.
  BuildRouteTable(*s, e0, nullptr, t);
  EXPECT_EQ(t.routes_size(), 35 * kTrafficClasses);
  EXPECT_EQ(t.stub_digest(), 0u);
  OfferToAll(*s, nullptr);
}

// A host's cable goes down and comes back: the compact deltas (the host loses its default and
// is sent its rows; then the rows go again as removals) keep every agent forwarding as the
// whole tables say.
TEST_F(CompactTablesTest, DeltasFollowAHostCableDownAndBackUp) {
  const Topology& topo = overlay_->topology;
  const NodeId h0 = *topo.FindNode("h0");
  const LinkId up = topo.StubUplink(h0);
  const auto before = Cycle();
  OfferToAll(*before, nullptr);
  // A cycle that changes nothing sends nothing.
  const auto same = Cycle();
  EXPECT_EQ(OfferToAll(*same, before.get()), 0);

  computer_.SetKnownDown(up, true);
  computer_.SetKnownDown(topo.link(up).reverse, true);
  const auto down = Cycle();
  // The host's stores see the cable down too (its data plane would).
  for (TwoStores* st : {stores_[h0].get(), stores_[topo.RouteTarget(h0)].get()}) {
    for (const agent::NeighbourConfig& nb : st->config.neighbours) {
      if (nb.node == h0 || nb.node == topo.RouteTarget(h0)) {
        st->whole.SetNeighbourUp(nb.node, false);
        st->compact.SetNeighbourUp(nb.node, false);
      }
    }
  }
  v1::RouteTable t;
  EXPECT_TRUE(BuildRouteTable(*down, h0, same.get(), t, /*compact=*/true));
  EXPECT_FALSE(t.has_default_route());
  // Every switch unreachable, said row by row; the hosts' rows are their switches'.
  EXPECT_EQ(t.routes_size(), 20 * kTrafficClasses);
  EXPECT_GT(OfferToAll(*down, same.get()), 0);

  computer_.SetKnownDown(up, false);
  computer_.SetKnownDown(topo.link(up).reverse, false);
  for (auto& st : stores_) {
    for (const agent::NeighbourConfig& nb : st->config.neighbours) {
      st->whole.SetNeighbourUp(nb.node, true);
      st->compact.SetNeighbourUp(nb.node, true);
    }
  }
  const auto again = Cycle();
  EXPECT_TRUE(BuildRouteTable(*again, h0, down.get(), t, /*compact=*/true));
  EXPECT_TRUE(t.has_default_route());
  EXPECT_EQ(t.routes_size(), 0);
  EXPECT_EQ(t.removed_size(), 20 * kTrafficClasses);
  OfferToAll(*again, down.get());
}

// A rack cut off from the core (its switch's uplinks down): its hosts' compact tables say,
// row by row, each switch they cannot reach, and every host of another rack says the one
// switch it cannot reach; none names a host under such a switch (that switch's row says it).
// Deltas say it and take it back, with the snapshots of both decision layers, and every agent
// forwards as with whole tables throughout.
TEST_F(CompactTablesTest, ARackCutOffFromTheCoreIsSaidInTheHostsRowsAndTakenBack) {
  const Topology& topo = overlay_->topology;
  const NodeId h0 = *topo.FindNode("h0");
  const NodeId e0 = topo.RouteTarget(h0);
  const NodeId far = topo.Hosts().back();
  ASSERT_NE(topo.RouteTarget(far), e0);
  std::vector<LinkId> cut;  // both directions of e0's uplinks
  for (const LinkId l : topo.node(e0).out_links) {
    if (topo.StubUplink(topo.link(l).dst) == kNoLink) {
      cut.insert(cut.end(), {l, topo.link(l).reverse});
    }
  }
  ASSERT_EQ(cut.size(), 4u);
  const auto set_cut = [&](bool down) {
    for (const LinkId l : cut) {
      computer_.SetKnownDown(l, down);
      TwoStores& st = *stores_[topo.link(l).src];
      st.whole.SetNeighbourUp(topo.link(l).dst, !down);
      st.compact.SetNeighbourUp(topo.link(l).dst, !down);
    }
  };
  const auto before = Cycle();
  OfferToAll(*before, nullptr);

  set_cut(true);
  const auto down = Cycle();
  const auto expect_unreachable = [&](const RouteSnapshot& s, NodeId host, int switches) {
    v1::RouteTable t;
    BuildRouteTable(s, host, nullptr, t, /*compact=*/true);
    EXPECT_TRUE(t.has_default_route()) << overlay_->name(host);
    EXPECT_EQ(t.routes_size(), switches * kTrafficClasses) << overlay_->name(host);
    for (const v1::Route& r : t.routes()) {
      const NodeId d = overlay_->Find(r.destination_id());
      EXPECT_EQ(topo.StubUplink(d), kNoLink)
          << overlay_->name(host) << " toward " << overlay_->name(d);
      EXPECT_EQ(r.next_hops_size(), 0);
      EXPECT_TRUE(std::isinf(r.potential()));
    }
    return t;
  };
  expect_unreachable(*down, h0, 19);  // every switch but its own
  const v1::RouteTable at_far = expect_unreachable(*down, far, 1);
  ASSERT_EQ(at_far.routes_size(), kTrafficClasses);
  EXPECT_EQ(at_far.routes(0).destination_id(), overlay_->wire_id[e0]);
  EXPECT_GT(OfferToAll(*down, before.get()), 0);

  // The marginal layer's snapshot (ranks for potentials) of the same tables says the same.
  Topology known = topo;
  for (const LinkId l : cut) known.mutable_link(l).up = false;
  ++version_;
  const auto ranked = MakeRankedSnapshot(overlay_, known, down->tables, version_, 0);
  expect_unreachable(*ranked, h0, 19);
  expect_unreachable(*ranked, far, 1);
  EXPECT_EQ(OfferToAll(*ranked, down.get()), 0);  // the same rows

  set_cut(false);
  const auto again = Cycle();
  v1::RouteTable t;
  EXPECT_TRUE(BuildRouteTable(*again, h0, ranked.get(), t, /*compact=*/true));
  EXPECT_EQ(t.routes_size(), 0);
  EXPECT_EQ(t.removed_size(), 19 * kTrafficClasses);
  EXPECT_TRUE(BuildRouteTable(*again, far, ranked.get(), t, /*compact=*/true));
  EXPECT_EQ(t.routes_size(), 0);
  EXPECT_EQ(t.removed_size(), kTrafficClasses);
  OfferToAll(*again, ranked.get());
}

// An agent whose configuration has other stubs than the controller's (a host cabled to
// another switch, the same number of hosts) refuses a compact table rather than fill in rows
// it cannot know; the session then sends it whole tables.
TEST_F(CompactTablesTest, AnAgentWithOtherStubsRefusesTheCompactFormAndGetsWholeTables) {
  const auto s = Cycle();
  const Topology& topo = overlay_->topology;
  const NodeId h0 = *topo.FindNode("h0");
  const NodeId e0 = topo.RouteTarget(h0);
  // Its configuration has h0 under another switch.
  ControllerConfig moved = config_;
  const std::string other = overlay_->name(topo.RouteTarget(*topo.FindNode("h2")));
  ASSERT_NE(other, overlay_->name(e0));
  for (ControllerLinkConfig& l : moved.links) {
    if (l.a == "h0") l.b = other;
    if (l.b == "h0") l.a = other;
  }
  TwoStores lagging(moved, e0);
  v1::RouteTable t;
  BuildRouteTable(*s, e0, nullptr, t, /*compact=*/true);
  const absl::Status refused = lagging.compact.Offer(t, Time(0));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.message()).find("leaves out rows toward stubs"), std::string::npos)
      << refused;

  AgentSession session(overlay_->wire_id[e0], /*delta_tables=*/true, 0, Seconds(1), Seconds(1));
  session.set_compact_tables(true);
  session.SetSnapshot(s);
  v1::ControllerMessage m;
  ASSERT_TRUE(session.Next(Time(0), m));
  ASSERT_TRUE(m.has_table());
  EXPECT_NE(m.table().stub_digest(), 0u);
  EXPECT_TRUE(agent::IsCompactFormRefusal(refused));
  // A refusal for anything else (a link the agent sees down) leaves the form as it is.
  v1::TableAck ack;
  ack.set_version(m.table().version());
  ack.set_accepted(false);
  ack.set_reason("next hop 3 is over a link the data plane reports down");
  EXPECT_EQ(session.OnAck(ack), AckOutcome::kRefused);
  EXPECT_TRUE(session.compact_tables());
  session.SetSnapshot(Cycle());
  ASSERT_TRUE(session.Next(Time(0), m));
  EXPECT_NE(m.table().stub_digest(), 0u);
  ack.set_version(m.table().version());
  ack.set_reason(std::string(refused.message()));
  ack.set_compact_refused(true);
  EXPECT_EQ(session.OnAck(ack), AckOutcome::kRefused);
  EXPECT_FALSE(session.compact_tables());
  const auto next = Cycle();
  session.SetSnapshot(next);
  ASSERT_TRUE(session.Next(Time(0), m));
  EXPECT_EQ(m.table().stub_digest(), 0u);
  EXPECT_EQ(m.table().base_version(), 0u);
  EXPECT_EQ(m.table().routes_size(), 35 * kTrafficClasses);
}

}  // namespace
}  // namespace dar::control
