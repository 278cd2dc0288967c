#include "core/table_manager.h"

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/routing.h"
#include "core/topology_gen.h"
#include "core/validator.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;
using TablesPtr = std::shared_ptr<const RoutingTables>;
using Rows = std::vector<std::vector<NextHop>>;

// `tables` with version `version` and the table toward `dest` passed through `edit`.
TablesPtr Edited(RoutingTables tables, uint64_t version, NodeId dest,
                 const std::function<void(Rows&)>& edit) {
  Rows rows(tables.num_nodes());
  for (NodeId v = 0; v < tables.num_nodes(); ++v) {
    const auto hops = tables.Lookup(v, dest);
    rows[v].assign(hops.begin(), hops.end());
  }
  edit(rows);
  tables.Set(std::make_shared<const DestinationTable>(dest, rows));
  tables.set_version(version);
  return std::make_shared<const RoutingTables>(std::move(tables));
}

// ECMP tables (by the topology's metrics, as a controller would compute) for `topo`.
TablesPtr Ecmp(const Topology& topo, uint64_t version) {
  RoutingTables tables = ComputeEcmpTables(topo);
  tables.set_version(version);
  return std::make_shared<const RoutingTables>(std::move(tables));
}

// A diamond s -> {a, b} -> t with a stub host on s and on t. s -> a has metric 5, so
// metric-based ECMP at s sends everything toward t via b, while hop-count ECMP splits.
class TableManagerTest : public ::testing::Test {
 protected:
  TableManagerTest() {
    s_ = topo_.AddNode("s", NodeKind::kSwitch);
    a_ = topo_.AddNode("a", NodeKind::kSwitch);
    b_ = topo_.AddNode("b", NodeKind::kSwitch);
    t_ = topo_.AddNode("t", NodeKind::kSwitch);
    const NodeId hs = topo_.AddNode("hs", NodeKind::kHost);
    const NodeId ht = topo_.AddNode("ht", NodeKind::kHost);
    sa_ = topo_.AddDuplexLink(s_, a_, LinkParams{.metric = 5}).first;
    sb_ = topo_.AddDuplexLink(s_, b_, LinkParams()).first;
    at_ = topo_.AddDuplexLink(a_, t_, LinkParams()).first;
    bt_ = topo_.AddDuplexLink(b_, t_, LinkParams()).first;
    topo_.AddDuplexLink(hs, s_, LinkParams());
    topo_.AddDuplexLink(ht, t_, LinkParams());
  }

  // Valid tables at `version` with the table toward t edited.
  TablesPtr Edit(uint64_t version, const std::function<void(Rows&)>& edit) {
    return Edited(ComputeEcmpTables(topo_), version, t_, edit);
  }
  // Tables at `version` with the loop s -> a -> s toward t.
  TablesPtr Loop(uint64_t version) {
    return Edit(version, [&](Rows& r) {
      r[s_] = {{sa_, 1.0}};
      r[a_] = {{topo_.FindLink(a_, s_), 1.0}};
    });
  }

  Topology topo_;
  NodeId s_, a_, b_, t_;
  LinkId sa_, sb_, at_, bt_;
  TableManagerConfig config_;
};

TEST_F(TableManagerTest, StaticTableIsActiveBeforeAnyOfferAndUsesHopCount) {
  TableManager m(topo_, config_);
  EXPECT_EQ(m.ActiveSource(Time(0)), TableSource::kStatic);
  const RoutingTables* active = m.Active(Time(0));
  ASSERT_NE(active, nullptr);
  EXPECT_TRUE(ValidateTables(topo_, *active).ok());
  // Hop count: s splits toward t over a and b, although s -> a has metric 5.
  const auto hops = active->Lookup(s_, t_);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(hops[0].link, sa_);
  EXPECT_EQ(hops[1].link, sb_);
  EXPECT_EQ(ComputeEcmpTables(topo_).Lookup(s_, t_).size(), 1u);  // by metric: only via b
  EXPECT_EQ(m.counters().fallbacks_to_static, 0);
  EXPECT_FALSE(m.highest_version().has_value());
  EXPECT_EQ(m.last_refusal(), "");
}

