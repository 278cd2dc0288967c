// libFuzzer target: the overlay header parser, on any datagram. Four nodes (indices and wire
// ids 0..3) each hold their row of one key epoch. The first byte picks what the rest is:
//   even: a datagram node 1 received from node 0, passed to ParseOverlay as it is;
//   odd:  a header and payload that the source node seals for a next hop (both chosen by the
//         input); the sealed datagram must parse at the next hop back to the same header and
//         payload, and with one bit flipped (where, the input chooses: anywhere when the next
//         hop is the destination, in the header and tags when it is a transit node, which
//         checks the hop tag only) must not parse.
// ParseOverlay must never read outside the datagram (ASan) and never accept what the keys did
// not seal. Seed corpus: fuzz/corpus/overlay.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/overlay_header.h"

namespace {

constexpr uint32_t kNodes = 4;

const dar::net::OverlayKeyRing& Ring(uint32_t node) {
  static std::array<dar::net::OverlayKeyRing, kNodes>* rings = [] {
    auto* r = new std::array<dar::net::OverlayKeyRing, kNodes>();
    dar::net::OverlayKeyBytes secret{};
    for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);
    const std::array<uint32_t, kNodes> wire = {0, 1, 2, 3};
    for (uint32_t n = 0; n < kNodes; ++n) {
      if (!(*r)[n].Add(7, dar::net::PairKeysFromSecret(secret, wire, n)).ok()) std::abort();
    }
    return r;
  }();
  return (*rings)[node];
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dar::net;
  if (size == 0) return 0;
  OverlayPacket packet;
  if (data[0] % 2 == 0) {
    (void)ParseOverlay(absl::MakeConstSpan(data + 1, size - 1), Ring(1), 1, 0, &packet);
    return 0;
  }
  // Odd: a header from the next bytes, the rest the payload.
  constexpr size_t kFields = 12;
  if (size < 1 + kFields) return 0;
  const uint8_t* f = data + 1;
  OverlayHeader h;
  h.type = static_cast<OverlayType>(f[0] % 4);  // 0 is no type: SealOverlay refuses it
  h.traffic_class = static_cast<TrafficClass>(f[1] % 3);
  h.hop_limit = f[2];
  h.source = f[3] % kNodes;
  h.destination = f[4] % kNodes;
  const uint32_t next_hop = f[5] % kNodes;
  std::memcpy(&h.sequence, f + 6, 4);
  h.flow_hash = f[11] * 0x01010101u;
  const absl::Span<const uint8_t> payload(data + 1 + kFields, size - 1 - kFields);
  std::vector<uint8_t> out(OverlayDatagramSize(payload.size()));
  absl::StatusOr<size_t> sealed =
      SealOverlay(h, payload, *Ring(h.source).current(), next_hop, absl::MakeSpan(out));
  if (!sealed.ok()) return 0;  // a bad type or class, or no key with itself
  const absl::Span<const uint8_t> datagram(out.data(), *sealed);
  const OverlayStatus status = ParseOverlay(datagram, Ring(next_hop), next_hop, h.source, &packet);
  if (h.hop_limit == 0) return 0;  // sealed, but dropped on arrival
  Check(status == OverlayStatus::kOk);
  Check(packet.header.type == h.type && packet.header.traffic_class == h.traffic_class &&
        packet.header.hop_limit == h.hop_limit && packet.header.source == h.source &&
        packet.header.destination == h.destination && packet.header.flow_hash == h.flow_hash &&
        packet.header.sequence == h.sequence && packet.key_id == 7);
  Check(packet.payload.size() == payload.size() &&
        std::memcmp(packet.payload.data(), payload.data(), payload.size()) == 0);
  // One flipped bit: refused.
  const size_t pick = static_cast<size_t>(f[11]) * 131 + payload.size();
  size_t at = pick % *sealed;
  if (next_hop != h.destination) {
    // A transit node sees the header and the two tags, not the payload.
    const size_t checked = kOverlayHeaderBytes + 2 * kOverlayTagBytes;
    at = pick % checked;
    if (at >= kOverlayHeaderBytes) at = *sealed - checked + at;
  }
  out[at] ^= 1;
  Check(ParseOverlay(datagram, Ring(next_hop), next_hop, h.source, &packet) != OverlayStatus::kOk);
  // Nor does it parse at a node it was not sent to.
  out[at] ^= 1;
  const uint32_t other = (next_hop + 1) % kNodes;
  Check(ParseOverlay(datagram, Ring(other), other, h.source, &packet) != OverlayStatus::kOk);
  return 0;
}
