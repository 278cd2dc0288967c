#include "net/overlay_header.h"

#include <array>
#include <set>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/telemetry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::net {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

OverlayKeyBytes Key(uint8_t fill) {
  OverlayKeyBytes k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(fill + i);
  return k;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 31 * i);
  return b;
}

// Four nodes, by index 0..3 (A, B, C, D), with these wire ids.
constexpr std::array<uint32_t, 4> kWire = {11, 12, 13, 14};
constexpr uint32_t kA = 0, kB = 1, kC = 2, kD = 3;

// Node `self`'s row of the epoch with this secret.
std::vector<OverlayPairKey> Row(const OverlayKeyBytes& secret, uint32_t self) {
  return PairKeysFromSecret(secret, kWire, self);
}

// From A to its neighbour B.
OverlayHeader DataHeader() {
  OverlayHeader h;
  h.type = OverlayType::kData;
  h.traffic_class = TrafficClass::kBulk;
  h.hop_limit = 7;
  h.source = kA;
  h.destination = kB;
  h.flow_hash = 0xdeadbeef;
  h.sequence = 0x0102030405060708;
  return h;
}

// A's, B's, C's and D's rings, each holding epoch 1 (current) and epoch 2. Datagrams are
// sealed by A (sender_) and parsed by B (ring_) unless a test says otherwise.
class OverlayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t n = 0; n < rings_.size(); ++n) {
      ASSERT_TRUE(rings_[n].Add(1, Row(Key(10), n)).ok());
      ASSERT_TRUE(rings_[n].Add(2, Row(Key(20), n)).ok());
    }
  }

  // Seals with `from`'s ring for the next hop (the destination unless given) and returns the
  // datagram.
  std::vector<uint8_t> Seal(const OverlayHeader& h, const std::vector<uint8_t>& payload,
                            uint32_t key_id = 1, uint32_t from = kA,
                            uint32_t next_hop = UINT32_MAX) {
    std::vector<uint8_t> out(OverlayDatagramSize(payload.size()));
    const OverlayKey* key = rings_[from].Find(key_id);
    EXPECT_NE(key, nullptr);
    absl::StatusOr<size_t> n = SealOverlay(
        h, payload, *key, next_hop == UINT32_MAX ? h.destination : next_hop, absl::MakeSpan(out));
    EXPECT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, out.size());
    return out;
  }

  // Parses as node `self` receiving from neighbour `from`.
  OverlayStatus Parse(const std::vector<uint8_t>& d, OverlayPacket* p = nullptr, uint32_t self = kB,
                      uint32_t from = kA) {
    OverlayPacket scratch;
    return ParseOverlay(d, rings_[self], self, from, p == nullptr ? &scratch : p);
  }

  std::array<OverlayKeyRing, 4> rings_;
  OverlayKeyRing& sender_ = rings_[kA];
  OverlayKeyRing& ring_ = rings_[kB];
};

TEST_F(OverlayTest, DataRoundTrip) {
  const std::vector<uint8_t> payload = Bytes(1400, 3);
  const std::vector<uint8_t> d = Seal(DataHeader(), payload);
  EXPECT_EQ(d.size(), 1400 + 64u);
  EXPECT_EQ(d[0], 7);  // hop limit first (outside the end-to-end tag), then the version
  EXPECT_EQ(d[1], 4);  // big-endian fields
  EXPECT_EQ(d[8], 0);
  EXPECT_EQ(d[11], kA);
  EXPECT_EQ(d[15], kB);
  OverlayPacket p;
  ASSERT_EQ(Parse(d, &p), OverlayStatus::kOk);
  EXPECT_EQ(p.header.type, OverlayType::kData);
  EXPECT_EQ(p.header.traffic_class, TrafficClass::kBulk);
  EXPECT_EQ(p.header.hop_limit, 7);
  EXPECT_EQ(p.header.source, kA);
  EXPECT_EQ(p.header.destination, kB);
  EXPECT_EQ(p.header.flow_hash, 0xdeadbeefu);
  EXPECT_EQ(p.header.sequence, 0x0102030405060708u);
  EXPECT_EQ(d[24], 0x01);
  EXPECT_EQ(d[31], 0x08);
  EXPECT_EQ(p.key_id, 1u);
  EXPECT_THAT(p.payload, ElementsAreArray(payload));
  EXPECT_EQ(p.payload.data(), d.data() + kOverlayHeaderBytes);  // no copy
}

TEST_F(OverlayTest, EmptyPayloadAndSecondKey) {
  const std::vector<uint8_t> d = Seal(DataHeader(), {}, /*key_id=*/2);
  OverlayPacket p;
  ASSERT_EQ(Parse(d, &p), OverlayStatus::kOk);
  EXPECT_EQ(p.key_id, 2u);
  EXPECT_TRUE(p.payload.empty());
}

TEST_F(OverlayTest, SealsInPlace) {
  const std::vector<uint8_t> payload = Bytes(300, 9);
  std::vector<uint8_t> buf(2048);
  std::copy(payload.begin(), payload.end(), buf.begin() + kOverlayHeaderBytes);
  absl::StatusOr<size_t> n =
      SealOverlay(DataHeader(), absl::MakeConstSpan(buf).subspan(kOverlayHeaderBytes, 300),
                  *sender_.current(), kB, absl::MakeSpan(buf));
  ASSERT_TRUE(n.ok()) << n.status();
  buf.resize(*n);
  EXPECT_EQ(buf, Seal(DataHeader(), payload));
}