TEST_F(TableManagerTest, ValidNewerOffersAreAccepted) {
  TableManager m(topo_, config_);
  const TablesPtr v1 = Ecmp(topo_, 1);
  ASSERT_TRUE(m.Offer(v1, Seconds(1)).ok());
  EXPECT_EQ(m.Active(Seconds(1)), v1.get());
  EXPECT_EQ(m.ActiveSource(Seconds(1)), TableSource::kCurrent);
  const TablesPtr v5 = Ecmp(topo_, 5);
  ASSERT_TRUE(m.Offer(v5, Seconds(2)).ok());
  EXPECT_EQ(m.Active(Seconds(2)), v5.get());
  EXPECT_EQ(m.highest_version(), 5u);
  EXPECT_EQ(m.counters().offered, 2);
  EXPECT_EQ(m.counters().accepted, 2);
  // The first table is not a recovery: the manager never fell back.
  EXPECT_EQ(m.counters().recoveries_from_static, 0);
  EXPECT_EQ(m.counters().fallbacks_to_static, 0);
}

TEST_F(TableManagerTest, FirstOfferMayHaveAnyVersion) {
  TableManager m(topo_, config_);
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 0), Time(0)).ok());
  EXPECT_EQ(m.ActiveSource(Time(0)), TableSource::kCurrent);
}

// One invalid offer per case; each is refused, counted under its reason and never served.
struct InvalidCase {
  const char* name;
  int64_t TableManagerCounters::*counter;
  const char* message;
};

TEST_F(TableManagerTest, InvalidOffersAreRefusedCountedAndNeverActive) {
  const std::vector<std::pair<InvalidCase, std::function<TablesPtr(uint64_t)>>> cases = {
      {{"loop", &TableManagerCounters::refused_loop, "loop toward 't': s -> a -> s"},
       [&](uint64_t v) { return Loop(v); }},
      {{"black hole", &TableManagerCounters::refused_black_hole,
        "black hole: node 'b' has no next hop toward 't'"},
       [&](uint64_t v) { return Edit(v, [&](Rows& r) { r[b_].clear(); }); }},
      {{"bad weights", &TableManagerCounters::refused_bad_weights,
        "bad weights: node 's' toward 't'"},
       [&](uint64_t v) { return Edit(v, [&](Rows& r) { r[s_][0].weight = 0.5; }); }},
      {{"nan weight", &TableManagerCounters::refused_bad_weights, "include a bad weight"},
       [&](uint64_t v) {
         return Edit(v,
                     [&](Rows& r) { r[s_][0].weight = std::numeric_limits<double>::quiet_NaN(); });
       }},
      {{"missing", &TableManagerCounters::refused_missing, "missing: no table toward 's'"},
       [&](uint64_t v) {
         RoutingTables partial(topo_.num_nodes(), topo_.Destinations());
         partial.Set(ComputeEcmpTables(topo_).SharedTable(t_));
         partial.set_version(v);
         return std::make_shared<const RoutingTables>(std::move(partial));
       }},
      {{"link of another node", &TableManagerCounters::refused_dead_link, "leaves another node"},
       [&](uint64_t v) { return Edit(v, [&](Rows& r) {
                           r[a_] = {{bt_, 1.0}};
                         }); }},
  };
  for (const auto& [c, make] : cases) {
    SCOPED_TRACE(c.name);
    TableManager m(topo_, config_);
    // Before any table is accepted, a refused offer leaves the static table active.
    const RoutingTables* static_table = m.Active(Time(0));
    absl::Status status = m.Offer(make(1), Time(0));
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(m.Active(Time(0)), static_table);
    EXPECT_EQ(m.ActiveSource(Time(0)), TableSource::kStatic);
    EXPECT_FALSE(m.highest_version().has_value());

    const TablesPtr good = Ecmp(topo_, 2);
    ASSERT_TRUE(m.Offer(good, Seconds(1)).ok());
    status = m.Offer(make(3), Seconds(2));
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("refused routing tables version 3"));
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(m.last_refusal(), status.message());
    EXPECT_EQ(m.Active(Seconds(2)), good.get());
    EXPECT_EQ(m.ActiveSource(Seconds(2)), TableSource::kLastGood);
    EXPECT_EQ(m.highest_version(), 2u);

    const TableManagerCounters& n = m.counters();
    EXPECT_EQ(n.*c.counter, 2);
    EXPECT_EQ(n.offered, 3);
    EXPECT_EQ(n.accepted, 1);
    EXPECT_EQ(n.refused_invalid, 2);
    EXPECT_EQ(n.refused_version, 0);
    EXPECT_EQ(n.refused_loop + n.refused_dead_link + n.refused_black_hole + n.refused_bad_weights +
                  n.refused_missing,
              2);
    EXPECT_EQ(n.fallbacks_to_last_good, 1);
    EXPECT_EQ(n.fallbacks_to_static, 0);

    // A valid newer offer (even with a version between) makes the manager current again.
    const TablesPtr next = Ecmp(topo_, 4);
    ASSERT_TRUE(m.Offer(next, Seconds(3)).ok());
    EXPECT_EQ(m.Active(Seconds(3)), next.get());
    EXPECT_EQ(m.ActiveSource(Seconds(3)), TableSource::kCurrent);
  }
}

