// The overlay data plane's wire format: the UDP payload that carries an application's IP
// packet (or a link probe) from one agent to the next.
//
//    0        1        2        3
//   +--------+--------+--------+--------+
//   |hop lim.|version |  type  | class  |   version 4; type OverlayType; class TrafficClass
//   +--------+--------+--------+--------+
//   |              key id               |   which key epoch made the tags (key rotation)
//   |          source node id           |
//   |        destination node id        |
//   |             flow hash             |   FlowHash() of the inner packet at the ingress
//   +-----------------+-----------------+
//   | payload length  |    reserved     |   reserved: sent as 0, ignored on receipt
//   +-----------------+-----------------+
//   |        sequence number            |   per source, destination and key: anti-replay
//   |          (64 bits)                |   (OverlayReplayGuard)
//   +-----------------------------------+
//   |  payload (payload length bytes)   |
//   |  end-to-end tag (16 bytes)        |   source -> destination
//   |  hop tag (16 bytes)               |   this hop -> the next
//   +-----------------------------------+
//
// All integers are big-endian. Tags are SipHash-2-4 with 128-bit output (libsodium
// crypto_shorthash_siphashx24), chosen by measurement (overlay_bench, 1400 bytes, CPU time:
// SipHash-128 0.7 us, keyed BLAKE2b with 16-byte output 1.9 us, HMAC-SHA-512/256 5.0 us).
//
// Keys are per node pair, so that a node can speak only as itself. Each key epoch (key id)
// has a 32-byte secret that only the controller holds; the pair key of nodes a and b is
// keyed BLAKE2b of the secret over the two wire ids (DerivePairKey), and an agent is given
// only its own row: the keys it shares with each other node. Two 16-byte SipHash keys come
// from each pair key (crypto_kdf): one for the end-to-end tag and one for the hop tag.
// - The end-to-end tag covers everything from the version to the tag (the hop limit, which
//   forwarders change, is left out, as IPsec AH leaves IPv4's TTL out of its ICV) with the
//   key of (source, destination): only the destination checks it, and only the source (and
//   the destination) could have made it. A node that claims another source fails it.
// - The hop tag covers the 32-byte header (hop limit included), the end-to-end tag and the
//   receiving node's id with the key of the link's two ends: every receiver checks it, and a
//   sender (the source or a transit node) writes it for the neighbour it sends to
//   (SetOverlayHopTag). The receiver's id makes it one-way: what a node sent cannot be
//   reflected back to it as if its neighbour had sent it. So a transit node refuses a header
//   that no neighbour sealed for it, without the cost of the payload's tag, and a probe or a
//   probe reply authenticates the neighbour that sent it. A transit node cannot check the
//   end-to-end tag, nor the payload, nor replays (the window is the destination's): what a
//   dishonest neighbour makes up, or a datagram captured on a link and sent again with any
//   payload of its length, is carried on and dropped by the destination.
// A packet keeps the key id its ingress sealed it with; key rotation accepts the old key for
// a rollout period after the new one seals (security/key_ring.h), far longer than a packet
// spends in the overlay. Version 3 had one cluster key that every agent held, so any node
// could forge any other's traffic and probe replies.
// Replay: the end-to-end tag covers a sequence number that the source counts up per
// destination, from its start time in milliseconds shifted left by 20 (so that a restarted
// source begins above everything it sent before, unless it sent a million packets a
// millisecond to one destination), and the destination accepts each number once, within a
// sliding window per source and key (OverlayReplayGuard; IPsec's anti-replay window, RFC 4303
// 3.4.3).
//
// Nothing here allocates on the per-packet path (SealOverlay, ParseOverlay, ForwardOverlay,
// FlowHash, the probe codecs' encoders). All functions are thread-safe; an OverlayKeyRing is
// thread-compatible (concurrent const use is safe, changes need exclusive access).
#ifndef DAR_NET_OVERLAY_HEADER_H_
#define DAR_NET_OVERLAY_HEADER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/units.h"

