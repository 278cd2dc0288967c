// Integration tests (root only): network namespaces, veth pairs and a TUN device. Everything
// a test creates is named with the process id and removed by RAII, also when it fails.
#include "net/tun.h"

#include <net/if.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/ip_packet.h"
#include "net/netns.h"
#include "net/overlay_header.h"
#include "net/tun_offload.h"
#include "net/udp_socket.h"

namespace dar::net {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

#define SKIP_UNLESS_ROOT()                                                              \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, TUN devices)"; \
  static_assert(true)

std::string UniqueName(const std::string& what) {
  return fmt::format("dar-{}-{}", what, ::getpid());
}

bool NamespaceExists(const std::string& name) {
  return ::access(("/run/netns/" + name).c_str(), F_OK) == 0;
}

// Waits until `fd` is readable or the deadline passes.
bool WaitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) > 0) return true;
  }
}

Ipv4Address Addr(const char* text) { return *ParseIpv4Address(text); }

TEST(NetNamespaceTest, CreatedAndDeleted) {
  SKIP_UNLESS_ROOT();
  const std::string name = UniqueName("ns");
  {
    absl::StatusOr<NetNamespace> ns = NetNamespace::Create(name);
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_TRUE(NamespaceExists(name));
    absl::StatusOr<std::string> links = ns->Run({"ip", "-o", "link", "show"});
    ASSERT_TRUE(links.ok()) << links.status();
    EXPECT_THAT(*links, HasSubstr("lo:"));
    EXPECT_THAT(*links, HasSubstr("UP"));  // loopback brought up

    // A second namespace of the same name is refused, naming the command.
    absl::StatusOr<NetNamespace> again = NetNamespace::Create(name);
    ASSERT_FALSE(again.ok());
    EXPECT_THAT(again.status().message(), HasSubstr("ip netns add " + name));
    EXPECT_TRUE(NamespaceExists(name));  // the failed attempt did not delete ours
  }
  EXPECT_FALSE(NamespaceExists(name));
}

TEST(NetNamespaceTest, BadNames) {
  for (const std::string& bad : {std::string(), std::string("a/b"), std::string(100, 'x')}) {
    absl::StatusOr<NetNamespace> ns = NetNamespace::Create(bad);
    EXPECT_EQ(ns.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(NetNamespaceTest, RunsCodeInside) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> ns = NetNamespace::Create(UniqueName("run"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  absl::StatusOr<VethPair> veth =
      VethPair::Create({UniqueName("v0").substr(0, 15), ns->name(), "10.97.0.1/24"},
                       {UniqueName("v1").substr(0, 15), ns->name(), ""});
  ASSERT_TRUE(veth.ok()) << veth.status();
  // The veth end is visible inside the namespace (thread and child process), not outside.
  const std::string inside = veth->a().name;
  EXPECT_EQ(::if_nametoindex(inside.c_str()), 0u);
  bool seen = false;
  ASSERT_TRUE(RunInNamespace(*ns, [&] {
                seen = ::if_nametoindex(inside.c_str()) != 0;
                return absl::OkStatus();
              }).ok());
  EXPECT_TRUE(seen);
  absl::StatusOr<int> code =
      RunInNamespaceProcess(*ns, [&] { return ::if_nametoindex(inside.c_str()) != 0 ? 7 : 1; });
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 7);
  // fn's error comes back.
  absl::Status s = RunInNamespace(*ns, [] { return absl::AbortedError("from inside"); });
  EXPECT_THAT(s.message(), HasSubstr("from inside"));
}

TEST(NetNamespaceTest, DeletedNamespaceCannotBeEntered) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> ns = NetNamespace::Create(UniqueName("gone"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  NetNamespace moved = std::move(*ns);
  const std::string name = moved.name();
  ASSERT_TRUE(moved.Delete().ok());
  EXPECT_FALSE(NamespaceExists(name));
  absl::Status s = RunInNamespace(moved, [] { return absl::OkStatus(); });
  EXPECT_FALSE(s.ok());
}

// Two namespaces joined by a veth pair: a datagram crosses from one to the other.
TEST(VethPairTest, ConnectsTwoNamespaces) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> left = NetNamespace::Create(UniqueName("left"));
  absl::StatusOr<NetNamespace> right = NetNamespace::Create(UniqueName("right"));
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_TRUE(right.ok()) << right.status();
  const std::string a = fmt::format("dva{}", ::getpid()), b = fmt::format("dvb{}", ::getpid());
  {
    absl::StatusOr<VethPair> veth =
        VethPair::Create({a, left->name(), "10.98.0.1/24"}, {b, right->name(), "10.98.0.2/24"});
    ASSERT_TRUE(veth.ok()) << veth.status();

    std::optional<UdpSocket> tx, rx;
    ASSERT_TRUE(RunInNamespace(*left, [&] {
                  absl::StatusOr<UdpSocket> s = UdpSocket::Bind({Addr("10.98.0.1"), 0});
                  if (!s.ok()) return s.status();
                  tx.emplace(std::move(*s));
                  return absl::OkStatus();
                }).ok());
    ASSERT_TRUE(RunInNamespace(*right, [&] {
                  absl::StatusOr<UdpSocket> s = UdpSocket::Bind({Addr("10.98.0.2"), 0});
                  if (!s.ok()) return s.status();
                  rx.emplace(std::move(*s));
                  return absl::OkStatus();
                }).ok());
    // The sockets stay in their namespaces when used from this thread.
    const std::vector<uint8_t> hello = {'h', 'i'};
    const SendItem item{hello, rx->local()};
    std::array<uint8_t, 64> buf;
    RecvSlot slot{absl::MakeSpan(buf)};
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int got = 0;
    // The first datagram may wait for neighbour discovery; resend until one arrives.
    while (got == 0 && Clock::now() < deadline) {
      ASSERT_TRUE(tx->SendBatch(absl::MakeConstSpan(&item, 1)).ok());
      if (!WaitReadable(rx->fd(), std::min(deadline, Clock::now() + std::chrono::seconds(1)))) {
        continue;
      }
      absl::StatusOr<int> n = rx->RecvBatch(absl::MakeSpan(&slot, 1));
      ASSERT_TRUE(n.ok()) << n.status();
      got = *n;
    }
    ASSERT_EQ(got, 1);
    EXPECT_EQ(slot.from, tx->local());
    EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + slot.size), hello);
  }
  // The pair is gone with its owner.
  EXPECT_FALSE(left->Run({"ip", "link", "show", "dev", a}).ok());
  EXPECT_FALSE(right->Run({"ip", "link", "show", "dev", b}).ok());
}

TEST(TunDeviceTest, ConfigIsValidated) {
  TunConfig c;
  c.name = "this-name-is-too-long";
  EXPECT_THAT(c.Validate().message(), HasSubstr("name"));
  c.name = "dtun0";
  c.mtu = 10;
  EXPECT_THAT(c.Validate().message(), HasSubstr("mtu"));
  c.mtu = 1400;
  c.prefix_length = 33;
  EXPECT_THAT(c.Validate().message(), HasSubstr("prefix_length"));
  c.prefix_length = 24;
  c.tx_queue_packets = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("tx_queue_packets"));
}