TEST_F(TableManagerTest, OlderAndRepeatedVersionsAreRefused) {
  TableManager m(topo_, config_);
  const TablesPtr v7 = Ecmp(topo_, 7);
  ASSERT_TRUE(m.Offer(v7, Time(0)).ok());
  for (uint64_t version : {7u, 6u, 0u}) {
    SCOPED_TRACE(version);
    const absl::Status status = m.Offer(Ecmp(topo_, version), Seconds(1));
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("is not newer than the installed version"));
    EXPECT_THAT(status.message(), HasSubstr("the installed version 7"));
    EXPECT_EQ(m.Active(Seconds(1)), v7.get());
    // The newest table is still the one served: not a fallback.
    EXPECT_EQ(m.ActiveSource(Seconds(1)), TableSource::kCurrent);
  }
  // The same object offered again is a repeated version too.
  EXPECT_FALSE(m.Offer(v7, Seconds(1)).ok());
  EXPECT_EQ(m.counters().refused_version, 4);
  EXPECT_EQ(m.counters().refused_invalid, 0);
  EXPECT_EQ(m.counters().accepted, 1);
  EXPECT_EQ(m.counters().fallbacks_to_last_good, 0);
}

TEST_F(TableManagerTest, RefusedVersionIsNotValidated) {
  TableManager m(topo_, config_);
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 2), Time(0)).ok());
  // Old and invalid: counted as a version refusal only.
  const absl::Status status = m.Offer(Edit(1, [&](Rows& r) { r[b_].clear(); }), Time(0));
  EXPECT_THAT(status.message(), HasSubstr("is not newer than the installed version"));
  EXPECT_EQ(m.counters().refused_version, 1);
  EXPECT_EQ(m.counters().refused_black_hole, 0);
}

TEST_F(TableManagerTest, StaleTableFallsBackToStaticOnceAndANewOfferRecovers) {
  config_.stale_after = Seconds(3);
  TableManager m(topo_, config_);
  const RoutingTables* static_table = m.Active(Time(0));
  const TablesPtr v1 = Ecmp(topo_, 1);
  ASSERT_TRUE(m.Offer(v1, Seconds(10)).ok());
  EXPECT_EQ(m.Active(Seconds(13)), v1.get());  // exactly stale_after old: still fresh
  EXPECT_EQ(m.ActiveSource(Seconds(13)), TableSource::kCurrent);
  EXPECT_EQ(m.Active(Seconds(13) + Nanoseconds(1)), static_table);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m.ActiveSource(Seconds(14 + i)), TableSource::kStatic);
  }
  EXPECT_EQ(m.counters().fallbacks_to_static, 1);
  EXPECT_EQ(m.counters().recoveries_from_static, 0);

  // A refused offer does not recover.
  EXPECT_FALSE(m.Offer(Edit(2, [&](Rows& r) { r[b_].clear(); }), Seconds(20)).ok());
  EXPECT_EQ(m.Active(Seconds(20)), static_table);
  EXPECT_FALSE(m.Offer(Ecmp(topo_, 1), Seconds(20)).ok());
  EXPECT_EQ(m.Active(Seconds(20)), static_table);
  EXPECT_EQ(m.counters().recoveries_from_static, 0);

  const TablesPtr v3 = Ecmp(topo_, 3);
  ASSERT_TRUE(m.Offer(v3, Seconds(21)).ok());
  EXPECT_EQ(m.Active(Seconds(21)), v3.get());
  EXPECT_EQ(m.ActiveSource(Seconds(22)), TableSource::kCurrent);
  EXPECT_EQ(m.counters().fallbacks_to_static, 1);
  EXPECT_EQ(m.counters().recoveries_from_static, 1);

  // A second outage counts a second fallback, found by whichever call comes first.
  ASSERT_TRUE(m.SetLinkUp(sa_, true, Seconds(30)).ok());
  EXPECT_EQ(m.counters().fallbacks_to_static, 2);
}

