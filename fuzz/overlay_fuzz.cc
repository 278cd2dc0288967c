// libFuzzer target: the overlay header parser, on any datagram. The first byte picks what
// the rest is:
//   even: a received datagram, passed to ParseOverlay as it is;
//   odd:  a header and payload that SealOverlay seals with the ring's key; the sealed
//         datagram must parse back to the same header and payload, and with one bit flipped
//         (where, the input chooses) must not parse.
// ParseOverlay must never read outside the datagram (ASan) and never accept what the key did
// not seal. Seed corpus: fuzz/corpus/overlay.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/overlay_header.h"

namespace {

const dar::net::OverlayKeyRing& Ring() {
  static dar::net::OverlayKeyRing* ring = [] {
    auto* r = new dar::net::OverlayKeyRing();
    dar::net::OverlayKeyBytes key{};
    for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);
    if (!r->Add(7, key).ok()) std::abort();
    return r;
  }();
  return *ring;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dar::net;
  if (size == 0) return 0;
  const OverlayKeyRing& ring = Ring();
  OverlayPacket packet;
  if (data[0] % 2 == 0) {
    (void)ParseOverlay(absl::MakeConstSpan(data + 1, size - 1), ring, &packet);
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
  std::memcpy(&h.source, f + 3, 4);
  std::memcpy(&h.destination, f + 7, 4);
  h.flow_hash = f[11] * 0x01010101u;
  const absl::Span<const uint8_t> payload(data + 1 + kFields, size - 1 - kFields);
  std::vector<uint8_t> out(OverlayDatagramSize(payload.size()));
  absl::StatusOr<size_t> sealed = SealOverlay(h, payload, *ring.current(), absl::MakeSpan(out));
  if (!sealed.ok()) return 0;
  const absl::Span<const uint8_t> datagram(out.data(), *sealed);
  const OverlayStatus status = ParseOverlay(datagram, ring, &packet);
  if (h.hop_limit == 0) return 0;  // sealed, but dropped on arrival
  Check(status == OverlayStatus::kOk);
  Check(packet.header.type == h.type && packet.header.traffic_class == h.traffic_class &&
        packet.header.hop_limit == h.hop_limit && packet.header.source == h.source &&
        packet.header.destination == h.destination && packet.header.flow_hash == h.flow_hash &&
        packet.key_id == 7);
  Check(packet.payload.size() == payload.size() &&
        std::memcmp(packet.payload.data(), payload.data(), payload.size()) == 0);
  // One flipped bit anywhere but in the first byte, the hop limit (which forwarders decrement,
  // so the tag does not cover it): refused.
  const size_t at = 1 + (static_cast<size_t>(f[11]) * 131 + payload.size()) % (*sealed - 1);
  out[at] ^= 1;
  Check(ParseOverlay(datagram, ring, &packet) != OverlayStatus::kOk);
  return 0;
}