TEST_F(OverlayTest, SealRejectsWhatItCannotCarry) {
  std::vector<uint8_t> small(100);
  absl::StatusOr<size_t> n =
      SealOverlay(DataHeader(), Bytes(53, 0), *sender_.current(), kB, absl::MakeSpan(small));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(n.status().message(), HasSubstr("117-byte"));

  std::vector<uint8_t> huge(kOverlayMaxPayload + 1), out(huge.size() + 64);
  n = SealOverlay(DataHeader(), huge, *sender_.current(), kB, absl::MakeSpan(out));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);

  OverlayHeader probe = DataHeader();
  probe.type = OverlayType::kProbe;
  n = SealOverlay(probe, Bytes(15, 0), *sender_.current(), kB, absl::MakeSpan(out));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(n.status().message(), HasSubstr("must be 16 bytes"));

  OverlayHeader odd = DataHeader();
  odd.traffic_class = static_cast<TrafficClass>(5);
  n = SealOverlay(odd, Bytes(8, 0), *sender_.current(), kB, absl::MakeSpan(out));
  EXPECT_THAT(n.status().message(), HasSubstr("traffic class 5"));

  // A node has no key with itself, nor with a node outside its epoch.
  OverlayHeader to_self = DataHeader();
  to_self.destination = kA;
  n = SealOverlay(to_self, Bytes(8, 0), *sender_.current(), kB, absl::MakeSpan(out));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  n = SealOverlay(DataHeader(), Bytes(8, 0), *sender_.current(), 9, absl::MakeSpan(out));
  EXPECT_THAT(n.status().message(), HasSubstr("no key for node 9"));
}

TEST(OverlayStatusTest, EveryReasonHasItsOwnName) {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(OverlayStatus::kCount); ++i) {
    const std::string name(OverlayStatusName(static_cast<OverlayStatus>(i)));
    EXPECT_NE(name, "?");
    EXPECT_TRUE(names.insert(name).second) << name;
  }
}

TEST_F(OverlayTest, EachDefectHasItsOwnReason) {
  const std::vector<uint8_t> good = Seal(DataHeader(), Bytes(100, 1));
  ASSERT_EQ(Parse(good), OverlayStatus::kOk);

  EXPECT_EQ(Parse({}), OverlayStatus::kTooShort);
  EXPECT_EQ(Parse(std::vector<uint8_t>(good.begin(), good.begin() + 63)), OverlayStatus::kTooShort);

  std::vector<uint8_t> d = good;
  d[1] = 1;  // version 1 (which covered the hop limit)
  EXPECT_EQ(Parse(d), OverlayStatus::kBadVersion);

  for (uint8_t type : {0, 4, 255}) {
    d = good;
    d[2] = type;
    EXPECT_EQ(Parse(d), OverlayStatus::kUnknownType) << int(type);
  }

  d = good;
  d[3] = 2;
  EXPECT_EQ(Parse(d), OverlayStatus::kBadTrafficClass);

  d = good;
  d.push_back(0);  // one byte more than the length field says
  EXPECT_EQ(Parse(d), OverlayStatus::kBadLength);
  d = good;
  d.pop_back();
  EXPECT_EQ(Parse(d), OverlayStatus::kBadLength);
  d = good;
  d[21] ^= 1;  // length field
  EXPECT_EQ(Parse(d), OverlayStatus::kBadLength);

  // A probe must carry exactly a ProbeBody, a reply a ProbeReplyBody.
  d = good;
  d[2] = static_cast<uint8_t>(OverlayType::kProbe);
  EXPECT_EQ(Parse(d), OverlayStatus::kBadLength);
  d[2] = static_cast<uint8_t>(OverlayType::kProbeReply);
  EXPECT_EQ(Parse(d), OverlayStatus::kBadLength);

  d = good;
  d[7] = 9;  // key id 9
  EXPECT_EQ(Parse(d), OverlayStatus::kUnknownKeyId);

  d = good;
  d[50] ^= 0x10;  // payload: the end-to-end tag covers it, the hop tag does not
  EXPECT_EQ(Parse(d), OverlayStatus::kBadTag);
  d = good;
  d.back() ^= 0x80;  // hop tag
  EXPECT_EQ(Parse(d), OverlayStatus::kBadHopTag);
  d = good;
  d[d.size() - 17] ^= 0x80;  // end-to-end tag, which the hop tag covers
  EXPECT_EQ(Parse(d), OverlayStatus::kBadHopTag);
  // The whole header is covered by the hop tag: the hop limit, the class changed into the
  // other valid one, the source, the destination, the flow hash, the reserved bits.
  for (size_t at : {0, 3, 8, 12, 16, 22}) {
    d = good;
    d[at] ^= 0x01;
    EXPECT_EQ(Parse(d), OverlayStatus::kBadHopTag) << at;
  }
  // From a neighbour other than the one that sealed it.
  EXPECT_EQ(Parse(good, nullptr, kB, kC), OverlayStatus::kBadHopTag);
  // From a node outside the epoch.
  EXPECT_EQ(Parse(good, nullptr, kB, 9), OverlayStatus::kUnknownKeyId);

  OverlayHeader h = DataHeader();
  h.hop_limit = 0;
  EXPECT_EQ(Parse(Seal(h, Bytes(10, 1))), OverlayStatus::kHopLimitExhausted);
}

TEST_F(OverlayTest, AnotherEpochSecretIsRejected) {
  OverlayKeyRing other;
  ASSERT_TRUE(other.Add(1, Row(Key(99), kA)).ok());  // same id, another secret
  std::vector<uint8_t> d(OverlayDatagramSize(64));
  ASSERT_TRUE(
      SealOverlay(DataHeader(), Bytes(64, 0), *other.current(), kB, absl::MakeSpan(d)).ok());
  EXPECT_EQ(Parse(d), OverlayStatus::kBadHopTag);
}