TEST_F(TableManagerTest, FallbackIsCountedEvenWhenTheNextCallIsTheRecoveringOffer) {
  TableManager m(topo_, config_);
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 1), Time(0)).ok());
  // Nobody asked during the outage, but the static table was what Active would have served.
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 2), Seconds(60)).ok());
  EXPECT_EQ(m.counters().fallbacks_to_static, 1);
  EXPECT_EQ(m.counters().recoveries_from_static, 1);
  EXPECT_EQ(m.ActiveSource(Seconds(60)), TableSource::kCurrent);
}

TEST_F(TableManagerTest, LastGoodTableAlsoGoesStale) {
  TableManager m(topo_, config_);
  const TablesPtr v1 = Ecmp(topo_, 1);
  ASSERT_TRUE(m.Offer(v1, Time(0)).ok());
  // Refused offers do not refresh the table they leave in place.
  EXPECT_FALSE(m.Offer(Edit(2, [&](Rows& r) { r[b_].clear(); }), Seconds(2)).ok());
  EXPECT_EQ(m.ActiveSource(Seconds(2)), TableSource::kLastGood);
  EXPECT_EQ(m.Active(Seconds(3)), v1.get());
  EXPECT_EQ(m.ActiveSource(Seconds(4)), TableSource::kStatic);
  EXPECT_EQ(m.counters().fallbacks_to_last_good, 1);
  EXPECT_EQ(m.counters().fallbacks_to_static, 1);
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 3), Seconds(5)).ok());
  EXPECT_EQ(m.ActiveSource(Seconds(5)), TableSource::kCurrent);
  EXPECT_EQ(m.counters().recoveries_from_static, 1);
}

TEST_F(TableManagerTest, LinkDownReroutesStaticKeepsCurrentAndRefusesTablesOverIt) {
  TableManager m(topo_, config_);
  // The static table splits at s toward t; with s -> b down it must avoid it.
  ASSERT_EQ(m.Active(Time(0))->Lookup(s_, t_).size(), 2u);
  ASSERT_TRUE(m.SetLinkUp(sb_, false, Time(0)).ok());
  EXPECT_FALSE(m.view().link(sb_).up);
  const RoutingTables* fallback = m.Active(Time(0));
  EXPECT_TRUE(ValidateTables(m.view(), *fallback).ok());
  auto hops = fallback->Lookup(s_, t_);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_EQ(hops[0].link, sa_);

  // The controller has not heard yet: its tables use s -> b and are refused.
  const absl::Status status = m.Offer(Ecmp(topo_, 1), Time(0));
  EXPECT_THAT(status.message(), HasSubstr("which is down"));
  EXPECT_EQ(m.counters().refused_dead_link, 1);
  EXPECT_EQ(m.ActiveSource(Time(0)), TableSource::kStatic);

  // Tables computed with the link down are accepted.
  Topology controller_view = topo_;
  controller_view.mutable_link(sb_).up = false;
  ASSERT_TRUE(m.Offer(Ecmp(controller_view, 2), Time(0)).ok());

  // The link comes back: the static table uses it again, and so may offers.
  ASSERT_TRUE(m.SetLinkUp(sb_, true, Seconds(1)).ok());
  ASSERT_TRUE(m.Offer(Ecmp(topo_, 3), Seconds(1)).ok());
  EXPECT_EQ(m.counters().link_down_under_current, 0);

  // The current table sends over s -> b (toward t). Losing the link keeps it.
  const TablesPtr v4 = Ecmp(topo_, 4);
  ASSERT_TRUE(m.Offer(v4, Seconds(2)).ok());
  ASSERT_TRUE(m.SetLinkUp(sb_, false, Seconds(2)).ok());
  EXPECT_EQ(m.Active(Seconds(2)), v4.get());
  EXPECT_EQ(m.ActiveSource(Seconds(2)), TableSource::kCurrent);
  EXPECT_EQ(m.counters().link_down_under_current, 1);
  // Reporting the same state again is no event.
  ASSERT_TRUE(m.SetLinkUp(sb_, false, Seconds(2)).ok());
  EXPECT_EQ(m.counters().link_down_under_current, 1);
  // b -> s is b's next hop toward s; a -> s (metric 5) is on no cheapest path.
  ASSERT_TRUE(m.SetLinkUp(topo_.FindLink(b_, s_), false, Seconds(2)).ok());
  EXPECT_EQ(m.counters().link_down_under_current, 2);
  ASSERT_TRUE(m.SetLinkUp(topo_.FindLink(a_, s_), false, Seconds(2)).ok());
  EXPECT_EQ(m.counters().link_down_under_current, 2);
}

