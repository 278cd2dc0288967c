// The controller's gRPC listener, with a cap on the connections it holds at once.
//
// gRPC 1.51 owns its accept loop and has no setting for a cap, so the controller accepts
// connections itself and hands each one to gRPC (grpc::experimental::ExternalConnectionAcceptor,
// which then runs TLS and HTTP/2 on it as on a connection it accepted). A connection beyond the
// cap is closed at once, before any TLS, and counted. What is open is counted by the kernel
// (at most every 10 ms while at the cap):
// the TCP sockets of this network namespace whose local port is the listener's and whose
// descriptor is still open (established, or closed by the peer only; not those waiting in the
// accept queue), read through sock_diag as `ss` reads them, so a connection that gRPC closes
// stops counting without gRPC telling anyone. The kernel is asked only when the connections
// accepted since it was last asked could have reached the cap, so a quiet listener costs one
// accept() a connection.
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

#include "absl/status/statusor.h"

namespace dar::control {

// The accepted TCP connections of this network namespace whose local port is `port` and whose
// descriptor is open (ESTABLISHED or CLOSE_WAIT, less those still in the listener's accept
// queue). Errors: the netlink socket cannot be opened or read.
absl::StatusOr<int> CountTcpConnections(uint16_t port);

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
  int max_connections() const { return max_.load(std::memory_order_relaxed); }
  // From the next connection on; open ones stay.
  void set_max_connections(int max) { max_.store(max, std::memory_order_relaxed); }
  // Connections closed at once because the cap was reached.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  // Takes ownership of `listener`.
  ConnectionLimiter(int listener, int port, int max, Handoff handoff,
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
  static constexpr std::chrono::milliseconds kRecount{10};
  // Accept thread only: open connections when the kernel was last asked, plus those accepted
  // since (an upper bound: some may have closed), and when it was asked.
  int known_ = 0;
  std::chrono::steady_clock::time_point counted_at_{};
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONNECTION_LIMITER_H_