// What per-pair keys are for: C holds its own row only, so whatever it claims, it cannot make
// B accept a datagram from A, neither as A's neighbour (hop tag) nor from its own link (the
// end-to-end tag is A's and B's).
TEST_F(OverlayTest, ANodeCanSpeakOnlyAsItself) {
  OverlayHeader forged = DataHeader();  // claims source A
  const std::vector<uint8_t> d = Seal(forged, Bytes(200, 5), 1, /*from=*/kC);
  EXPECT_EQ(Parse(d, nullptr, kB, /*from=*/kA), OverlayStatus::kBadHopTag);
  EXPECT_EQ(Parse(d, nullptr, kB, /*from=*/kC), OverlayStatus::kBadTag);
  // The same from C as itself passes.
  OverlayHeader own = DataHeader();
  own.source = kC;
  OverlayPacket p;
  ASSERT_EQ(Parse(Seal(own, Bytes(200, 5), 1, kC), &p, kB, kC), OverlayStatus::kOk);
  EXPECT_EQ(p.header.source, kC);
  // A forged probe reply "from A" fails the same way: probes have no other path.
  OverlayHeader reply;
  reply.type = OverlayType::kProbeReply;
  reply.source = kA;
  reply.destination = kB;
  const auto body = EncodeProbeReply(ProbeReplyBody{1, Seconds(1), Seconds(1), Seconds(1)});
  const std::vector<uint8_t> r = Seal(reply, std::vector<uint8_t>(body.begin(), body.end()), 1, kC);
  EXPECT_EQ(Parse(r, nullptr, kB, kA), OverlayStatus::kBadHopTag);
  EXPECT_EQ(Parse(r, nullptr, kB, kC), OverlayStatus::kBadTag);
  // What A sent B, reflected back to A as if B had sent it: the hop tag names its receiver.
  EXPECT_EQ(Parse(Seal(DataHeader(), Bytes(20, 1)), nullptr, kA, kB), OverlayStatus::kBadHopTag);
}

// Both ends of every pair derive the same key, and every pair's differs.
TEST(PairKeyTest, SymmetricAndDistinct) {
  const OverlayKeyBytes secret = Key(3);
  EXPECT_EQ(DerivePairKey(secret, 11, 12), DerivePairKey(secret, 12, 11));
  EXPECT_NE(DerivePairKey(secret, 11, 12), DerivePairKey(secret, 11, 13));
  EXPECT_NE(DerivePairKey(secret, 11, 12), DerivePairKey(Key(4), 11, 12));
  const std::vector<OverlayPairKey> row = PairKeysFromSecret(secret, kWire, kC);
  ASSERT_EQ(row.size(), 3u);
  for (const OverlayPairKey& k : row) {
    EXPECT_NE(k.node, kC);
    EXPECT_EQ(k.key, DerivePairKey(secret, kWire[kC], kWire[k.node]));
  }
  OverlayKeyRing ring;
  std::vector<OverlayPairKey> twice = row;
  twice.push_back(row[0]);
  EXPECT_THAT(ring.Add(1, twice).message(), HasSubstr("appears twice"));
  EXPECT_THAT(ring.Add(1, {OverlayPairKey{OverlayKeyRing::kMaxNodes, secret}}).message(),
              HasSubstr("beyond"));
  EXPECT_EQ(ring.size(), 0);
}

// A datagram from A to D through B: B checks A's hop tag, not the end-to-end tag (it has no
// key for A and D), and writes its own hop tag for D; D checks both. What B changes on the
// way, D refuses.
TEST_F(OverlayTest, TransitChecksTheHopAndTheDestinationTheWhole) {
  OverlayHeader h = DataHeader();
  h.destination = kD;
  std::vector<uint8_t> d = Seal(h, Bytes(700, 8), 1, kA, /*next_hop=*/kB);
  OverlayPacket p;
  ASSERT_EQ(Parse(d, &p, kB, kA), OverlayStatus::kOk);
  EXPECT_EQ(p.header.destination, kD);
  // Not for D yet: the hop tag is A's for B.
  EXPECT_EQ(Parse(d, nullptr, kD, kB), OverlayStatus::kBadHopTag);
  ASSERT_EQ(ForwardOverlay(absl::MakeSpan(d)), OverlayStatus::kOk);
  SetOverlayHopTag(d.data(), d.size(), rings_[kB].current()->peer(kD)->hop, kD);
  ASSERT_EQ(Parse(d, &p, kD, kB), OverlayStatus::kOk);
  EXPECT_EQ(p.header.source, kA);
  EXPECT_EQ(p.header.hop_limit, 6);
  // B changes the payload and re-tags the hop: D's end-to-end check refuses it.
  d[kOverlayHeaderBytes + 3] ^= 1;
  SetOverlayHopTag(d.data(), d.size(), rings_[kB].current()->peer(kD)->hop, kD);
  EXPECT_EQ(Parse(d, nullptr, kD, kB), OverlayStatus::kBadTag);
}