TEST_F(TableManagerTest, UnknownLinkIsAnError) {
  TableManager m(topo_, config_);
  EXPECT_EQ(m.SetLinkUp(-1, false, Time(0)).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status status = m.SetLinkUp(topo_.num_links(), false, Time(0));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not in the topology"));
}

TEST_F(TableManagerTest, WithoutValidationOnlyVersionsAreChecked) {
  config_.validate = false;
  TableManager m(topo_, config_);
  const TablesPtr loop = Loop(1);
  ASSERT_TRUE(m.Offer(loop, Time(0)).ok());
  EXPECT_EQ(m.Active(Time(0)), loop.get());
  EXPECT_FALSE(m.Offer(Ecmp(topo_, 1), Time(0)).ok());
  EXPECT_EQ(m.counters().refused_version, 1);
}

TEST(TableManagerFatTreeTest, K4FailoverAndInjectedFaults) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  TableManager m(topo, TableManagerConfig{});
  const NodeId e0 = *topo.FindNode("e0");
  const NodeId a0 = *topo.FindNode("a0");
  const NodeId a1 = *topo.FindNode("a1");
  const NodeId e2 = *topo.FindNode("e2");  // an edge switch in pod 1
  const LinkId e0a0 = topo.FindLink(e0, a0);

  EXPECT_TRUE(ValidateTables(topo, *m.Active(Time(0))).ok());
  EXPECT_EQ(m.Active(Time(0))->Lookup(e0, e2).size(), 2u);  // via a0 and a1

  ASSERT_TRUE(m.SetLinkUp(e0a0, false, Time(0)).ok());
  const RoutingTables* fallback = m.Active(Time(0));
  EXPECT_TRUE(ValidateTables(m.view(), *fallback).ok());
  for (NodeId d : topo.Destinations()) {
    for (const NextHop& hop : fallback->Lookup(e0, d)) EXPECT_NE(hop.link, e0a0);
  }
  ASSERT_EQ(fallback->Lookup(e0, e2).size(), 1u);
  EXPECT_EQ(fallback->Lookup(e0, e2)[0].link, topo.FindLink(e0, a1));

  // Tables from a controller that has not seen the failure: refused.
  EXPECT_FALSE(m.Offer(Ecmp(topo, 1), Time(0)).ok());
  EXPECT_EQ(m.counters().refused_dead_link, 1);

  Topology controller_view = topo;
  controller_view.mutable_link(e0a0).up = false;
  const TablesPtr good = Ecmp(controller_view, 2);
  ASSERT_TRUE(m.Offer(good, Seconds(1)).ok());

  // A loop in pod 0: toward e2, a0 sends back down to e1, and e1 sends up to a0 only.
  const NodeId e1 = *topo.FindNode("e1");
  const TablesPtr loop = Edited(ComputeEcmpTables(controller_view), 3, e2, [&](Rows& r) {
    r[a0] = {{topo.FindLink(a0, e1), 1.0}};
    r[e1] = {{topo.FindLink(e1, a0), 1.0}};
  });
  const absl::Status status = m.Offer(loop, Seconds(1));
  EXPECT_THAT(status.message(), HasSubstr("loop toward 'e2'"));
  EXPECT_EQ(m.counters().refused_loop, 1);
  EXPECT_EQ(m.Active(Seconds(1)), good.get());
  EXPECT_EQ(m.ActiveSource(Seconds(1)), TableSource::kLastGood);

  const TablesPtr hole =
      Edited(ComputeEcmpTables(controller_view), 3, e2, [&](Rows& r) { r[a1].clear(); });
  EXPECT_FALSE(m.Offer(hole, Seconds(1)).ok());
  EXPECT_EQ(m.counters().refused_black_hole, 1);
  EXPECT_EQ(m.Active(Seconds(1)), good.get());
}