namespace dar::net {

inline constexpr uint8_t kOverlayVersion = 4;
inline constexpr size_t kOverlayHeaderBytes = 32;
// Where the header's type byte is (OverlayType): what a socket filter steers by.
inline constexpr size_t kOverlayTypeOffset = 2;
inline constexpr size_t kOverlayTagBytes = 16;
// Header, end-to-end tag and hop tag.
inline constexpr size_t kOverlayOverheadBytes = kOverlayHeaderBytes + 2 * kOverlayTagBytes;
// The largest payload whose overlay datagram still fits a UDP datagram over IPv4.
inline constexpr size_t kOverlayMaxPayload = 65507 - kOverlayOverheadBytes;
// A key epoch's secret (the controller's, GenerateOverlayKey) and a pair key
// (DerivePairKey) are 32 bytes.
inline constexpr size_t kOverlayKeyBytes = 32;
using OverlayKeyBytes = std::array<uint8_t, kOverlayKeyBytes>;

enum class OverlayType : uint8_t {
  kData = 1,        // payload: an application's IP packet
  kProbe = 2,       // payload: ProbeBody
  kProbeReply = 3,  // payload: ProbeReplyBody
};

enum class TrafficClass : uint8_t {
  kLatency = 0,
  kBulk = 1,
};

struct OverlayHeader {
  OverlayType type = OverlayType::kData;
  TrafficClass traffic_class = TrafficClass::kLatency;
  // Hops the packet may still take; a forwarder decrements it (ForwardOverlay) and a packet
  // that arrives with 0 is rejected.
  uint8_t hop_limit = 64;
  uint32_t source = 0;
  uint32_t destination = 0;
  uint32_t flow_hash = 0;
  // Counted up by the source per destination (OverlaySequencer); checked once by the
  // destination (OverlayReplayGuard).
  uint64_t sequence = 0;
};

// The outcome of ParseOverlay (and ForwardOverlay): kOk, or why a datagram is dropped. One
// value per reason, so that an agent can count drops by reason; the checks run in this order.
enum class OverlayStatus : uint8_t {
  kOk,
  kTooShort,           // shorter than header + two tags
  kBadVersion,         // version is not kOverlayVersion
  kUnknownType,        // type is not an OverlayType
  kBadTrafficClass,    // traffic class is not a TrafficClass
  kBadLength,          // payload length disagrees with the datagram size, or a probe (reply)
                       // payload has the wrong size
  kUnknownKeyId,       // no key with this id in the ring, or none for the neighbour or source
  kBadHopTag,          // the hop tag does not match: not sent by the link's other end
  kBadTag,             // the end-to-end tag does not match (checked by the destination only):
                       // corrupted, or forged by a node claiming another's source
  kHopLimitExhausted,  // hop limit 0 on arrival, or ForwardOverlay would send it with 0
  kReplayed,           // its sequence number was seen, or is older than the window (checked by
                       // the destination, OverlayReplayGuard, not by ParseOverlay)
  kCount
};
// A short snake_case name ("too_short", "bad_tag", ...) for counters and logs.
std::string_view OverlayStatusName(OverlayStatus s);

// A 16-byte SipHash key, ready to make and check tags.
class OverlayMacKey {
 public:
  // Writes the tag of data[0, n) to tag[0, kOverlayTagBytes).
  void MakeTag(const uint8_t* data, size_t n, uint8_t* tag) const;
  // The same for `count` messages of n bytes each: tags[i] for data[i][0, n). Bit-identical to
  // MakeTag; several at once in vector lanes where the CPU has them and n is at least 256.
  void MakeTags(const uint8_t* const* data, size_t n, size_t count, uint8_t (*tags)[16]) const;

 private:
  friend class OverlayKeyRing;
  std::array<uint8_t, 16> key_{};
};

// The two keys a node shares with one other node in one key epoch.
struct OverlayPeerKeys {
  OverlayMacKey end_to_end;
  OverlayMacKey hop;
};

// One key epoch as one node holds it: its keys with each other node, by node index.
class OverlayKey {
 public:
  uint32_t id() const { return id_; }
  // The keys shared with node `node`, or null if this epoch has none for it. O(1).
  const OverlayPeerKeys* peer(uint32_t node) const {
    return node < present_.size() && present_[node] ? &peers_[node] : nullptr;
  }