TEST_F(OverlayTest, KeyRotation) {
  const std::vector<uint8_t> old_packet = Seal(DataHeader(), Bytes(20, 0), 1);
  ASSERT_TRUE(ring_.SetCurrent(2).ok());
  EXPECT_EQ(ring_.current()->id(), 2u);
  EXPECT_EQ(Parse(old_packet), OverlayStatus::kOk);  // both accepted during the rotation
  ASSERT_TRUE(ring_.Remove(1).ok());
  EXPECT_EQ(Parse(old_packet), OverlayStatus::kUnknownKeyId);
  EXPECT_EQ(ring_.size(), 1);

  absl::Status s = ring_.Remove(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ring_.Remove(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ring_.SetCurrent(7).code(), absl::StatusCode::kNotFound);

  // Replacing a key under the same id invalidates packets made with the old one.
  const std::vector<uint8_t> with_2 = Seal(DataHeader(), Bytes(20, 0), 2);
  ASSERT_TRUE(ring_.Add(2, Row(Key(77), kB)).ok());
  EXPECT_EQ(ring_.size(), 1);
  EXPECT_EQ(Parse(with_2), OverlayStatus::kBadHopTag);
}

// MakeTags is MakeTag, several at once: every count (vector lanes full and partial) and
// lengths around the 8-byte words, both below the length where lanes start (kMinLaneBytes,
// 256: one at a time) and above it (every remainder of 8 in the lanes' tail).
TEST_F(OverlayTest, MakeTagsIsMakeTagSideBySide) {
  const OverlayMacKey& key = ring_.Find(2)->peer(kA)->end_to_end;
  for (const size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{256}, size_t{257},
        size_t{258}, size_t{259}, size_t{260}, size_t{261}, size_t{262}, size_t{263}, size_t{264},
        size_t{265}, size_t{1383}, size_t{1400}}) {
    std::vector<std::vector<uint8_t>> messages;
    for (int i = 0; i < 19; ++i) messages.push_back(Bytes(n, static_cast<uint8_t>(i)));
    for (size_t count = 1; count <= messages.size(); ++count) {
      std::vector<const uint8_t*> data;
      for (size_t i = 0; i < count; ++i) data.push_back(messages[i].data());
      std::vector<std::array<uint8_t, 16>> tags(count);
      key.MakeTags(data.data(), n, count, reinterpret_cast<uint8_t(*)[16]>(tags.data()));
      for (size_t i = 0; i < count; ++i) {
        std::array<uint8_t, 16> one;
        key.MakeTag(messages[i].data(), n, one.data());
        ASSERT_EQ(tags[i], one) << "length " << n << ", message " << i << " of " << count;
      }
    }
  }
}

// ParseOverlayBatch gives each datagram what ParseOverlay gives it: a run of equal datagrams
// (a GRO slot) mixed with a shorter one, another key, bad tags, a bad length, garbage and one
// in transit.
TEST_F(OverlayTest, ParseOverlayBatchAgreesWithParseOverlay) {
  std::vector<std::vector<uint8_t>> d;
  for (int i = 0; i < 21; ++i)
    d.push_back(Seal(DataHeader(), Bytes(1372, static_cast<uint8_t>(i))));
  d.push_back(Seal(DataHeader(), Bytes(500, 3)));
  d.push_back(Seal(DataHeader(), Bytes(1372, 99), /*key_id=*/2));
  d[4][100] ^= 1;             // bad end-to-end tag, inside a run
  d[9].back() ^= 0x80;        // bad hop tag
  d[12].pop_back();           // bad length
  d[15][0] = 0;               // hop limit 0 (the hop tag made again, below)
  d.push_back(Bytes(40, 1));  // not an overlay datagram
  d.push_back(Seal(DataHeader(), Bytes(1372, 7)));
  SetOverlayHopTag(d[15].data(), d[15].size(), sender_.current()->peer(kB)->hop, kB);
  // And one in transit to D (its end-to-end tag is not B's to check).
  OverlayHeader to_d = DataHeader();
  to_d.destination = kD;
  d.push_back(Seal(to_d, Bytes(1372, 8), 1, kA, kB));
  d.back()[kOverlayHeaderBytes] ^= 1;
  std::vector<absl::Span<const uint8_t>> spans(d.begin(), d.end());
  std::vector<OverlayStatus> got(d.size());
  std::vector<OverlayPacket> packets(d.size());
  ParseOverlayBatch(spans, ring_, kB, kA, got.data(), packets.data());
  int ok = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    OverlayPacket want;
    ASSERT_EQ(got[i], Parse(d[i], &want)) << "datagram " << i;
    if (got[i] != OverlayStatus::kOk) continue;
    ++ok;
    EXPECT_EQ(packets[i].key_id, want.key_id);
    EXPECT_EQ(packets[i].header.flow_hash, want.header.flow_hash);
    EXPECT_EQ(packets[i].payload.data(), want.payload.data());
    EXPECT_EQ(packets[i].payload.size(), want.payload.size());
  }
  EXPECT_EQ(ok, 21);
  EXPECT_EQ(got[4], OverlayStatus::kBadTag);
  EXPECT_EQ(got[9], OverlayStatus::kBadHopTag);
  EXPECT_EQ(got[15], OverlayStatus::kHopLimitExhausted);
  EXPECT_EQ(got.back(), OverlayStatus::kOk);
}

TEST(OverlayKeyRingTest, HoldsAtMostFourKeys) {
  OverlayKeyRing ring;
  EXPECT_EQ(ring.current(), nullptr);
  for (uint32_t id = 0; id < OverlayKeyRing::kMaxKeys; ++id) {
    ASSERT_TRUE(ring.Add(id, Row(GenerateOverlayKey(), kA)).ok());
  }
  EXPECT_EQ(ring.current()->id(), 0u);  // the first added
  absl::Status s = ring.Add(100, Row(GenerateOverlayKey(), kA));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("key id 100"));
  // Removing one key keeps the others (and the current one) findable.
  ASSERT_TRUE(ring.SetCurrent(3).ok());
  ASSERT_TRUE(ring.Remove(1).ok());
  EXPECT_EQ(ring.current()->id(), 3u);
  EXPECT_NE(ring.Find(0), nullptr);
  EXPECT_EQ(ring.Find(1), nullptr);
  EXPECT_NE(ring.Find(2), nullptr);
  EXPECT_TRUE(ring.Add(100, Row(GenerateOverlayKey(), kA)).ok());
}

