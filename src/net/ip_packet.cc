#include "net/ip_packet.h"

#include <arpa/inet.h>

#include <bit>
#include <charconv>
#include <cstring>

#include "fmt/format.h"
#include "net/byte_order.h"

namespace dar::net {
namespace {

uint32_t PseudoHeaderSum(Ipv4Address src, Ipv4Address dst, size_t udp_length) {
  return Ipv4PseudoHeaderSum(src, dst, kIpProtoUdp, udp_length);
}

}  // namespace

uint32_t Ipv4PseudoHeaderSum(Ipv4Address src, Ipv4Address dst, uint8_t protocol, size_t length) {
  uint32_t sum = 0;
  sum += src.value >> 16;
  sum += src.value & 0xffff;
  sum += dst.value >> 16;
  sum += dst.value & 0xffff;
  sum += protocol;
  sum += static_cast<uint32_t>(length);
  return sum;
}

absl::StatusOr<Ipv4Address> ParseIpv4Address(std::string_view text) {
  // inet_pton wants a NUL-terminated string; an address is at most 15 characters.
  char buf[16];
  in_addr addr;
  if (text.size() >= sizeof(buf)) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not an IPv4 address", text));
  }
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  if (inet_pton(AF_INET, buf, &addr) != 1) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not an IPv4 address", text));
  }
  return Ipv4Address{ntohl(addr.s_addr)};
}

std::string ToString(Ipv4Address a) {
  return fmt::format("{}.{}.{}.{}", a.value >> 24, (a.value >> 16) & 0xff, (a.value >> 8) & 0xff,
                     a.value & 0xff);
}

absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not an IPv4 endpoint (expected address:port)", text));
  }
  absl::StatusOr<Ipv4Address> address = ParseIpv4Address(text.substr(0, colon));
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("'{}': {}", text, std::string(address.status().message())));
  }
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("'{}': port '{}' is not a number in [0, 65535]", text, port_text));
  }
  return Ipv4Endpoint{*address, static_cast<uint16_t>(port)};
}

std::string ToString(const Ipv4Endpoint& e) {
  return fmt::format("{}:{}", ToString(e.address), e.port);
}

uint16_t InternetChecksum(absl::Span<const uint8_t> data, uint32_t sum) {
  // The one's-complement sum does not depend on byte order beyond a final swap (RFC 1071
  // section 2(B)), so the data is summed eight bytes at a time in the machine's order: each
  // 64-bit word adds as two 32-bit halves, which cannot overflow the accumulator for any packet.
  const uint8_t* p = data.data();
  size_t n = data.size();
  uint64_t s = 0;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, sizeof(w));
    s += (w & 0xffffffffu) + (w >> 32);
  }
  if (n >= 4) {
    uint32_t w;
    std::memcpy(&w, p, sizeof(w));
    s += w;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, sizeof(w));
    s += w;
    p += 2;
    n -= 2;
  }
  if (n == 1) {
    // The odd last byte is the high byte of a zero-padded big-endian word.
    s += std::endian::native == std::endian::little ? p[0] : static_cast<uint32_t>(p[0]) << 8;
  }
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  if constexpr (std::endian::native == std::endian::little) {
    s = ((s & 0xff) << 8) | (s >> 8);
  }
  s += sum;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}