 private:
  friend class OverlayKeyRing;
  uint32_t id_ = 0;
  std::vector<OverlayPeerKeys> peers_;
  std::vector<uint8_t> present_;
};

// A node's pair key with one other node (by index) in one epoch.
struct OverlayPairKey {
  uint32_t node = 0;
  OverlayKeyBytes key{};
};

// The key epochs a node accepts, by key id, and the one it seals with. Holding the old and
// the new epoch during a rotation lets packets sealed with either pass. Keys are wiped from
// memory when removed or when the ring is destroyed.
class OverlayKeyRing {
 public:
  static constexpr int kMaxKeys = 4;
  // Node indices a ring accepts keys for: 0..kMaxNodes-1.
  static constexpr uint32_t kMaxNodes = 1u << 20;

  OverlayKeyRing() = default;
  OverlayKeyRing(const OverlayKeyRing&) = delete;
  OverlayKeyRing& operator=(const OverlayKeyRing&) = delete;
  ~OverlayKeyRing();

  // Adds epoch `id` with these pair keys (replacing an epoch with the same id). The first
  // epoch added becomes current. Errors: InvalidArgument if a node index repeats or is
  // kMaxNodes or more; ResourceExhausted if kMaxKeys other epochs are held; Internal if
  // libsodium cannot be initialised.
  absl::Status Add(uint32_t id, absl::Span<const OverlayPairKey> pair_keys);
  // Removes epoch `id`; NotFound if absent, FailedPrecondition if it is current.
  absl::Status Remove(uint32_t id);
  // Seals with epoch `id` from now on; NotFound if absent.
  absl::Status SetCurrent(uint32_t id);

  // The epoch with this id, or null. O(kMaxKeys), no allocation.
  const OverlayKey* Find(uint32_t id) const;
  // The epoch to seal with; null while the ring is empty.
  const OverlayKey* current() const { return current_ < 0 ? nullptr : &keys_[current_]; }
  int size() const { return count_; }

 private:
  void Wipe(OverlayKey& key);

