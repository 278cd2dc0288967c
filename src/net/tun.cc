#include "net/tun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

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
  req.ifr_flags = IFF_TUN | IFF_NO_PI;
  if (::ioctl(fd.get(), TUNSETIFF, &req) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("TUN {}: TUNSETIFF", name));
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
  return TunDevice(std::move(fd), std::move(actual), config.mtu);
}

absl::StatusOr<size_t> TunDevice::Read(absl::Span<uint8_t> buffer) {
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

absl::StatusOr<bool> TunDevice::Write(absl::Span<const uint8_t> packet) {
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

}  // namespace dar::net