TEST(OverlayKeyTest, GeneratedKeysDiffer) { EXPECT_NE(GenerateOverlayKey(), GenerateOverlayKey()); }

TEST_F(OverlayTest, ForwardDecrementsHopLimitAndKeepsTheEndToEndTag) {
  std::vector<uint8_t> d = Seal(DataHeader(), Bytes(500, 4), 1);
  const std::vector<uint8_t> sealed = d;
  ASSERT_EQ(ForwardOverlay(absl::MakeSpan(d)), OverlayStatus::kOk);
  EXPECT_EQ(Parse(d), OverlayStatus::kBadHopTag);  // until the sender tags the hop
  SetOverlayHopTag(d.data(), d.size(), sender_.current()->peer(kB)->hop, kB);
  OverlayPacket p;
  ASSERT_EQ(Parse(d, &p), OverlayStatus::kOk);
  EXPECT_EQ(p.header.hop_limit, 6);
  EXPECT_EQ(p.key_id, 1u);  // the ingress's key, not the forwarder's
  EXPECT_EQ(p.header.flow_hash, 0xdeadbeefu);
  // Only the hop limit and the hop tag changed.
  d[0] = sealed[0];
  EXPECT_TRUE(std::equal(d.begin(), d.end() - kOverlayTagBytes, sealed.begin()));
  // Six forwards take a hop limit of 7 to 1; a seventh would send it with 0.
  for (int hop = 7; hop > 1; --hop) {
    ASSERT_EQ(ForwardOverlay(absl::MakeSpan(d)), OverlayStatus::kOk);
  }
  EXPECT_EQ(ForwardOverlay(absl::MakeSpan(d)), OverlayStatus::kHopLimitExhausted);

  OverlayHeader h = DataHeader();
  h.hop_limit = 1;
  d = Seal(h, Bytes(50, 4));
  const std::vector<uint8_t> before = d;
  EXPECT_EQ(ForwardOverlay(absl::MakeSpan(d)), OverlayStatus::kHopLimitExhausted);
  EXPECT_EQ(d, before);
}

TEST(ProbeCodecTest, RoundTrips) {
  const ProbeBody probe{0x0123456789abcdefULL, Nanoseconds(-5)};
  absl::StatusOr<ProbeBody> p = DecodeProbe(EncodeProbe(probe));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sequence, probe.sequence);
  EXPECT_EQ(p->t1, probe.t1);

  const ProbeReplyBody reply{~0ULL, Seconds(1), Time{INT64_MIN}, Time{INT64_MAX}};
  absl::StatusOr<ProbeReplyBody> r = DecodeProbeReply(EncodeProbeReply(reply));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sequence, reply.sequence);
  EXPECT_EQ(r->t1, reply.t1);
  EXPECT_EQ(r->t2, reply.t2);
  EXPECT_EQ(r->t3, reply.t3);

  const std::vector<uint8_t> short_body(15);
  EXPECT_THAT(DecodeProbe(short_body).status().message(), HasSubstr("15 bytes, expected 16"));
  EXPECT_THAT(DecodeProbeReply(short_body).status().message(), HasSubstr("15 bytes, expected 32"));
}

// A whole probe exchange through sealed datagrams, ending in the telemetry estimator.
TEST_F(OverlayTest, ProbeExchangeGivesTwoWayDelay) {
  OverlayHeader h;
  h.type = OverlayType::kProbe;
  h.source = kA;
  h.destination = kB;
  const Time t1 = Milliseconds(100);
  const auto body = EncodeProbe(ProbeBody{42, t1});
  const std::vector<uint8_t> probe = Seal(h, std::vector<uint8_t>(body.begin(), body.end()));

  // The peer (clock 1 s ahead) receives it 5 ms later and replies 1 ms after that.
  OverlayPacket in;
  ASSERT_EQ(Parse(probe, &in), OverlayStatus::kOk);
  ASSERT_EQ(in.header.type, OverlayType::kProbe);
  absl::StatusOr<ProbeBody> got = DecodeProbe(in.payload);
  ASSERT_TRUE(got.ok());
  OverlayHeader rh;
  rh.type = OverlayType::kProbeReply;
  rh.source = kB;
  rh.destination = kA;
  const auto reply_body = EncodeProbeReply(
      ProbeReplyBody{got->sequence, got->t1, t1 + Milliseconds(1005), t1 + Milliseconds(1006)});
  const std::vector<uint8_t> reply =
      Seal(rh, std::vector<uint8_t>(reply_body.begin(), reply_body.end()), 2, kB);

  ASSERT_EQ(Parse(reply, &in, kA, kB), OverlayStatus::kOk);
  absl::StatusOr<ProbeReplyBody> r = DecodeProbeReply(in.payload);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sequence, 42u);
  absl::StatusOr<TwoWayDelay> delay =
      ComputeTwoWayDelay(r->t1, r->t2, r->t3, t1 + Milliseconds(11));
  ASSERT_TRUE(delay.ok()) << delay.status();
  EXPECT_EQ(delay->rtt, Milliseconds(10));
  EXPECT_EQ(delay->offset, Seconds(1));
}