  std::array<OverlayKey, kMaxKeys> keys_{};
  int count_ = 0;
  int current_ = -1;
};

// The pair key of the nodes with wire ids a and b in the epoch whose secret is `secret`:
// keyed BLAKE2b of the secret over the two ids, the smaller first, so that both ends derive
// the same key. What the controller hands each agent (its row), and what an agent that holds
// the secret itself (the bootstrap key of its config file) derives.
OverlayKeyBytes DerivePairKey(const OverlayKeyBytes& secret, uint32_t wire_a, uint32_t wire_b);
// Node `self`'s row of an epoch's pair keys: DerivePairKey(secret, wire_ids[self],
// wire_ids[j]) for every node index j other than self.
std::vector<OverlayPairKey> PairKeysFromSecret(const OverlayKeyBytes& secret,
                                               absl::Span<const uint32_t> wire_ids, uint32_t self);

// 32 bytes from libsodium's CSPRNG.
OverlayKeyBytes GenerateOverlayKey();

// A datagram that passed ParseOverlay. `payload` points into the datagram.
struct OverlayPacket {
  OverlayHeader header;
  uint32_t key_id = 0;
  absl::Span<const uint8_t> payload;
};

// The size of the datagram that carries `payload_bytes` bytes.
constexpr size_t OverlayDatagramSize(size_t payload_bytes) {
  return kOverlayOverheadBytes + payload_bytes;
}

// Writes header, payload, end-to-end tag (with `key`'s keys for header.destination, whose
// id goes into the header) and hop tag (with its keys for `next_hop`, the neighbour it is
// sent to) to the front of `out`; returns the datagram's size. `payload` may be anywhere,
// including already in place at out[kOverlayHeaderBytes...] (encapsulation without a copy).
// Errors: InvalidArgument if the type or traffic class is unknown, the payload exceeds
// kOverlayMaxPayload, or a probe (reply) payload has the wrong size; FailedPrecondition if
// `key` has no keys for the destination or the next hop; ResourceExhausted if `out` is too
// small. No allocation unless it fails.
absl::StatusOr<size_t> SealOverlay(const OverlayHeader& header, absl::Span<const uint8_t> payload,
                                   const OverlayKey& key, uint32_t next_hop,
                                   absl::Span<uint8_t> out);

// The most datagrams ParseOverlayBatch and TagSealedOverlays take at once (a GRO slot's worth).
inline constexpr size_t kOverlayParseBatch = 64;

// SealOverlay in three steps, to seal several datagrams with their end-to-end tags side by
// side (as the segments of a TCP super-packet are) and give each its hop tag once its next hop
// is known: SealOverlayHeader is SealOverlay (the same checks, errors and result, but for the
// keys, which it does not use) without the tags, with key id `key_id`; TagSealedOverlays then
// writes the end-to-end tags of `count` datagrams datagrams[i][0, sizes[i]) whose headers it wrote,
// all with `end_to_end`, in vector lanes where the sizes are equal (OverlayMacKey::MakeTags);
// SetOverlayHopTag writes a datagram's hop tag. REQUIRES: count <= kOverlayParseBatch.
absl::StatusOr<size_t> SealOverlayHeader(const OverlayHeader& header,
                                         absl::Span<const uint8_t> payload, uint32_t key_id,
                                         absl::Span<uint8_t> out);
void TagSealedOverlays(const OverlayMacKey& end_to_end, uint8_t* const* datagrams,
                       const size_t* sizes, size_t count);
// Writes the hop tag of datagram[0, size) (its header, its end-to-end tag and `receiver`, 52
// bytes) with `hop`, the key shared with the neighbour it is sent to, whose node id is
// `receiver`. REQUIRES: size >= kOverlayOverheadBytes.
void SetOverlayHopTag(uint8_t* datagram, size_t size, const OverlayMacKey& hop, uint32_t receiver);
// The key id a well-formed datagram names. REQUIRES: size >= kOverlayHeaderBytes.
uint32_t OverlayKeyId(const uint8_t* datagram);

// Checks a datagram that node `self` received from its neighbour `from` (structure, key id,
// hop tag, hop limit and, when it is addressed to self, the end-to-end tag) and fills `*out`
// when kOk. A datagram for another node is checked up to its hop tag: its end-to-end tag is
// the destination's to check. Never reads outside `datagram`; any byte string is safe to pass.
OverlayStatus ParseOverlay(absl::Span<const uint8_t> datagram, const OverlayKeyRing& keys,
                           uint32_t self, uint32_t from, OverlayPacket* out);

// ParseOverlay for several datagrams from the same neighbour at once, with the same checks and
// outcome for each: statuses[i] and, when kOk, packets[i] are what ParseOverlay(datagrams[i],
// keys, self, from, ...) gives. What costs is the end-to-end tag (SipHash, about 1 ns a byte):
// the tags of datagrams of equal length from the same source under the same key, as a GRO
// receive slot holds, are computed side by side in vector lanes (8 with AVX-512, 4 with AVX2,
// chosen at run time; one by one without either), which takes a quarter of the time or less.
// No allocation.
// REQUIRES: statuses and packets have datagrams.size() elements; datagrams.size() <=
// kOverlayParseBatch.
void ParseOverlayBatch(absl::Span<const absl::Span<const uint8_t>> datagrams,
                       const OverlayKeyRing& keys, uint32_t self, uint32_t from,
                       OverlayStatus* statuses, OverlayPacket* packets);

// Prepares a parsed datagram, in place, for the next hop: decrements the hop limit. The
// sender then writes the hop tag for that hop (SetOverlayHopTag). kHopLimitExhausted (datagram
// unchanged) if the hop limit would reach 0: the packet must be dropped.
// REQUIRES: ParseOverlay(datagram) returned kOk.
OverlayStatus ForwardOverlay(absl::Span<uint8_t> datagram);

// Link probes (the four-timestamp method, core/telemetry.h ComputeTwoWayDelay). Times are
// nanoseconds on the clock of the node that took them, as signed 64-bit integers.
struct ProbeBody {
  uint64_t sequence = 0;
  Time t1{0};  // sent by the prober
};
struct ProbeReplyBody {
  uint64_t sequence = 0;
  Time t1{0};  // echoed from the probe
  Time t2{0};  // the probe arrived at the peer
  Time t3{0};  // the reply left the peer
};
inline constexpr size_t kProbeBodyBytes = 16;
inline constexpr size_t kProbeReplyBodyBytes = 32;

std::array<uint8_t, kProbeBodyBytes> EncodeProbe(const ProbeBody& probe);
std::array<uint8_t, kProbeReplyBodyBytes> EncodeProbeReply(const ProbeReplyBody& reply);
// InvalidArgument if the payload has the wrong size (ParseOverlay has already rejected such
// payloads of probe datagrams).
absl::StatusOr<ProbeBody> DecodeProbe(absl::Span<const uint8_t> payload);
absl::StatusOr<ProbeReplyBody> DecodeProbeReply(absl::Span<const uint8_t> payload);

// The sequence numbers a source seals with, one counter per destination (0..n-1), each
// starting at `start_unix_ns` in milliseconds shifted left by 20. Next is for one thread;
// Highest may be called from any other.
class OverlaySequencer {
 public:
  OverlaySequencer(size_t destinations, int64_t start_unix_ns);
  // The next number toward `destination`. REQUIRES: destination < the count given.
  uint64_t Next(uint32_t destination) {
    std::atomic<uint64_t>& n = next_[destination];
    const uint64_t s = n.load(std::memory_order_relaxed);  // one writer: no read-modify-write
    n.store(s + 1, std::memory_order_relaxed);
    return s;
  }
  // The highest number handed out toward any destination, or the start if none was.
  uint64_t Highest() const;

