// IPv4 addresses and endpoints, and just enough of IPv4/UDP to build and check the packets
// that cross a TUN device (the agent's tests and the namespace lab).
#ifndef DAR_NET_IP_PACKET_H_
#define DAR_NET_IP_PACKET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dar::net {

// An IPv4 address in host byte order (10.0.0.1 is 0x0a000001).
struct Ipv4Address {
  uint32_t value = 0;
  friend bool operator==(Ipv4Address, Ipv4Address) = default;
};
// Dotted quad, e.g. "10.99.0.1"; InvalidArgument naming the text otherwise.
absl::StatusOr<Ipv4Address> ParseIpv4Address(std::string_view text);
std::string ToString(Ipv4Address a);

struct Ipv4Endpoint {
  Ipv4Address address;
  uint16_t port = 0;
  friend bool operator==(const Ipv4Endpoint&, const Ipv4Endpoint&) = default;
};
// "a.b.c.d:port"; InvalidArgument naming the text otherwise.
absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text);
std::string ToString(const Ipv4Endpoint& e);

// The Internet checksum (RFC 1071) of `data`, starting from the partial sum `sum`: the
// one's-complement of the one's-complement sum of its 16-bit big-endian words (an odd last
// byte is padded with zero). A correct packet's checksum over itself is 0.
uint16_t InternetChecksum(absl::Span<const uint8_t> data, uint32_t sum = 0);

inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr size_t kTcpHeaderBytes = 20;  // without options
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;

// The partial sum of the IPv4 pseudo-header of a TCP or UDP checksum (RFC 793, RFC 768):
// addresses, protocol and the transport `length`, to pass to InternetChecksum.
uint32_t Ipv4PseudoHeaderSum(Ipv4Address src, Ipv4Address dst, uint8_t protocol, size_t length);

// Writes an IPv4 packet (no options, DF set, given TTL) carrying one UDP datagram, with both
// checksums filled in, to the front of `out`; returns its size.
// Errors: InvalidArgument if the packet would exceed 65535 bytes; ResourceExhausted if `out`
// is too small.
absl::StatusOr<size_t> BuildUdpIpv4Packet(const Ipv4Endpoint& source,
                                          const Ipv4Endpoint& destination,
                                          absl::Span<const uint8_t> payload,
                                          absl::Span<uint8_t> out, uint8_t ttl = 64);

// A UDP-in-IPv4 packet that passed ParseUdpIpv4Packet; `payload` points into the packet.
struct UdpIpv4Packet {
  Ipv4Endpoint source;
  Ipv4Endpoint destination;
  uint8_t ttl = 0;
  absl::Span<const uint8_t> payload;
};

// Checks an IPv4 packet carrying UDP: version, header length, total length, header checksum,
// not a fragment, UDP length and the UDP checksum (unless 0, "none"). InvalidArgument naming
// the first problem otherwise. Trailing bytes after the IPv4 total length are ignored.
absl::StatusOr<UdpIpv4Packet> ParseUdpIpv4Packet(absl::Span<const uint8_t> packet);

}  // namespace dar::net

#endif  // DAR_NET_IP_PACKET_H_
