#include "agent/table_store.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Node B of the diamond A-B, A-C, B-D, C-D: neighbours A (1) over link 0 and D (4) over link 2.
constexpr char kNodeB[] = R"(node: {id: 2, name: B}
controller: 127.0.0.1:1
tls: {cert: c, key: k, ca: a}
state_dir: STATE
nodes:
  - {id: 1, name: A}
  - {id: 2, name: B}
  - {id: 3, name: C}
  - {id: 4, name: D}
links:
  - {a: A, b: B}
  - {a: A, b: C}
  - {a: B, b: D}
  - {a: C, b: D}
neighbours:
  - {id: 1, link: 0, interface: b-a, address: 10.1.0.2/30, peer_address: 10.1.0.1}
  - {id: 4, link: 2, interface: b-d, address: 10.1.2.1/30, peer_address: 10.1.2.2}
)";
constexpr uint32_t kA = 1, kC = 3, kD = 4;
constexpr NodeId kNodeA = 0, kNodeC = 2, kNodeD = 3;
constexpr LinkId kLinkToA = 1, kLinkToD = 4;

struct Hop {
  uint32_t neighbour;
  double weight;
  double potential;
};

v1::Route MakeRoute(uint32_t dest, uint32_t cls, double potential, std::vector<Hop> hops) {
  v1::Route r;
  r.set_destination_id(dest);
  r.set_traffic_class(cls);
  r.set_potential(potential);
  for (const Hop& h : hops) {
    v1::NextHop* n = r.add_next_hops();
    n->set_neighbor_id(h.neighbour);
    n->set_weight(h.weight);
    n->set_potential(h.potential);
  }
  return r;
}

// A valid full table for B: A and D directly, C over both at equal weight.
v1::RouteTable FullTable(uint64_t version) {
  v1::RouteTable t;
  t.set_version(version);
  for (uint32_t cls = 0; cls < 2; ++cls) {
    *t.add_routes() = MakeRoute(kA, cls, 1, {{kA, 1, 0}});
    *t.add_routes() = MakeRoute(kD, cls, 1, {{kD, 1, 0}});
    *t.add_routes() = MakeRoute(kC, cls, 2, {{kA, 0.5, 1}, {kD, 0.5, 1}});
  }
  return t;
}

// The route of `t` toward `dest` in class `cls`.
v1::Route* RouteOf(v1::RouteTable& t, uint32_t dest, uint32_t cls) {
  for (v1::Route& r : *t.mutable_routes()) {
    if (r.destination_id() == dest && r.traffic_class() == cls) return &r;
  }
  ADD_FAILURE() << "no route " << dest << "/" << cls;
  return nullptr;
}

