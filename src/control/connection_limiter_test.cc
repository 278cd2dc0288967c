#include "control/connection_limiter.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::control {
namespace {

using ::testing::HasSubstr;

// A client connected to 127.0.0.1:port (or -1).
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` within `ms` (end of file).
bool ClosedWithin(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

// The connections handed over, which the test holds as gRPC would.
struct Held {
  std::mutex mu;
  std::vector<int> fds;
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return fds.size();
  }
};

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// Three connections fit; the fourth and fifth are closed at once, before any byte; once one
// held connection closes, the next one fits again, and a raised cap takes more.
TEST(ConnectionLimiterTest, HoldsAtMostTheCapAndClosesTheRestAtOnce) {
  Held held;
  std::atomic<int> refused{0};
  absl::StatusOr<std::unique_ptr<ConnectionLimiter>> limiter = ConnectionLimiter::Listen(
      "127.0.0.1:0", 3,
      [&](int, int fd) {
        std::lock_guard<std::mutex> lock(held.mu);
        held.fds.push_back(fd);
      },
      [&] { ++refused; });
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  (*limiter)->Start();
  const int port = (*limiter)->port();
  ASSERT_GT(port, 0);
  std::vector<int> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(Connect(port));
  ASSERT_TRUE(WaitFor([&] { return held.size() == 3 && (*limiter)->refused() == 2; }));
  int closed = 0;
  for (int fd : clients) closed += ClosedWithin(fd, 200);
  EXPECT_EQ(closed, 2);
  EXPECT_EQ(refused, 2);
  EXPECT_EQ((*limiter)->held(), 3u);
  // The kernel's view: the three held, and the five clients' own ends are on other ports.
  absl::StatusOr<std::vector<uint64_t>> open = TcpSocketCookies(static_cast<uint16_t>(port));
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->size(), 3u);  // the two refused are closed on this side

  // One held connection ends (as gRPC closes one): room for the next.
  {
    std::lock_guard<std::mutex> lock(held.mu);
    ::close(held.fds.front());
    held.fds.erase(held.fds.begin());
  }
  const int again = Connect(port);
  ASSERT_TRUE(WaitFor([&] { return held.size() == 3; }));
  EXPECT_FALSE(ClosedWithin(again, 100));
  EXPECT_EQ((*limiter)->refused(), 2u);
  const int over = Connect(port);
  EXPECT_TRUE(ClosedWithin(over, 2000));
  (*limiter)->set_max_connections(4);
  const int raised = Connect(port);
  ASSERT_TRUE(WaitFor([&] { return held.size() == 4; }));
  EXPECT_FALSE(ClosedWithin(raised, 100));

  (*limiter)->Stop();
  for (int fd : clients) ::close(fd);
  for (int fd : {again, over, raised}) ::close(fd);
  std::lock_guard<std::mutex> lock(held.mu);
  for (int fd : held.fds) ::close(fd);
}

// A burst far above the cap, faster than the accept loop: the cap still holds (what waits in
// the accept queue is not counted as held, nor let in past the cap).
TEST(ConnectionLimiterTest, ABurstIsCutAtTheCap) {
  Held held;
  absl::StatusOr<std::unique_ptr<ConnectionLimiter>> limiter =
      ConnectionLimiter::Listen("127.0.0.1:0", 20, [&](int, int fd) {
        std::lock_guard<std::mutex> lock(held.mu);
        held.fds.push_back(fd);
      });
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  std::vector<int> clients;
  for (int i = 0; i < 300; ++i) clients.push_back(Connect((*limiter)->port()));
  (*limiter)->Start();  // after the burst: all of it waits in the accept queue
  ASSERT_TRUE(WaitFor([&] { return held.size() + (*limiter)->refused() == 300; }))
      << held.size() << " held, " << (*limiter)->refused() << " refused";
  EXPECT_EQ(held.size(), 20u);
  (*limiter)->Stop();
  for (int fd : clients) ::close(fd);
  std::lock_guard<std::mutex> lock(held.mu);
  for (int fd : held.fds) ::close(fd);
}

TEST(ConnectionLimiterTest, BadAddressesAndCapsAreRefused) {
  const auto handoff = [](int, int fd) { ::close(fd); };
  EXPECT_THAT(std::string(ConnectionLimiter::Listen("nowhere", 3, handoff).status().message()),
              HasSubstr("must be host:port"));
  EXPECT_THAT(
      std::string(
          ConnectionLimiter::Listen("no.such.host.invalid:1", 3, handoff).status().message()),
      HasSubstr("cannot resolve"));
  EXPECT_THAT(std::string(ConnectionLimiter::Listen("127.0.0.1:0", 0, handoff).status().message()),
              HasSubstr("at least 1"));
  absl::StatusOr<std::unique_ptr<ConnectionLimiter>> taken =
      ConnectionLimiter::Listen("127.0.0.1:0", 3, handoff);
  ASSERT_TRUE(taken.ok());
  const std::string same = "127.0.0.1:" + std::to_string((*taken)->port());
  EXPECT_THAT(std::string(ConnectionLimiter::Listen(same, 3, handoff).status().message()),
              HasSubstr("bind"));
  // IPv6 in brackets, where the machine has it.
  absl::StatusOr<std::unique_ptr<ConnectionLimiter>> v6 =
      ConnectionLimiter::Listen("[::1]:0", 3, handoff);
  if (v6.ok()) {
    EXPECT_GT((*v6)->port(), 0);
  }
}

}  // namespace
}  // namespace dar::control