// A connected random graph of switches with random metrics and stub hosts.
Topology RandomTopology(Random& rng) {
  Topology topo;
  const int n = 3 + static_cast<int>(rng.Below(8));
  for (int i = 0; i < n; ++i) topo.AddNode(fmt::format("s{}", i), NodeKind::kSwitch);
  auto params = [&] { return LinkParams{.metric = 1 + static_cast<double>(rng.Below(3))}; };
  for (int i = 1; i < n; ++i) topo.AddDuplexLink(i, static_cast<NodeId>(rng.Below(i)), params());
  const double p_edge = 0.1 + 0.4 * rng.Uniform();
  for (NodeId a = 0; a < n; ++a) {
    for (NodeId b = a + 1; b < n; ++b) {
      if (rng.Uniform() < p_edge) topo.AddDuplexLink(a, b, params());
    }
  }
  const int hosts = static_cast<int>(rng.Below(n));
  for (int h = 0; h < hosts; ++h) {
    const NodeId host = topo.AddNode(fmt::format("h{}", h), NodeKind::kHost);
    topo.AddDuplexLink(host, static_cast<NodeId>(rng.Below(n)), params());
  }
  return topo;
}

// Tables a (possibly confused) controller might send: ECMP on its own view, sometimes with
// one destination's rows broken at random.
TablesPtr RandomOffer(Random& rng, const Topology& controller_view, uint64_t version) {
  RoutingTables tables = ComputeEcmpTables(controller_view);
  const std::vector<NodeId> dests = controller_view.Destinations();
  const NodeId d = dests[rng.Below(dests.size())];
  const NodeId v = static_cast<NodeId>(rng.Below(controller_view.num_nodes()));
  const std::vector<LinkId>& out = controller_view.node(v).out_links;
  switch (rng.Below(6)) {
    case 0:  // a random out link (often a loop or a dead link; sometimes fine)
      return Edited(std::move(tables), version, d, [&](Rows& r) {
        r[v] = {{out[rng.Below(out.size())], 1.0}};
      });
    case 1:  // no next hop
      return Edited(std::move(tables), version, d, [&](Rows& r) { r[v].clear(); });
    case 2:  // bad weights, when there is a weight to spoil
      return Edited(std::move(tables), version, d, [&](Rows& r) {
        if (!r[v].empty()) r[v][0].weight *= 0.5;
      });
    case 3: {  // a destination missing
      RoutingTables partial(tables.num_nodes(), dests);
      for (NodeId other : dests) {
        if (other != d) partial.Set(tables.SharedTable(other));
      }
      partial.set_version(version);
      return std::make_shared<const RoutingTables>(std::move(partial));
    }
    default:
      tables.set_version(version);
      return std::make_shared<const RoutingTables>(std::move(tables));
  }
}

