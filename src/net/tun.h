// A layer-3 TUN device: the agent's interface to applications on its node. Packets the kernel
// routes to the device are read here as whole IP packets (no packet-information prefix), and
// packets written here enter the node's IP stack as if they had arrived on the device.
//
// An offload device (TunConfig::offload) exchanges each packet with a virtio_net_hdr, as a
// virtual NIC does: the kernel's TCP then hands the device 64 KB super-packets to be segmented
// (TSO) and leaves transport checksums to it, and a super-packet written to it enters the stack
// as one packet (as after GRO). net/tun_offload.h segments and coalesces them.
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
  // IFF_VNET_HDR with TUNSETOFFLOAD (checksum and TCP/IPv4 segmentation offload): see the top
  // of this file. Reads then need Read(buffer, overflow, info). Default: plain packets.
  bool offload = false;
  // The device's transmit queue (txqueuelen): packets the kernel has routed to the device and
  // the reader has not read yet; past it the kernel drops them. The kernel's default, 500, is
  // short for a data plane that reads in batches between other work: a sender's burst, or one
  // scheduling delay of the reader on a busy machine, overflows it. (A UDP sender is held back
  // by its send buffer before that, while its datagrams wait here.) 1..1000000.
  int tx_queue_packets = 4096;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// What travels with a packet of an offload device (the kernel's struct virtio_net_hdr).
struct OffloadInfo {
  enum class Gso : uint8_t {
    kNone,   // a single packet
    kTcpV4,  // a TCP/IPv4 super-packet: segment_bytes of TCP payload per segment
    kTcpV6,
    kUdp,    // UDP segmentation (USO): segment_bytes of UDP payload per datagram
    kOther,  // anything else (e.g. UFO): not handled by the data plane
  };
  Gso gso = Gso::kNone;
  // The transport checksum at checksum_start + checksum_offset holds only the pseudo-header
  // sum: the rest of the packet from checksum_start is still to be added (CHECKSUM_PARTIAL).
  bool needs_checksum = false;
  uint16_t header_bytes = 0;   // IP and transport headers (a hint for GSO)
  uint16_t segment_bytes = 0;  // GSO: transport payload per segment
  uint16_t checksum_start = 0;
  uint16_t checksum_offset = 0;
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
  bool offload() const { return offload_; }

  // The largest packet an offload device reads or takes: an IPv4 super-packet.
  static constexpr size_t kMaxSuperPacketBytes = 65535;

  // Reads one IP packet into `buffer`; returns its size, 0 if none is waiting. A packet longer
  // than the buffer is cut to it (keep the buffer at least mtu() bytes).
  // REQUIRES: !offload() (FailedPrecondition otherwise).
  absl::StatusOr<size_t> Read(absl::Span<uint8_t> buffer);
  // Offload devices: reads one packet, possibly a super-packet, and what the kernel says about
  // it; returns its size, 0 if none is waiting. The packet fills `buffer` first and continues
  // in `overflow` (so that a small packet lands whole where the caller wants it, and a
  // super-packet still fits: keep buffer.size() + overflow.size() >= kMaxSuperPacketBytes).
  // REQUIRES: offload() (FailedPrecondition otherwise).
  absl::StatusOr<size_t> Read(absl::Span<uint8_t> buffer, absl::Span<uint8_t> overflow,
                              OffloadInfo* info);
  // Writes one whole IP packet; false if the device cannot take it now (try again later).
  // Errors (e.g. EINVAL for a malformed packet) name the device. On an offload device the
  // packet goes with an empty header (complete, checksums filled in).
  absl::StatusOr<bool> Write(absl::Span<const uint8_t> packet);
  // Offload devices: writes a packet or super-packet described by `info` (kNone, kTcpV4, kTcpV6
  // or kUdp). The kernel refuses one that `info` does not fit (an error naming the device).
  // REQUIRES: offload().
  absl::StatusOr<bool> Write(absl::Span<const uint8_t> packet, const OffloadInfo& info);

 private:
  TunDevice(ScopedFd fd, std::string name, int mtu, bool offload)
      : fd_(std::move(fd)), name_(std::move(name)), mtu_(mtu), offload_(offload) {}

  ScopedFd fd_;
  std::string name_;
  int mtu_;
  bool offload_;
};

}  // namespace dar::net

#endif  // DAR_NET_TUN_H_