class TableStoreTest : public ::testing::Test {
 protected:
  TableStoreTest()
      : dir_((std::filesystem::temp_directory_path() /
              fmt::format("dar-table-store-{}-{}", getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                 .string()),
        config_(MakeConfig(dir_)),
        topology_(BuildAgentTopology(config_)),
        log_([this](std::string_view line) { lines_.emplace_back(line); }, LogLevel::kDebug) {
    std::filesystem::remove_all(dir_);
  }
  ~TableStoreTest() override { std::filesystem::remove_all(dir_); }

  // The configuration `yaml` (B's by default), its state dir under `dir`.
  static AgentConfig MakeConfig(const std::string& dir, const char* yaml = kNodeB,
                                const std::string& file = "B.yaml") {
    std::string text = yaml;
    text.replace(text.find("STATE"), 5, dir + "/state");
    absl::StatusOr<AgentConfig> c = ParseAgentConfig(text, file);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }

  std::unique_ptr<TableStore> NewStore() {
    return std::make_unique<TableStore>(config_, topology_, Seconds(3), &log_);
  }

  // The refusal of `t` by a store that holds FullTable(5).
  std::string RefusalOf(const v1::RouteTable& t) {
    std::unique_ptr<TableStore> store = NewStore();
    EXPECT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
    const std::shared_ptr<const AgentTables> before = store->Active(Time(0));
    const absl::Status s = store->Offer(t, Time(0));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    // Nothing changed: the last good table is still served.
    EXPECT_EQ(store->Active(Time(0)), before);
    EXPECT_EQ(store->installed_version(), 5u);
    EXPECT_EQ(store->counters().refused, 1);
    EXPECT_EQ(store->last_refusal(), std::string(s.message()));
    return std::string(s.message());
  }

  bool Logged(const std::string& text) const {
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

  std::string dir_;
  AgentConfig config_;
  Topology topology_;
  std::vector<std::string> lines_;
  JsonLog log_;
};

TEST_F(TableStoreTest, StartsOnTheStaticTable) {
  std::unique_ptr<TableStore> store = NewStore();
  const std::shared_ptr<const AgentTables> t = store->Active(Time(0));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->is_static);
  EXPECT_EQ(store->Source(Time(0)), TableSource::kStatic);
  EXPECT_EQ(store->installed_version(), 0u);
  ASSERT_EQ(t->Lookup(0, kNodeA).size(), 1u);
  EXPECT_EQ(t->Lookup(0, kNodeA)[0].link, kLinkToA);
  EXPECT_EQ(t->Lookup(1, kNodeD)[0].link, kLinkToD);
  EXPECT_EQ(t->Lookup(0, kNodeC).size(), 1u);  // one shortest path: static is not ECMP
}

TEST_F(TableStoreTest, AcceptsAValidFullTable) {
  std::unique_ptr<TableStore> store = NewStore();
  ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  const std::shared_ptr<const AgentTables> t = store->Active(Time(0));
  EXPECT_FALSE(t->is_static);
  EXPECT_EQ(t->version, 5u);
  EXPECT_EQ(store->Source(Time(0)), TableSource::kCurrent);
  for (int cls = 0; cls < 2; ++cls) {
    ASSERT_EQ(t->Lookup(cls, kNodeC).size(), 2u);
    EXPECT_EQ(t->Lookup(cls, kNodeC)[0].link, kLinkToA);
    EXPECT_EQ(t->Lookup(cls, kNodeC)[1].link, kLinkToD);
    EXPECT_EQ(t->Lookup(cls, kNodeC)[1].weight, 0.5);
    EXPECT_EQ(t->Lookup(cls, kNodeD)[0].link, kLinkToD);
    EXPECT_TRUE(t->Lookup(cls, 1).empty());  // this node
  }
  EXPECT_EQ(store->counters().accepted, 1);
}

TEST_F(TableStoreTest, RefusesOldAndRepeatedVersions) {
  EXPECT_EQ(RefusalOf(FullTable(5)), "version 5 is not newer than the installed version 5");
  EXPECT_EQ(RefusalOf(FullTable(4)), "version 4 is not newer than the installed version 5");
  EXPECT_EQ(RefusalOf(FullTable(0)), "version 0 is not a table version");
}

// The same chain as the simulator's forwarders (core/fallback_chain.h): a newer table refused
// for its content leaves the one held served as the last good one; an old version does not.
TEST_F(TableStoreTest, ServesTheLastGoodTableAfterANewerOneIsRefused) {
  std::unique_ptr<TableStore> store = NewStore();
  ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  EXPECT_FALSE(store->Offer(FullTable(5), Time(0)).ok());
  EXPECT_EQ(store->Source(Time(0)), TableSource::kCurrent);
  v1::RouteTable bad = FullTable(6);
  RouteOf(bad, kA, 1)->mutable_next_hops(0)->set_weight(0.5);
  EXPECT_FALSE(store->Offer(bad, Milliseconds(100)).ok());
  EXPECT_EQ(store->Source(Milliseconds(100)), TableSource::kLastGood);
  EXPECT_EQ(store->Active(Milliseconds(100))->version, 5u);
  EXPECT_EQ(store->counters().fallbacks_to_last_good, 1);
  ASSERT_TRUE(store->Offer(FullTable(7), Milliseconds(200)).ok());
  EXPECT_EQ(store->Source(Milliseconds(200)), TableSource::kCurrent);
  EXPECT_EQ(store->Active(Milliseconds(200))->version, 7u);
}

TEST_F(TableStoreTest, RefusesADeltaAgainstAnotherVersion) {
  v1::RouteTable delta;
  delta.set_version(7);
  delta.set_base_version(4);
  EXPECT_EQ(RefusalOf(delta), "a delta against version 4, but the installed version is 5");
  std::unique_ptr<TableStore> empty = NewStore();
  EXPECT_THAT(std::string(empty->Offer(delta, Time(0)).message()),
              HasSubstr("a delta against version 4, but no table is installed"));
}

TEST_F(TableStoreTest, RefusesUnknownDestinationsAndClasses) {
  v1::RouteTable t = FullTable(6);
  *t.add_routes() = MakeRoute(9, 0, 1, {{kA, 1, 0}});
  EXPECT_EQ(RefusalOf(t), "routes[6] (destination 9 class 0): unknown destination node id 9");
  t = FullTable(6);
  *t.add_routes() = MakeRoute(2, 0, 1, {{kA, 1, 0}});
  EXPECT_THAT(RefusalOf(t), HasSubstr("a route to this node itself"));
  t = FullTable(6);
  RouteOf(t, kA, 1)->set_traffic_class(2);
  EXPECT_THAT(RefusalOf(t), HasSubstr("unknown traffic class 2"));
  t = FullTable(6);
  *t.add_routes() = MakeRoute(kA, 0, 1, {{kA, 1, 0}});
  EXPECT_THAT(RefusalOf(t), HasSubstr("(destination 1 class 0): a second row for it"));
  t = FullTable(6);
  t.set_base_version(5);
  t.add_removed()->set_destination_id(77);
  EXPECT_THAT(RefusalOf(t), HasSubstr("removed[0]: unknown destination node id 77"));
}

TEST_F(TableStoreTest, RefusesANextHopThatIsNotANeighbour) {
  v1::RouteTable t = FullTable(6);
  *RouteOf(t, kC, 0) = MakeRoute(kC, 0, 2, {{kC, 1, 0}});
  EXPECT_EQ(RefusalOf(t),
            "routes[2] (destination 3 class 0): next hop 3 is not a neighbour of "
            "node 2");
  *RouteOf(t, kC, 0) = MakeRoute(kC, 0, 2, {{kA, 0.5, 1}, {kA, 0.5, 1}});
  EXPECT_THAT(RefusalOf(t), HasSubstr("next hop 1 appears twice"));
}

TEST_F(TableStoreTest, RefusesANextHopOverALinkThatIsDown) {
  std::unique_ptr<TableStore> store = NewStore();
  store->SetNeighbourUp(kNodeA, false);
  const absl::Status s = store->Offer(FullTable(1), Time(0));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("next hop 1 is over a link the data plane reports down (via b-a)"));
  // Without next hops over A (everything via D) it passes; back up, A is fine again.
  v1::RouteTable t;
  t.set_version(2);
  for (uint32_t cls = 0; cls < 2; ++cls) {
    for (const auto& [dest, phi] : {std::pair{kA, 3.0}, std::pair{kC, 2.0}, std::pair{kD, 1.0}}) {
      *t.add_routes() = MakeRoute(dest, cls, phi, {{kD, 1, phi - 1}});
    }
  }
  EXPECT_TRUE(store->Offer(t, Time(0)).ok());
  store->SetNeighbourUp(kNodeA, true);
  EXPECT_TRUE(store->Offer(FullTable(3), Time(0)).ok());
}

TEST_F(TableStoreTest, RefusesBadWeights) {
  for (const double w : {kNaN, kInfinity, 0.0, -0.5}) {
    v1::RouteTable t = FullTable(6);
    RouteOf(t, kC, 1)->mutable_next_hops(0)->set_weight(w);
    EXPECT_THAT(RefusalOf(t),
                HasSubstr(fmt::format("next hop 1 has weight {}: must be finite and positive", w)));
  }
  v1::RouteTable t = FullTable(6);
  RouteOf(t, kC, 1)->mutable_next_hops(0)->set_weight(0.4);
  EXPECT_EQ(RefusalOf(t), "routes[5] (destination 3 class 1): weights sum to 0.9, not 1");
  // Rounding is tolerated.
  std::unique_ptr<TableStore> store = NewStore();
  t = FullTable(6);
  RouteOf(t, kC, 1)->mutable_next_hops(0)->set_weight(0.1 + 0.2);
  RouteOf(t, kC, 1)->mutable_next_hops(1)->set_weight(0.7);
  EXPECT_TRUE(store->Offer(t, Time(0)).ok());
}

TEST_F(TableStoreTest, RefusesNextHopsThatAreNotDownhill) {
  for (const double p : {2.0, 2.5, kNaN, kInfinity}) {
    v1::RouteTable t = FullTable(6);
    RouteOf(t, kC, 0)->mutable_next_hops(1)->set_potential(p);
    EXPECT_THAT(
        RefusalOf(t),
        HasSubstr(fmt::format("next hop 4 has potential {}, not strictly below this node's 2", p)));
  }
  v1::RouteTable t = FullTable(6);
  RouteOf(t, kC, 0)->set_potential(kNaN);
  EXPECT_THAT(RefusalOf(t), HasSubstr("potential nan is not finite"));
}

TEST_F(TableStoreTest, RefusesABlackHole) {
  v1::RouteTable t = FullTable(6);
  t.mutable_routes()->DeleteSubrange(5, 1);  // C, class 1
  EXPECT_EQ(RefusalOf(t), "destination 3 (C) class 1 is reachable but has no route (black hole)");
  // A row without next hops is not a route, unless it says "unreachable" (+inf).
  t = FullTable(6);
  RouteOf(t, kC, 1)->clear_next_hops();
  EXPECT_THAT(RefusalOf(t), HasSubstr("no next hops"));
  RouteOf(t, kC, 1)->set_potential(kInfinity);
  std::unique_ptr<TableStore> store = NewStore();
  ASSERT_TRUE(store->Offer(t, Time(0)).ok());
  EXPECT_TRUE(store->Active(Time(0))->Lookup(1, kNodeC).empty());
  // With both links down nothing is reachable: an empty table passes.
  store->SetNeighbourUp(kNodeA, false);
  store->SetNeighbourUp(kNodeD, false);
  v1::RouteTable empty;
  empty.set_version(7);
  EXPECT_TRUE(store->Offer(empty, Time(0)).ok());
}

TEST_F(TableStoreTest, AppliesDeltas) {
  std::unique_ptr<TableStore> store = NewStore();
  ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  // C class 0 moves to D only; the rest stays.
  v1::RouteTable delta;
  delta.set_version(6);
  delta.set_base_version(5);
  *delta.add_routes() = MakeRoute(kC, 0, 2, {{kD, 1, 1}});
  ASSERT_TRUE(store->Offer(delta, Time(0)).ok());
  std::shared_ptr<const AgentTables> t = store->Active(Time(0));
  EXPECT_EQ(t->version, 6u);
  ASSERT_EQ(t->Lookup(0, kNodeC).size(), 1u);
  EXPECT_EQ(t->Lookup(0, kNodeC)[0].link, kLinkToD);
  EXPECT_EQ(t->Lookup(1, kNodeC).size(), 2u);
  EXPECT_EQ(t->Lookup(0, kNodeA)[0].link, kLinkToA);

  // An empty delta refreshes; removing a reachable row is a black hole; removing and adding in
  // one delta replaces.
  delta.Clear();
  delta.set_version(7);
  delta.set_base_version(6);
  ASSERT_TRUE(store->Offer(delta, Time(0)).ok());
  delta.set_version(8);
  delta.set_base_version(7);
  v1::RouteKey* key = delta.add_removed();
  key->set_destination_id(kA);
  key->set_traffic_class(1);
  EXPECT_THAT(std::string(store->Offer(delta, Time(0)).message()),
              HasSubstr("destination 1 (A) class 1 is reachable but has no route"));
  *delta.add_routes() = MakeRoute(kA, 1, 3, {{kD, 1, 2}});
  ASSERT_TRUE(store->Offer(delta, Time(0)).ok());
  t = store->Active(Time(0));
  EXPECT_EQ(t->Lookup(1, kNodeA)[0].link, kLinkToD);
  EXPECT_EQ(t->Lookup(0, kNodeA)[0].link, kLinkToA);
  // The refused delta did not move the base.
  EXPECT_EQ(store->installed_version(), 8u);
}

TEST_F(TableStoreTest, FallsBackToStaticWhenStaleAndRecovers) {
  std::unique_ptr<TableStore> store = NewStore();
  EXPECT_TRUE(store->TakeChange(Time(0))->is_static);
  EXPECT_EQ(store->TakeChange(Time(0)), nullptr);
  ASSERT_TRUE(store->Offer(FullTable(5), Seconds(1)).ok());
  EXPECT_EQ(store->TakeChange(Seconds(1))->version, 5u);
  EXPECT_EQ(store->TakeChange(Seconds(4)), nullptr);  // exactly stale_after: still fresh
  EXPECT_EQ(store->counters().fallbacks_to_static, 0);

  const std::shared_ptr<const AgentTables> fallback =
      store->TakeChange(Seconds(4) + Nanoseconds(1));
  ASSERT_NE(fallback, nullptr);
  EXPECT_TRUE(fallback->is_static);
  EXPECT_EQ(store->Source(Seconds(5)), TableSource::kStatic);
  EXPECT_EQ(store->counters().fallbacks_to_static, 1);
  EXPECT_TRUE(Logged("table stale: falling back to the static table"));
  // The stale table's version is still the floor, and its rows the base of a delta.
  EXPECT_THAT(std::string(store->Offer(FullTable(5), Seconds(6)).message()),
              HasSubstr("not newer"));
  v1::RouteTable delta;
  delta.set_version(9);
  delta.set_base_version(5);
  ASSERT_TRUE(store->Offer(delta, Seconds(6)).ok());
  EXPECT_EQ(store->TakeChange(Seconds(6))->version, 9u);
  EXPECT_EQ(store->counters().recoveries_from_static, 1);

  // A shorter timeout from the controller applies at once.
  store->set_stale_after(Milliseconds(500));
  EXPECT_TRUE(store->Active(Seconds(6) + Milliseconds(501))->is_static);
  EXPECT_EQ(store->counters().fallbacks_to_static, 2);
}

TEST_F(TableStoreTest, StaticTableFollowsTheLinkView) {
  std::unique_ptr<TableStore> store = NewStore();
  const std::shared_ptr<const AgentTables> before = store->TakeChange(Time(0));
  store->SetNeighbourUp(kNodeA, false);
  store->SetNeighbourUp(kNodeA, false);  // no change: counted once
  EXPECT_EQ(store->counters().link_changes, 1);
  const std::shared_ptr<const AgentTables> after = store->TakeChange(Time(0));
  ASSERT_NE(after, nullptr);
  ASSERT_NE(after, before);
  ASSERT_EQ(after->Lookup(0, kNodeA).size(), 1u);
  EXPECT_EQ(after->Lookup(0, kNodeA)[0].link, kLinkToD);  // B-D-C-A
  store->SetNeighbourUp(99, false);                       // not a neighbour: ignored
  EXPECT_EQ(store->TakeChange(Time(0)), nullptr);
}

TEST_F(TableStoreTest, SavesEveryAcceptedTableAndLoadsItBack) {
  {
    std::unique_ptr<TableStore> store = NewStore();
    EXPECT_TRUE(absl::IsNotFound(store->LoadFromDisk(Time(0))));
    ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
    v1::RouteTable delta;
    delta.set_version(7);
    delta.set_base_version(5);
    *delta.add_routes() = MakeRoute(kC, 0, 2, {{kD, 1, 1}});
    ASSERT_TRUE(store->Offer(delta, Time(0)).ok());
    EXPECT_EQ(store->counters().disk_write_errors, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state/tables.bin.tmp"));
  std::unique_ptr<TableStore> restarted = NewStore();
  ASSERT_TRUE(restarted->LoadFromDisk(Seconds(100)).ok());
  EXPECT_TRUE(Logged("forwarding with the table from disk"));
  EXPECT_EQ(restarted->installed_version(), 7u);
  EXPECT_EQ(restarted->counters().loaded_from_disk, 1);
  const std::shared_ptr<const AgentTables> t = restarted->TakeChange(Seconds(100));
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->is_static);
  EXPECT_EQ(t->version, 7u);
  ASSERT_EQ(t->Lookup(0, kNodeC).size(), 1u);
  EXPECT_EQ(t->Lookup(0, kNodeC)[0].link, kLinkToD);
  EXPECT_EQ(t->Lookup(1, kNodeC).size(), 2u);
  // Read again, the file holds nothing newer: it is ignored, and the table stays.
  const absl::Status again = restarted->LoadFromDisk(Seconds(100));
  EXPECT_THAT(std::string(again.message()), HasSubstr("version 7 is not newer"));
  EXPECT_EQ(restarted->installed_version(), 7u);
  EXPECT_EQ(restarted->counters().loaded_from_disk, 1);
  // Older versions are still refused; a delta against the loaded version applies.
  EXPECT_THAT(std::string(restarted->Offer(FullTable(6), Seconds(100)).message()),
              HasSubstr("version 6 is not newer than the installed version 7"));
  v1::RouteTable delta;
  delta.set_version(8);
  delta.set_base_version(7);
  EXPECT_TRUE(restarted->Offer(delta, Seconds(100)).ok());
  // The loaded table goes stale like any other.
  EXPECT_TRUE(restarted->Active(Seconds(104))->is_static);
}

TEST_F(TableStoreTest, IgnoresACorruptTableFile) {
  {
    std::unique_ptr<TableStore> store = NewStore();
    ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  }
  const std::string path = dir_ + "/state/tables.bin";
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    good = buffer.str();
  }
  const size_t eol = good.find('\n');
  std::string flipped = good;
  flipped[eol + 5] ^= 0x40;
  std::string other_node = good;
  other_node.replace(other_node.find("node=2"), 6, "node=3");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"garbage\nmore", "not a table file"},
      {good.substr(0, good.size() - 3), "truncated"},
      {flipped, "checksum mismatch"},
      {other_node, "the table of node 3, not of this node (2)"},
      {"", "no header line"},
  };
  for (const auto& [contents, why] : cases) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    lines_.clear();
    std::unique_ptr<TableStore> store = NewStore();
    const absl::Status s = store->LoadFromDisk(Time(0));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << why;
    EXPECT_THAT(std::string(s.message()), HasSubstr(why));
    EXPECT_TRUE(Logged("ignored the table on disk")) << why;
    EXPECT_TRUE(Logged(why)) << why;
    EXPECT_EQ(store->counters().disk_ignored, 1);
    EXPECT_TRUE(store->Active(Time(0))->is_static);
    EXPECT_EQ(store->installed_version(), 0u);
  }
}

