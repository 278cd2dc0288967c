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

// The states of a connection whose descriptor may be open on this side: established, or
// closed by the peer only (the others come after this side's close).
constexpr uint32_t kHeldStates = (1u << TCP_ESTABLISHED) | (1u << TCP_CLOSE_WAIT);

// Adds the cookies of one family's sockets on `port` to `out`, from one netlink dump.
absl::Status DumpFamily(int nl, uint8_t family, uint16_t port, std::vector<uint64_t>* out) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = family;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = kHeldStates;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl, &message, sizeof message, 0, reinterpret_cast<const sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return absl::ErrnoToStatus(errno, "sock_diag: send");
  }
  alignas(nlmsghdr) std::array<char, 32768> buffer;
  for (;;) {
    const ssize_t n = ::recv(nl, buffer.data(), buffer.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "sock_diag: receive");
    }
    if (n == 0) return absl::InternalError("sock_diag: the dump ended without its end");
    int left = static_cast<int>(n);
    for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer.data()); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        // Both carry an error number first (0, or minus an errno): a dump that failed part
        // way must not pass for a complete one.
        int error = 0;
        if (h->nlmsg_len >= NLMSG_LENGTH(sizeof error)) {
          std::memcpy(&error, NLMSG_DATA(h), sizeof error);
        }
        if (error < 0) return absl::ErrnoToStatus(-error, "sock_diag: the dump failed");
        if (h->nlmsg_type == NLMSG_ERROR) return absl::InternalError("sock_diag: refused");
        return absl::OkStatus();
      }
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(d->id.idiag_sport) != port) continue;
      out->push_back(static_cast<uint64_t>(d->id.idiag_cookie[0]) |
                     static_cast<uint64_t>(d->id.idiag_cookie[1]) << 32);
    }
  }
}

uint64_t CookieOf(int fd) {
  uint64_t cookie = 0;
  socklen_t length = sizeof cookie;
  if (::getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &length) != 0) return 0;
  return cookie;
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> TcpSocketCookies(uint16_t port) {
  const int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return absl::ErrnoToStatus(errno, "sock_diag: socket");
  std::vector<uint64_t> cookies;
  absl::Status status;
  for (const uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    status = DumpFamily(nl, family, port, &cookies);
    if (!status.ok()) break;
  }
  ::close(nl);
  if (!status.ok()) return status;
  return cookies;
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
  // The first address that binds; an IPv6 wildcard takes IPv4 too, as gRPC's does.
  int fd = -1;
  absl::Status failed;
  for (const addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      failed = absl::ErrnoToStatus(errno, fmt::format("listen {}: socket", address));
      continue;
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    const char* step = ::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ? "bind"
                       : ::listen(fd, 1024) != 0                    ? "listen"
                                                                    : nullptr;
    if (step != nullptr) {
      failed = absl::ErrnoToStatus(errno, fmt::format("listen {}: {}", address, step));
      ::close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return failed;
  const auto fail = [&](const absl::Status& s) {
    ::close(fd);
    return s;
  };
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return fail(absl::ErrnoToStatus(errno, fmt::format("listen {}: getsockname", address)));
  }
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  // Counting must work before the first connection depends on it.
  if (absl::StatusOr<std::vector<uint64_t>> open = TcpSocketCookies(static_cast<uint16_t>(port));
      !open.ok()) {
    return fail(open.status());
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return fail(absl::ErrnoToStatus(errno, "listen: eventfd"));
  return std::unique_ptr<ConnectionLimiter>(new ConnectionLimiter(
      fd, wake, port, max_connections, std::move(handoff), std::move(on_refused)));
}

ConnectionLimiter::ConnectionLimiter(int listener, int wake, int port, int max, Handoff handoff,
                                     std::function<void()> on_refused)
    : listener_(listener),
      wake_(wake),
      port_(port),
      max_(max),
      handoff_(std::move(handoff)),
      on_refused_(std::move(on_refused)) {}

ConnectionLimiter::~ConnectionLimiter() {
  Stop();
  ::close(listener_);
  ::close(wake_);
}

void ConnectionLimiter::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void ConnectionLimiter::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof one);
  thread_.join();
}

bool ConnectionLimiter::Room() {
  const size_t max = static_cast<size_t>(max_.load(std::memory_order_relaxed));
  if (held_.size() < max) return true;
  // At the cap by what was handed over (some may have closed since): ask the kernel which of
  // them are still open, at most once per kRecount (a flood of connections is then closed at
  // the rate accept goes, not at the rate of a dump of every connection; a place freed waits
  // that long at most). If the kernel cannot say, refuse: the cap is what protects the
  // process.
  const auto now = std::chrono::steady_clock::now();
  if (now - counted_at_ < kRecount) return false;
  counted_at_ = now;
  const absl::StatusOr<std::vector<uint64_t>> open = TcpSocketCookies(static_cast<uint16_t>(port_));
  if (!open.ok()) return false;
  const absl::flat_hash_set<uint64_t> still(open->begin(), open->end());
  absl::erase_if(held_, [&](uint64_t cookie) { return !still.contains(cookie); });
  held_count_.store(held_.size(), std::memory_order_relaxed);
  return held_.size() < max;
}

void ConnectionLimiter::Loop() {
  std::array<pollfd, 2> fds = {pollfd{listener_, POLLIN, 0}, pollfd{wake_, POLLIN, 0}};
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno != EINTR) ::usleep(10000);
      continue;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) {
      if (fds[0].revents != 0) ::usleep(10000);  // an error on the listener: do not spin
      continue;
    }
    while (!stopping_.load(std::memory_order_relaxed)) {
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
      // gRPC's own listener sets no delay on what it accepts; small table and ack writes must
      // not wait for Nagle here either.
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      held_.insert(CookieOf(fd));
      held_count_.store(held_.size(), std::memory_order_relaxed);
      handoff_(listener_, fd);
    }
  }
}

}  // namespace dar::control
