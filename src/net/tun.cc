#include "net/tun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

#include "fmt/format.h"

namespace dar::net {
namespace {

constexpr size_t kMaxNameLength = IFNAMSIZ - 1;

ifreq NamedRequest(const std::string& name) {
  ifreq req;
  std::memset(&req, 0, sizeof(req));
  std::memcpy(req.ifr_name, name.data(), name.size());
  return req;
}

void SetInetAddress(sockaddr* sa, uint32_t host_order) {
  sockaddr_in in;
  std::memset(&in, 0, sizeof(in));
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(host_order);
  std::memcpy(sa, &in, sizeof(in));
}

// The kernel's legacy struct virtio_net_hdr (<linux/virtio_net.h> does not compile as C++ and
// Debian 12's copy predates UDP_L4). TUN devices use the machine's byte order for it
// (TUNSETVNETLE/BE are not used), so its fields are plain integers.
struct virtio_net_hdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;      // IP and transport headers
  uint16_t gso_size;     // transport payload per segment
  uint16_t csum_start;   // the checksum covers the packet from here
  uint16_t csum_offset;  // and goes at csum_start + csum_offset
};
static_assert(sizeof(virtio_net_hdr) == 10);
constexpr uint8_t VIRTIO_NET_HDR_F_NEEDS_CSUM = 1;
constexpr uint8_t VIRTIO_NET_HDR_GSO_NONE = 0;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV4 = 1;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV6 = 4;
constexpr uint8_t VIRTIO_NET_HDR_GSO_UDP_L4 = 5;
constexpr uint8_t VIRTIO_NET_HDR_GSO_ECN = 0x80;

OffloadInfo FromVirtio(const virtio_net_hdr& h) {
  OffloadInfo info;
  switch (h.gso_type & ~VIRTIO_NET_HDR_GSO_ECN) {
    case VIRTIO_NET_HDR_GSO_NONE:
      info.gso = OffloadInfo::Gso::kNone;
      break;
    case VIRTIO_NET_HDR_GSO_TCPV4:
      info.gso = OffloadInfo::Gso::kTcpV4;
      break;
    case VIRTIO_NET_HDR_GSO_TCPV6:
      info.gso = OffloadInfo::Gso::kTcpV6;
      break;
    case VIRTIO_NET_HDR_GSO_UDP_L4:
      info.gso = OffloadInfo::Gso::kUdp;
      break;
    default:
      info.gso = OffloadInfo::Gso::kOther;
      break;
  }
  info.needs_checksum = (h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) != 0;
  info.header_bytes = h.hdr_len;
  info.segment_bytes = h.gso_size;
  info.checksum_start = h.csum_start;
  info.checksum_offset = h.csum_offset;
  return info;
}

virtio_net_hdr ToVirtio(const OffloadInfo& info) {
  virtio_net_hdr h{};
  switch (info.gso) {
    case OffloadInfo::Gso::kNone:
    case OffloadInfo::Gso::kOther:
      h.gso_type = VIRTIO_NET_HDR_GSO_NONE;
      break;
    case OffloadInfo::Gso::kTcpV4:
      h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
      break;
    case OffloadInfo::Gso::kTcpV6:
      h.gso_type = VIRTIO_NET_HDR_GSO_TCPV6;
      break;
    case OffloadInfo::Gso::kUdp:
      h.gso_type = VIRTIO_NET_HDR_GSO_UDP_L4;
      break;
  }
  if (info.needs_checksum) h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
  h.hdr_len = info.header_bytes;
  h.gso_size = info.segment_bytes;
  h.csum_start = info.checksum_start;
  h.csum_offset = info.checksum_offset;
  return h;
}

}  // namespace

absl::Status TunConfig::Validate() const {
  if (name.empty() || name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        fmt::format("TUN config: name '{}' must have 1 to {} characters", name, kMaxNameLength));
  }
  if (name.find('/') != std::string::npos || name.find('%') != std::string::npos) {
    return absl::InvalidArgumentError(
        fmt::format("TUN config: name '{}' may not contain '/' or '%'", name));
  }
  if (mtu < 68 || mtu > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("TUN config {}: mtu {} is outside [68, 65535]", name, mtu));
  }
  if (prefix_length < 0 || prefix_length > 32) {
    return absl::InvalidArgumentError(
        fmt::format("TUN config {}: prefix_length {} is outside [0, 32]", name, prefix_length));
  }
  if (tx_queue_packets < 1 || tx_queue_packets > 1000000) {
    return absl::InvalidArgumentError(fmt::format(
        "TUN config {}: tx_queue_packets {} is outside [1, 1000000]", name, tx_queue_packets));
  }
  return absl::OkStatus();
}

