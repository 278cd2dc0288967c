// A layer-3 TUN device: the agent's interface to applications on its node. Packets the kernel
// routes to the device are read here as whole IP packets (no packet-information prefix), and
// packets written here enter the node's IP stack as if they had arrived on the device.
//
// The device exists while the object holds it (it is not persistent) in the network namespace
// of the thread that opened it. Needs CAP_NET_ADMIN. Thread-compatible.
#ifndef DAR_NET_TUN_H_
#define DAR_NET_TUN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/ip_packet.h"
#include "net/scoped_fd.h"

namespace dar::net {

struct TunConfig {
  // The interface name, at most 15 characters (IFNAMSIZ - 1). Required.
  std::string name;
  int mtu = 1400;
  // The device's IPv4 address and prefix length (0..32); the kernel adds the connected route.
  Ipv4Address address;
  int prefix_length = 24;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

class TunDevice {
 public:
  // Creates the device (IFF_TUN | IFF_NO_PI, non-blocking), sets its MTU and address and
  // brings it up. Errors name the device and the step that failed (open, TUNSETIFF, an
  // ioctl), with the errno text; PermissionDenied without CAP_NET_ADMIN.
  static absl::StatusOr<TunDevice> Open(const TunConfig& config);

  TunDevice(TunDevice&&) = default;
  TunDevice& operator=(TunDevice&&) = default;

  // For poll/epoll: readable when a packet waits.
  int fd() const { return fd_.get(); }
  // The name the kernel gave the device (the one asked for).
  const std::string& name() const { return name_; }
  int mtu() const { return mtu_; }

  // Reads one IP packet into `buffer`; returns its size, 0 if none is waiting. A packet longer
  // than the buffer is cut to it (keep the buffer at least mtu() bytes).
  absl::StatusOr<size_t> Read(absl::Span<uint8_t> buffer);
  // Writes one whole IP packet; false if the device cannot take it now (try again later).
  // Errors (e.g. EINVAL for a malformed packet) name the device.
  absl::StatusOr<bool> Write(absl::Span<const uint8_t> packet);

 private:
  TunDevice(ScopedFd fd, std::string name, int mtu)
      : fd_(std::move(fd)), name_(std::move(name)), mtu_(mtu) {}

  ScopedFd fd_;
  std::string name_;
  int mtu_;
};

}  // namespace dar::net

#endif  // DAR_NET_TUN_H_
