#include "control/connection_limiter.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <utility>

#include "fmt/format.h"

namespace dar::control {
namespace {

// The states of a connection whose descriptor is open on this side: established, or closed
// by the peer only (the others come after this side's close, or before the accept). And the
// listener, whose receive queue is the connections waiting to be accepted: established, but
// not held yet.
constexpr uint32_t kHeldStates = (1u << TCP_ESTABLISHED) | (1u << TCP_CLOSE_WAIT);
constexpr uint32_t kQueriedStates = kHeldStates | (1u << TCP_LISTEN);

// Counts the sockets of one family in one netlink dump.
absl::StatusOr<int> CountFamily(int nl, uint8_t family, uint16_t port) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = family;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = kQueriedStates;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl, &message, sizeof message, 0, reinterpret_cast<const sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return absl::ErrnoToStatus(errno, "sock_diag: send");
  }
  int count = 0;
  alignas(nlmsghdr) std::array<char, 32768> buffer;
  for (;;) {
    const ssize_t n = ::recv(nl, buffer.data(), buffer.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "sock_diag: receive");
    }
    int left = static_cast<int>(n);
    for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer.data()); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return count;
      if (h->nlmsg_type == NLMSG_ERROR) return absl::InternalError("sock_diag: the kernel refused");
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(d->id.idiag_sport) != port) continue;
      if (d->idiag_state == TCP_LISTEN) {
        count -= static_cast<int>(d->idiag_rqueue);
      } else {
        ++count;
      }
    }
    if (n == 0) return count;
  }
}

}  // namespace

absl::StatusOr<int> CountTcpConnections(uint16_t port) {
  const int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return absl::ErrnoToStatus(errno, "sock_diag: socket");
  int total = 0;
  absl::Status status;
  for (const uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    absl::StatusOr<int> n = CountFamily(nl, family, port);
    if (!n.ok()) {
      status = n.status();
      break;
    }
    total += *n;
  }
  ::close(nl);
  if (!status.ok()) return status;
  return total;
}

absl::StatusOr<std::unique_ptr<ConnectionLimiter>> ConnectionLimiter::Listen(
    const std::string& address, int max_connections, Handoff handoff,
    std::function<void()> on_refused) {
  if (max_connections < 1) {
    return absl::InvalidArgumentError(
        fmt::format("max_connections {} must be at least 1", max_connections));
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("listen {}: must be host:port", address));
  }
  std::string host = address.substr(0, colon);
  const std::string service = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int e =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      e != 0) {
    return absl::InvalidArgumentError(
        fmt::format("listen {}: cannot resolve: {}", address, ::gai_strerror(e)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> results(found, &::freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, fmt::format("listen {}: socket", address));
  const auto fail = [&](const char* step) {
    const absl::Status s = absl::ErrnoToStatus(errno, fmt::format("listen {}: {}", address, step));
    ::close(fd);
    return s;
  };
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) return fail("bind");
  if (::listen(fd, 1024) != 0) return fail("listen");
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return fail("getsockname");
  }
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  // Counting must work before the first connection depends on it.
  if (absl::StatusOr<int> n = CountTcpConnections(static_cast<uint16_t>(port)); !n.ok()) {
    ::close(fd);
    return n.status();
  }
  return std::unique_ptr<ConnectionLimiter>(
      new ConnectionLimiter(fd, port, max_connections, std::move(handoff), std::move(on_refused)));
}

ConnectionLimiter::ConnectionLimiter(int listener, int port, int max, Handoff handoff,
                                     std::function<void()> on_refused)
    : listener_(listener),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      port_(port),
      max_(max),
      handoff_(std::move(handoff)),
      on_refused_(std::move(on_refused)) {}

ConnectionLimiter::~ConnectionLimiter() {
  Stop();
  ::close(listener_);
  if (wake_ >= 0) ::close(wake_);
}

void ConnectionLimiter::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void ConnectionLimiter::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
  thread_.join();
}

bool ConnectionLimiter::Room() {
  const int max = max_.load(std::memory_order_relaxed);
  if (known_ < max) return true;
  // At the cap by the last count and what was accepted since: ask the kernel what is open
  // now, at most once per kRecount (a flood of connections is then closed at the rate accept
  // goes, not at the rate of a dump of every connection; one that closed waits for a place
  // that long at most). This connection is counted already: it was accepted. If the kernel
  // cannot say, refuse: the cap is what protects the process.
  const auto now = std::chrono::steady_clock::now();
  if (now - counted_at_ < kRecount) return false;
  counted_at_ = now;
  const absl::StatusOr<int> open = CountTcpConnections(static_cast<uint16_t>(port_));
  if (!open.ok()) return false;
  known_ = *open - 1;
  return known_ < max;
}

void ConnectionLimiter::Loop() {
  std::array<pollfd, 2> fds = {pollfd{listener_, POLLIN, 0}, pollfd{wake_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // EAGAIN: all taken. EMFILE and the like: wait for the next readiness (poll again
        // rather than spin: the connection stays in the backlog).
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) ::usleep(10000);
        break;
      }
      if (!Room()) {
        ::close(fd);
        refused_.fetch_add(1, std::memory_order_relaxed);
        if (on_refused_) on_refused_();
        continue;
      }
      ++known_;
      handoff_(listener_, fd);
    }
  }
}

}  // namespace dar::control