TEST_F(TableStoreTest, IgnoresATableFileThatFailsTheChecks) {
  // A table that passes the file checks but would loop: written by hand, as a bug would.
  {
    std::unique_ptr<TableStore> store = NewStore();
    ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  }
  const std::string path = dir_ + "/state/tables.bin";
  v1::RouteTable bad = FullTable(6);
  RouteOf(bad, kC, 0)->mutable_next_hops(0)->set_potential(5);
  std::string payload;
  ASSERT_TRUE(bad.SerializeToString(&payload));
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : payload) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << fmt::format("dar-agent-table 1 node=2 size={} fnv1a64={:016x}\n", payload.size(), h)
      << payload;
  std::unique_ptr<TableStore> store = NewStore();
  const absl::Status s = store->LoadFromDisk(Time(0));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not strictly below"));
  EXPECT_TRUE(store->Active(Time(0))->is_static);
}

TEST_F(TableStoreTest, AWriteErrorIsCountedAndTheTableStillAccepted) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/state") << "a file where the state dir should be";
  std::unique_ptr<TableStore> store = NewStore();
  ASSERT_TRUE(store->Offer(FullTable(5), Time(0)).ok());
  EXPECT_EQ(store->counters().disk_write_errors, 1);
  EXPECT_TRUE(Logged("cannot save the table"));
  EXPECT_EQ(store->Active(Time(0))->version, 5u);
}

