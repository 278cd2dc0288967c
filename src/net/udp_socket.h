// A non-blocking IPv4 UDP socket with batched I/O (recvmmsg / sendmmsg): the agent's overlay
// transport. The caller owns every buffer and polls fd() (poll/epoll) for readiness; no call
// allocates or blocks.
//
// Thread-compatible: one thread may receive while another sends only if each uses its own
// socket object (the batch descriptors are per object).
#ifndef DAR_NET_UDP_SOCKET_H_
#define DAR_NET_UDP_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/ip_packet.h"
#include "net/scoped_fd.h"

namespace dar::net {

// One datagram of a receive batch: the caller's buffer in, what arrived out.
struct RecvSlot {
  RecvSlot() = default;
  explicit RecvSlot(absl::Span<uint8_t> b) : buffer(b) {}

  absl::Span<uint8_t> buffer;  // in: where the datagram goes
  size_t size = 0;             // out: bytes stored in buffer
  bool truncated = false;      // out: the datagram was longer than buffer; the rest is lost
  Ipv4Endpoint from;           // out: the sender
  // out: with UDP GRO (EnableGro), the size of each datagram the kernel coalesced into
  // buffer[0, size): all but the last have this size, the last may be shorter. 0: one datagram.
  size_t segment_size = 0;
};

// The datagrams of a received slot: one, or the ones the kernel coalesced (segment_size).
// Calls visit(offset, size) for each in order; REQUIRES: slot filled by RecvBatch.
template <typename Visit>
void ForEachDatagram(const RecvSlot& slot, Visit&& visit) {
  const size_t step = slot.segment_size == 0 ? slot.size : slot.segment_size;
  if (step == 0) {
    visit(size_t{0}, size_t{0});  // an empty datagram
    return;
  }
  for (size_t at = 0; at < slot.size; at += step) visit(at, std::min(step, slot.size - at));
}

// Room for the UDP_SEGMENT control message of one UDP GSO send.
union GsoControl {
  char buf[CMSG_SPACE(sizeof(uint16_t))];
  cmsghdr align;
};
// Attaches a UDP_SEGMENT control message (in `control`, which must live until the send) to `h`:
// the kernel cuts the message into datagrams of `segment` bytes, the last possibly shorter.
void AttachUdpSegment(msghdr& h, GsoControl& control, uint16_t segment);

// One datagram of a send batch.
struct SendItem {
  absl::Span<const uint8_t> data;
  Ipv4Endpoint to;
};

class UdpSocket {
 public:
  static constexpr int kDefaultMaxBatch = 64;

  // Opens a non-blocking, close-on-exec UDP socket with SO_REUSEADDR, bound to `local` (port 0
  // picks a free port; local() tells which). `max_batch` bounds the datagrams one RecvBatch or
  // SendBatch call moves; their descriptors are allocated here, once.
  // Errors: the failing system call, with the address and errno text.
  // REQUIRES: max_batch >= 1.
  static absl::StatusOr<UdpSocket> Bind(const Ipv4Endpoint& local,
                                        int max_batch = kDefaultMaxBatch);

  UdpSocket(UdpSocket&&) = default;
  UdpSocket& operator=(UdpSocket&&) = default;

  int fd() const { return fd_.get(); }
  // The address the socket is bound to.
  const Ipv4Endpoint& local() const { return local_; }
  int max_batch() const { return static_cast<int>(msgs_.size()); }

  // Sets SO_RCVBUF and SO_SNDBUF (the kernel doubles them and caps them at
  // net.core.rmem_max / wmem_max); 0 leaves one unchanged.
  absl::Status SetBufferBytes(int receive_bytes, int send_bytes);

  // Turns on UDP GRO (UDP_GRO): datagrams of one sender that arrive together, or a UDP GSO
  // message sent whole over loopback or a veth, are received as one slot of up to 64 KB
  // (RecvSlot::segment_size; give each slot a buffer of kMaxGroBytes). One trip through the
  // stack and one slot then carry up to 64 datagrams. Errors: the kernel refused (older than
  // 5.0), naming the socket.
  absl::Status EnableGro();
  static constexpr size_t kMaxGroBytes = 65536;

  // Receives the datagrams waiting, up to min(slots.size(), max_batch()), into slots[0..n);
  // returns n, 0 if none is waiting. Each slot's buffer must be non-empty.
  absl::StatusOr<int> RecvBatch(absl::Span<RecvSlot> slots);

  // Sends items[0..n) in order, up to max_batch() of them; returns n, the number the kernel
  // took (fewer than offered, possibly 0, when the send buffer is full: retry the rest when
  // fd() is writable). An error on the first item is returned as a Status naming its
  // destination; an error on a later item ends the batch there and is reported by the next
  // call.
  absl::StatusOr<int> SendBatch(absl::Span<const SendItem> items);

  // Sends `data` to `to` as one UDP GSO message: datagrams of `segment` bytes, the last
  // possibly shorter. Blocking callers aside, a full send buffer is an Unavailable error.
  // Errors name the destination. REQUIRES: segment > 0.
  absl::Status SendGso(absl::Span<const uint8_t> data, uint16_t segment, const Ipv4Endpoint& to);

 private:
  friend struct SteeredSockets;
  UdpSocket(ScopedFd fd, const Ipv4Endpoint& local, int max_batch);
  // Bind, with SO_REUSEPORT as well when `reuse_port`.
  static absl::StatusOr<UdpSocket> Open(const Ipv4Endpoint& local, int max_batch, bool reuse_port);

  ScopedFd fd_;
  Ipv4Endpoint local_;
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iovs_;
  std::vector<sockaddr_in> addrs_;
  // Room for a UDP_GRO control message per receive slot.
  union Control {
    char buf[CMSG_SPACE(sizeof(int))];
    cmsghdr align;
  };
  std::vector<Control> controls_;
};

// Two sockets on one address and port, each with its own receive queue: the kernel hands every
// arriving datagram whose payload byte at `offset` lies in [low, high] to `control`, every
// other one (and one too short to have that byte) to `data`. This is how a router keeps its
// control plane's packets out of the queues transit traffic fills: a flood that overflows
// data's queue leaves control's untouched. Both send from the same address and port, so a
// peer cannot tell them apart.
//
// Mechanism: SO_REUSEPORT on both and a classic BPF program on the port's group
// (SO_ATTACH_REUSEPORT_CBPF; Linux 4.5). The program runs when a datagram is delivered; the
// GRO stage picks a socket without it, so GRO (on both sockets, if wanted) may still join a
// control datagram behind data of the same sender: `data` must accept both kinds.
struct SteeredSockets {
  UdpSocket data;
  UdpSocket control;

  // Errors: the failing system call, naming the address. REQUIRES: max_batch >= 1, low <= high.
  static absl::StatusOr<SteeredSockets> Bind(const Ipv4Endpoint& local, int max_batch,
                                             size_t offset, uint8_t low, uint8_t high);
};

}  // namespace dar::net

#endif  // DAR_NET_UDP_SOCKET_H_
