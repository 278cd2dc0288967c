#include "net/overlay_header.h"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "base/status_macros.h"
#include "core/random.h"
#include "fmt/format.h"
#include "net/byte_order.h"

namespace dar::net {
namespace {

// Byte offsets in the header.
constexpr size_t kHopLimitAt = 0;
constexpr size_t kVersionAt = 1;
constexpr size_t kTypeAt = kOverlayTypeOffset;
constexpr size_t kClassAt = 3;
// The end-to-end tag covers the datagram from here (after the hop limit) to the tag.
constexpr size_t kCoveredFrom = 1;
constexpr size_t kKeyIdAt = 4;
constexpr size_t kSourceAt = 8;
constexpr size_t kDestinationAt = 12;
constexpr size_t kFlowHashAt = 16;
constexpr size_t kLengthAt = 20;
constexpr size_t kReservedAt = 22;
constexpr size_t kSequenceAt = 24;

// crypto_kdf context: which subkeys of a pair key the tags use (8 bytes, no NUL needed).
constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES] = {'D', 'A', 'R', 'o', 'v', 'l', 'a', 'y'};
constexpr uint64_t kKdfSubkeyEndToEnd = 1;
constexpr uint64_t kKdfSubkeyHop = 2;
// What DerivePairKey hashes before the two ids.
constexpr char kPairLabel[8] = {'D', 'A', 'R', ' ', 'p', 'a', 'i', 'r'};

// Where a datagram of `size` bytes has its tags.
constexpr size_t EndToEndTagAt(size_t size) { return size - 2 * kOverlayTagBytes; }
constexpr size_t HopTagAt(size_t size) { return size - kOverlayTagBytes; }
// What the hop tag covers: the header, the end-to-end tag and the receiver's id.
constexpr size_t kHopCoveredBytes = kOverlayHeaderBytes + kOverlayTagBytes + 4;

void MakeHopTag(const uint8_t* datagram, size_t size, const OverlayMacKey& hop, uint32_t receiver,
                uint8_t* tag) {
  uint8_t covered[kHopCoveredBytes];
  std::memcpy(covered, datagram, kOverlayHeaderBytes);
  std::memcpy(covered + kOverlayHeaderBytes, datagram + EndToEndTagAt(size), kOverlayTagBytes);
  Store32(covered + kOverlayHeaderBytes + kOverlayTagBytes, receiver);
  hop.MakeTag(covered, sizeof covered, tag);
}

static_assert(crypto_shorthash_siphashx24_BYTES == kOverlayTagBytes);
static_assert(crypto_shorthash_siphashx24_KEYBYTES == 16);
static_assert(crypto_kdf_KEYBYTES == kOverlayKeyBytes);
static_assert(crypto_generichash_KEYBYTES_MAX >= kOverlayKeyBytes);

bool KnownType(uint8_t t) {
  return t == static_cast<uint8_t>(OverlayType::kData) ||
         t == static_cast<uint8_t>(OverlayType::kProbe) ||
         t == static_cast<uint8_t>(OverlayType::kProbeReply);
}

// The payload size a type requires, or 0 for any.
size_t RequiredPayload(uint8_t type) {
  if (type == static_cast<uint8_t>(OverlayType::kProbe)) return kProbeBodyBytes;
  if (type == static_cast<uint8_t>(OverlayType::kProbeReply)) return kProbeReplyBodyBytes;
  return 0;
}

absl::Status InitSodium() {
  if (sodium_init() < 0) return absl::InternalError("libsodium: sodium_init failed");
  return absl::OkStatus();
}

}  // namespace

std::string_view OverlayStatusName(OverlayStatus s) {
  switch (s) {
    case OverlayStatus::kOk:
      return "ok";
    case OverlayStatus::kTooShort:
      return "too_short";
    case OverlayStatus::kBadVersion:
      return "bad_version";
    case OverlayStatus::kUnknownType:
      return "unknown_type";
    case OverlayStatus::kBadTrafficClass:
      return "bad_traffic_class";
    case OverlayStatus::kBadLength:
      return "bad_length";
    case OverlayStatus::kUnknownKeyId:
      return "unknown_key_id";
    case OverlayStatus::kBadHopTag:
      return "bad_hop_tag";
    case OverlayStatus::kBadTag:
      return "bad_tag";
    case OverlayStatus::kHopLimitExhausted:
      return "hop_limit_exhausted";
    case OverlayStatus::kReplayed:
      return "replayed";
    case OverlayStatus::kCount:
      break;
  }
  return "?";
}