// In a fresh namespace: the kernel routes a UDP datagram for 10.99.0.2 into the TUN, where it
// is read as an IP packet; a reply written to the TUN reaches the sending socket.
TEST(TunDeviceTest, CarriesPacketsBothWays) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> ns = NetNamespace::Create(UniqueName("tun"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  std::optional<TunDevice> tun;
  std::optional<UdpSocket> socket;
  const std::string tun_name = fmt::format("dtun{}", ::getpid());
  absl::Status opened = RunInNamespace(*ns, [&] {
    TunConfig config;
    config.name = tun_name;
    config.mtu = 1400;
    config.address = Addr("10.99.0.1");
    config.prefix_length = 24;
    absl::StatusOr<TunDevice> t = TunDevice::Open(config);
    if (!t.ok()) return t.status();
    tun.emplace(std::move(*t));
    absl::StatusOr<UdpSocket> s = UdpSocket::Bind({Addr("10.99.0.1"), 0});
    if (!s.ok()) return s.status();
    socket.emplace(std::move(*s));
    return absl::OkStatus();
  });
  ASSERT_TRUE(opened.ok()) << opened;
  EXPECT_EQ(tun->name(), tun_name);
  absl::StatusOr<std::string> addr = ns->Run({"ip", "-o", "addr", "show", "dev", tun_name});
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_THAT(*addr, HasSubstr("10.99.0.1/24"));
  absl::StatusOr<std::string> link = ns->Run({"ip", "-o", "link", "show", "dev", tun_name});
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_THAT(*link, HasSubstr("mtu 1400"));
  EXPECT_THAT(*link, HasSubstr("qlen 4096"));  // TunConfig's default, not the kernel's 500

  // Out: socket -> kernel -> TUN.
  const Ipv4Endpoint peer{Addr("10.99.0.2"), 7777};
  const std::vector<uint8_t> ping = {'p', 'i', 'n', 'g', 0, 1, 2, 3};
  const SendItem item{ping, peer};
  ASSERT_EQ(*socket->SendBatch(absl::MakeConstSpan(&item, 1)), 1);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::array<uint8_t, 2048> buf;
  std::optional<UdpIpv4Packet> out;
  std::vector<uint8_t> out_bytes;
  while (!out.has_value()) {
    // Other packets (IPv6 router solicitations, ...) may come first: skip them.
    ASSERT_TRUE(WaitReadable(tun->fd(), deadline)) << "no UDP packet on the TUN";
    absl::StatusOr<size_t> n = tun->Read(absl::MakeSpan(buf));
    ASSERT_TRUE(n.ok()) << n.status();
    out_bytes.assign(buf.begin(), buf.begin() + *n);
    absl::StatusOr<UdpIpv4Packet> p = ParseUdpIpv4Packet(out_bytes);
    if (p.ok() && p->destination == peer) out = *p;
  }
  EXPECT_EQ(out->source, socket->local());
  EXPECT_EQ(std::vector<uint8_t>(out->payload.begin(), out->payload.end()), ping);
  const uint32_t hash = FlowHash(out_bytes);
  EXPECT_EQ(FlowHash(out_bytes), hash);
  // Another datagram of the same flow hashes alike although its payload differs.
  const std::vector<uint8_t> ping2 = {'a', 'g', 'a', 'i', 'n'};
  std::vector<uint8_t> same_flow(kIpv4HeaderBytes + kUdpHeaderBytes + ping2.size());
  ASSERT_TRUE(BuildUdpIpv4Packet(socket->local(), peer, ping2, absl::MakeSpan(same_flow), 1).ok());
  EXPECT_EQ(FlowHash(same_flow), hash);

  // Back: TUN -> kernel -> socket.
  const std::vector<uint8_t> pong = {'p', 'o', 'n', 'g'};
  std::vector<uint8_t> reply(kIpv4HeaderBytes + kUdpHeaderBytes + pong.size());
  ASSERT_TRUE(BuildUdpIpv4Packet(peer, socket->local(), pong, absl::MakeSpan(reply)).ok());
  absl::StatusOr<bool> written = tun->Write(reply);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(*written);
  ASSERT_TRUE(WaitReadable(socket->fd(), deadline)) << "the reply did not reach the socket";
  std::array<uint8_t, 64> rbuf;
  RecvSlot slot{absl::MakeSpan(rbuf)};
  ASSERT_EQ(*socket->RecvBatch(absl::MakeSpan(&slot, 1)), 1);
  EXPECT_EQ(slot.from, peer);
  EXPECT_EQ(std::vector<uint8_t>(rbuf.begin(), rbuf.begin() + slot.size), pong);

  // A garbage write is refused with an error naming the device, or dropped by the kernel;
  // either way nothing crashes and the device keeps working.
  const std::vector<uint8_t> garbage = {0x45, 0, 0};
  absl::StatusOr<bool> g = tun->Write(garbage);
  if (!g.ok()) {
    EXPECT_THAT(g.status().message(), HasSubstr(tun_name));
  }
}

// An offload device: the kernel leaves the UDP checksum to the reader, takes a UDP super-packet
// and splits it for the socket, and survives a header that does not fit the packet.
TEST(TunDeviceTest, OffloadDeviceCarriesPacketsAndSuperPackets) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> ns = NetNamespace::Create(UniqueName("tuno"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  std::optional<TunDevice> tun;
  std::optional<UdpSocket> socket;
  const std::string tun_name = fmt::format("dtuo{}", ::getpid());
  absl::Status opened = RunInNamespace(*ns, [&] {
    TunConfig config;
    config.name = tun_name;
    config.address = Addr("10.99.0.1");
    config.offload = true;
    absl::StatusOr<TunDevice> t = TunDevice::Open(config);
    if (!t.ok()) return t.status();
    tun.emplace(std::move(*t));
    absl::StatusOr<UdpSocket> s = UdpSocket::Bind({Addr("10.99.0.1"), 0});
    if (!s.ok()) return s.status();
    socket.emplace(std::move(*s));
    return absl::OkStatus();
  });
  ASSERT_TRUE(opened.ok()) << opened;
  ASSERT_TRUE(tun->offload());
  std::array<uint8_t, 2048> buf;
  absl::StatusOr<size_t> plain = tun->Read(absl::MakeSpan(buf));
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);

  // Out: the packet arrives whole in the first buffer; its checksum is finished here.
  const Ipv4Endpoint peer{Addr("10.99.0.2"), 7777};
  const std::vector<uint8_t> ping(1000, 0x5a);
  const SendItem item{ping, peer};
  ASSERT_EQ(*socket->SendBatch(absl::MakeConstSpan(&item, 1)), 1);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::vector<uint8_t> overflow(TunDevice::kMaxSuperPacketBytes);
  std::optional<UdpIpv4Packet> out;
  std::vector<uint8_t> out_bytes;
  while (!out.has_value()) {
    ASSERT_TRUE(WaitReadable(tun->fd(), deadline)) << "no UDP packet on the TUN";
    OffloadInfo info;
    absl::StatusOr<size_t> n = tun->Read(absl::MakeSpan(buf), absl::MakeSpan(overflow), &info);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_LE(*n, buf.size());
    out_bytes.assign(buf.begin(), buf.begin() + *n);
    ASSERT_TRUE(CompleteChecksum(absl::MakeSpan(out_bytes), info));
    absl::StatusOr<UdpIpv4Packet> p = ParseUdpIpv4Packet(out_bytes);
    if (p.ok() && p->destination == peer) out = *p;
  }
  EXPECT_EQ(std::vector<uint8_t>(out->payload.begin(), out->payload.end()), ping);

  // Back: three datagrams joined into one UDP super-packet arrive as three.
  UdpCoalescer coalescer;
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 3; ++i) {
    sent.push_back(std::vector<uint8_t>(i == 2 ? 100 : 500, i));
    std::vector<uint8_t> d(kIpv4HeaderBytes + kUdpHeaderBytes + sent.back().size());
    ASSERT_TRUE(BuildUdpIpv4Packet(peer, socket->local(), sent.back(), absl::MakeSpan(d)).ok());
    ASSERT_TRUE(coalescer.Add(d));
  }
  OffloadInfo info;
  const absl::Span<const uint8_t> super = coalescer.Take(&info);
  ASSERT_EQ(info.gso, OffloadInfo::Gso::kUdp);
  absl::StatusOr<bool> written = tun->Write(super, info);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(*written);
  for (const auto& want : sent) {
    ASSERT_TRUE(WaitReadable(socket->fd(), deadline)) << "a datagram did not reach the socket";
    std::array<uint8_t, 2048> rbuf;
    RecvSlot slot{absl::MakeSpan(rbuf)};
    ASSERT_EQ(*socket->RecvBatch(absl::MakeSpan(&slot, 1)), 1);
    EXPECT_EQ(std::vector<uint8_t>(rbuf.begin(), rbuf.begin() + slot.size), want);
  }

  // A header that does not fit the packet (TCP segmentation of a UDP datagram, a checksum
  // past its end) is refused or dropped by the kernel; the device keeps working.
  std::vector<uint8_t> d(kIpv4HeaderBytes + kUdpHeaderBytes + sent[2].size());
  ASSERT_TRUE(BuildUdpIpv4Packet(peer, socket->local(), sent[2], absl::MakeSpan(d)).ok());
  OffloadInfo bad;
  bad.gso = OffloadInfo::Gso::kTcpV4;
  bad.segment_bytes = 3;
  bad.needs_checksum = true;
  bad.checksum_start = 1000;
  bad.checksum_offset = 6;
  absl::StatusOr<bool> refused = tun->Write(d, bad);
  if (!refused.ok()) {
    EXPECT_THAT(refused.status().message(), HasSubstr(tun_name));
  }
  const std::vector<uint8_t> again = {'o', 'k'};
  std::vector<uint8_t> ok(kIpv4HeaderBytes + kUdpHeaderBytes + again.size());
  ASSERT_TRUE(BuildUdpIpv4Packet(peer, socket->local(), again, absl::MakeSpan(ok)).ok());
  ASSERT_TRUE(*tun->Write(ok));
  ASSERT_TRUE(WaitReadable(socket->fd(), deadline)) << "the device stopped working";
  std::array<uint8_t, 64> rbuf;
  RecvSlot slot{absl::MakeSpan(rbuf)};
  ASSERT_EQ(*socket->RecvBatch(absl::MakeSpan(&slot, 1)), 1);
  EXPECT_EQ(std::vector<uint8_t>(rbuf.begin(), rbuf.begin() + slot.size), again);
}

TEST(TunDeviceTest, OpenFailureNamesTheDevice) {
  SKIP_UNLESS_ROOT();
  absl::StatusOr<NetNamespace> ns = NetNamespace::Create(UniqueName("tunerr"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::string name = fmt::format("dterr{}", ::getpid());
  absl::Status s = RunInNamespace(*ns, [&] {
    TunConfig config;
    config.name = name;
    config.address = Addr("10.96.0.1");
    absl::StatusOr<TunDevice> first = TunDevice::Open(config);
    if (!first.ok()) return first.status();
    // The same name twice: TUNSETIFF on an attached device fails.
    absl::StatusOr<TunDevice> second = TunDevice::Open(config);
    if (second.ok()) return absl::InternalError("second open succeeded");
    return second.status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(name));
  EXPECT_THAT(s.message(), HasSubstr("TUNSETIFF"));
}

}  // namespace
}  // namespace dar::net
