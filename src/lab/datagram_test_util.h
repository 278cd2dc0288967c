// A paced stream of numbered UDP datagrams between two namespaces of a lab, for the lab's system
// tests: what was lost, duplicated, and the longest pause in delivery. Test code only.
#ifndef DAR_LAB_DATAGRAM_TEST_UTIL_H_
#define DAR_LAB_DATAGRAM_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "lab/lab_test_util.h"
#include "net/netns.h"
#include "net/scoped_fd.h"

namespace dar::lab {

// A paced stream of numbered UDP datagrams from one namespace to an overlay address: one every
// millisecond. The receiver records when each number arrived.
class DatagramStream {
  using Clock = std::chrono::steady_clock;

 public:
  static absl::StatusOr<std::unique_ptr<DatagramStream>> Open(const std::string& from_netns,
                                                              const std::string& to_netns,
                                                              const std::string& to_address,
                                                              uint16_t port) {
    auto s = std::unique_ptr<DatagramStream>(new DatagramStream());
    s->to_.sin_family = AF_INET;
    s->to_.sin_port = htons(port);
    if (inet_pton(AF_INET, to_address.c_str(), &s->to_.sin_addr) != 1) {
      return absl::InvalidArgumentError("bad address " + to_address);
    }
    RETURN_IF_ERROR(net::RunInNamespace(to_netns, [&]() -> absl::Status {
      s->receiver_.Reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      if (::bind(s->receiver_.get(), reinterpret_cast<const sockaddr*>(&s->to_), sizeof(s->to_)) !=
          0) {
        return absl::ErrnoToStatus(errno, "bind " + to_address);
      }
      return absl::OkStatus();
    }));
    RETURN_IF_ERROR(net::RunInNamespace(from_netns, [&]() -> absl::Status {
      s->sender_.Reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      return s->sender_.valid() ? absl::OkStatus() : absl::ErrnoToStatus(errno, "socket");
    }));
    return s;
  }

  ~DatagramStream() { Stop(); }

  void Start() {
    receiving_ = std::thread([this] { Receive(); });
    sending_ = std::thread([this] { Send(); });
  }

  // Stops sending, waits up to a second for the datagrams still in flight, stops receiving.
  void Stop() {
    if (!sending_.joinable()) return;
    stop_sending_ = true;
    sending_.join();
    WaitFor([&] { return newest_.load() + 1 >= sent_.load(); }, std::chrono::seconds(1));
    stop_receiving_ = true;
    receiving_.join();
  }

  uint32_t sent() const { return sent_.load(); }
  uint32_t received() const { return received_.load(); }

  // Waits until `count` more datagrams have been sent (time passes with the stream, not with a
  // fixed sleep).
  bool WaitSent(uint32_t count, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const uint32_t target = sent() + count;
    return WaitFor([&] { return sent() >= target; }, timeout);
  }

  struct Report {
    uint32_t sent = 0;
    uint32_t lost = 0;        // of [first, end)
    uint32_t duplicates = 0;  // arrivals of a datagram that had arrived already
    int64_t longest_gap_ms;   // longest time without an arrival while datagrams were due
  };
  // After Stop: datagrams [first, end) lost, and the longest time between two arrivals over
  // the whole stream.
  Report Analyse(uint32_t first, uint32_t end) const {
    Report r;
    r.sent = static_cast<uint32_t>(sent_at_.size());
    std::vector<bool> seen(sent_at_.size(), false);
    for (const auto& [seq, at] : arrivals_) {
      if (seq >= seen.size()) continue;
      r.duplicates += seen[seq];
      seen[seq] = true;
    }
    for (uint32_t s = first; s < std::min<uint32_t>(end, r.sent); ++s) r.lost += !seen[s];
    Clock::duration longest{};
    for (size_t i = 1; i < arrivals_.size(); ++i) {
      longest = std::max(longest, arrivals_[i].second - arrivals_[i - 1].second);
    }
    r.longest_gap_ms = std::chrono::duration_cast<std::chrono::milliseconds>(longest).count();
    return r;
  }

 private:
  DatagramStream() = default;

  void Send() {
    while (!stop_sending_) {
      const uint32_t seq = static_cast<uint32_t>(sent_at_.size());
      sent_at_.push_back(Clock::now());
      ::sendto(sender_.get(), &seq, sizeof seq, 0, reinterpret_cast<const sockaddr*>(&to_),
               sizeof to_);
      sent_.store(seq + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void Receive() {
    while (!stop_receiving_) {
      pollfd p{receiver_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      uint32_t seq = 0;
      if (::recv(receiver_.get(), &seq, sizeof seq, 0) != sizeof seq) continue;
      arrivals_.emplace_back(seq, Clock::now());
      received_.fetch_add(1);
      if (seq > newest_.load()) newest_.store(seq);
    }
  }

  sockaddr_in to_{};
  net::ScopedFd sender_, receiver_;
  std::thread sending_, receiving_;
  std::atomic<bool> stop_sending_{false}, stop_receiving_{false};
  std::atomic<uint32_t> sent_{0}, received_{0}, newest_{0};
  std::vector<Clock::time_point> sent_at_;                        // sender thread, then Analyse
  std::vector<std::pair<uint32_t, Clock::time_point>> arrivals_;  // receiver thread, then Analyse
};

}  // namespace dar::lab

#endif  // DAR_LAB_DATAGRAM_TEST_UTIL_H_
