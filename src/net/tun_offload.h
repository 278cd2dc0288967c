// The user-space half of TUN offloads (an offload TunDevice, net/tun.h), as a virtual NIC's
// driver does it: finishing what the kernel left to the device on the way out, and building
// super-packets on the way in.
//
//   out of the kernel: a TCP/IPv4 super-packet (TSO, up to 64 KB) is split into MTU-size
//     segments (ParseTcpSuperPacket, WriteTcpSegment), each a whole packet with its own IPv4
//     length, id and header checksum and its own TCP sequence number, flags and checksum; a
//     single packet whose transport checksum was left undone gets it (CompleteChecksum);
//   into the kernel: consecutive in-order TCP segments of one flow are joined into one
//     super-packet (TcpCoalescer), written with one call, which the kernel's TCP takes as one
//     packet, as after GRO; consecutive equal-size UDP datagrams of one flow likewise
//     (UdpCoalescer, UDP segmentation offload): one write and one trip through IP, and the
//     kernel splits them again for the receiving socket.
//
// Only IPv4 is handled (the overlay carries IPv4). Every packet comes from a peer or from
// the kernel, so nothing here trusts a length: any byte string is safe to pass. No allocation
// per packet. Thread-compatible.
#ifndef DAR_NET_TUN_OFFLOAD_H_
#define DAR_NET_TUN_OFFLOAD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/tun.h"

namespace dar::net {

// Adds the transport checksum the kernel left to the device (info.needs_checksum): the
// packet from checksum_start is summed into the pseudo-header sum the kernel stored at
// checksum_start + checksum_offset. No-op without needs_checksum. False (packet unchanged) if
// the offsets do not fit the packet.
bool CompleteChecksum(absl::Span<uint8_t> packet, const OffloadInfo& info);

// A TCP/IPv4 super-packet checked for segmentation; `packet` points into the caller's bytes.
struct TcpSuperPacket {
  absl::Span<const uint8_t> packet;  // up to the IPv4 total length
  size_t ip_header_bytes = 0;
  size_t header_bytes = 0;     // IPv4 and TCP headers, with options
  size_t segment_payload = 0;  // TCP payload per segment (the MSS); the last may be shorter
  size_t payload_bytes = 0;    // TCP payload in all
  int segments = 0;            // >= 1 (a packet without payload is one segment)

  // The size of the largest segment.
  size_t max_segment_bytes() const { return header_bytes + segment_payload; }
};

// Checks a super-packet read from an offload TUN (info.gso kTcpV4): an unfragmented IPv4
// packet whose total length fits, carrying TCP with a valid data offset, and a segment size of
// at least one byte. InvalidArgument naming the first problem otherwise.
absl::StatusOr<TcpSuperPacket> ParseTcpSuperPacket(absl::Span<const uint8_t> packet,
                                                   const OffloadInfo& info);

// Writes segment `index` of `sp` to the front of `out` as a whole IPv4/TCP packet and returns
// its size: the headers of the super-packet with the IPv4 total length, id (+index) and header
// checksum, the TCP sequence number (+index * MSS) and the TCP checksum of the segment; FIN and
// PSH only on the last segment, CWR only on the first.
// REQUIRES: 0 <= index < sp.segments, out.size() >= sp.max_segment_bytes().
size_t WriteTcpSegment(const TcpSuperPacket& sp, int index, absl::Span<uint8_t> out);

// Joins in-order TCP/IPv4 segments of one flow into one super-packet for an offload TUN's
// Write (the receive-side counterpart of TSO, as the kernel's GRO does for a NIC). A segment
// joins when it has the same addresses, ports, TOS, TTL, DF, acknowledgment number, window and
// TCP options as the first, starts at the next sequence number, carries no more payload than
// the first, and only ACK (and PSH) are set; a shorter segment or one with PSH ends the
// super-packet. A segment whose IPv4 or TCP checksum is wrong is never joined (the kernel
// would drop it; a super-packet's checksum is not checked again).
class TcpCoalescer {
 public:
  // Super-packets of at most max_segments segments and TunDevice::kMaxSuperPacketBytes.
  // REQUIRES: max_segments >= 1.
  explicit TcpCoalescer(int max_segments = 64);

  // Takes `packet` (copies it): the first segment of a new super-packet if empty(), else the
  // next one of the current one. False (nothing changes) if it cannot join: the caller Takes
  // the current super-packet and tries again, or passes the packet on alone.
  bool Add(absl::Span<const uint8_t> packet);

  bool empty() const { return segments_ == 0; }
  int segments() const { return segments_; }

  // The super-packet built, to write with `*info`, and starts over. A single segment comes back
  // exactly as added, with kNone. The span is valid until the next Add.
  // REQUIRES: !empty().
  absl::Span<const uint8_t> Take(OffloadInfo* info);

 private:
  const int max_segments_;
  std::vector<uint8_t> buffer_;
  size_t size_ = 0;
  int segments_ = 0;
  size_t header_bytes_ = 0;
  size_t segment_payload_ = 0;
  uint32_t next_seq_ = 0;
  bool closed_ = false;  // a short or PSH segment ended it
};

// Joins UDP/IPv4 datagrams of one flow into one UDP GSO super-packet (OffloadInfo::Gso::kUdp)
// for an offload TUN's Write. A datagram joins when it has the same addresses, ports, TOS, TTL
// and DF as the first and no more payload than the first; a shorter one ends the super-packet.
// A datagram whose IPv4 or UDP checksum is wrong, or that has no UDP checksum, is never joined.
class UdpCoalescer {
 public:
  // REQUIRES: max_segments >= 1.
  explicit UdpCoalescer(int max_segments = 64);

  // As TcpCoalescer::Add.
  bool Add(absl::Span<const uint8_t> packet);
  bool empty() const { return segments_ == 0; }
  int segments() const { return segments_; }
  // As TcpCoalescer::Take.
  absl::Span<const uint8_t> Take(OffloadInfo* info);

 private:
  const int max_segments_;
  std::vector<uint8_t> buffer_;
  size_t size_ = 0;
  int segments_ = 0;
  size_t segment_payload_ = 0;
  bool closed_ = false;  // a short datagram ended it
};

}  // namespace dar::net

#endif  // DAR_NET_TUN_OFFLOAD_H_