// OverlayMacKey, OverlayKeyRing, pair keys -------------------------------------------------

void OverlayMacKey::MakeTag(const uint8_t* data, size_t n, uint8_t* tag) const {
  crypto_shorthash_siphashx24(tag, data, n, key_.data());
}

// SipHash-2-4 with a 128-bit tag in L vector lanes: L messages of n bytes, one per lane. The
// same algorithm as libsodium's crypto_shorthash_siphashx24 (little-endian words, the length in
// the top byte of the last word, 0xee and 0xdd for the 128-bit output), lane by lane.
namespace {

#define DAR_SIPHASH_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define DAR_SIPHASH_ROUND          \
  do {                             \
    v0 += v1;                      \
    v1 = DAR_SIPHASH_ROTL(v1, 13); \
    v1 ^= v0;                      \
    v0 = DAR_SIPHASH_ROTL(v0, 32); \
    v2 += v3;                      \
    v3 = DAR_SIPHASH_ROTL(v3, 16); \
    v3 ^= v2;                      \
    v0 += v3;                      \
    v3 = DAR_SIPHASH_ROTL(v3, 21); \
    v3 ^= v0;                      \
    v2 += v1;                      \
    v1 = DAR_SIPHASH_ROTL(v1, 17); \
    v1 ^= v2;                      \
    v2 = DAR_SIPHASH_ROTL(v2, 32); \
  } while (0)

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;  // x86-64 and every target this builds for are little-endian
}

// L 64-bit lanes (a GCC vector type; the typedef must not depend on L inside the function).
template <int L>
struct LaneVector {
  typedef uint64_t Type __attribute__((vector_size(8 * L)));
};

template <int L>
__attribute__((always_inline)) inline void SipHashLanes(const uint8_t* const* in, size_t n,
                                                        const uint8_t* key, uint8_t (*out)[16]) {
  using Lanes = typename LaneVector<L>::Type;
  const uint64_t k0 = LoadLe64(key), k1 = LoadLe64(key + 8);
  Lanes v0 = {}, v1 = {}, v2 = {}, v3 = {}, m = {};
  for (int l = 0; l < L; ++l) {
    v0[l] = 0x736f6d6570736575ULL ^ k0;
    v1[l] = 0x646f72616e646f6dULL ^ k1 ^ 0xee;
    v2[l] = 0x6c7967656e657261ULL ^ k0;
    v3[l] = 0x7465646279746573ULL ^ k1;
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < L; ++l) m[l] = LoadLe64(in[l] + i);
    v3 ^= m;
    DAR_SIPHASH_ROUND;
    DAR_SIPHASH_ROUND;
    v0 ^= m;
  }
  for (int l = 0; l < L; ++l) {
    uint64_t last = static_cast<uint64_t>(n) << 56;
    for (size_t j = 0; j < (n & 7); ++j) last |= static_cast<uint64_t>(in[l][i + j]) << (8 * j);
    m[l] = last;
  }
  v3 ^= m;
  DAR_SIPHASH_ROUND;
  DAR_SIPHASH_ROUND;
  v0 ^= m;
  v2 ^= 0xee;
  for (int r = 0; r < 4; ++r) DAR_SIPHASH_ROUND;
  Lanes t = v0 ^ v1 ^ v2 ^ v3;
  for (int l = 0; l < L; ++l) {
    const uint64_t lane = t[l];  // (clang takes no address of a vector's lane)
    std::memcpy(out[l], &lane, 8);
  }
  v1 ^= 0xdd;
  for (int r = 0; r < 4; ++r) DAR_SIPHASH_ROUND;
  t = v0 ^ v1 ^ v2 ^ v3;
  for (int l = 0; l < L; ++l) {
    const uint64_t lane = t[l];
    std::memcpy(out[l] + 8, &lane, 8);
  }
}

#undef DAR_SIPHASH_ROUND
#undef DAR_SIPHASH_ROTL

