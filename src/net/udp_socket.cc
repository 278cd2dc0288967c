#include "net/udp_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/udp.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "fmt/format.h"

namespace dar::net {
namespace {

sockaddr_in ToSockaddr(const Ipv4Endpoint& e) {
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(e.port);
  a.sin_addr.s_addr = htonl(e.address.value);
  return a;
}

Ipv4Endpoint FromSockaddr(const sockaddr_in& a) {
  return Ipv4Endpoint{Ipv4Address{ntohl(a.sin_addr.s_addr)}, ntohs(a.sin_port)};
}

}  // namespace

absl::StatusOr<UdpSocket> UdpSocket::Bind(const Ipv4Endpoint& local, int max_batch) {
  return Open(local, max_batch, /*reuse_port=*/false);
}

absl::StatusOr<UdpSocket> UdpSocket::Open(const Ipv4Endpoint& local, int max_batch,
                                          bool reuse_port) {
  assert(max_batch >= 1);
  ScopedFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket for {}: socket", ToString(local)));
  }
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: SO_REUSEADDR", ToString(local)));
  }
  if (reuse_port && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: SO_REUSEPORT", ToString(local)));
  }
  const sockaddr_in addr = ToSockaddr(local);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket: bind to {}", ToString(local)));
  }
  sockaddr_in bound;
  socklen_t len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: getsockname", ToString(local)));
  }
  return UdpSocket(std::move(fd), FromSockaddr(bound), max_batch);
}

absl::StatusOr<SteeredSockets> SteeredSockets::Bind(const Ipv4Endpoint& local, int max_batch,
                                                    size_t offset, uint8_t low, uint8_t high) {
  assert(low <= high);
  // The group's sockets are numbered in the order they join it: data is 0, control 1. With
  // port 0, control joins the port data was given.
  absl::StatusOr<UdpSocket> data = UdpSocket::Open(local, max_batch, /*reuse_port=*/true);
  if (!data.ok()) return data.status();
  absl::StatusOr<UdpSocket> control =
      UdpSocket::Open(data->local(), max_batch, /*reuse_port=*/true);
  if (!control.ok()) return control.status();
  // A = payload[offset]; 1 (control) if low <= A <= high, else 0 (data). A load past the
  // end of the payload ends the program with 0.
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, static_cast<uint32_t>(offset)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, low, 0, 2),
      BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, high, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, 1),
      BPF_STMT(BPF_RET | BPF_K, 0),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
  if (::setsockopt(data->fd(), SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof(program)) !=
      0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("UDP socket {}: SO_ATTACH_REUSEPORT_CBPF", ToString(data->local())));
  }
  return SteeredSockets{std::move(*data), std::move(*control)};
}

UdpSocket::UdpSocket(ScopedFd fd, const Ipv4Endpoint& local, int max_batch)
    : fd_(std::move(fd)),
      local_(local),
      msgs_(max_batch),
      iovs_(max_batch),
      addrs_(max_batch),
      controls_(max_batch) {}

absl::Status UdpSocket::EnableGro() {
  const int one = 1;
  if (::setsockopt(fd(), SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: UDP_GRO", ToString(local_)));
  }
  return absl::OkStatus();
}

absl::Status UdpSocket::SetBufferBytes(int receive_bytes, int send_bytes) {
  if (receive_bytes > 0 &&
      ::setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &receive_bytes, sizeof(receive_bytes)) != 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("UDP socket {}: SO_RCVBUF {}", ToString(local_), receive_bytes));
  }
  if (send_bytes > 0 &&
      ::setsockopt(fd(), SOL_SOCKET, SO_SNDBUF, &send_bytes, sizeof(send_bytes)) != 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("UDP socket {}: SO_SNDBUF {}", ToString(local_), send_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> UdpSocket::RecvBatch(absl::Span<RecvSlot> slots) {
  const size_t n = std::min(slots.size(), msgs_.size());
  if (n == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    iovs_[i].iov_base = slots[i].buffer.data();
    iovs_[i].iov_len = slots[i].buffer.size();
    msghdr& h = msgs_[i].msg_hdr;
    std::memset(&h, 0, sizeof(h));
    h.msg_name = &addrs_[i];
    h.msg_namelen = sizeof(addrs_[i]);
    h.msg_iov = &iovs_[i];
    h.msg_iovlen = 1;
    h.msg_control = controls_[i].buf;
    h.msg_controllen = sizeof(controls_[i].buf);
    msgs_[i].msg_len = 0;
  }
  int got;
  do {
    got = ::recvmmsg(fd(), msgs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: recvmmsg", ToString(local_)));
  }
  for (int i = 0; i < got; ++i) {
    slots[i].size = msgs_[i].msg_len;
    slots[i].truncated = (msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
    slots[i].from = FromSockaddr(addrs_[i]);
    slots[i].segment_size = 0;
    msghdr& h = msgs_[i].msg_hdr;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int size;
        std::memcpy(&size, CMSG_DATA(c), sizeof(size));
        // A coalesced slot that holds a single datagram is reported as one.
        if (size > 0 && static_cast<size_t>(size) < slots[i].size) {
          slots[i].segment_size = static_cast<size_t>(size);
        }
      }
    }
  }
  return got;
}

absl::StatusOr<int> UdpSocket::SendBatch(absl::Span<const SendItem> items) {
  const size_t n = std::min(items.size(), msgs_.size());
  if (n == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    addrs_[i] = ToSockaddr(items[i].to);
    iovs_[i].iov_base = const_cast<uint8_t*>(items[i].data.data());
    iovs_[i].iov_len = items[i].data.size();
    msghdr& h = msgs_[i].msg_hdr;
    std::memset(&h, 0, sizeof(h));
    h.msg_name = &addrs_[i];
    h.msg_namelen = sizeof(addrs_[i]);
    h.msg_iov = &iovs_[i];
    h.msg_iovlen = 1;
  }
  int sent;
  do {
    sent = ::sendmmsg(fd(), msgs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return 0;
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: sendmmsg to {}", ToString(local_),
                                                  ToString(items[0].to)));
  }
  return sent;
}

void AttachUdpSegment(msghdr& h, GsoControl& control, uint16_t segment) {
  h.msg_control = control.buf;
  h.msg_controllen = sizeof(control.buf);
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
}

absl::Status UdpSocket::SendGso(absl::Span<const uint8_t> data, uint16_t segment,
                                const Ipv4Endpoint& to) {
  assert(segment > 0);
  sockaddr_in addr = ToSockaddr(to);
  iovec iov{const_cast<uint8_t*>(data.data()), data.size()};
  msghdr h{};
  h.msg_name = &addr;
  h.msg_namelen = sizeof(addr);
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  GsoControl control;
  AttachUdpSegment(h, control, segment);
  ssize_t n;
  do {
    n = ::sendmsg(fd(), &h, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return absl::ErrnoToStatus(errno, fmt::format("UDP socket {}: GSO send of {} bytes to {}",
                                                  ToString(local_), data.size(), ToString(to)));
  }
  return absl::OkStatus();
}

}  // namespace dar::net