absl::StatusOr<size_t> BuildUdpIpv4Packet(const Ipv4Endpoint& source,
                                          const Ipv4Endpoint& destination,
                                          absl::Span<const uint8_t> payload,
                                          absl::Span<uint8_t> out, uint8_t ttl) {
  const size_t udp_length = kUdpHeaderBytes + payload.size();
  const size_t total = kIpv4HeaderBytes + udp_length;
  if (total > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("UDP/IPv4 packet: a {}-byte payload makes a {}-byte packet, over 65535",
                    payload.size(), total));
  }
  if (out.size() < total) {
    return absl::ResourceExhaustedError(
        fmt::format("UDP/IPv4 packet: buffer of {} bytes cannot hold {} bytes", out.size(), total));
  }
  uint8_t* ip = out.data();
  uint8_t* udp = ip + kIpv4HeaderBytes;
  // An empty span may have no data pointer at all, which memmove may not be given.
  if (!payload.empty()) std::memmove(udp + kUdpHeaderBytes, payload.data(), payload.size());
  ip[0] = 0x45;  // version 4, five 32-bit words
  ip[1] = 0;     // DSCP, ECN
  Store16(ip + 2, static_cast<uint16_t>(total));
  Store16(ip + 4, 0);       // identification: unused with DF
  Store16(ip + 6, 0x4000);  // don't fragment
  ip[8] = ttl;
  ip[9] = kIpProtoUdp;
  Store16(ip + 10, 0);
  Store32(ip + 12, source.address.value);
  Store32(ip + 16, destination.address.value);
  Store16(ip + 10, InternetChecksum(absl::Span<const uint8_t>(ip, kIpv4HeaderBytes)));
  Store16(udp, source.port);
  Store16(udp + 2, destination.port);
  Store16(udp + 4, static_cast<uint16_t>(udp_length));
  Store16(udp + 6, 0);
  uint16_t check =
      InternetChecksum(absl::Span<const uint8_t>(udp, udp_length),
                       PseudoHeaderSum(source.address, destination.address, udp_length));
  if (check == 0) check = 0xffff;  // 0 means "no checksum" in UDP
  Store16(udp + 6, check);
  return total;
}

absl::StatusOr<UdpIpv4Packet> ParseUdpIpv4Packet(absl::Span<const uint8_t> packet) {
  const uint8_t* ip = packet.data();
  const size_t n = packet.size();
  if (n < kIpv4HeaderBytes) {
    return absl::InvalidArgumentError(
        fmt::format("IPv4 packet of {} bytes is shorter than an IPv4 header", n));
  }
  if ((ip[0] >> 4) != 4) {
    return absl::InvalidArgumentError(fmt::format("IP version is {}, not 4", ip[0] >> 4));
  }
  const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
  const size_t total = Load16(ip + 2);
  if (ihl < kIpv4HeaderBytes || ihl > n) {
    return absl::InvalidArgumentError(
        fmt::format("IPv4 header length {} is invalid for a {}-byte packet", ihl, n));
  }
  if (total < ihl || total > n) {
    return absl::InvalidArgumentError(fmt::format(
        "IPv4 total length {} is invalid (header {} bytes, packet {} bytes)", total, ihl, n));
  }
  if (InternetChecksum(packet.subspan(0, ihl)) != 0) {
    return absl::InvalidArgumentError("IPv4 header checksum is wrong");
  }
  if ((Load16(ip + 6) & 0x3fff) != 0) {
    return absl::InvalidArgumentError("IPv4 packet is a fragment");
  }
  if (ip[9] != kIpProtoUdp) {
    return absl::InvalidArgumentError(fmt::format("IPv4 protocol is {}, not UDP", ip[9]));
  }
  const size_t udp_available = total - ihl;
  const uint8_t* udp = ip + ihl;
  if (udp_available < kUdpHeaderBytes) {
    return absl::InvalidArgumentError(
        fmt::format("UDP datagram of {} bytes is shorter than a UDP header", udp_available));
  }
  const size_t udp_length = Load16(udp + 4);
  if (udp_length < kUdpHeaderBytes || udp_length > udp_available) {
    return absl::InvalidArgumentError(fmt::format(
        "UDP length {} is invalid ({} bytes after the IPv4 header)", udp_length, udp_available));
  }
  UdpIpv4Packet out;
  out.source = {Ipv4Address{Load32(ip + 12)}, Load16(udp)};
  out.destination = {Ipv4Address{Load32(ip + 16)}, Load16(udp + 2)};
  if (Load16(udp + 6) != 0 &&
      InternetChecksum(absl::Span<const uint8_t>(udp, udp_length),
                       PseudoHeaderSum(out.source.address, out.destination.address, udp_length)) !=
          0) {
    return absl::InvalidArgumentError(fmt::format("UDP checksum is wrong ({} -> {})",
                                                  ToString(out.source), ToString(out.destination)));
  }
  out.ttl = ip[8];
  out.payload = absl::Span<const uint8_t>(udp + kUdpHeaderBytes, udp_length - kUdpHeaderBytes);
  return out;
}

}  // namespace dar::net