// The compact form's default route is for a node on a single link: B has two.
TEST_F(TableStoreTest, RefusesADefaultRouteAtANodeWithSeveralLinks) {
  v1::RouteTable t = FullTable(6);
  t.mutable_default_route()->set_neighbor_id(kA);
  EXPECT_THAT(RefusalOf(t), HasSubstr("node 2 is no stub"));
  EXPECT_TRUE(IsCompactFormRefusal(NewStore()->Offer(t, Time(0))));
}

// B's configuration has no stubs (every node of the diamond has two links): a table that
// names some was cut from another overlay.
TEST_F(TableStoreTest, RefusesImpliedStubsItsConfigurationLacks) {
  v1::RouteTable t = FullTable(6);
  t.set_stub_digest(0x1234);
  EXPECT_THAT(RefusalOf(t), HasSubstr("leaves out rows toward stubs 0000000000001234, but this "
                                      "node's configuration has stubs 0000000000000000"));
}

// Host H hangs off A of the diamond; G hangs off D.
constexpr char kHostH[] = R"(node: {id: 5, name: H}
controller: 127.0.0.1:1
tls: {cert: c, key: k, ca: a}
state_dir: STATE
nodes:
  - {id: 1, name: A}
  - {id: 2, name: B}
  - {id: 3, name: C}
  - {id: 4, name: D}
  - {id: 5, name: H}
  - {id: 6, name: G}
