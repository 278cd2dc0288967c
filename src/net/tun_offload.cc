#include "net/tun_offload.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "fmt/format.h"
#include "net/byte_order.h"
#include "net/ip_packet.h"

namespace dar::net {
namespace {

// TCP flags (byte 13 of the header).
constexpr uint8_t kTcpFin = 0x01;
constexpr uint8_t kTcpPsh = 0x08;
constexpr uint8_t kTcpAck = 0x10;
constexpr uint8_t kTcpCwr = 0x80;

// IPv4 header fields.
constexpr size_t kIpTotalLength = 2;
constexpr size_t kIpId = 4;
constexpr size_t kIpFlagsFragment = 6;
constexpr size_t kIpChecksum = 10;
// TCP header fields.
constexpr size_t kTcpSeq = 4;
constexpr size_t kTcpAckNumber = 8;
constexpr size_t kTcpFlags = 13;
constexpr size_t kTcpChecksum = 16;

Ipv4Address Source(const uint8_t* ip) { return Ipv4Address{Load32(ip + 12)}; }
Ipv4Address Destination(const uint8_t* ip) { return Ipv4Address{Load32(ip + 16)}; }

void SetIpv4Checksum(uint8_t* ip, size_t ihl) {
  Store16(ip + kIpChecksum, 0);
  Store16(ip + kIpChecksum, InternetChecksum(absl::Span<const uint8_t>(ip, ihl)));
}

// An IPv4 packet carrying an unfragmented TCP segment, whose lengths fit `n` bytes.
struct TcpView {
  size_t ihl = 0;
  size_t total = 0;
  size_t thl = 0;  // TCP header with options
};
bool ViewTcpIpv4(const uint8_t* p, size_t n, TcpView* v, std::string* why) {
  if (n < kIpv4HeaderBytes || (p[0] >> 4) != 4) {
    if (why) *why = "not an IPv4 packet";
    return false;
  }
  v->ihl = static_cast<size_t>(p[0] & 0x0f) * 4;
  v->total = Load16(p + kIpTotalLength);
  if (v->ihl < kIpv4HeaderBytes || v->total < v->ihl || v->total > n) {
    if (why) *why = fmt::format("IPv4 header {} / total {} bytes in {} bytes", v->ihl, v->total, n);
    return false;
  }
  if ((Load16(p + kIpFlagsFragment) & 0x3fff) != 0) {
    if (why) *why = "a fragment";
    return false;
  }
  if (p[9] != kIpProtoTcp) {
    if (why) *why = fmt::format("protocol {}, not TCP", p[9]);
    return false;
  }
  if (v->total - v->ihl < kTcpHeaderBytes) {
    if (why) *why = "shorter than a TCP header";
    return false;
  }
  v->thl = static_cast<size_t>(p[v->ihl + 12] >> 4) * 4;
  if (v->thl < kTcpHeaderBytes || v->ihl + v->thl > v->total) {
    if (why) *why = fmt::format("TCP data offset {} does not fit", v->thl);
    return false;
  }
  return true;
}

}  // namespace

bool CompleteChecksum(absl::Span<uint8_t> packet, const OffloadInfo& info) {
  if (!info.needs_checksum) return true;
  const size_t start = info.checksum_start;
  const size_t field = start + info.checksum_offset;
  if (start >= packet.size() || field + 2 > packet.size()) return false;
  // The field holds the pseudo-header sum, so summing over it adds that in.
  uint16_t sum = InternetChecksum(packet.subspan(start));
  if (sum == 0) sum = 0xffff;  // as the kernel does: 0 would mean "no checksum" in UDP
  Store16(packet.data() + field, sum);
  return true;
}

absl::StatusOr<TcpSuperPacket> ParseTcpSuperPacket(absl::Span<const uint8_t> packet,
                                                   const OffloadInfo& info) {
  if (info.gso != OffloadInfo::Gso::kTcpV4) {
    return absl::InvalidArgumentError("super-packet: not TCP/IPv4 segmentation");
  }
  TcpView v;
  std::string why;
  if (!ViewTcpIpv4(packet.data(), packet.size(), &v, &why)) {
    return absl::InvalidArgumentError(fmt::format("TCP/IPv4 super-packet: {}", why));
  }
  if (info.segment_bytes == 0) {
    return absl::InvalidArgumentError("TCP/IPv4 super-packet: segment size 0");
  }
  TcpSuperPacket sp;
  sp.packet = packet.first(v.total);
  sp.ip_header_bytes = v.ihl;
  sp.header_bytes = v.ihl + v.thl;
  sp.payload_bytes = v.total - sp.header_bytes;
  sp.segment_payload = std::min<size_t>(info.segment_bytes, std::max<size_t>(sp.payload_bytes, 1));
  sp.segments = static_cast<int>(
      std::max<size_t>(1, (sp.payload_bytes + sp.segment_payload - 1) / sp.segment_payload));
  return sp;
}

size_t WriteTcpSegment(const TcpSuperPacket& sp, int index, absl::Span<uint8_t> out) {
  assert(index >= 0 && index < sp.segments);
  assert(out.size() >= sp.max_segment_bytes());
  const size_t offset = static_cast<size_t>(index) * sp.segment_payload;
  const size_t payload = std::min(sp.segment_payload, sp.payload_bytes - offset);
  const size_t size = sp.header_bytes + payload;
  uint8_t* ip = out.data();
  uint8_t* tcp = ip + sp.ip_header_bytes;
  std::memcpy(ip, sp.packet.data(), sp.header_bytes);
  std::memcpy(ip + sp.header_bytes, sp.packet.data() + sp.header_bytes + offset, payload);

  Store16(ip + kIpTotalLength, static_cast<uint16_t>(size));
  Store16(ip + kIpId, static_cast<uint16_t>(Load16(ip + kIpId) + index));
  SetIpv4Checksum(ip, sp.ip_header_bytes);

  Store32(tcp + kTcpSeq, Load32(tcp + kTcpSeq) + static_cast<uint32_t>(offset));
  if (index != sp.segments - 1) tcp[kTcpFlags] &= static_cast<uint8_t>(~(kTcpFin | kTcpPsh));
  if (index != 0) tcp[kTcpFlags] &= static_cast<uint8_t>(~kTcpCwr);
  const size_t tcp_length = size - sp.ip_header_bytes;
  Store16(tcp + kTcpChecksum, 0);
  Store16(tcp + kTcpChecksum, InternetChecksum(absl::Span<const uint8_t>(tcp, tcp_length),
                                               Ipv4PseudoHeaderSum(Source(ip), Destination(ip),
                                                                   kIpProtoTcp, tcp_length)));
  return size;
}

// TcpCoalescer ----------------------------------------------------------------------------------

TcpCoalescer::TcpCoalescer(int max_segments)
    : max_segments_(max_segments), buffer_(TunDevice::kMaxSuperPacketBytes) {
  assert(max_segments >= 1);
}

bool TcpCoalescer::Add(absl::Span<const uint8_t> packet) {
  const uint8_t* p = packet.data();
  TcpView v;
  if (!ViewTcpIpv4(p, packet.size(), &v, nullptr)) return false;
  // IPv4 options would have to match too; segments from a TCP stack carry none.
  if (v.ihl != kIpv4HeaderBytes) return false;
  const uint8_t* tcp = p + v.ihl;
  const uint8_t flags = tcp[kTcpFlags];
  if ((flags & ~kTcpPsh) != kTcpAck) return false;
  const size_t header = v.ihl + v.thl;
  const size_t payload = v.total - header;
  if (payload == 0) return false;  // pure ACKs carry nothing to join and may be duplicates
  const uint32_t seq = Load32(tcp + kTcpSeq);

  if (segments_ > 0) {
    const uint8_t* first = buffer_.data();
    if (closed_ || segments_ >= max_segments_ || header != header_bytes_ ||
        payload > segment_payload_ || size_ + payload > buffer_.size() || seq != next_seq_) {
      return false;
    }
    // TOS, TTL, protocol and addresses (bytes 1, 8, 9, 12-19), DF (byte 6), ports, the
    // acknowledgment number, data offset, window and options must be the same.
    if (p[1] != first[1] || p[6] != first[6] || p[8] != first[8] ||
        std::memcmp(p + 12, first + 12, 8) != 0 || std::memcmp(tcp, first + v.ihl, 4) != 0 ||
        std::memcmp(tcp + kTcpAckNumber, first + v.ihl + kTcpAckNumber, 5) != 0 ||
        std::memcmp(tcp + 14, first + v.ihl + 14, 2) != 0 ||
        std::memcmp(tcp + kTcpHeaderBytes, first + v.ihl + kTcpHeaderBytes,
                    v.thl - kTcpHeaderBytes) != 0) {
      return false;
    }
  }
  // Never launder a corrupt segment into a super-packet the kernel will not check again.
  if (InternetChecksum(packet.first(v.ihl)) != 0 ||
      InternetChecksum(
          packet.subspan(v.ihl, v.total - v.ihl),
          Ipv4PseudoHeaderSum(Source(p), Destination(p), kIpProtoTcp, v.total - v.ihl)) != 0) {
    return false;
  }

  if (segments_ == 0) {
    std::memcpy(buffer_.data(), p, v.total);
    size_ = v.total;
    header_bytes_ = header;
    segment_payload_ = payload;
  } else {
    std::memcpy(buffer_.data() + size_, p + header, payload);
    size_ += payload;
    if (flags & kTcpPsh) buffer_[v.ihl + kTcpFlags] |= kTcpPsh;
  }
  ++segments_;
  next_seq_ = seq + static_cast<uint32_t>(payload);
  if (payload < segment_payload_ || (flags & kTcpPsh)) closed_ = true;
  return true;
}

absl::Span<const uint8_t> TcpCoalescer::Take(OffloadInfo* info) {
  assert(!empty());
  *info = OffloadInfo{};
  uint8_t* ip = buffer_.data();
  if (segments_ > 1) {
    const size_t ihl = kIpv4HeaderBytes;
    Store16(ip + kIpTotalLength, static_cast<uint16_t>(size_));
    SetIpv4Checksum(ip, ihl);
    // CHECKSUM_PARTIAL: the field holds the pseudo-header sum (not complemented), as the
    // kernel's own TSO packets do, so that the kernel can finish it should it forward the
    // packet instead of delivering it.
    const size_t tcp_length = size_ - ihl;
    uint32_t sum = Ipv4PseudoHeaderSum(Source(ip), Destination(ip), kIpProtoTcp, tcp_length);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    Store16(ip + ihl + kTcpChecksum, static_cast<uint16_t>(sum));
    info->gso = OffloadInfo::Gso::kTcpV4;
    info->needs_checksum = true;
    info->header_bytes = static_cast<uint16_t>(header_bytes_);
    info->segment_bytes = static_cast<uint16_t>(segment_payload_);
    info->checksum_start = static_cast<uint16_t>(ihl);
    info->checksum_offset = static_cast<uint16_t>(kTcpChecksum);
  }
  const absl::Span<const uint8_t> out(ip, size_);
  segments_ = 0;
  size_ = 0;
  closed_ = false;
  return out;
}

// UdpCoalescer ----------------------------------------------------------------------------------

UdpCoalescer::UdpCoalescer(int max_segments)
    : max_segments_(max_segments), buffer_(TunDevice::kMaxSuperPacketBytes) {
  assert(max_segments >= 1);
}

bool UdpCoalescer::Add(absl::Span<const uint8_t> packet) {
  const uint8_t* p = packet.data();
  const size_t n = packet.size();
  if (n < kIpv4HeaderBytes + kUdpHeaderBytes || p[0] != 0x45 || p[9] != kIpProtoUdp) return false;
  const size_t total = Load16(p + kIpTotalLength);
  if (total < kIpv4HeaderBytes + kUdpHeaderBytes || total > n) return false;
  if ((Load16(p + kIpFlagsFragment) & 0x3fff) != 0) return false;
  const uint8_t* udp = p + kIpv4HeaderBytes;
  const size_t udp_length = Load16(udp + 4);
  if (udp_length != total - kIpv4HeaderBytes || Load16(udp + 6) == 0) return false;
  const size_t payload = udp_length - kUdpHeaderBytes;
  if (payload == 0) return false;

  if (segments_ > 0) {
    const uint8_t* first = buffer_.data();
    if (closed_ || segments_ >= max_segments_ || payload > segment_payload_ ||
        size_ + payload > buffer_.size()) {
      return false;
    }
    // TOS, DF, TTL, addresses and ports.
    if (p[1] != first[1] || p[6] != first[6] || p[8] != first[8] ||
        std::memcmp(p + 12, first + 12, 12) != 0) {
      return false;
    }
  }
  if (InternetChecksum(packet.first(kIpv4HeaderBytes)) != 0 ||
      InternetChecksum(packet.subspan(kIpv4HeaderBytes, udp_length),
                       Ipv4PseudoHeaderSum(Source(p), Destination(p), kIpProtoUdp, udp_length)) !=
          0) {
    return false;
  }
  if (segments_ == 0) {
    std::memcpy(buffer_.data(), p, total);
    size_ = total;
    segment_payload_ = payload;
  } else {
    std::memcpy(buffer_.data() + size_, udp + kUdpHeaderBytes, payload);
    size_ += payload;
  }
  ++segments_;
  if (payload < segment_payload_) closed_ = true;
  return true;
}

absl::Span<const uint8_t> UdpCoalescer::Take(OffloadInfo* info) {
  assert(!empty());
  *info = OffloadInfo{};
  uint8_t* ip = buffer_.data();
  if (segments_ > 1) {
    Store16(ip + kIpTotalLength, static_cast<uint16_t>(size_));
    SetIpv4Checksum(ip, kIpv4HeaderBytes);
    const size_t udp_length = size_ - kIpv4HeaderBytes;
    Store16(ip + kIpv4HeaderBytes + 4, static_cast<uint16_t>(udp_length));
    // As the kernel's own UDP GSO packets: the pseudo-header sum of the whole, not
    // complemented; the kernel gives every datagram its own length and checksum.
    uint32_t sum = Ipv4PseudoHeaderSum(Source(ip), Destination(ip), kIpProtoUdp, udp_length);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    Store16(ip + kIpv4HeaderBytes + 6, static_cast<uint16_t>(sum));
    info->gso = OffloadInfo::Gso::kUdp;
    info->needs_checksum = true;
    info->header_bytes = static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes);
    info->segment_bytes = static_cast<uint16_t>(segment_payload_);
    info->checksum_start = static_cast<uint16_t>(kIpv4HeaderBytes);
    info->checksum_offset = 6;
  }
  const absl::Span<const uint8_t> out(ip, size_);
  segments_ = 0;
  size_ = 0;
  closed_ = false;
  return out;
}

}  // namespace dar::net