// Fuzz-style: seeded random and mutated datagrams are all rejected, without a crash (this
// binary also runs under ASan + UBSan). Every buffer is heap-allocated at its exact size so
// that an overread is caught.
TEST_F(OverlayTest, RandomAndMutatedDatagramsAreRejected) {
  Random rng(20240601);
  std::array<int, static_cast<int>(OverlayStatus::kCount)> seen{};
  auto check = [&](const std::vector<uint8_t>& d) {
    OverlayPacket p;
    const OverlayStatus s = ParseOverlay(absl::MakeConstSpan(d), ring_, kB, kA, &p);
    ++seen[static_cast<int>(s)];
    return s;
  };
  // Pure noise of every short length and some long ones.
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> d(i < 2000 ? i % 100 : rng.Below(2000));
    for (uint8_t& b : d) b = static_cast<uint8_t>(rng.Next());
    ASSERT_NE(check(d), OverlayStatus::kOk) << i;
  }
  // Noise with a plausible header (version, type, class, length, known key id), so that the
  // tag check is reached.
  for (int i = 0; i < 4000; ++i) {
    const size_t len = rng.Below(3) == 0 ? (rng.Below(2) ? 16 : 32) : rng.Below(1500);
    std::vector<uint8_t> d(OverlayDatagramSize(len));
    for (uint8_t& b : d) b = static_cast<uint8_t>(rng.Next());
    d[1] = kOverlayVersion;
    d[2] = static_cast<uint8_t>(1 + rng.Below(3));
    d[3] = static_cast<uint8_t>(rng.Below(2));
    d[4] = d[5] = d[6] = 0;
    d[7] = static_cast<uint8_t>(1 + rng.Below(2));
    d[20] = static_cast<uint8_t>(len >> 8);
    d[21] = static_cast<uint8_t>(len);
    ASSERT_NE(check(d), OverlayStatus::kOk) << i;
  }
  // Valid datagrams with 1 to 3 bits flipped, truncated or extended.
  for (int i = 0; i < 4000; ++i) {
    OverlayHeader h = DataHeader();
    h.type = static_cast<OverlayType>(1 + rng.Below(3));
    const size_t len = h.type == OverlayType::kProbe        ? kProbeBodyBytes
                       : h.type == OverlayType::kProbeReply ? kProbeReplyBodyBytes
                                                            : rng.Below(1500);
    std::vector<uint8_t> d = Seal(h, Bytes(len, static_cast<uint8_t>(i)), 1 + rng.Below(2));
    ASSERT_EQ(check(d), OverlayStatus::kOk);
    switch (rng.Below(3)) {
      case 0: {
        const int flips = 1 + static_cast<int>(rng.Below(3));
        std::set<uint64_t> bits;
        // Half of the time in the header, where the early checks are.
        const uint64_t range = rng.Below(2) ? kOverlayHeaderBytes * 8 : d.size() * 8;
        while (static_cast<int>(bits.size()) < flips) bits.insert(rng.Below(range));
        for (uint64_t bit : bits) d[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        break;
      }
      case 1:
        d.resize(rng.Below(d.size()));
        d.shrink_to_fit();
        break;
      default:
        d.resize(d.size() + 1 + rng.Below(16), static_cast<uint8_t>(rng.Next()));
        break;
    }
    ASSERT_NE(check(d), OverlayStatus::kOk) << i;
  }
  // The corpus reached every check.
  for (int s = 1; s < static_cast<int>(OverlayStatus::kCount); ++s) {
    // Neither is ParseOverlay's to find in a corrupted datagram.
    if (static_cast<OverlayStatus>(s) == OverlayStatus::kHopLimitExhausted ||
        static_cast<OverlayStatus>(s) == OverlayStatus::kReplayed) {
      continue;
    }
    EXPECT_GT(seen[s], 0) << OverlayStatusName(static_cast<OverlayStatus>(s));
  }
  EXPECT_GT(seen[static_cast<int>(OverlayStatus::kBadHopTag)], 2000);
}

// Replay protection ---------------------------------------------------------------------------

TEST(ReplayWindowTest, AcceptsEachNumberOnceWithinTheWindow) {
  ReplayWindow w;
  EXPECT_TRUE(w.Accept(1000));
  EXPECT_FALSE(w.Accept(1000));  // the same again
  EXPECT_TRUE(w.Accept(1002));
  EXPECT_TRUE(w.Accept(1001));  // late, within the window, new
  EXPECT_FALSE(w.Accept(1001));
  EXPECT_TRUE(w.Accept(999));  // below the first, within the window: not seen yet
  // Reordering by up to the window is accepted, each number once.
  const uint64_t top = 1002 + ReplayWindow::kWindow - 1;
  EXPECT_TRUE(w.Accept(top));
  EXPECT_FALSE(w.Accept(1002));                         // seen
  EXPECT_TRUE(w.Accept(1003));                          // not seen, still inside
  EXPECT_FALSE(w.Accept(top - ReplayWindow::kWindow));  // too old to tell: refused
  // A jump past the whole window forgets it; everything below the window is refused.
  EXPECT_TRUE(w.Accept(top + 10 * ReplayWindow::kWindow));
  EXPECT_FALSE(w.Accept(top));
  EXPECT_TRUE(w.Accept(top + 10 * ReplayWindow::kWindow - 5));
  // Numbers between the old and the new top that were never seen are accepted once.
  EXPECT_TRUE(w.Accept(top + 10 * ReplayWindow::kWindow + 3));
  EXPECT_TRUE(w.Accept(top + 10 * ReplayWindow::kWindow + 1));
  EXPECT_FALSE(w.Accept(top + 10 * ReplayWindow::kWindow + 1));
}