__attribute__((target("avx512f,avx512vl"))) void SipHash8(const uint8_t* const* in, size_t n,
                                                          const uint8_t* key, uint8_t (*out)[16]) {
  SipHashLanes<8>(in, n, key, out);
}
__attribute__((target("avx2"))) void SipHash4(const uint8_t* const* in, size_t n,
                                              const uint8_t* key, uint8_t (*out)[16]) {
  SipHashLanes<4>(in, n, key, out);
}

// Lanes the CPU offers: 8, 4, or 1 (libsodium, one message at a time).
int SipHashLaneCount() {
  static const int lanes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
                               ? 8
                           : __builtin_cpu_supports("avx2") ? 4
                                                            : 1;
  return lanes;
}

}  // namespace

void OverlayMacKey::MakeTags(const uint8_t* const* data, size_t n, size_t count,
                             uint8_t (*tags)[16]) const {
  // Lanes pay for gathering each word from L messages and for the vector unit's start-up
  // (on some CPUs a lower clock for a while): worth it for MTU-size datagrams, not for short
  // ones (forwarding 100-byte datagrams took more CPU with lanes in forwarder_bench).
  constexpr size_t kMinLaneBytes = 256;
  const int lanes = n >= kMinLaneBytes ? SipHashLaneCount() : 1;
  size_t i = 0;
  if (lanes == 8) {
    for (; i + 8 <= count; i += 8) SipHash8(data + i, n, key_.data(), tags + i);
  }
  if (lanes >= 4) {
    for (; i + 4 <= count; i += 4) SipHash4(data + i, n, key_.data(), tags + i);
  }
  for (; i < count; ++i) MakeTag(data[i], n, tags[i]);
}

OverlayKeyRing::~OverlayKeyRing() {
  for (OverlayKey& k : keys_) Wipe(k);
}

void OverlayKeyRing::Wipe(OverlayKey& key) {
  if (!key.peers_.empty()) {
    sodium_memzero(key.peers_.data(), key.peers_.size() * sizeof(OverlayPeerKeys));
  }
  key.peers_.clear();
  key.present_.clear();
  key.id_ = 0;
}

absl::Status OverlayKeyRing::Add(uint32_t id, absl::Span<const OverlayPairKey> pair_keys) {
  if (absl::Status s = InitSodium(); !s.ok()) return s;
  uint32_t nodes = 0;
  for (const OverlayPairKey& k : pair_keys) {
    if (k.node >= kMaxNodes) {
      return absl::InvalidArgumentError(fmt::format(
          "overlay key ring: key id {}: node index {} is beyond {}", id, k.node, kMaxNodes - 1));
    }
    nodes = std::max(nodes, k.node + 1);
  }
  OverlayKey made;
  made.id_ = id;
  made.peers_.resize(nodes);
  made.present_.assign(nodes, 0);
  for (const OverlayPairKey& k : pair_keys) {
    if (made.present_[k.node]) {
      Wipe(made);
      return absl::InvalidArgumentError(
          fmt::format("overlay key ring: key id {}: node index {} appears twice", id, k.node));
    }
    made.present_[k.node] = 1;
    OverlayPeerKeys& peer = made.peers_[k.node];
    if (crypto_kdf_derive_from_key(peer.end_to_end.key_.data(), peer.end_to_end.key_.size(),
                                   kKdfSubkeyEndToEnd, kKdfContext, k.key.data()) != 0 ||
        crypto_kdf_derive_from_key(peer.hop.key_.data(), peer.hop.key_.size(), kKdfSubkeyHop,
                                   kKdfContext, k.key.data()) != 0) {
      Wipe(made);
      return absl::InternalError(
          fmt::format("overlay key ring: key derivation failed for id {}", id));
    }
  }
  int slot = -1;
  for (int i = 0; i < count_; ++i) {
    if (keys_[i].id_ == id) slot = i;
  }
  if (slot < 0) {
    if (count_ == kMaxKeys) {
      Wipe(made);
      return absl::ResourceExhaustedError(fmt::format(
          "overlay key ring: cannot add key id {}, already holding {} keys", id, kMaxKeys));
    }
    slot = count_++;
  }
  Wipe(keys_[slot]);
  keys_[slot] = std::move(made);
  if (current_ < 0) current_ = slot;
  return absl::OkStatus();
}

