#include "security/key_ring.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::security {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kT0 = 1'800'000'000'000'000'000;  // some Unix time, ns

class KeyRingTest : public ::testing::Test {
 protected:
  KeyRingTest()
      : dir_((std::filesystem::temp_directory_path() /
              fmt::format("dar-key-ring-{}-{}", getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                 .string()) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~KeyRingTest() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
  }
  // Where the ring of `o` is kept.
  static std::string File(const KeyRingOptions& o) { return o.store->Where(o.name); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  KeyRingOptions Options() const {
    KeyRingOptions o;
    o.store = std::make_shared<DirectoryStateStore>(Path("state"));
    o.name = "ring.json";
    o.rollout = Seconds(5);
    return o;
  }

  std::string dir_;
};

// "1*,2": the ring's ids, the sealing one starred.
std::string Ids(const KeyRing& ring) {
  std::string out;
  for (const v1::OverlayKey& k : ring.keys()) {
    out += fmt::format("{}{}{}", out.empty() ? "" : ",", k.key_id(), k.active() ? "*" : "");
  }
  return out;
}

std::set<std::string> Accepted(const KeyRing& ring) {
  std::set<std::string> out;
  for (const v1::OverlayKey& k : ring.keys()) out.insert(k.key());
  return out;
}
std::string Sealing(const KeyRing& ring) {
  for (const v1::OverlayKey& k : ring.keys()) {
    if (k.active()) return k.key();
  }
  return "";
}

TEST_F(KeyRingTest, KeyFileReadsHex) {
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += fmt::format("{:02x}", i * 7);
  Write("key", hex.substr(0, 30) + "\n  " + hex.substr(30) + "\n");
  absl::StatusOr<net::OverlayKeyBytes> key = LoadKeyFile(Path("key"));
  ASSERT_TRUE(key.ok()) << key.status();
  for (int i = 0; i < 32; ++i) EXPECT_EQ((*key)[i], static_cast<uint8_t>(i * 7));
}

TEST_F(KeyRingTest, KeyFileRefusesBadFiles) {
  Write("key", "abcd");
  EXPECT_THAT(std::string(LoadKeyFile(Path("key")).status().message()),
              HasSubstr(Path("key") + ": must hold 64 hexadecimal digits, has 4"));
  Write("key", std::string(63, 'a') + "g");
  EXPECT_THAT(std::string(LoadKeyFile(Path("key")).status().message()),
              HasSubstr("not a hexadecimal digit: 'g'"));
  EXPECT_TRUE(absl::IsNotFound(LoadKeyFile(Path("missing")).status()));
}

TEST_F(KeyRingTest, FirstRingIsTheInitialKeyKeptInAPrivateFile) {
  KeyRingOptions o = Options();
  net::OverlayKeyBytes initial;
  initial.fill(0xab);
  o.initial = std::make_pair(uint32_t{0}, initial);
  absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(Ids(*ring), "0*");
  EXPECT_EQ(ring->keys()[0].key(), std::string(32, '\xab'));
  EXPECT_EQ(ring->phase(), KeyPhase::kSteady);
  struct stat st;
  ASSERT_EQ(stat(File(o).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A restart reads the file, whatever the initial key now says.
  o.initial->second.fill(0x11);
  absl::StatusOr<KeyRing> again = KeyRing::Load(o, kT0 + 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->keys()[0].key(), std::string(32, '\xab'));
  EXPECT_EQ(again->phase_since_unix_ns(), kT0);
}

// The bootstrap key is in every agent's config file: anyone holding it derives every pair key.
// The ring moves away from it at the first step, and does not come back to it.
TEST_F(KeyRingTest, TheBootstrapKeyIsRotatedAwayAtOnce) {
  KeyRingOptions o = Options();
  net::OverlayKeyBytes initial;
  initial.fill(0xab);
  o.initial = std::make_pair(uint32_t{1}, initial);
  absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(Ids(*ring), "1*");
  ASSERT_TRUE(*ring->Advance(kT0));  // no timer needed
  EXPECT_EQ(Ids(*ring), "1*,2");
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(5).count()));
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(10).count()));
  EXPECT_EQ(Ids(*ring), "2*");
  EXPECT_FALSE(Accepted(*ring).contains(std::string(32, '\xab')));
  EXPECT_FALSE(*ring->Advance(kT0 + Seconds(3600).count()));  // steady on a key of its own
  // A restart with the same bootstrap key keeps the ring as it is.
  absl::StatusOr<KeyRing> again = KeyRing::Load(o, kT0 + Seconds(3601).count());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again->Advance(kT0 + Seconds(3601).count()));
  EXPECT_EQ(Ids(*again), "2*");
}