TEST(ReplayWindowTest, MatchesASetOfSeenNumbersUnderRandomReordering) {
  // Against the obvious model: a number is new if never accepted and not older than the window.
  Random rng(5);
  ReplayWindow w;
  std::set<uint64_t> seen;
  uint64_t top = 0;
  bool any = false;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t base = 1'000'000 + static_cast<uint64_t>(i) / 2;
    const uint64_t seq = base - std::min<uint64_t>(base, rng.Below(3 * ReplayWindow::kWindow));
    const bool expect =
        !seen.contains(seq) && (!any || seq > top || top - seq < ReplayWindow::kWindow);
    ASSERT_EQ(w.Accept(seq), expect) << i << " seq " << seq << " top " << top;
    if (expect) {
      seen.insert(seq);
      if (!any || seq > top) top = seq;
      any = true;
    }
  }
}

TEST(OverlayReplayGuardTest, OneWindowPerSourceAndKey) {
  OverlayReplayGuard g(3);
  EXPECT_TRUE(g.Accept(0, 1, 50));
  EXPECT_TRUE(g.Accept(1, 1, 50));  // another source
  EXPECT_TRUE(g.Accept(0, 2, 50));  // another key
  EXPECT_FALSE(g.Accept(0, 1, 50));
  EXPECT_FALSE(g.Accept(0, 2, 50));
  EXPECT_FALSE(g.Accept(3, 1, 1));  // no such source
  // Replays under the ring's keys in turn cannot push a window out while its key is held.
  for (uint32_t k = 3; k <= OverlayKeyRing::kMaxKeys; ++k) EXPECT_TRUE(g.Accept(0, k, 7));
  EXPECT_FALSE(g.Accept(0, 1, 50));
  EXPECT_FALSE(g.Accept(0, 2, 50));
  // A key beyond the ring's takes the slot of the key seen least recently (key 3 now: keys 1
  // and 2 were just used), whose window starts over.
  EXPECT_TRUE(g.Accept(0, 99, 1));
  EXPECT_FALSE(g.Accept(0, 1, 50));
  EXPECT_FALSE(g.Accept(0, 2, 50));
  EXPECT_FALSE(g.Accept(0, OverlayKeyRing::kMaxKeys, 7));
  EXPECT_TRUE(g.Accept(0, 3, 7));  // forgotten with its slot
}

TEST(OverlaySequencerTest, CountsPerDestinationFromTheStartTime) {
  OverlaySequencer s(2, /*start_unix_ns=*/1'700'000'000'123'456'789);
  const uint64_t base = uint64_t{1'700'000'000'123} << 20;
  EXPECT_EQ(s.Next(0), base);
  EXPECT_EQ(s.Next(0), base + 1);
  EXPECT_EQ(s.Next(1), base);
  EXPECT_EQ(s.Highest(), base + 1);
  // A restart a millisecond later begins above everything a million packets could reach.
  OverlaySequencer later(2, 1'700'000'000'124'456'789);
  EXPECT_EQ(later.Highest(), base + (uint64_t{1} << 20));  // nothing handed out: the start
  EXPECT_GT(later.Next(0), base + 1'000'000);
}

// FlowHash ----------------------------------------------------------------------------------

// An IPv4 packet: 20-byte header (plus `options` 4-byte words), then the L4 header's ports.
std::vector<uint8_t> Ipv4(uint8_t proto, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                          int options = 0, uint16_t frag = 0x4000, size_t payload = 32) {
  const size_t ihl = 20 + 4 * options;
  std::vector<uint8_t> p(ihl + 8 + payload, 0);
  p[0] = static_cast<uint8_t>(0x40 | (ihl / 4));
  p[2] = static_cast<uint8_t>(p.size() >> 8);
  p[3] = static_cast<uint8_t>(p.size());
  p[6] = static_cast<uint8_t>(frag >> 8);
  p[7] = static_cast<uint8_t>(frag);
  p[8] = 64;
  p[9] = proto;
  for (int i = 0; i < 4; ++i) {
    p[12 + i] = static_cast<uint8_t>(src >> (24 - 8 * i));
    p[16 + i] = static_cast<uint8_t>(dst >> (24 - 8 * i));
  }
  for (int i = 0; i < 4 * options; ++i) p[20 + i] = 1;  // NOP options
  p[ihl] = static_cast<uint8_t>(sport >> 8);
  p[ihl + 1] = static_cast<uint8_t>(sport);
  p[ihl + 2] = static_cast<uint8_t>(dport >> 8);
  p[ihl + 3] = static_cast<uint8_t>(dport);
  for (size_t i = ihl + 8; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i);
  return p;
}

constexpr uint8_t kTcp = 6, kUdp = 17, kIcmp = 1;
constexpr uint32_t kAddrA = 0x0a000001, kAddrB = 0x0a000002;