links:
  - {a: A, b: B}
  - {a: A, b: C}
  - {a: B, b: D}
  - {a: C, b: D}
  - {a: H, b: A}
  - {a: G, b: D}
neighbours:
  - {id: 1, link: 4, interface: h-a, address: 10.1.4.1/30, peer_address: 10.1.4.2}
)";

class HostTableStoreTest : public TableStoreTest {
 protected:
  HostTableStoreTest()
      : host_(MakeConfig(dir_, kHostH, "H.yaml")), host_topology_(BuildAgentTopology(host_)) {
    std::vector<uint32_t> ids;
    for (const AgentNodeConfig& n : host_.nodes) ids.push_back(n.id);
    digest_ = StubDigest(StubSwitches(host_topology_), ids);
  }

  std::unique_ptr<TableStore> NewHostStore() {
    return std::make_unique<TableStore>(host_, host_topology_, Seconds(3), &log_);
  }
  // H's compact table: A as its default route, and G (class 1) unreachable, an exception.
  v1::RouteTable HostTable(uint64_t version) const {
    v1::RouteTable t;
    t.set_version(version);
    t.mutable_default_route()->set_neighbor_id(kA);
    t.set_stub_digest(digest_);
    *t.add_routes() = MakeRoute(6, 1, kInfinity, {});
    return t;
  }