// A ring file of the single-key overlay ("dar-key-ring/1"): every agent was handed its
// secrets, so they are rotated away at once, and a restart during that rotation keeps knowing
// which keys were handed out.
TEST_F(KeyRingTest, ARingWhoseSecretsWereHandedOutIsRotatedAway) {
  const KeyRingOptions o = Options();
  std::filesystem::create_directories(Path("state"));
  Write("state/ring.json", fmt::format(R"({{"format": "dar-key-ring/1", "phase": "announced",
      "since_unix_ns": {}, "keys": [{{"id": 4, "key": "{}", "active": true}},
      {{"id": 5, "key": "{}", "active": false}}]}})",
                                       kT0, std::string(64, 'a'), std::string(64, 'b')));
  absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(5).count()));
  EXPECT_EQ(Ids(*ring), "4,5*");
  EXPECT_THAT(Read(File(o)), HasSubstr("\"exposed\""));
  // A restart here, then the rotation goes on: steady on 5, which was handed out too.
  ring = KeyRing::Load(o, kT0 + Seconds(6).count());
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(10).count()));
  EXPECT_EQ(Ids(*ring), "5*");
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(10).count()));  // and away from it at once
  EXPECT_EQ(Ids(*ring), "5*,6");
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(15).count()));
  ASSERT_TRUE(*ring->Advance(kT0 + Seconds(20).count()));
  EXPECT_EQ(Ids(*ring), "6*");
  EXPECT_FALSE(*ring->Advance(kT0 + Seconds(3600).count()));
  EXPECT_THAT(Read(File(o)), HasSubstr("dar-key-ring/2"));
}

// Each node's row holds a key for every other node, the same one its peer holds for it, and
// different pairs have different keys; no row carries the secret.
TEST(RowForTest, RowsAgreePairwiseAndHoldNoSecret) {
  v1::OverlayKey secret;
  secret.set_key_id(4);
  secret.set_active(true);
  secret.set_key(std::string(32, '\x5c'));
  const std::vector<uint32_t> nodes = {10, 20, 30};
  std::map<std::pair<uint32_t, uint32_t>, std::string> held;
  std::set<std::string> distinct;
  for (const uint32_t self : nodes) {
    const v1::OverlayKey row = RowFor(secret, self, nodes);
    EXPECT_EQ(row.key_id(), 4u);
    EXPECT_TRUE(row.active());
    EXPECT_TRUE(row.row());
    EXPECT_TRUE(row.key().empty());
    ASSERT_EQ(row.peers_size(), 2);
    for (const v1::PeerKey& p : row.peers()) {
      EXPECT_NE(p.node_id(), self);
      held[{self, p.node_id()}] = p.key();
      distinct.insert(p.key());
    }
  }
  for (const auto& [pair, key] : held) {
    EXPECT_EQ(key, held.at({pair.second, pair.first})) << pair.first << "-" << pair.second;
  }
  EXPECT_EQ(distinct.size(), 3u);  // three pairs
  // A one-node cluster's row is empty, and still a row; a key that is no secret gives no row.
  EXPECT_TRUE(RowFor(secret, 10, std::vector<uint32_t>{10}).row());
  v1::OverlayKey short_key = secret;
  short_key.set_key("short");
  const v1::OverlayKey refused = RowFor(short_key, 10, nodes);
  EXPECT_FALSE(refused.row());
  EXPECT_EQ(refused.peers_size(), 0);
}