TEST(FlowHashTest, FiveTupleDecides) {
  for (uint8_t proto : {kTcp, kUdp}) {
    const uint32_t h = FlowHash(Ipv4(proto, kAddrA, kAddrB, 1000, 80));
    EXPECT_EQ(h, FlowHash(Ipv4(proto, kAddrA, kAddrB, 1000, 80)));
    EXPECT_NE(h, FlowHash(Ipv4(proto, kAddrB, kAddrA, 1000, 80)));
    EXPECT_NE(h, FlowHash(Ipv4(proto, kAddrA, kAddrA, 1000, 80)));
    EXPECT_NE(h, FlowHash(Ipv4(proto, kAddrA, kAddrB, 1001, 80)));
    EXPECT_NE(h, FlowHash(Ipv4(proto, kAddrA, kAddrB, 1000, 81)));
    EXPECT_NE(h, FlowHash(Ipv4(proto, kAddrA, kAddrB, 80, 1000)));
  }
  EXPECT_NE(FlowHash(Ipv4(kTcp, kAddrA, kAddrB, 1000, 80)),
            FlowHash(Ipv4(kUdp, kAddrA, kAddrB, 1000, 80)));
}

TEST(FlowHashTest, OtherFieldsDoNotMatter) {
  std::vector<uint8_t> p = Ipv4(kUdp, kAddrA, kAddrB, 5000, 53);
  const uint32_t h = FlowHash(p);
  p[1] = 0xb8;  // DSCP
  p[5] = 77;    // identification
  p[8] = 3;     // TTL
  p[10] = 0xff;
  p[40] = 0x55;  // payload
  EXPECT_EQ(FlowHash(p), h);
  EXPECT_EQ(FlowHash(Ipv4(kUdp, kAddrA, kAddrB, 5000, 53, 0, 0x4000, 1000)), h);  // length
}

TEST(FlowHashTest, OptionsMoveThePorts) {
  EXPECT_EQ(FlowHash(Ipv4(kTcp, kAddrA, kAddrB, 1, 2, /*options=*/2)),
            FlowHash(Ipv4(kTcp, kAddrA, kAddrB, 1, 2)));
  EXPECT_NE(FlowHash(Ipv4(kTcp, kAddrA, kAddrB, 1, 2, 2)),
            FlowHash(Ipv4(kTcp, kAddrA, kAddrB, 1, 3, 2)));
}

TEST(FlowHashTest, FragmentsAndPortlessProtocolsUseAddresses) {
  // All fragments of a datagram hash alike: the later ones carry no ports.
  const uint32_t first = FlowHash(Ipv4(kUdp, kAddrA, kAddrB, 1000, 2000, 0, /*frag=*/0x2000));
  EXPECT_EQ(first, FlowHash(Ipv4(kUdp, kAddrA, kAddrB, 7, 9, 0, /*frag=*/0x00b9)));
  EXPECT_NE(first, FlowHash(Ipv4(kUdp, kAddrB, kAddrA, 7, 9, 0, 0x00b9)));
  // ICMP: whatever follows the header does not matter.
  EXPECT_EQ(FlowHash(Ipv4(kIcmp, kAddrA, kAddrB, 1, 2)),
            FlowHash(Ipv4(kIcmp, kAddrA, kAddrB, 3, 4)));
  EXPECT_NE(FlowHash(Ipv4(kIcmp, kAddrA, kAddrB, 1, 2)),
            FlowHash(Ipv4(kIcmp, kAddrA, kAddrB + 1, 1, 2)));
}

TEST(FlowHashTest, Ipv6) {
  std::vector<uint8_t> p(40 + 8 + 10, 0);
  p[0] = 0x60;
  p[6] = kUdp;
  p[23] = 1;  // ::1 -> ::2
  p[39] = 2;
  p[41] = 10;  // ports 10 -> 20
  p[43] = 20;
  const uint32_t h = FlowHash(p);
  std::vector<uint8_t> q = p;
  q[43] = 21;
  EXPECT_NE(FlowHash(q), h);
  q = p;
  q[50] = 9;  // payload
  q[7] = 1;   // hop limit
  EXPECT_EQ(FlowHash(q), h);
}

TEST(FlowHashTest, TruncatedAndGarbagePacketsAreSafe) {
  const std::vector<uint8_t> full = Ipv4(kTcp, kAddrA, kAddrB, 1000, 80, 1);
  for (size_t n = 0; n <= full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + n);  // exact-size heap copy
    EXPECT_EQ(FlowHash(cut), FlowHash(cut));
  }
  // Without its ports a TCP packet still hashes by addresses (and stays apart from others).
  const std::vector<uint8_t> headers_only(full.begin(), full.begin() + 24);
  EXPECT_NE(FlowHash(headers_only), FlowHash(Ipv4(kTcp, kAddrB, kAddrA, 1000, 80)));
  // A bad header length (below 5 words or past the end) is not trusted for the ports.
  std::vector<uint8_t> bad = Ipv4(kTcp, kAddrA, kAddrB, 1, 2);
  bad[0] = 0x43;
  FlowHash(bad);
  bad[0] = 0x4f;
  bad.resize(40);
  FlowHash(bad);
  Random rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> d(rng.Below(80));
    for (uint8_t& b : d) b = static_cast<uint8_t>(rng.Next());
    if (!d.empty()) d[0] = static_cast<uint8_t>((rng.Below(3) == 0 ? 0x60 : 0x40) | (d[0] & 15));
    EXPECT_EQ(FlowHash(d), FlowHash(d));
  }
}

TEST(FlowHashTest, SpreadsFlows) {
  // 4096 flows over 16 buckets: each bucket gets its share within a wide margin.
  std::array<int, 16> buckets{};
  for (int port = 0; port < 4096; ++port) {
    ++buckets[FlowHash(Ipv4(kTcp, kAddrA, kAddrB, static_cast<uint16_t>(30000 + port), 443)) % 16];
  }
  for (int b : buckets) {
    EXPECT_GT(b, 256 - 80);
    EXPECT_LT(b, 256 + 80);
  }
}

}  // namespace
}  // namespace dar::net