  AgentConfig host_;
  Topology host_topology_;
  uint64_t digest_ = 0;  // of H and G, the stubs
};

TEST_F(HostTableStoreTest, ADefaultRouteCoversEveryRowNotSentAndSurvivesARestart) {
  constexpr LinkId kHostToA = 8;  // link 4 of the config, H -> A
  {
    std::unique_ptr<TableStore> store = NewHostStore();
    ASSERT_TRUE(store->Offer(HostTable(5), Time(0)).ok());
  }
  std::unique_ptr<TableStore> store = NewHostStore();
  ASSERT_TRUE(store->LoadFromDisk(Time(0)).ok());
  const std::shared_ptr<const AgentTables> t = store->Active(Time(0));
  EXPECT_EQ(t->version, 5u);
  for (int cls = 0; cls < 2; ++cls) {
    for (NodeId d = 0; d < 6; ++d) {
      const absl::Span<const NextHop> hops = t->Lookup(cls, d);
      if (d == host_.self || (d == 5 && cls == 1)) {
        EXPECT_TRUE(hops.empty()) << cls << " " << d;
        continue;
      }
      ASSERT_EQ(hops.size(), 1u) << cls << " " << d;
      EXPECT_EQ(hops[0].link, kHostToA);
      EXPECT_EQ(hops[0].weight, 1.0);
    }
  }
  // A delta may not change the form.
  v1::RouteTable delta = HostTable(6);
  delta.set_base_version(5);
  delta.set_stub_digest(0);
  const absl::Status refused = store->Offer(delta, Time(0));
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("a delta with stubs 0000000000000000 against a table with stubs"));
  EXPECT_TRUE(IsCompactFormRefusal(refused));
}

TEST_F(HostTableStoreTest, RefusesADefaultRouteOverALinkThatIsDownOrToANonNeighbour) {
  std::unique_ptr<TableStore> store = NewHostStore();
  v1::RouteTable t = HostTable(5);
  t.mutable_default_route()->set_neighbor_id(kD);
  EXPECT_THAT(std::string(store->Offer(t, Time(0)).message()),
              HasSubstr("default route: node 4 is not a neighbour of node 5"));
  // A bad table, not a form this agent cannot take.
  EXPECT_FALSE(IsCompactFormRefusal(store->Offer(t, Time(0))));
  store->SetNeighbourUp(kNodeA, false);
  // Refused, but not for its form: the controller goes on sending compact tables.
  const absl::Status down = store->Offer(HostTable(6), Time(0));
  EXPECT_THAT(std::string(down.message()), HasSubstr("a link the data plane reports down"));
  EXPECT_FALSE(IsCompactFormRefusal(down));
  // With the link down nothing is reachable: no default and no row is no black hole.
  v1::RouteTable none;
  none.set_version(7);
  none.set_stub_digest(digest_);
  EXPECT_TRUE(store->Offer(none, Time(0)).ok());
}

}  // namespace
}  // namespace dar::agent