// An agent's saved row goes through JSON and back; a ring file may hold secrets only.
TEST_F(KeyRingTest, RowsRoundTripThroughJsonAndAreNoRingFile) {
  v1::OverlayKey secret;
  secret.set_key_id(2);
  secret.set_active(true);
  secret.set_key(std::string(32, '\x01'));
  const v1::OverlayKey row = RowFor(secret, 1, std::vector<uint32_t>{1, 2, 3});
  absl::StatusOr<std::vector<v1::OverlayKey>> back = KeysFromJson(KeysToJson({row}));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].SerializeAsString(), row.SerializeAsString());

  nlohmann::json bad = KeysToJson({row});
  bad[0]["peers"][1]["key"] = "abc";
  EXPECT_THAT(std::string(KeysFromJson(bad).status().message()), HasSubstr("keys[0].peers[1].key"));
  bad = KeysToJson({row});
  bad[0]["key"] = std::string(64, 'a');  // both a secret and a row
  EXPECT_THAT(std::string(KeysFromJson(bad).status().message()),
              HasSubstr("either key (hex) or peers"));

  Write("ring.json", nlohmann::json({{"format", "dar-key-ring/2"},
                                     {"phase", "steady"},
                                     {"since_unix_ns", kT0},
                                     {"keys", KeysToJson({row})}})
                         .dump());
  KeyRingOptions o = Options();
  o.store = std::make_shared<DirectoryStateStore>(dir_);
  EXPECT_THAT(std::string(KeyRing::Load(o, kT0).status().message()),
              HasSubstr("key 2 is a node's row, not a secret"));
}

TEST_F(KeyRingTest, WithoutFileOrInitialKeyEachRingIsNew) {
  absl::StatusOr<KeyRing> a = KeyRing::Load(KeyRingOptions{}, kT0);
  absl::StatusOr<KeyRing> b = KeyRing::Load(KeyRingOptions{}, kT0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Ids(*a), "1*");
  EXPECT_EQ(a->keys()[0].key().size(), 32u);
  EXPECT_NE(a->keys()[0].key(), b->keys()[0].key());
}

// Each step keeps the key that sealed before it accepted, and the key that seals after it was
// accepted before it: whatever order agents learn the steps in, no packet is refused.
TEST_F(KeyRingTest, RotationMakesBeforeItBreaks) {
  absl::StatusOr<KeyRing> ring = KeyRing::Load(Options(), kT0);
  ASSERT_TRUE(ring.ok());
  EXPECT_FALSE(*ring->Advance(kT0 + Seconds(3600).count()));  // no timer: only on request
  std::vector<KeyRing> states = {*ring};

  const int64_t t1 = kT0 + Seconds(10).count();
  ASSERT_TRUE(*ring->Rotate(t1));
  EXPECT_EQ(Ids(*ring), "1*,2");
  EXPECT_EQ(ring->phase(), KeyPhase::kAnnounced);
  EXPECT_FALSE(*ring->Rotate(t1));  // one at a time
  states.push_back(*ring);
  EXPECT_FALSE(*ring->Advance(t1 + Seconds(5).count() - 1));
  ASSERT_TRUE(*ring->Advance(t1 + Seconds(5).count()));
  EXPECT_EQ(Ids(*ring), "1,2*");
  EXPECT_EQ(ring->phase(), KeyPhase::kActivated);
  states.push_back(*ring);
  EXPECT_FALSE(*ring->Advance(t1 + Seconds(9).count()));
  ASSERT_TRUE(*ring->Advance(t1 + Seconds(10).count()));
  EXPECT_EQ(Ids(*ring), "2*");
  EXPECT_EQ(ring->phase(), KeyPhase::kSteady);
  states.push_back(*ring);

  for (size_t i = 1; i < states.size(); ++i) {
    EXPECT_TRUE(Accepted(states[i]).contains(Sealing(states[i - 1]))) << "step " << i;
    EXPECT_TRUE(Accepted(states[i - 1]).contains(Sealing(states[i]))) << "step " << i;
  }
  EXPECT_NE(Sealing(states.front()), Sealing(states.back()));
}

