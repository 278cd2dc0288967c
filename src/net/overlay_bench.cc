// Cost per packet of the overlay authenticator candidates and of the overlay codec.
//
// The MAC candidates, each over a 1400-byte packet (and 64 bytes for small probes):
//   siphash128   libsodium crypto_shorthash_siphashx24 (SipHash-2-4, 128-bit output)
//   blake2b      crypto_generichash with a 32-byte key, 16-byte output
//   hmac512_256  crypto_auth (HMAC-SHA-512 truncated to 256 bits)
// The fastest became the overlay's tag (overlay_header.h). Time per iteration = per packet.
#include <sodium.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "net/overlay_header.h"

namespace dar::net {
namespace {

std::vector<uint8_t> Packet(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  return p;
}

template <size_t N>
std::array<uint8_t, N> FixedKey() {
  std::array<uint8_t, N> k;
  for (size_t i = 0; i < N; ++i) k[i] = static_cast<uint8_t>(i + 1);
  return k;
}

void Init() {
  if (sodium_init() < 0) std::abort();
}

void BM_Mac_siphash128(benchmark::State& state) {
  Init();
  const std::vector<uint8_t> p = Packet(state.range(0));
  const auto key = FixedKey<crypto_shorthash_siphashx24_KEYBYTES>();
  std::array<uint8_t, crypto_shorthash_siphashx24_BYTES> tag;
  for (auto _ : state) {
    crypto_shorthash_siphashx24(tag.data(), p.data(), p.size(), key.data());
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(p.size()));
}
BENCHMARK(BM_Mac_siphash128)->Arg(64)->Arg(1400);

void BM_Mac_blake2b(benchmark::State& state) {
  Init();
  const std::vector<uint8_t> p = Packet(state.range(0));
  const auto key = FixedKey<32>();
  std::array<uint8_t, 16> tag;
  for (auto _ : state) {
    crypto_generichash(tag.data(), tag.size(), p.data(), p.size(), key.data(), key.size());
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(p.size()));
}
BENCHMARK(BM_Mac_blake2b)->Arg(64)->Arg(1400);

void BM_Mac_hmac512_256(benchmark::State& state) {
  Init();
  const std::vector<uint8_t> p = Packet(state.range(0));
  const auto key = FixedKey<crypto_auth_KEYBYTES>();
  std::array<uint8_t, crypto_auth_BYTES> tag;
  for (auto _ : state) {
    crypto_auth(tag.data(), p.data(), p.size(), key.data());
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(p.size()));
}
BENCHMARK(BM_Mac_hmac512_256)->Arg(64)->Arg(1400);

// The codec with the chosen MAC: a 1400-byte datagram (1360 bytes of payload).
constexpr size_t kPayload = 1400 - kOverlayOverheadBytes;

// Three nodes in a line, 0 - 1 - 2; each holds its row of epoch 1.
constexpr std::array<uint32_t, 3> kWire = {0, 1, 2};

std::unique_ptr<OverlayKeyRing> Ring(uint32_t self) {
  auto ring = std::make_unique<OverlayKeyRing>();
  if (!ring->Add(1, PairKeysFromSecret(FixedKey<kOverlayKeyBytes>(), kWire, self)).ok()) {
    std::abort();
  }
  return ring;
}

OverlayHeader Header(uint32_t destination) {
  OverlayHeader h;
  h.source = 0;
  h.destination = destination;
  h.flow_hash = 3;
  h.hop_limit = 255;
  return h;
}

// What the ingress does: both tags.
void BM_SealOverlay(benchmark::State& state) {
  const auto ring = Ring(0);
  const std::vector<uint8_t> payload = Packet(kPayload);
  std::vector<uint8_t> out(OverlayDatagramSize(kPayload));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        SealOverlay(Header(1), payload, *ring->current(), 1, absl::MakeSpan(out)));
  }
}
BENCHMARK(BM_SealOverlay);

// What the destination does: both tags.
void BM_ParseOverlay(benchmark::State& state) {
  const auto sender = Ring(0), receiver = Ring(1);
  std::vector<uint8_t> d(OverlayDatagramSize(kPayload));
  if (!SealOverlay(Header(1), Packet(kPayload), *sender->current(), 1, absl::MakeSpan(d)).ok()) {
    std::abort();
  }
  OverlayPacket p;
  for (auto _ : state) {
    if (ParseOverlay(d, *receiver, 1, 0, &p) != OverlayStatus::kOk) std::abort();
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_ParseOverlay);

// What a transit agent does: check the hop tag, decrement the hop limit, tag the next hop (the
// same hop each time here, so that the datagram stays valid for the next round).
void BM_ParseAndForwardOverlay(benchmark::State& state) {
  const auto sender = Ring(0), transit = Ring(1);
  std::vector<uint8_t> d(OverlayDatagramSize(kPayload));
  const OverlayMacKey& back = transit->current()->peer(0)->hop;
  OverlayPacket p;
  for (auto _ : state) {
    state.PauseTiming();
    if (!SealOverlay(Header(2), Packet(kPayload), *sender->current(), 1, absl::MakeSpan(d)).ok()) {
      std::abort();
    }
    state.ResumeTiming();
    for (int hop = 0; hop < 100; ++hop) {
      if (ParseOverlay(d, *transit, 1, 0, &p) != OverlayStatus::kOk) std::abort();
      if (ForwardOverlay(absl::MakeSpan(d)) != OverlayStatus::kOk) std::abort();
      // (1 sends it back to 0's key so that the loop can go on: the cost is the same.)
      SetOverlayHopTag(d.data(), d.size(), sender->current()->peer(1)->hop, 1);
    }
    benchmark::DoNotOptimize(back);
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_ParseAndForwardOverlay);

// What the data plane does for a GRO slot or a TCP super-packet's segments: the tags of 8
// datagrams of the same size at once (OverlayMacKey::MakeTags: vector lanes where the CPU has
// them). Arg: bytes per datagram. Time per iteration = per 8 datagrams.
void BM_MakeTags8(benchmark::State& state) {
  const auto ring = Ring(0);
  const OverlayMacKey& key = ring->current()->peer(1)->end_to_end;
  const size_t n = static_cast<size_t>(state.range(0));
  std::array<std::vector<uint8_t>, 8> datagrams;
  std::array<const uint8_t*, 8> data;
  for (size_t i = 0; i < datagrams.size(); ++i) {
    datagrams[i] = Packet(n + i);  // each its own bytes
    data[i] = datagrams[i].data();
  }
  uint8_t tags[8][16];
  for (auto _ : state) {
    key.MakeTags(data.data(), n, data.size(), tags);
    benchmark::DoNotOptimize(tags);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(8 * n));
}
BENCHMARK(BM_MakeTags8)->Arg(64)->Arg(300)->Arg(1384);

// What the controller spends per pair key of an agent's row (security::RowFor).
void BM_DerivePairKey(benchmark::State& state) {
  const OverlayKeyBytes secret = FixedKey<kOverlayKeyBytes>();
  uint32_t peer = 0;
  for (auto _ : state) benchmark::DoNotOptimize(DerivePairKey(secret, 7, ++peer));
}
BENCHMARK(BM_DerivePairKey);

void BM_FlowHash(benchmark::State& state) {
  std::vector<uint8_t> ip = Packet(1400);
  ip[0] = 0x45;
  ip[6] = 0x40;
  ip[7] = 0;
  ip[9] = 6;
  for (auto _ : state) benchmark::DoNotOptimize(FlowHash(ip));
}
BENCHMARK(BM_FlowHash);

}  // namespace
}  // namespace dar::net

BENCHMARK_MAIN();