absl::Status OverlayKeyRing::Remove(uint32_t id) {
  for (int i = 0; i < count_; ++i) {
    if (keys_[i].id_ != id) continue;
    if (i == current_) {
      return absl::FailedPreconditionError(fmt::format(
          "overlay key ring: key id {} is the current key; make another current first", id));
    }
    const int last = count_ - 1;
    Wipe(keys_[i]);
    if (i != last) {
      keys_[i] = std::move(keys_[last]);
      if (current_ == last) current_ = i;
    }
    Wipe(keys_[last]);
    --count_;
    return absl::OkStatus();
  }
  return absl::NotFoundError(fmt::format("overlay key ring: no key with id {}", id));
}

absl::Status OverlayKeyRing::SetCurrent(uint32_t id) {
  for (int i = 0; i < count_; ++i) {
    if (keys_[i].id_ == id) {
      current_ = i;
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(fmt::format("overlay key ring: no key with id {}", id));
}

const OverlayKey* OverlayKeyRing::Find(uint32_t id) const {
  for (int i = 0; i < count_; ++i) {
    if (keys_[i].id_ == id) return &keys_[i];
  }
  return nullptr;
}

OverlayKeyBytes DerivePairKey(const OverlayKeyBytes& secret, uint32_t wire_a, uint32_t wire_b) {
  uint8_t message[sizeof kPairLabel + 8];
  std::memcpy(message, kPairLabel, sizeof kPairLabel);
  Store32(message + sizeof kPairLabel, std::min(wire_a, wire_b));
  Store32(message + sizeof kPairLabel + 4, std::max(wire_a, wire_b));
  OverlayKeyBytes key;
  (void)InitSodium();
  crypto_generichash(key.data(), key.size(), message, sizeof message, secret.data(), secret.size());
  return key;
}

std::vector<OverlayPairKey> PairKeysFromSecret(const OverlayKeyBytes& secret,
                                               absl::Span<const uint32_t> wire_ids, uint32_t self) {
  std::vector<OverlayPairKey> out;
  out.reserve(wire_ids.size());
  for (uint32_t j = 0; j < wire_ids.size(); ++j) {
    if (j == self) continue;
    out.push_back(OverlayPairKey{j, DerivePairKey(secret, wire_ids[self], wire_ids[j])});
  }
  return out;
}

OverlayKeyBytes GenerateOverlayKey() {
  OverlayKeyBytes key;
  (void)InitSodium();  // randombytes_buf works without it; initialising picks the fast paths
  randombytes_buf(key.data(), key.size());
  return key;
}

// Sealing and parsing --------------------------------------------------------------------------

void SetOverlayHopTag(uint8_t* datagram, size_t size, const OverlayMacKey& hop, uint32_t receiver) {
  MakeHopTag(datagram, size, hop, receiver, datagram + HopTagAt(size));
}

uint32_t OverlayKeyId(const uint8_t* datagram) { return Load32(datagram + kKeyIdAt); }

absl::StatusOr<size_t> SealOverlay(const OverlayHeader& header, absl::Span<const uint8_t> payload,
                                   const OverlayKey& key, uint32_t next_hop,
                                   absl::Span<uint8_t> out) {
  const OverlayPeerKeys* destination = key.peer(header.destination);
  const OverlayPeerKeys* hop = key.peer(next_hop);
  if (destination == nullptr || hop == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("overlay seal: key id {} has no key for node {}", key.id(),
                    destination == nullptr ? header.destination : next_hop));
  }
  ASSIGN_OR_RETURN(const size_t size, SealOverlayHeader(header, payload, key.id(), out));
  uint8_t* p = out.data();
  destination->end_to_end.MakeTag(p + kCoveredFrom, EndToEndTagAt(size) - kCoveredFrom,
                                  p + EndToEndTagAt(size));
  SetOverlayHopTag(p, size, hop->hop, next_hop);
  return size;
}

void TagSealedOverlays(const OverlayMacKey& end_to_end, uint8_t* const* datagrams,
                       const size_t* sizes, size_t count) {
  assert(count <= kOverlayParseBatch);
  bool done[kOverlayParseBatch] = {};
  const uint8_t* run_data[kOverlayParseBatch];
  size_t run_index[kOverlayParseBatch];
  uint8_t tags[kOverlayParseBatch][kOverlayTagBytes];
  for (size_t i = 0; i < count; ++i) {
    if (done[i]) continue;
    size_t run = 0;
    for (size_t j = i; j < count; ++j) {
      if (done[j] || sizes[j] != sizes[i]) continue;
      done[j] = true;
      run_data[run] = datagrams[j] + kCoveredFrom;
      run_index[run++] = j;
    }
    const size_t at = EndToEndTagAt(sizes[i]);
    end_to_end.MakeTags(run_data, at - kCoveredFrom, run, tags);
    for (size_t r = 0; r < run; ++r) {
      std::memcpy(datagrams[run_index[r]] + at, tags[r], kOverlayTagBytes);
    }
  }
}

absl::StatusOr<size_t> SealOverlayHeader(const OverlayHeader& header,
                                         absl::Span<const uint8_t> payload, uint32_t key_id,
                                         absl::Span<uint8_t> out) {
  if (payload.size() > kOverlayMaxPayload) {
    return absl::InvalidArgumentError(
        fmt::format("overlay seal: payload of {} bytes exceeds the maximum of {}", payload.size(),
                    kOverlayMaxPayload));
  }
  if (!KnownType(static_cast<uint8_t>(header.type)) || header.traffic_class > TrafficClass::kBulk) {
    return absl::InvalidArgumentError(
        fmt::format("overlay seal: unknown type {} or traffic class {}",
                    static_cast<int>(header.type), static_cast<int>(header.traffic_class)));
  }
  const size_t required = RequiredPayload(static_cast<uint8_t>(header.type));
  if (required != 0 && payload.size() != required) {
    return absl::InvalidArgumentError(
        fmt::format("overlay seal: a type {} payload must be {} bytes, got {}",
                    static_cast<int>(header.type), required, payload.size()));
  }
  const size_t size = OverlayDatagramSize(payload.size());
  if (out.size() < size) {
    return absl::ResourceExhaustedError(fmt::format(
        "overlay seal: buffer of {} bytes cannot hold a {}-byte datagram", out.size(), size));
  }
  uint8_t* p = out.data();
  // The payload first: it may overlap the header's bytes only if the caller put it in place.
  if (payload.data() != p + kOverlayHeaderBytes && !payload.empty()) {
    std::memmove(p + kOverlayHeaderBytes, payload.data(), payload.size());
  }
  p[kVersionAt] = kOverlayVersion;
  p[kTypeAt] = static_cast<uint8_t>(header.type);
  p[kClassAt] = static_cast<uint8_t>(header.traffic_class);
  p[kHopLimitAt] = header.hop_limit;
  Store32(p + kKeyIdAt, key_id);
  Store32(p + kSourceAt, header.source);
  Store32(p + kDestinationAt, header.destination);
  Store32(p + kFlowHashAt, header.flow_hash);
  Store16(p + kLengthAt, static_cast<uint16_t>(payload.size()));
  Store16(p + kReservedAt, 0);
  Store64(p + kSequenceAt, header.sequence);
  return size;
}

namespace {

// ParseOverlay up to the end-to-end tag: the structure, the key id, the hop tag (with the keys
// shared with `from`) and the hop limit. kOk and, for a datagram addressed to `self`, the key
// its end-to-end tag must have been made with (null for one in transit); or why not.
OverlayStatus CheckHop(absl::Span<const uint8_t> datagram, const OverlayKeyRing& keys,
                       uint32_t self, uint32_t from, const OverlayMacKey** end_to_end) {
  const uint8_t* p = datagram.data();
  const size_t n = datagram.size();
  *end_to_end = nullptr;
  if (n < kOverlayOverheadBytes) return OverlayStatus::kTooShort;
  if (p[kVersionAt] != kOverlayVersion) return OverlayStatus::kBadVersion;
  const uint8_t type = p[kTypeAt];
  if (!KnownType(type)) return OverlayStatus::kUnknownType;
  if (p[kClassAt] > static_cast<uint8_t>(TrafficClass::kBulk)) {
    return OverlayStatus::kBadTrafficClass;
  }
  const size_t length = Load16(p + kLengthAt);
  if (OverlayDatagramSize(length) != n) return OverlayStatus::kBadLength;
  if (const size_t required = RequiredPayload(type); required != 0 && length != required) {
    return OverlayStatus::kBadLength;
  }
  const OverlayKey* key = keys.Find(Load32(p + kKeyIdAt));
  const OverlayPeerKeys* neighbour = key == nullptr ? nullptr : key->peer(from);
  if (neighbour == nullptr) return OverlayStatus::kUnknownKeyId;
  uint8_t tag[kOverlayTagBytes];
  MakeHopTag(p, n, neighbour->hop, self, tag);
  if (sodium_memcmp(tag, p + HopTagAt(n), kOverlayTagBytes) != 0) {
    return OverlayStatus::kBadHopTag;
  }
  if (p[kHopLimitAt] == 0) return OverlayStatus::kHopLimitExhausted;
  if (Load32(p + kDestinationAt) != self) return OverlayStatus::kOk;
  const OverlayPeerKeys* source = key->peer(Load32(p + kSourceAt));
  if (source == nullptr) return OverlayStatus::kUnknownKeyId;
  *end_to_end = &source->end_to_end;
  return OverlayStatus::kOk;
}

// ParseOverlay after the end-to-end tag: compares it with `tag` (what the key makes of the
// datagram; null for a datagram in transit, which is not compared) and fills `*out`.
// REQUIRES: CheckHop returned kOk.
OverlayStatus FinishParse(absl::Span<const uint8_t> datagram, const uint8_t* tag,
                          OverlayPacket* out) {
  const uint8_t* p = datagram.data();
  const size_t at = EndToEndTagAt(datagram.size());
  if (tag != nullptr && sodium_memcmp(tag, p + at, kOverlayTagBytes) != 0) {
    return OverlayStatus::kBadTag;
  }
  out->header.type = static_cast<OverlayType>(p[kTypeAt]);
  out->header.traffic_class = static_cast<TrafficClass>(p[kClassAt]);
  out->header.hop_limit = p[kHopLimitAt];
  out->header.source = Load32(p + kSourceAt);
  out->header.destination = Load32(p + kDestinationAt);
  out->header.flow_hash = Load32(p + kFlowHashAt);
  out->header.sequence = Load64(p + kSequenceAt);
  out->key_id = Load32(p + kKeyIdAt);
  out->payload = datagram.subspan(kOverlayHeaderBytes, at - kOverlayHeaderBytes);
  return OverlayStatus::kOk;
}

}  // namespace

void ParseOverlayBatch(absl::Span<const absl::Span<const uint8_t>> datagrams,
                       const OverlayKeyRing& keys, uint32_t self, uint32_t from,
                       OverlayStatus* statuses, OverlayPacket* packets) {
  const size_t count = datagrams.size();
  assert(count <= kOverlayParseBatch);
  const OverlayMacKey* key_of[kOverlayParseBatch];
  uint8_t tags[kOverlayParseBatch][kOverlayTagBytes];
  bool tagged[kOverlayParseBatch] = {};
  for (size_t i = 0; i < count; ++i) {
    statuses[i] = CheckHop(datagrams[i], keys, self, from, &key_of[i]);
  }
  // Runs of datagrams for this node with the same key and length share one MakeTags call (in
  // a GRO slot all but the last datagram have the same length).
  const uint8_t* run_data[kOverlayParseBatch];
  uint8_t run_tags[kOverlayParseBatch][kOverlayTagBytes];
  size_t run_index[kOverlayParseBatch];
  for (size_t i = 0; i < count; ++i) {
    if (statuses[i] != OverlayStatus::kOk || key_of[i] == nullptr || tagged[i]) continue;
    const size_t n = datagrams[i].size();
    size_t run = 0;
    for (size_t j = i; j < count; ++j) {
      if (statuses[j] != OverlayStatus::kOk || tagged[j] || key_of[j] != key_of[i] ||
          datagrams[j].size() != n) {
        continue;
      }
      run_data[run] = datagrams[j].data() + kCoveredFrom;
      run_index[run++] = j;
      tagged[j] = true;
    }
    key_of[i]->MakeTags(run_data, EndToEndTagAt(n) - kCoveredFrom, run, run_tags);
    for (size_t r = 0; r < run; ++r) std::memcpy(tags[run_index[r]], run_tags[r], kOverlayTagBytes);
  }
  for (size_t i = 0; i < count; ++i) {
    if (statuses[i] == OverlayStatus::kOk) {
      statuses[i] = FinishParse(datagrams[i], tagged[i] ? tags[i] : nullptr, &packets[i]);
    }
  }
}

OverlayStatus ParseOverlay(absl::Span<const uint8_t> datagram, const OverlayKeyRing& keys,
                           uint32_t self, uint32_t from, OverlayPacket* out) {
  const OverlayMacKey* key = nullptr;
  if (const OverlayStatus s = CheckHop(datagram, keys, self, from, &key); s != OverlayStatus::kOk) {
    return s;
  }
  if (key == nullptr) return FinishParse(datagram, nullptr, out);
  uint8_t tag[kOverlayTagBytes];
  key->MakeTag(datagram.data() + kCoveredFrom, EndToEndTagAt(datagram.size()) - kCoveredFrom, tag);
  return FinishParse(datagram, tag, out);
}

OverlayStatus ForwardOverlay(absl::Span<uint8_t> datagram) {
  uint8_t* p = datagram.data();
  if (p[kHopLimitAt] <= 1) return OverlayStatus::kHopLimitExhausted;
  --p[kHopLimitAt];
  return OverlayStatus::kOk;
}

// Replay protection -----------------------------------------------------------------------------

OverlaySequencer::OverlaySequencer(size_t destinations, int64_t start_unix_ns)
    : next_(destinations),
      start_(static_cast<uint64_t>(std::max<int64_t>(start_unix_ns, 0) / 1'000'000) << 20) {
  for (std::atomic<uint64_t>& n : next_) n.store(start_, std::memory_order_relaxed);
}

uint64_t OverlaySequencer::Highest() const {
  uint64_t highest = start_;
  for (const std::atomic<uint64_t>& n : next_) {
    const uint64_t next = n.load(std::memory_order_relaxed);
    if (next > start_) highest = std::max(highest, next - 1);
  }
  return highest;
}

bool ReplayWindow::Accept(uint64_t seq) {
  const auto bit = [](uint64_t s) { return uint64_t{1} << (s % 64); };
  const auto word = [](uint64_t s) { return static_cast<size_t>((s / 64) % (kWindow / 64)); };
  if (!any_ || seq > top_) {
    // Slide: the numbers between the old top and `seq` are not seen yet.
    if (!any_ || seq - top_ >= kWindow) {
      seen_.fill(0);
    } else {
      for (uint64_t s = top_ + 1; s < seq; ++s) seen_[word(s)] &= ~bit(s);
    }
    seen_[word(seq)] |= bit(seq);
    top_ = seq;
    any_ = true;
    return true;
  }
  if (top_ - seq >= kWindow) return false;  // too old to tell
  if ((seen_[word(seq)] & bit(seq)) != 0) return false;
  seen_[word(seq)] |= bit(seq);
  return true;
}

bool OverlayReplayGuard::Accept(uint32_t source, uint32_t key_id, uint64_t seq) {
  if (source >= slots_.size()) return false;
  auto& slots = slots_[source];
  Slot* slot = nullptr;
  Slot* stalest = &slots[0];
  for (Slot& s : slots) {
    if (s.used && s.key_id == key_id) slot = &s;
    if (s.last_use < stalest->last_use) stalest = &s;
  }
  if (slot == nullptr) {
    slot = stalest;
    *slot = Slot{key_id, true, 0, ReplayWindow()};
  }
  slot->last_use = ++uses_;
  return slot->window.Accept(seq);
}

// Probes ----------------------------------------------------------------------------------------

std::array<uint8_t, kProbeBodyBytes> EncodeProbe(const ProbeBody& probe) {
  std::array<uint8_t, kProbeBodyBytes> b;
  Store64(b.data(), probe.sequence);
  Store64(b.data() + 8, static_cast<uint64_t>(probe.t1.count()));
  return b;
}

std::array<uint8_t, kProbeReplyBodyBytes> EncodeProbeReply(const ProbeReplyBody& reply) {
  std::array<uint8_t, kProbeReplyBodyBytes> b;
  Store64(b.data(), reply.sequence);
  Store64(b.data() + 8, static_cast<uint64_t>(reply.t1.count()));
  Store64(b.data() + 16, static_cast<uint64_t>(reply.t2.count()));
  Store64(b.data() + 24, static_cast<uint64_t>(reply.t3.count()));
  return b;
}

absl::StatusOr<ProbeBody> DecodeProbe(absl::Span<const uint8_t> payload) {
  if (payload.size() != kProbeBodyBytes) {
    return absl::InvalidArgumentError(
        fmt::format("probe payload is {} bytes, expected {}", payload.size(), kProbeBodyBytes));
  }
  ProbeBody probe;
  probe.sequence = Load64(payload.data());
  probe.t1 = Time(static_cast<int64_t>(Load64(payload.data() + 8)));
  return probe;
}

absl::StatusOr<ProbeReplyBody> DecodeProbeReply(absl::Span<const uint8_t> payload) {
  if (payload.size() != kProbeReplyBodyBytes) {
    return absl::InvalidArgumentError(fmt::format("probe reply payload is {} bytes, expected {}",
                                                  payload.size(), kProbeReplyBodyBytes));
  }
  ProbeReplyBody reply;
  reply.sequence = Load64(payload.data());
  reply.t1 = Time(static_cast<int64_t>(Load64(payload.data() + 8)));
  reply.t2 = Time(static_cast<int64_t>(Load64(payload.data() + 16)));
  reply.t3 = Time(static_cast<int64_t>(Load64(payload.data() + 24)));
  return reply;
}

// Flow hash -------------------------------------------------------------------------------------

namespace {

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kProtoSctp = 132;

bool HasPorts(uint8_t proto) {
  return proto == kProtoTcp || proto == kProtoUdp || proto == kProtoSctp;
}

// Absorbs words into a 64-bit state with the splitmix64 finaliser.
class FlowMixer {
 public:
  explicit FlowMixer(uint64_t kind) : h_(Random::Hash(kind)) {}
  void Add(uint64_t word) { h_ = Random::Hash(h_ ^ word); }
  void AddBytes(const uint8_t* p, size_t n) {
    while (n >= 8) {
      Add(Load64(p));
      p += 8;
      n -= 8;
    }
    uint64_t tail = n;  // the length, so that trailing zeros count
    for (size_t i = 0; i < n; ++i) tail = (tail << 8) | p[i];
    Add(tail);
  }
  uint32_t Finish() const { return static_cast<uint32_t>(h_ ^ (h_ >> 32)); }

 private:
  uint64_t h_;
};

}  // namespace

uint32_t FlowHash(absl::Span<const uint8_t> packet) {
  const uint8_t* p = packet.data();
  const size_t n = packet.size();
  const int version = n > 0 ? p[0] >> 4 : 0;
  if (version == 4 && n >= 20) {
    const uint8_t proto = p[9];
    const size_t ihl = static_cast<size_t>(p[0] & 0x0f) * 4;
    const uint16_t frag = Load16(p + 6);
    const bool fragment = (frag & 0x3fff) != 0;  // more-fragments flag or a non-zero offset
    uint32_t ports = 0;
    if (HasPorts(proto) && !fragment && ihl >= 20 && n >= ihl + 4) ports = Load32(p + ihl);
    FlowMixer m(4);
    m.Add((static_cast<uint64_t>(Load32(p + 12)) << 32) | Load32(p + 16));
    m.Add((static_cast<uint64_t>(proto) << 32) | ports);
    return m.Finish();
  }
  if (version == 6 && n >= 40) {
    const uint8_t next = p[6];
    uint32_t ports = 0;
    if (HasPorts(next) && n >= 44) ports = Load32(p + 40);
    FlowMixer m(6);
    m.AddBytes(p + 8, 32);  // source and destination addresses
    m.Add((static_cast<uint64_t>(next) << 32) | ports);
    return m.Finish();
  }
  FlowMixer m(0);
  m.AddBytes(p, std::min<size_t>(n, 64));
  return m.Finish();
}

}  // namespace dar::net