TEST_F(KeyRingTest, RotatesOnItsTimer) {
  KeyRingOptions o = Options();
  o.rotate_every = Seconds(3600);
  absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
  ASSERT_TRUE(ring.ok());
  EXPECT_FALSE(*ring->Advance(kT0 + Seconds(3599).count()));
  EXPECT_TRUE(*ring->Advance(kT0 + Seconds(3600).count()));
  EXPECT_EQ(ring->phase(), KeyPhase::kAnnounced);
}

// A controller restarted in the middle of a rotation goes on from where it was.
TEST_F(KeyRingTest, ARestartResumesARotation) {
  absl::StatusOr<KeyRing> ring = KeyRing::Load(Options(), kT0);
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE(*ring->Rotate(kT0 + 1));
  absl::StatusOr<KeyRing> again = KeyRing::Load(Options(), kT0 + 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Ids(*again), "1*,2");
  EXPECT_EQ(Accepted(*again), Accepted(*ring));
  EXPECT_EQ(again->phase(), KeyPhase::kAnnounced);
  EXPECT_TRUE(*again->Advance(kT0 + 1 + Seconds(5).count()));
  EXPECT_EQ(Ids(*again), "1,2*");
}

TEST_F(KeyRingTest, ABadFileIsRefusedAndKept) {
  const KeyRingOptions o = Options();
  std::filesystem::create_directories(Path("state"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {R"({"format": "other"})", "format is not"},
      {R"({"format": 1})", "format is not"},
      {R"({"format": "dar-key-ring/1", "phase": 7})", "unknown phase"},
      {R"({"format": "dar-key-ring/1", "phase": "steady", "since_unix_ns": 1, "keys": []})",
       "keys: must be a list of one or two keys"},
      {R"({"format": "dar-key-ring/1", "phase": "steady", "since_unix_ns": 1,
           "keys": [{"id": 1, "key": "zz", "active": true}]})",
       "keys[0].key: not a hexadecimal digit"},
      {fmt::format(R"({{"format": "dar-key-ring/1", "phase": "steady", "since_unix_ns": 1,
           "keys": [{{"id": 1, "key": "{}", "active": false}}]}})",
                   std::string(64, 'a')),
       "exactly one key must be active"},
      {fmt::format(R"({{"format": "dar-key-ring/1", "phase": "announced", "since_unix_ns": 1,
           "keys": [{{"id": 1, "key": "{}", "active": true}}]}})",
                   std::string(64, 'a')),
       "phase announced does not fit 1 keys"},
  };
  for (const auto& [text, problem] : cases) {
    std::ofstream(File(o)) << text;
    absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
    ASSERT_FALSE(ring.ok()) << text;
    EXPECT_THAT(std::string(ring.status().message()), HasSubstr(File(o))) << text;
    EXPECT_THAT(std::string(ring.status().message()), HasSubstr(problem)) << text;
    EXPECT_EQ(Read(File(o)), text);
  }
}

TEST_F(KeyRingTest, AStepThatCannotBeSavedIsNotTaken) {
  KeyRingOptions o = Options();
  absl::StatusOr<KeyRing> ring = KeyRing::Load(o, kT0);
  ASSERT_TRUE(ring.ok());
  // The state dir is replaced by a plain file: nothing can be written there any more.
  std::filesystem::remove_all(Path("state"));
  std::ofstream(Path("state")) << "x";
  absl::StatusOr<bool> rotated = ring->Rotate(kT0 + 1);
  EXPECT_FALSE(rotated.ok());
  EXPECT_THAT(std::string(rotated.status().message()), HasSubstr(File(o)));
  EXPECT_EQ(Ids(*ring), "1*");
  EXPECT_EQ(ring->phase(), KeyPhase::kSteady);
}

}  // namespace
}  // namespace dar::security
