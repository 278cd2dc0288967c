// The controller's gRPC listener, with a cap on the connections it holds at once.
//
// gRPC 1.51 owns its accept loop and has no setting for a cap, so the controller accepts
// connections itself and hands each one to gRPC (grpc::experimental::ExternalConnectionAcceptor,
// which then runs TLS and HTTP/2 on it as on a connection it accepted). A connection beyond the
// cap is closed at once, before any TLS, and counted. The connections handed over are known
// by their socket cookies; which of them are still open (established, or closed by the peer
// only) is read from the kernel through sock_diag, as `ss` reads it, so a connection that gRPC
// closes frees its place without gRPC saying so, and nothing else on the port (a connection
// reset while it waited to be accepted, another process's) is counted. The kernel is asked
// only at the cap, and then at most every 10 ms, so a quiet listener costs one accept() a
// connection.
//
// Thread-safe: Start() runs the accept loop on a thread of its own, Stop() ends it.
#ifndef DAR_CONTROL_CONNECTION_LIMITER_H_
#define DAR_CONTROL_CONNECTION_LIMITER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace dar::control {

// The socket cookies (SO_COOKIE) of the TCP connections of this network namespace whose local
// port is `port` and whose descriptor may be open: ESTABLISHED or CLOSE_WAIT (those waiting to
// be accepted included). Errors: the netlink socket cannot be opened, or the dump failed.
absl::StatusOr<std::vector<uint64_t>> TcpSocketCookies(uint16_t port);

class ConnectionLimiter {
 public:
  // Takes ownership of `fd`, an accepted connection of the listener `listener_fd`.
  using Handoff = std::function<void(int listener_fd, int fd)>;

  // Listens on `address` ("host:port"; port 0 picks one; the host may be a name, an IPv4
  // address or a bracketed IPv6 one). `on_refused` (optional) is called, on the accept thread,
  // for each connection closed at the cap. Errors: the address does not resolve or cannot be
  // bound, max_connections < 1, the kernel cannot count connections (sock_diag).
  static absl::StatusOr<std::unique_ptr<ConnectionLimiter>> Listen(
      const std::string& address, int max_connections, Handoff handoff,
      std::function<void()> on_refused = nullptr);
  ConnectionLimiter(const ConnectionLimiter&) = delete;
  ConnectionLimiter& operator=(const ConnectionLimiter&) = delete;
  ~ConnectionLimiter();  // Stop(), then closes the listener

  // Accepts on a thread of its own until Stop.
  void Start();
  void Stop();

  int port() const { return port_; }
  // Connections handed over and not known to be closed (an upper bound).
  size_t held() const { return held_count_.load(std::memory_order_relaxed); }
  int max_connections() const { return max_.load(std::memory_order_relaxed); }
  // From the next connection on; open ones stay.
  void set_max_connections(int max) { max_.store(max, std::memory_order_relaxed); }
  // Connections closed at once because the cap was reached.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  // Takes ownership of `listener` and `wake`.
  ConnectionLimiter(int listener, int wake, int port, int max, Handoff handoff,
                    std::function<void()> on_refused);
  void Loop();
  // Whether one more connection fits under the cap.
  bool Room();

  const int listener_;
  const int wake_;  // eventfd: Stop
  int port_;
  std::atomic<int> max_;
  Handoff handoff_;
  std::function<void()> on_refused_;
  std::thread thread_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> held_count_{0};
  static constexpr std::chrono::milliseconds kRecount{10};
  // Accept thread only: the cookies of the connections handed over and not yet seen closed,
  // and when the kernel was last asked.
  absl::flat_hash_set<uint64_t> held_;
  std::chrono::steady_clock::time_point counted_at_{};
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONNECTION_LIMITER_H_
