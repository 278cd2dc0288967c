#include "net/udp_socket.h"

#include <netinet/udp.h>
#include <poll.h>

#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::net {
namespace {

using ::testing::HasSubstr;

const Ipv4Endpoint kLoopbackAnyPort{Ipv4Address{0x7f000001}, 0};

// Waits until `fd` is readable or the deadline passes.
bool WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) > 0) return true;
  }
}

// Datagram i: its index in the first two bytes, then bytes derived from it.
std::vector<uint8_t> Datagram(int i) {
  std::vector<uint8_t> d(1 + (i * 97) % 1400 + 2);
  d[0] = static_cast<uint8_t>(i >> 8);
  d[1] = static_cast<uint8_t>(i);
  for (size_t k = 2; k < d.size(); ++k) d[k] = static_cast<uint8_t>(i * 7 + k);
  return d;
}

TEST(UdpSocketTest, BindsToAFreePort) {
  absl::StatusOr<UdpSocket> s = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(s->fd(), 0);
  EXPECT_EQ(s->local().address, kLoopbackAnyPort.address);
  EXPECT_NE(s->local().port, 0);
  EXPECT_EQ(s->max_batch(), UdpSocket::kDefaultMaxBatch);
}

TEST(UdpSocketTest, BindErrorNamesTheAddress) {
  // 192.0.2.1 (TEST-NET-1) is not an address of this host.
  absl::StatusOr<UdpSocket> s = UdpSocket::Bind({Ipv4Address{0xc0000201}, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("bind to 192.0.2.1:0"));
}

TEST(UdpSocketTest, ReuseAddressAllowsASecondBind) {
  absl::StatusOr<UdpSocket> a = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<UdpSocket> b = UdpSocket::Bind(a->local());
  EXPECT_TRUE(b.ok()) << b.status();
}

// Two sockets on one port: datagrams whose third byte is 2 or 3 reach `control`, the others
// (also one too short to have a third byte) reach `data`, in order; a peer sees one address.
TEST(SteeredSocketsTest, SteersByOnePayloadByte) {
  absl::StatusOr<SteeredSockets> pair =
      SteeredSockets::Bind(kLoopbackAnyPort, 8, /*offset=*/2, /*low=*/2, /*high=*/3);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_NE(pair->data.local().port, 0);
  EXPECT_EQ(pair->control.local(), pair->data.local());
  absl::StatusOr<UdpSocket> tx = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(tx.ok()) << tx.status();
  const std::vector<std::vector<uint8_t>> sent = {{0, 0, 1, 10}, {0, 0, 2, 11}, {0, 0, 3, 12},
                                                  {0, 0, 4, 13}, {9},           {0, 0, 2, 14}};
  for (const auto& d : sent) {
    const SendItem item{d, pair->data.local()};
    ASSERT_EQ(*tx->SendBatch(absl::MakeConstSpan(&item, 1)), 1);
  }
  const auto receive = [](UdpSocket& s, size_t want) {
    std::vector<std::vector<uint8_t>> got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::array<uint8_t, 64> buf;
    while (got.size() < want && WaitReadable(s.fd(), deadline)) {
      RecvSlot slot{absl::MakeSpan(buf)};
      absl::StatusOr<int> n = s.RecvBatch(absl::MakeSpan(&slot, 1));
      if (n.ok() && *n == 1) got.emplace_back(buf.begin(), buf.begin() + slot.size);
    }
    return got;
  };
  const std::vector<std::vector<uint8_t>> control = receive(pair->control, 3);
  const std::vector<std::vector<uint8_t>> data = receive(pair->data, 3);
  EXPECT_EQ(control, (std::vector<std::vector<uint8_t>>{sent[1], sent[2], sent[5]}));
  EXPECT_EQ(data, (std::vector<std::vector<uint8_t>>{sent[0], sent[3], sent[4]}));
}

TEST(UdpSocketTest, NothingWaitingReturnsZero) {
  absl::StatusOr<UdpSocket> s = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(s.ok()) << s.status();
  std::array<uint8_t, 64> buf;
  RecvSlot slot{absl::MakeSpan(buf)};
  absl::StatusOr<int> n = s->RecvBatch(absl::MakeSpan(&slot, 1));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
}

TEST(UdpSocketTest, BatchOf64ArrivesIntact) {
  absl::StatusOr<UdpSocket> tx = UdpSocket::Bind(kLoopbackAnyPort);
  absl::StatusOr<UdpSocket> rx = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(tx.ok()) << tx.status();
  ASSERT_TRUE(rx.ok()) << rx.status();
  ASSERT_TRUE(rx->SetBufferBytes(1 << 20, 0).ok());

  constexpr int kCount = 64;
  std::vector<std::vector<uint8_t>> sent;
  std::vector<SendItem> items;
  for (int i = 0; i < kCount; ++i) sent.push_back(Datagram(i));
  for (int i = 0; i < kCount; ++i) items.push_back({sent[i], rx->local()});
  int offered = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (offered < kCount && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<int> n = tx->SendBatch(absl::MakeConstSpan(items).subspan(offered));
    ASSERT_TRUE(n.ok()) << n.status();
    offered += *n;
  }
  ASSERT_EQ(offered, kCount);

  // Caller-owned buffers, reused across calls.
  std::vector<std::array<uint8_t, 2048>> buffers(kCount);
  std::vector<RecvSlot> slots(kCount);
  std::vector<std::vector<uint8_t>> got;
  while (static_cast<int>(got.size()) < kCount) {
    ASSERT_TRUE(WaitReadable(rx->fd(), deadline)) << "received " << got.size() << " of 64";
    for (int i = 0; i < kCount; ++i) slots[i] = RecvSlot{absl::MakeSpan(buffers[i])};
    absl::StatusOr<int> n = rx->RecvBatch(absl::MakeSpan(slots));
    ASSERT_TRUE(n.ok()) << n.status();
    for (int i = 0; i < *n; ++i) {
      EXPECT_FALSE(slots[i].truncated);
      EXPECT_EQ(slots[i].from, tx->local());
      got.emplace_back(buffers[i].begin(), buffers[i].begin() + slots[i].size);
    }
  }
  EXPECT_EQ(got, sent);  // intact and, on loopback, in order
}

// Sends `datagrams` to `to` as one UDP GSO message (UDP_SEGMENT): all but the last the same
// size.
void SendGso(UdpSocket& s, const std::vector<std::vector<uint8_t>>& datagrams,
             const Ipv4Endpoint& to) {
  std::vector<uint8_t> data;
  for (const auto& d : datagrams) data.insert(data.end(), d.begin(), d.end());
  const absl::Status sent = s.SendGso(data, static_cast<uint16_t>(datagrams[0].size()), to);
  ASSERT_TRUE(sent.ok()) << sent;
}

TEST(UdpSocketTest, GroReceivesAGsoMessageWholeAndSplitsItBack) {
  absl::StatusOr<UdpSocket> tx = UdpSocket::Bind(kLoopbackAnyPort);
  absl::StatusOr<UdpSocket> rx = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(tx.ok() && rx.ok());
  ASSERT_TRUE(rx->EnableGro().ok());
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 10; ++i) {
    std::vector<uint8_t> d(500);
    for (size_t k = 0; k < d.size(); ++k) d[k] = static_cast<uint8_t>(i * 13 + k);
    sent.push_back(d);
  }
  sent.push_back(std::vector<uint8_t>(200, 0x77));  // a shorter last one
  SendGso(*tx, sent, rx->local());
  // A plain datagram after it arrives in a slot of its own.
  const std::vector<uint8_t> plain(321, 0x31);
  const SendItem item{plain, rx->local()};
  ASSERT_EQ(*tx->SendBatch(absl::MakeConstSpan(&item, 1)), 1);

  // More than one UDP message can carry is refused, naming where it was going.
  const absl::Status too_big = tx->SendGso(std::vector<uint8_t>(70000), 1400, rx->local());
  EXPECT_THAT(std::string(too_big.message()), HasSubstr(ToString(rx->local())));

  std::vector<uint8_t> buffers(2 * UdpSocket::kMaxGroBytes);
  std::vector<RecvSlot> slots;
  for (int i = 0; i < 2; ++i) {
    slots.emplace_back(
        absl::MakeSpan(buffers).subspan(i * UdpSocket::kMaxGroBytes, UdpSocket::kMaxGroBytes));
  }
  std::vector<std::vector<uint8_t>> got;
  std::vector<size_t> segment_sizes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < sent.size() + 1) {
    ASSERT_TRUE(WaitReadable(rx->fd(), deadline)) << "received " << got.size();
    absl::StatusOr<int> n = rx->RecvBatch(absl::MakeSpan(slots));
    ASSERT_TRUE(n.ok()) << n.status();
    for (int i = 0; i < *n; ++i) {
      segment_sizes.push_back(slots[i].segment_size);
      ForEachDatagram(slots[i], [&](size_t offset, size_t size) {
        const uint8_t* p = slots[i].buffer.data() + offset;
        got.emplace_back(p, p + size);
      });
    }
  }
  std::vector<std::vector<uint8_t>> want = sent;
  want.push_back(plain);
  EXPECT_EQ(got, want);
  EXPECT_EQ(segment_sizes, (std::vector<size_t>{500, 0})) << "one slot for the GSO message";
}