 private:
  std::vector<std::atomic<uint64_t>> next_;
  uint64_t start_ = 0;
};

// An anti-replay window over 64-bit sequence numbers (RFC 4303 3.4.3, with the whole 64 bits
// carried): the highest number accepted and which of the kWindow numbers below it were seen.
class ReplayWindow {
 public:
  static constexpr uint64_t kWindow = 2048;
  // True, and marks it seen, if `seq` is above the highest so far, or within the window and not
  // seen yet; false (a replay, or too old) otherwise. Call only for authenticated datagrams.
  bool Accept(uint64_t seq);

 private:
  std::array<uint64_t, kWindow / 64> seen_{};  // bit seq % kWindow, for seq in the window
  uint64_t top_ = 0;
  bool any_ = false;
};

// The replay windows of a destination: one per source node (0..n-1) and key id, for as many
// keys as a ring holds (so that replays under keys in turn cannot push a window out while its
// key is still accepted; a key beyond that takes the slot seen least recently). Not
// thread-safe; no allocation after construction.
class OverlayReplayGuard {
 public:
  explicit OverlayReplayGuard(size_t sources) : slots_(sources) {}
  // Whether an authenticated datagram from `source` is new (see ReplayWindow::Accept); false
  // also for a source outside 0..n-1.
  bool Accept(uint32_t source, uint32_t key_id, uint64_t seq);

 private:
  struct Slot {
    uint32_t key_id = 0;
    bool used = false;
    uint64_t last_use = 0;
    ReplayWindow window;
  };
  std::vector<std::array<Slot, OverlayKeyRing::kMaxKeys>> slots_;
  uint64_t uses_ = 0;
};

// A hash of an IP packet's flow, so that a flow (or flowlet) keeps to one path. IPv4 and IPv6
// TCP, UDP and SCTP packets hash their 5-tuple (addresses, protocol, ports); fragments and
// other protocols their addresses and protocol; anything else (including a packet too short
// for its addresses) its first bytes. Deterministic across nodes and runs. Never reads
// outside `packet`.
uint32_t FlowHash(absl::Span<const uint8_t> packet);

}  // namespace dar::net

#endif  // DAR_NET_OVERLAY_HEADER_H_