TEST(TableManagerPropertyTest, ActiveIsAlwaysValidAgainstTheViewAtAcceptance) {
  Random rng(20240917);
  TableManagerCounters total;  // over all iterations, to show every path was taken
  for (int iteration = 0; iteration < 200; ++iteration) {
    SCOPED_TRACE(fmt::format("iteration {}", iteration));
    const Topology topo = RandomTopology(rng);
    const TableManagerConfig config{.stale_after = Seconds(3)};
    TableManager m(topo, config);
    Topology controller_view = topo;  // lags the manager's view
    // Every table accepted so far; each validated against the view before its offer.
    std::map<const RoutingTables*, TablesPtr> accepted;
    // The model of the source.
    std::optional<Time> installed;
    bool last_invalid = false;
    uint64_t next_version = 1;
    Time now(0);
    for (int step = 0; step < 60; ++step) {
      switch (rng.Below(4)) {
        case 0:  // time passes, up to 2 s
          now += Milliseconds(static_cast<int64_t>(rng.Below(2000)));
          break;
        case 1: {  // a link changes state, sometimes seen by the controller too
          const LinkId l = static_cast<LinkId>(rng.Below(topo.num_links()));
          const bool up = rng.Below(3) == 0;
          ASSERT_TRUE(m.SetLinkUp(l, up, now).ok());
          if (rng.Below(2) == 0) controller_view.mutable_link(l).up = up;
          break;
        }
        case 2:
          controller_view = m.view();
          break;
        default: {
          // Mostly new versions; sometimes an old or repeated one.
          const uint64_t version = rng.Below(5) == 0 ? rng.Below(next_version) : next_version++;
          const TablesPtr offer = RandomOffer(rng, controller_view, version);
          const Topology view_before = m.view();
          const bool version_ok =
              !m.highest_version().has_value() || version > *m.highest_version();
          const bool valid = ValidateTables(view_before, *offer).ok();
          const absl::Status status = m.Offer(offer, now);
          ASSERT_EQ(status.ok(), version_ok && valid) << status;
          if (status.ok()) {
            accepted[offer.get()] = offer;
            installed = now;
            last_invalid = false;
          } else if (version_ok) {
            last_invalid = true;
          }
          break;
        }
      }
      const TableSource expected = !installed.has_value() || now - *installed > Seconds(3)
                                       ? TableSource::kStatic
                                   : last_invalid ? TableSource::kLastGood
                                                  : TableSource::kCurrent;
      ASSERT_EQ(m.ActiveSource(now), expected);
      const RoutingTables* active = m.Active(now);
      ASSERT_NE(active, nullptr);
      if (expected == TableSource::kStatic) {
        const ValidationReport report = ValidateTables(m.view(), *active);
        ASSERT_TRUE(report.ok()) << report.ToStatus();
        ASSERT_EQ(accepted.count(active), 0u);
      } else {
        // Accepted, hence (checked above) valid against the view at acceptance.
        ASSERT_EQ(accepted.count(active), 1u);
        ASSERT_EQ(active->version(), *m.highest_version());
      }
      const TableManagerCounters& n = m.counters();
      ASSERT_EQ(n.offered, n.accepted + n.refused_version + n.refused_invalid);
      ASSERT_LE(n.recoveries_from_static, n.fallbacks_to_static);
      ASSERT_GE(n.recoveries_from_static, n.fallbacks_to_static - 1);
    }
    const TableManagerCounters& n = m.counters();
    total.accepted += n.accepted;
    total.refused_version += n.refused_version;
    total.refused_invalid += n.refused_invalid;
    total.refused_loop += n.refused_loop;
    total.refused_dead_link += n.refused_dead_link;
    total.refused_black_hole += n.refused_black_hole;
    total.refused_bad_weights += n.refused_bad_weights;
    total.refused_missing += n.refused_missing;
    total.fallbacks_to_last_good += n.fallbacks_to_last_good;
    total.fallbacks_to_static += n.fallbacks_to_static;
    total.recoveries_from_static += n.recoveries_from_static;
    total.link_down_under_current += n.link_down_under_current;
  }
  for (int64_t count :
       {total.accepted, total.refused_version, total.refused_invalid, total.refused_loop,
        total.refused_dead_link, total.refused_black_hole, total.refused_bad_weights,
        total.refused_missing, total.fallbacks_to_last_good, total.fallbacks_to_static,
        total.recoveries_from_static, total.link_down_under_current}) {
    EXPECT_GT(count, 0);
  }
}

}  // namespace
}  // namespace dar