absl::StatusOr<TunDevice> TunDevice::Open(const TunConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  const std::string& name = config.name;
  ScopedFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: open /dev/net/tun", name));
  }
  ifreq req = NamedRequest(name);
  req.ifr_flags = IFF_TUN | IFF_NO_PI | (config.offload ? IFF_VNET_HDR : 0);
  if (::ioctl(fd.get(), TUNSETIFF, &req) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: TUNSETIFF", name));
  }
  if (config.offload) {
    // Checksums and TCP/IPv4 segmentation are left to us. Not TSO6 or USO: the overlay
    // carries IPv4 only, and UDP senders rarely segment.
    const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4;
    if (::ioctl(fd.get(), TUNSETOFFLOAD, offloads) != 0) {
      return absl::ErrnoToStatus(errno, fmt::format("TUN {}: TUNSETOFFLOAD", name));
    }
  }
  // The kernel may not rename a device it was asked to create by name, but take its word.
  std::string actual(req.ifr_name, strnlen(req.ifr_name, IFNAMSIZ));

  // Interface configuration goes through any socket of the device's namespace.
  ScopedFd ctl(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!ctl.valid()) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: control socket", actual));
  }
  req = NamedRequest(actual);
  req.ifr_mtu = config.mtu;
  if (::ioctl(ctl.get(), SIOCSIFMTU, &req) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: SIOCSIFMTU {}", actual, config.mtu));
  }
  req = NamedRequest(actual);
  req.ifr_qlen = config.tx_queue_packets;
  if (::ioctl(ctl.get(), SIOCSIFTXQLEN, &req) != 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("TUN {}: SIOCSIFTXQLEN {}", actual, config.tx_queue_packets));
  }
  req = NamedRequest(actual);
  SetInetAddress(&req.ifr_addr, config.address.value);
  if (::ioctl(ctl.get(), SIOCSIFADDR, &req) != 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("TUN {}: SIOCSIFADDR {}", actual, ToString(config.address)));
  }
  req = NamedRequest(actual);
  const uint32_t mask = config.prefix_length == 0 ? 0 : ~uint32_t{0} << (32 - config.prefix_length);
  SetInetAddress(&req.ifr_netmask, mask);
  if (::ioctl(ctl.get(), SIOCSIFNETMASK, &req) != 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("TUN {}: SIOCSIFNETMASK /{}", actual, config.prefix_length));
  }
  req = NamedRequest(actual);
  if (::ioctl(ctl.get(), SIOCGIFFLAGS, &req) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: SIOCGIFFLAGS", actual));
  }
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(ctl.get(), SIOCSIFFLAGS, &req) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: SIOCSIFFLAGS up", actual));
  }
  return TunDevice(std::move(fd), std::move(actual), config.mtu, config.offload);
}

absl::StatusOr<size_t> TunDevice::Read(absl::Span<uint8_t> buffer) {
  if (offload_) {
    return absl::FailedPreconditionError(
        fmt::format("TUN {}: an offload device is read with Read(buffer, overflow, info)", name_));
  }
  ssize_t n;
  do {
    n = ::read(fd(), buffer.data(), buffer.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: read", name_));
  }
  return static_cast<size_t>(n);
}

absl::StatusOr<size_t> TunDevice::Read(absl::Span<uint8_t> buffer, absl::Span<uint8_t> overflow,
                                       OffloadInfo* info) {
  if (!offload_) {
    return absl::FailedPreconditionError(
        fmt::format("TUN {}: a plain device is read with Read(buffer)", name_));
  }
  virtio_net_hdr h;
  iovec iov[3] = {
      {&h, sizeof(h)}, {buffer.data(), buffer.size()}, {overflow.data(), overflow.size()}};
  ssize_t n;
  do {
    n = ::readv(fd(), iov, 3);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: read", name_));
  }
  if (static_cast<size_t>(n) < sizeof(h)) {
    return absl::InternalError(fmt::format("TUN {}: read {} bytes, less than a header", name_, n));
  }
  *info = FromVirtio(h);
  return static_cast<size_t>(n) - sizeof(h);
}

absl::StatusOr<bool> TunDevice::Write(absl::Span<const uint8_t> packet) {
  if (offload_) return Write(packet, OffloadInfo{});
  ssize_t n;
  do {
    n = ::write(fd(), packet.data(), packet.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return absl::ErrnoToStatus(
        errno, fmt::format("TUN {}: write of a {}-byte packet", name_, packet.size()));
  }
  return true;
}

absl::StatusOr<bool> TunDevice::Write(absl::Span<const uint8_t> packet, const OffloadInfo& info) {
  if (!offload_) {
    return absl::FailedPreconditionError(
        fmt::format("TUN {}: a plain device takes no offload header", name_));
  }
  virtio_net_hdr h = ToVirtio(info);
  const iovec iov[2] = {{&h, sizeof(h)}, {const_cast<uint8_t*>(packet.data()), packet.size()}};
  ssize_t n;
  do {
    n = ::writev(fd(), iov, 2);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return absl::ErrnoToStatus(
        errno, fmt::format("TUN {}: write of a {}-byte packet", name_, packet.size()));
  }
  return true;
}

}  // namespace dar::net