TEST(UdpSocketTest, ForEachDatagramVisitsAnEmptyDatagramOnce) {
  RecvSlot slot;
  int visits = 0;
  ForEachDatagram(slot, [&](size_t offset, size_t size) {
    EXPECT_EQ(offset, 0u);
    EXPECT_EQ(size, 0u);
    ++visits;
  });
  EXPECT_EQ(visits, 1);
}

TEST(UdpSocketTest, LongDatagramIsReportedTruncated) {
  absl::StatusOr<UdpSocket> tx = UdpSocket::Bind(kLoopbackAnyPort);
  absl::StatusOr<UdpSocket> rx = UdpSocket::Bind(kLoopbackAnyPort);
  ASSERT_TRUE(tx.ok() && rx.ok());
  const std::vector<uint8_t> big(1000, 0xab);
  const SendItem item{big, rx->local()};
  ASSERT_EQ(*tx->SendBatch(absl::MakeConstSpan(&item, 1)), 1);
  ASSERT_TRUE(WaitReadable(rx->fd(), std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  std::vector<uint8_t> small(100);
  RecvSlot slot{absl::MakeSpan(small)};
  ASSERT_EQ(*rx->RecvBatch(absl::MakeSpan(&slot, 1)), 1);
  EXPECT_TRUE(slot.truncated);
  EXPECT_EQ(slot.size, 100u);
  EXPECT_EQ(small, std::vector<uint8_t>(100, 0xab));
}

TEST(UdpSocketTest, BatchesAreCappedAtMaxBatch) {
  absl::StatusOr<UdpSocket> tx = UdpSocket::Bind(kLoopbackAnyPort, /*max_batch=*/4);
  absl::StatusOr<UdpSocket> rx = UdpSocket::Bind(kLoopbackAnyPort, /*max_batch=*/3);
  ASSERT_TRUE(tx.ok() && rx.ok());
  const std::vector<uint8_t> d = {1, 2, 3};
  const std::vector<SendItem> items(10, SendItem{d, rx->local()});
  absl::StatusOr<int> n = tx->SendBatch(items);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4);
  std::vector<std::array<uint8_t, 16>> buffers(10);
  std::vector<RecvSlot> slots;
  for (auto& b : buffers) slots.push_back(RecvSlot{absl::MakeSpan(b)});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int received = 0;
  while (received < 4) {
    ASSERT_TRUE(WaitReadable(rx->fd(), deadline));
    absl::StatusOr<int> r = rx->RecvBatch(absl::MakeSpan(slots));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(*r, 3);
    received += *r;
  }
  EXPECT_EQ(received, 4);
}

}  // namespace
}  // namespace dar::net
