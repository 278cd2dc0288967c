// Unit tests of the data plane that need no privileges: the pure pieces (drop reasons, DSCP,
// ingress classification, the liveness state machine, config checks) and whole Dataplanes
// without TUN devices talking over loopback sockets (probes, liveness, forwarding, drops).
// One file over 600 lines: the loopback data planes are one fixture the tests share.
// Every node of a test gets its own loopback address 127.a.b.n, with a.b from the process id,
// so that parallel test processes never share a socket address.
#include "agent/dataplane.h"

#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "base/test_support.h"
#include "core/routing.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/ip_packet.h"
#include "net/overlay_header.h"
#include "net/udp_socket.h"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

using test::WaitFor;

net::OverlayKeyBytes TestKey(uint8_t fill) {
  net::OverlayKeyBytes k;
  k.fill(fill);
  return k;
}

// Node `self`'s row of the epoch whose secret is TestKey(fill), in a lab of up to 16 nodes
// whose wire ids are their node ids (what a data plane without wire_ids derives).
std::vector<net::OverlayPairKey> TestRow(uint8_t fill, NodeId self) {
  std::vector<uint32_t> wire(16);
  for (uint32_t i = 0; i < wire.size(); ++i) wire[i] = i;
  return net::PairKeysFromSecret(TestKey(fill), wire, static_cast<uint32_t>(self));
}

// Pure pieces ---------------------------------------------------------------------------------

TEST(DropReasonTest, EveryReasonHasADistinctName) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kDropReasons; ++i) {
    const std::string_view name = DropReasonName(static_cast<DropReason>(i));
    EXPECT_NE(name, "?") << i;
    EXPECT_TRUE(names.insert(name).second) << name;
  }
}

TEST(DropReasonTest, OverlayStatusesMapToTheirReasons) {
  for (size_t i = 1; i < static_cast<size_t>(net::OverlayStatus::kCount); ++i) {
    const auto s = static_cast<net::OverlayStatus>(i);
    EXPECT_EQ(DropReasonName(DropReasonFor(s)), net::OverlayStatusName(s));
  }
}

// Every field of the snapshot besides the drops comes from the one list, so it is exported
// under its own name: a field added outside DAR_DATAPLANE_COUNTERS would be missed by ForEach.
TEST(DataplaneCountersTest, ForEachVisitsEveryCounterOnceByItsName) {
  DataplaneCounters c;
  uint64_t next = 1;
#define DAR_TEST_SET(name, help) c.name = next++;
  DAR_DATAPLANE_COUNTERS(DAR_TEST_SET)
#undef DAR_TEST_SET
  std::set<std::string_view> names;
  uint64_t expected = 1;
  c.ForEach([&](std::string_view name, std::string_view help, uint64_t value) {
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_FALSE(help.empty()) << name;
    EXPECT_EQ(value, expected++) << name;
  });
  EXPECT_EQ(names.size() * sizeof(uint64_t), sizeof(DataplaneCounters) - sizeof(c.drops));
  EXPECT_TRUE(names.count("forwarded") == 1 && names.count("sent_bytes") == 1);
}

TEST(TrafficClassTest, Cs1IsBulkEverythingElseLatency) {
  EXPECT_EQ(TrafficClassFromTos(8 << 2), net::TrafficClass::kBulk);        // CS1
  EXPECT_EQ(TrafficClassFromTos((8 << 2) | 3), net::TrafficClass::kBulk);  // CS1 with ECN CE
  EXPECT_EQ(TrafficClassFromTos(0), net::TrafficClass::kLatency);          // best effort
  EXPECT_EQ(TrafficClassFromTos(46 << 2), net::TrafficClass::kLatency);    // EF
  EXPECT_EQ(TrafficClassFromTos(10 << 2), net::TrafficClass::kLatency);    // AF11
  EXPECT_EQ(TrafficClassFromTos(1 << 2), net::TrafficClass::kLatency);     // LE (RFC 8622)
}

std::vector<uint8_t> UdpPacket(const char* dst, uint16_t dport, size_t payload, uint8_t tos = 0) {
  std::vector<uint8_t> out(net::kIpv4HeaderBytes + net::kUdpHeaderBytes + payload);
  const std::vector<uint8_t> data(payload, 0xab);
  absl::StatusOr<size_t> n =
      net::BuildUdpIpv4Packet({*net::ParseIpv4Address("10.77.0.1"), 5555},
                              {*net::ParseIpv4Address(dst), dport}, data, absl::MakeSpan(out));
  EXPECT_TRUE(n.ok()) << n.status();
  out[1] = tos;
  return out;
}

TEST(ClassifyIngressTest, ReadsDestinationClassAndFlow) {
  const std::vector<uint8_t> p = UdpPacket("10.77.0.3", 9000, 100, 8 << 2);
  IngressPacket in;
  ASSERT_TRUE(ClassifyIngress(p, &in));
  EXPECT_EQ(in.destination, *net::ParseIpv4Address("10.77.0.3"));
  EXPECT_EQ(in.traffic_class, net::TrafficClass::kBulk);
  EXPECT_EQ(in.flow_hash, net::FlowHash(p));
  // Another port is another flow; the same 5-tuple the same flow.
  IngressPacket other;
  ASSERT_TRUE(ClassifyIngress(UdpPacket("10.77.0.3", 9001, 10), &other));
  EXPECT_NE(other.flow_hash, in.flow_hash);
  EXPECT_EQ(other.traffic_class, net::TrafficClass::kLatency);
  ASSERT_TRUE(ClassifyIngress(UdpPacket("10.77.0.3", 9000, 10), &other));
  EXPECT_EQ(other.flow_hash, in.flow_hash);
}

TEST(ClassifyIngressTest, RejectsWhatIsNotIpv4) {
  IngressPacket in;
  std::vector<uint8_t> p = UdpPacket("10.77.0.3", 9000, 20);
  EXPECT_FALSE(ClassifyIngress(absl::MakeConstSpan(p).first(19), &in));  // too short
  std::vector<uint8_t> v6 = p;
  v6[0] = 0x60;
  EXPECT_FALSE(ClassifyIngress(v6, &in));
  std::vector<uint8_t> bad_ihl = p;
  bad_ihl[0] = 0x44;  // 16-byte header
  EXPECT_FALSE(ClassifyIngress(bad_ihl, &in));
  std::vector<uint8_t> long_total = p;
  long_total[2] = 0xff;  // total length beyond the bytes read
  EXPECT_FALSE(ClassifyIngress(long_total, &in));
  EXPECT_FALSE(ClassifyIngress({}, &in));
}

// A loopback lab -------------------------------------------------------------------------------

// Nodes 127.a.b.(n+1), cables between them; link sockets on port 7000 + cable index.
struct LoopbackLab {
  explicit LoopbackLab(int nodes) {
    for (int n = 0; n < nodes; ++n) {
      topology.AddNode(fmt::format("n{}", n), NodeKind::kSwitch);
      overlay.push_back(net::Ipv4Address{0x0a4d0001u + static_cast<uint32_t>(n)});  // 10.77.0.n+1
    }
  }
  net::Ipv4Address Underlay(NodeId n) const {
    const uint32_t pid = static_cast<uint32_t>(::getpid());
    return net::Ipv4Address{(127u << 24) | (((pid >> 8) & 0xff) << 16) | ((pid & 0xff) << 8) |
                            static_cast<uint32_t>(n + 1)};
  }
  void Connect(NodeId a, NodeId b) {
    const auto [ab, ba] = topology.AddDuplexLink(a, b, LinkParams{});
    cables.push_back({a, b, ab, ba});
  }
  // The socket address of `node`'s end of the cable between `node` and `peer`.
  net::Ipv4Endpoint End(NodeId node, NodeId peer) const {
    for (size_t i = 0; i < cables.size(); ++i) {
      const Cable& c = cables[i];
      if ((c.a == node && c.b == peer) || (c.b == node && c.a == peer)) {
        return {Underlay(node), static_cast<uint16_t>(7000 + i)};
      }
    }
    ADD_FAILURE() << "no cable " << node << " - " << peer;
    return {};
  }
  DataplaneConfig ConfigFor(NodeId node) const {
    DataplaneConfig c;
    c.node = node;
    c.topology = &topology;
    c.overlay_addresses = overlay;
    for (const Cable& cable : cables) {
      if (cable.a != node && cable.b != node) continue;
      const NodeId peer = cable.a == node ? cable.b : cable.a;
      NeighbourLinkConfig n;
      n.neighbour = peer;
      n.link = cable.a == node ? cable.ab : cable.ba;
      n.local = End(node, peer);
      n.peer = End(peer, node);
      n.interface = fmt::format("lo-{}-{}", node, peer);
      c.neighbours.push_back(n);
    }
    c.initial_keys = {KeyUpdate{1, TestKey(7), true}};
    c.socket_buffer_bytes = 0;
    return c;
  }

  struct Cable {
    NodeId a, b;
    LinkId ab, ba;
  };
  Topology topology;
  std::vector<net::Ipv4Address> overlay;
  std::vector<Cable> cables;
};

// A plain UDP socket standing in for a neighbour: sends sealed datagrams, receives what the
// data plane sends it. SendRaw may be called from several threads (a test's responder answers
// probes while the test sends data): a UdpSocket's batch scratch is not thread-safe, so sends
// take turns (two at once once sent a datagram with another's length: EMSGSIZE in CI).
class FakePeer {
 public:
  // Node `self` on its link to the data plane's node `neighbour`, holding its row of the epoch
  // `key_id` whose secret is TestKey(key_fill) (wire ids are node ids).
  FakePeer(const net::Ipv4Endpoint& local, NodeId self, NodeId neighbour, uint8_t key_fill = 7,
           uint32_t key_id = 1)
      : self_(static_cast<uint32_t>(self)), neighbour_(static_cast<uint32_t>(neighbour)) {
    absl::StatusOr<net::UdpSocket> s = net::UdpSocket::Bind(local);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) socket_.emplace(std::move(*s));
    EXPECT_TRUE(keys_.Add(key_id, TestRow(key_fill, self)).ok());
  }
  void SendRaw(absl::Span<const uint8_t> bytes, const net::Ipv4Endpoint& to) {
    std::lock_guard<std::mutex> lock(send_mu_);
    const net::SendItem item{bytes, to};
    absl::StatusOr<int> n = socket_->SendBatch(absl::MakeConstSpan(&item, 1));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, 1);
  }
  std::vector<uint8_t> Seal(const net::OverlayHeader& h, absl::Span<const uint8_t> payload) {
    std::vector<uint8_t> out(net::OverlayDatagramSize(payload.size()));
    absl::StatusOr<size_t> n =
        net::SealOverlay(h, payload, *keys_.current(), neighbour_, absl::MakeSpan(out));
    EXPECT_TRUE(n.ok()) << n.status();
    return out;
  }
  // A datagram with only its hop tag right (for one no end-to-end key exists).
  std::vector<uint8_t> SealHopOnly(const net::OverlayHeader& h, absl::Span<const uint8_t> payload) {
    std::vector<uint8_t> out(net::OverlayDatagramSize(payload.size()));
    EXPECT_TRUE(
        net::SealOverlayHeader(h, payload, keys_.current()->id(), absl::MakeSpan(out)).ok());
    net::SetOverlayHopTag(out.data(), out.size(), keys_.current()->peer(neighbour_)->hop,
                          neighbour_);
    return out;
  }
  // Checks a datagram from the data plane's node.
  net::OverlayStatus Parse(absl::Span<const uint8_t> datagram, net::OverlayPacket* p) const {
    return net::ParseOverlay(datagram, keys_, self_, neighbour_, p);
  }
  // The next datagram that arrives within `timeout`, or empty.
  std::vector<uint8_t> Receive(std::chrono::milliseconds timeout) {
    pollfd p{socket_->fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    std::vector<uint8_t> buf(65536);
    net::RecvSlot slot(absl::MakeSpan(buf));
    absl::StatusOr<int> n = socket_->RecvBatch(absl::MakeSpan(&slot, 1));
    if (!n.ok() || *n != 1) return {};
    buf.resize(slot.size);
    return buf;
  }
  const net::OverlayKeyRing& keys() const { return keys_; }

 private:
  uint32_t self_, neighbour_;
  std::optional<net::UdpSocket> socket_;
  net::OverlayKeyRing keys_;
  std::mutex send_mu_;
};

net::OverlayHeader DataHeader(NodeId src, NodeId dst, uint8_t hop_limit) {
  net::OverlayHeader h;
  h.type = net::OverlayType::kData;
  h.source = static_cast<uint32_t>(src);
  h.destination = static_cast<uint32_t>(dst);
  h.hop_limit = hop_limit;
  h.flow_hash = 1234;
  return h;
}

std::unique_ptr<Dataplane> MustCreate(const DataplaneConfig& c) {
  absl::StatusOr<std::unique_ptr<Dataplane>> dp = Dataplane::Create(c);
  EXPECT_TRUE(dp.ok()) << dp.status();
  return dp.ok() ? std::move(*dp) : nullptr;
}

// Tables that send every destination of `route` over the given link.
std::shared_ptr<const AgentTables> Routes(int nodes,
                                          const std::vector<std::pair<NodeId, LinkId>>& route) {
  auto t = std::make_shared<AgentTables>();
  t->version = 5;
  for (auto& rows : t->rows) {
    rows.assign(static_cast<size_t>(nodes), {});
    for (const auto& [dest, link] : route) rows[static_cast<size_t>(dest)] = {NextHop{link, 1.0}};
  }
  return t;
}

// Config checks ---------------------------------------------------------------------------------

TEST(DataplaneConfigTest, NamesTheBadField) {
  LoopbackLab lab(3);
  lab.Connect(0, 1);
  lab.Connect(1, 2);
  const DataplaneConfig good = lab.ConfigFor(1);
  EXPECT_TRUE(good.Validate().ok()) << good.Validate();

  const auto expect_bad = [&](const std::function<void(DataplaneConfig&)>& edit,
                              const std::string& what) {
    DataplaneConfig c = good;
    edit(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(s.message(), HasSubstr(what));
  };
  expect_bad([](DataplaneConfig& c) { c.topology = nullptr; }, "topology");
  expect_bad([](DataplaneConfig& c) { c.node = 3; }, "node 3");
  expect_bad([](DataplaneConfig& c) { c.overlay_addresses.pop_back(); }, "overlay addresses");
  expect_bad([](DataplaneConfig& c) { c.overlay_addresses[2] = c.overlay_addresses[0]; },
             "used twice");
  expect_bad([](DataplaneConfig& c) { c.neighbours[0].link = 99; }, "link 99");
  expect_bad([](DataplaneConfig& c) { c.neighbours[0].neighbour = 2; }, "not 1 -> 2");
  expect_bad([](DataplaneConfig& c) { c.neighbours[1] = c.neighbours[0]; }, "appears twice");
  expect_bad([](DataplaneConfig& c) { c.neighbours[0].peer.port = 0; }, "peer port");
  expect_bad([](DataplaneConfig& c) { c.probe_interval = Duration(0); }, "probe_interval");
  expect_bad([](DataplaneConfig& c) { c.liveness.missed_probes = 0; }, "missed_probes");
  expect_bad([](DataplaneConfig& c) { c.liveness.recover_replies = 0; }, "recover_replies");
  expect_bad([](DataplaneConfig& c) { c.hop_limit = 256; }, "hop_limit");
  expect_bad([](DataplaneConfig& c) { c.batch_size = 0; }, "batch_size");
  expect_bad([](DataplaneConfig& c) { c.queue_packets = 0; }, "queue_packets");
  expect_bad([](DataplaneConfig& c) { c.forwarding.flowlet_table_size = 0; }, "flowlet_table_size");
  expect_bad([](DataplaneConfig& c) { c.initial_keys[0].active = false; }, "active");
  expect_bad(
      [](DataplaneConfig& c) {
        c.tun.name = "dtun0";
        c.tun.address = c.overlay_addresses[0];
      },
      "tun address");
  expect_bad([](DataplaneConfig& c) { c.tun.name = "a-name-far-too-long"; }, "name");
}

TEST(DataplaneTest, SetKeysAndSetForwardingRefuseBadInput) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  std::unique_ptr<Dataplane> dp = MustCreate(lab.ConfigFor(0));
  ASSERT_NE(dp, nullptr);
  EXPECT_THAT(dp->SetKeys({}).message(), HasSubstr("empty"));
  EXPECT_THAT(
      dp->SetKeys({KeyUpdate{1, TestKey(1), true}, KeyUpdate{1, TestKey(2), false}}).message(),
      HasSubstr("twice"));
  EXPECT_THAT(
      dp->SetKeys({KeyUpdate{1, TestKey(1), true}, KeyUpdate{2, TestKey(2), true}}).message(),
      HasSubstr("2 keys are active"));
  std::vector<KeyUpdate> many;
  for (uint32_t i = 0; i < 5; ++i) many.push_back(KeyUpdate{i, TestKey(1), i == 0});
  EXPECT_THAT(dp->SetKeys(many).message(), HasSubstr("at most"));
  EXPECT_TRUE(dp->SetKeys({KeyUpdate{1, TestKey(1), false}, KeyUpdate{2, TestKey(2), true}}).ok());
  ForwardingConfig f;
  f.queue_bias_bytes = -1;
  EXPECT_EQ(dp->SetForwarding(f).code(), absl::StatusCode::kInvalidArgument);
  f.queue_bias_bytes = 0;
  f.mode = ForwardingMode::kPerPacket;
  EXPECT_TRUE(dp->SetForwarding(f).ok());
  EXPECT_THAT(dp->SetProbeSettings(Microseconds(500), 3).message(), HasSubstr("1 ms and 60 s"));
  EXPECT_THAT(dp->SetProbeSettings(Milliseconds(100), 0).message(), HasSubstr("at least 1"));
  EXPECT_TRUE(dp->SetProbeSettings(Milliseconds(100), 1).ok());
}

// Probe settings change while the data plane runs: a node that starts with probes off (an
// hour apart) probes every 20 ms once told to.
TEST(DataplaneLoopbackTest, ProbeSettingsApplyWhileRunning) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  std::vector<std::unique_ptr<Dataplane>> dps;
  for (NodeId n = 0; n < 2; ++n) {
    DataplaneConfig c = lab.ConfigFor(n);
    c.probe_interval = Seconds(3600);
    dps.push_back(MustCreate(c));
    ASSERT_NE(dps.back(), nullptr);
    ASSERT_TRUE(dps.back()->Start().ok());
  }
  EXPECT_EQ(dps[0]->Samples(Time(0))[0].probes_sent, 0u);
  ASSERT_TRUE(dps[0]->SetProbeSettings(Milliseconds(20), 3).ok());
  EXPECT_TRUE(WaitFor([&] { return dps[0]->Samples(Time(0))[0].probes_answered >= 5; },
                      std::chrono::seconds(20)));
}

TEST(DataplaneTest, CreateNamesTheLinkWhoseSocketCannotBind) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  DataplaneConfig c = lab.ConfigFor(0);
  c.neighbours[0].local.address = *net::ParseIpv4Address("192.0.2.1");  // not ours
  absl::StatusOr<std::unique_ptr<Dataplane>> dp = Dataplane::Create(c);
  ASSERT_FALSE(dp.ok());
  EXPECT_THAT(dp.status().message(), HasSubstr("lo-0-1"));
  EXPECT_THAT(dp.status().message(), HasSubstr("192.0.2.1"));
}

TEST(AgentTablesTest, FromStaticRouting) {
  // A line 0 - 1 - 2: node 1 reaches 0 and 2 directly, node 0 reaches 2 through 1.
  LoopbackLab lab(3);
  lab.Connect(0, 1);
  lab.Connect(1, 2);
  const RoutingTables routing = ComputeStaticTables(lab.topology);
  const std::shared_ptr<const AgentTables> t0 = AgentTablesFromRouting(routing, 0, true);
  EXPECT_TRUE(t0->is_static);
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    EXPECT_TRUE(t0->Lookup(cls, 0).empty());
    ASSERT_EQ(t0->Lookup(cls, 2).size(), 1u);
    EXPECT_EQ(t0->Lookup(cls, 2)[0].link, lab.cables[0].ab);
    EXPECT_EQ(t0->Lookup(cls, 1)[0].link, lab.cables[0].ab);
  }
  EXPECT_TRUE(t0->Lookup(0, 7).empty());
  EXPECT_TRUE(t0->Lookup(0, -1).empty());
}

// Dataplanes over loopback ------------------------------------------------------------------------

// Two data planes probe each other: both links up, RTT measured, nothing lost.
TEST(DataplaneLoopbackTest, ProbesFeedTheEstimators) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  std::vector<std::unique_ptr<Dataplane>> dps;
  for (NodeId n = 0; n < 2; ++n) {
    DataplaneConfig c = lab.ConfigFor(n);
    c.probe_interval = Milliseconds(10);
    dps.push_back(MustCreate(c));
    ASSERT_NE(dps.back(), nullptr);
  }
  for (auto& dp : dps) ASSERT_TRUE(dp->Start().ok());
  EXPECT_EQ(dps[0]->Start().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(WaitFor(
      [&] {
        return dps[0]->Samples(Time(0))[0].probes_answered >= 10 &&
               dps[1]->Samples(Time(0))[0].probes_answered >= 10;
      },
      std::chrono::seconds(20)));
  for (NodeId n = 0; n < 2; ++n) {
    const std::vector<NeighbourSample> s = dps[static_cast<size_t>(n)]->Samples(Time(42));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].neighbour, 1 - n);
    EXPECT_EQ(s[0].link, lab.ConfigFor(n).neighbours[0].link);
    const LinkSample& m = s[0].sample;
    EXPECT_EQ(m.at, Time(42));
    EXPECT_TRUE(m.up);
    EXPECT_GT(m.rtt_smoothed.count(), 0);
    EXPECT_GT(m.rtt_min.count(), 0);
    EXPECT_LE(m.rtt_min, m.rtt_smoothed);
    EXPECT_GE(m.rtt_p95, m.rtt_smoothed / 2);
    EXPECT_LE(m.loss, 0.2);  // a loaded machine may delay a reply past the grace
    EXPECT_GE(s[0].probes_sent, s[0].probes_answered);
    EXPECT_GT(m.throughput.bps(), 0);  // probes and replies are traffic too
    EXPECT_EQ(m.utilisation, 0);       // capacity unknown
    const DataplaneCounters c = dps[static_cast<size_t>(n)]->counters();
    EXPECT_GT(c.probe_replies_sent, 0u);
    EXPECT_EQ(c.total_dropped(), 0u);
    EXPECT_EQ(c.liveness_changes, 0u);
  }
  for (auto& dp : dps) dp->Stop();
  for (auto& dp : dps) dp->Stop();  // twice is fine
}

// A neighbour that stops answering is down within a few probe intervals and reported through
// the callback; it is up again once replies resume.
TEST(DataplaneLoopbackTest, SilentNeighbourGoesDownAndComesBack) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  std::vector<std::unique_ptr<Dataplane>> dps;
  for (NodeId n = 0; n < 2; ++n) {
    DataplaneConfig c = lab.ConfigFor(n);
    c.probe_interval = Milliseconds(20);
    dps.push_back(MustCreate(c));
    ASSERT_NE(dps.back(), nullptr);
  }
  std::mutex mu;
  std::vector<std::pair<NodeId, bool>> events;
  dps[0]->SetLivenessCallback([&](NodeId n, bool up) {
    std::lock_guard<std::mutex> lock(mu);
    events.emplace_back(n, up);
  });
  const auto event_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return events.size();
  };
  for (auto& dp : dps) ASSERT_TRUE(dp->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return dps[0]->Samples(Time(0))[0].probes_answered >= 3; },
                      std::chrono::seconds(20)));
  dps[1]->Stop();
  ASSERT_TRUE(WaitFor([&] { return event_count() >= 1; }, std::chrono::seconds(20)));
  EXPECT_EQ(dps[0]->LinksUp(), std::vector<bool>{false});
  EXPECT_FALSE(dps[0]->Samples(Time(0))[0].sample.up);
  ASSERT_TRUE(dps[1]->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return event_count() >= 2; }, std::chrono::seconds(20)));
  EXPECT_EQ(dps[0]->LinksUp(), std::vector<bool>{true});
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(events[0], std::make_pair(NodeId{1}, false));
  EXPECT_EQ(events[1], std::make_pair(NodeId{1}, true));
  EXPECT_EQ(dps[0]->counters().liveness_changes, 2u);
}

// Node 1 is a data plane between two fake neighbours 0 and 2. Probes are off (a long interval)
// so that the fakes need not answer them.
class TransitTest : public ::testing::Test {
 protected:
  static LoopbackLab MakeLab() {
    LoopbackLab lab(4);
    lab.Connect(0, 1);
    lab.Connect(1, 2);
    lab.Connect(1, 3);
    return lab;
  }
  void SetUp() override {
    DataplaneConfig c = lab_.ConfigFor(1);
    c.probe_interval = Seconds(3600);
    dp_ = MustCreate(c);
    ASSERT_NE(dp_, nullptr);
    // Toward 2 over the cable 1 - 2; toward 3 nowhere.
    dp_->InstallTables(Routes(4, {{2, lab_.cables[1].ab}, {0, lab_.cables[0].ba}}));
    ASSERT_TRUE(dp_->Start().ok());
  }
  uint64_t Dropped(DropReason r) const { return dp_->counters().dropped(r); }
  bool WaitDropped(DropReason r, uint64_t n) {
    return WaitFor([&] { return Dropped(r) >= n; }, std::chrono::seconds(20));
  }

  LoopbackLab lab_ = MakeLab();
  std::unique_ptr<Dataplane> dp_;
  FakePeer from_{lab_.End(0, 1), 0, 1};
  FakePeer to_{lab_.End(2, 1), 2, 1};
  const net::Ipv4Endpoint dp_in_ = lab_.End(1, 0);
};

TEST_F(TransitTest, ForwardsWithHopLimitDecrementedAndTheIngressEndToEndTag) {
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 64);
  const std::vector<uint8_t> sent = from_.Seal(DataHeader(0, 2, 5), inner);
  from_.SendRaw(sent, dp_in_);
  const std::vector<uint8_t> got = to_.Receive(std::chrono::seconds(20));
  ASSERT_FALSE(got.empty());
  // Byte for byte what the ingress sealed, but for the hop limit (byte 0) and the hop tag (the
  // last 16 bytes), which the transit node wrote for the next hop.
  ASSERT_EQ(got.size(), sent.size());
  EXPECT_TRUE(std::equal(got.begin() + 1, got.end() - net::kOverlayTagBytes, sent.begin() + 1));
  EXPECT_FALSE(
      std::equal(got.end() - net::kOverlayTagBytes, got.end(), sent.end() - net::kOverlayTagBytes));
  net::OverlayPacket p;
  ASSERT_EQ(to_.Parse(got, &p), net::OverlayStatus::kOk);
  EXPECT_EQ(p.header.type, net::OverlayType::kData);
  EXPECT_EQ(p.header.hop_limit, 4);
  EXPECT_EQ(p.header.source, 0u);
  EXPECT_EQ(p.header.destination, 2u);
  EXPECT_EQ(p.header.flow_hash, 1234u);
  EXPECT_EQ(std::vector<uint8_t>(p.payload.begin(), p.payload.end()), inner);
  // The counters are updated just after sendmmsg returns.
  ASSERT_TRUE(WaitFor([&] { return dp_->counters().sent == 1; }, std::chrono::seconds(20)));
  const DataplaneCounters c = dp_->counters();
  EXPECT_EQ(c.received, 1u);
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.total_dropped(), 0u);
}

TEST_F(TransitTest, DropsAndCountsWhatItCannotForward) {
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 64);
  from_.SendRaw(from_.Seal(DataHeader(0, 2, 1), inner), dp_in_);  // last hop was the previous
  ASSERT_TRUE(WaitDropped(DropReason::kHopLimitExhausted, 1));
  from_.SendRaw(from_.Seal(DataHeader(0, 3, 9), inner), dp_in_);  // no row toward 3
  ASSERT_TRUE(WaitDropped(DropReason::kNoRoute, 1));
  from_.SendRaw(from_.SealHopOnly(DataHeader(0, 77, 9), inner), dp_in_);  // no such node
  ASSERT_TRUE(WaitDropped(DropReason::kNoRoute, 2));
  from_.SendRaw(from_.Seal(DataHeader(0, 1, 9), inner), dp_in_);  // for node 1, which has no TUN
  ASSERT_TRUE(WaitDropped(DropReason::kNoTun, 1));
  dp_->InstallTables(nullptr);
  from_.SendRaw(from_.Seal(DataHeader(0, 2, 9), inner), dp_in_);  // no table at all
  ASSERT_TRUE(WaitDropped(DropReason::kNoRoute, 3));
  EXPECT_EQ(dp_->counters().forwarded, 0u);
  EXPECT_TRUE(to_.Receive(std::chrono::milliseconds(0)).empty());
}

TEST_F(TransitTest, DropsAndCountsMalformedAndUnauthenticatedDatagrams) {
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 64);
  // Plain UDP from outside the overlay.
  const std::vector<uint8_t> hello = {'h', 'e', 'l', 'l', 'o'};
  from_.SendRaw(hello, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kTooShort, 1));
  std::vector<uint8_t> junk(200, 0x5a);
  from_.SendRaw(junk, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadVersion, 1));
  // Sealed with another epoch secret under the same id: a forgery, refused at the hop.
  FakePeer forger(net::Ipv4Endpoint{lab_.Underlay(0), 0}, 0, 1, /*key_fill=*/99);
  forger.SendRaw(forger.Seal(DataHeader(0, 2, 9), inner), dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadHopTag, 1));
  // A key id nobody holds.
  FakePeer stranger(net::Ipv4Endpoint{lab_.Underlay(0), 0}, 0, 1, 7, /*key_id=*/42);
  stranger.SendRaw(stranger.Seal(DataHeader(0, 2, 9), inner), dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kUnknownKeyId, 1));
  // A genuine datagram with one bit flipped in the header: the hop tag covers it.
  std::vector<uint8_t> flipped = from_.Seal(DataHeader(0, 2, 9), inner);
  flipped[16] ^= 1;
  from_.SendRaw(flipped, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadHopTag, 2));
  // One bit flipped in the payload: not the transit node's to see (it has no key for 0 and 2);
  // it is carried on, and node 2 refuses it.
  flipped = from_.Seal(DataHeader(0, 2, 9), inner);
  flipped[net::kOverlayHeaderBytes + 30] ^= 1;
  from_.SendRaw(flipped, dp_in_);
  const std::vector<uint8_t> carried = to_.Receive(std::chrono::seconds(20));
  net::OverlayPacket dummy;
  EXPECT_EQ(to_.Parse(carried, &dummy), net::OverlayStatus::kBadTag);
  // Node 0 claims to send node 1 data as node 2: node 1 refuses it end to end.
  from_.SendRaw(from_.Seal(DataHeader(2, 1, 9), inner), dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadTag, 1));
  // A datagram whose length field lies.
  std::vector<uint8_t> short_len = from_.Seal(DataHeader(0, 2, 9), inner);
  short_len.pop_back();
  from_.SendRaw(short_len, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadLength, 1));
  // A probe over the link from node 0 addressed to node 2 (a probe goes one hop).
  net::OverlayHeader probe;
  probe.type = net::OverlayType::kProbe;
  probe.source = 0;
  probe.destination = 2;
  probe.hop_limit = 1;
  from_.SendRaw(from_.Seal(probe, net::EncodeProbe(net::ProbeBody{1, Time(5)})), dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kBadProbe, 1));
  // Through all of it the data plane still forwards.
  from_.SendRaw(from_.Seal(DataHeader(0, 2, 5), inner), dp_in_);
  EXPECT_FALSE(to_.Receive(std::chrono::seconds(20)).empty());
  const DataplaneCounters c = dp_->counters();
  EXPECT_EQ(c.forwarded, 2u);  // and the one with the flipped payload bit
  EXPECT_EQ(c.total_dropped(), 8u);
}

TEST_F(TransitTest, AnswersProbesWithFourTimestamps) {
  net::OverlayHeader probe;
  probe.type = net::OverlayType::kProbe;
  probe.source = 0;
  probe.destination = 1;
  probe.hop_limit = 1;
  from_.SendRaw(from_.Seal(probe, net::EncodeProbe(net::ProbeBody{17, Time(123456)})), dp_in_);
  const std::vector<uint8_t> got = from_.Receive(std::chrono::seconds(20));
  ASSERT_FALSE(got.empty());
  net::OverlayPacket p;
  ASSERT_EQ(from_.Parse(got, &p), net::OverlayStatus::kOk);
  EXPECT_EQ(p.header.type, net::OverlayType::kProbeReply);
  EXPECT_EQ(p.header.source, 1u);
  EXPECT_EQ(p.header.destination, 0u);
  absl::StatusOr<net::ProbeReplyBody> r = net::DecodeProbeReply(p.payload);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sequence, 17u);
  EXPECT_EQ(r->t1, Time(123456));
  EXPECT_GT(r->t2.count(), 0);
  EXPECT_GE(r->t3, r->t2);
  EXPECT_EQ(dp_->counters().probe_replies_sent, 1u);
}

TEST_F(TransitTest, WhatIsAddressedToItCountsOnceAndTransitIsLeftToTheDestination) {
  // A probe re-sent as captured: answered once, the copies dropped as replays.
  net::OverlayHeader probe;
  probe.type = net::OverlayType::kProbe;
  probe.source = 0;
  probe.destination = 1;
  probe.hop_limit = 1;
  probe.sequence = 77;
  const std::vector<uint8_t> captured =
      from_.Seal(probe, net::EncodeProbe(net::ProbeBody{17, Time(123456)}));
  for (int i = 0; i < 3; ++i) from_.SendRaw(captured, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kReplayed, 2));
  const std::vector<uint8_t> reply = from_.Receive(std::chrono::seconds(20));
  ASSERT_FALSE(reply.empty());
  EXPECT_TRUE(from_.Receive(std::chrono::milliseconds(200)).empty());
  EXPECT_EQ(dp_->counters().probe_replies_sent, 1u);
  // The reply carries the data plane's own sequence number, counted from its start time.
  net::OverlayPacket p;
  ASSERT_EQ(from_.Parse(reply, &p), net::OverlayStatus::kOk);
  EXPECT_GE(p.header.sequence, uint64_t{1'600'000'000'000} << 20);
  // A newer number from the same source is taken; so is one a little older, not seen yet.
  probe.sequence = 80;
  from_.SendRaw(from_.Seal(probe, net::EncodeProbe(net::ProbeBody{18, Time(5)})), dp_in_);
  probe.sequence = 79;
  from_.SendRaw(from_.Seal(probe, net::EncodeProbe(net::ProbeBody{19, Time(5)})), dp_in_);
  ASSERT_TRUE(
      WaitFor([&] { return dp_->counters().probe_replies_sent == 3; }, std::chrono::seconds(20)));
  EXPECT_EQ(Dropped(DropReason::kReplayed), 2u);

  // A transit datagram re-sent is forwarded again: the destination holds the window.
  const std::vector<uint8_t> data =
      from_.Seal(DataHeader(0, 2, 5), UdpPacket("10.77.0.3", 9000, 64));
  from_.SendRaw(data, dp_in_);
  from_.SendRaw(data, dp_in_);
  EXPECT_FALSE(to_.Receive(std::chrono::seconds(20)).empty());
  EXPECT_FALSE(to_.Receive(std::chrono::seconds(20)).empty());
}

TEST_F(TransitTest, KeyRotation) {
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 64);
  // The new key (id 2) is accepted alongside the old one; the data plane seals with it.
  ASSERT_TRUE(dp_->SetKeys({KeyUpdate{1, TestKey(7), false}, KeyUpdate{2, TestKey(8), true}}).ok());
  // Picked up before the data plane's next batch: the first packet sealed with 2 passes.
  FakePeer rotated(net::Ipv4Endpoint{lab_.Underlay(0), 0}, 0, 1, 8, 2);
  rotated.SendRaw(rotated.Seal(DataHeader(0, 2, 5), inner), dp_in_);
  ASSERT_FALSE(to_.Receive(std::chrono::seconds(20)).empty());
  from_.SendRaw(from_.Seal(DataHeader(0, 2, 5), inner), dp_in_);  // the old key still passes
  const std::vector<uint8_t> got = to_.Receive(std::chrono::seconds(20));
  ASSERT_FALSE(got.empty());
  // A transit hop keeps the ingress's tag: the packet is still sealed with key 1, which the
  // next hop accepts until key 1 is retired everywhere.
  net::OverlayPacket p;
  net::OverlayKeyRing old_only;
  ASSERT_TRUE(old_only.Add(1, TestRow(7, 2)).ok());
  EXPECT_EQ(net::ParseOverlay(got, old_only, 2, 1, &p), net::OverlayStatus::kOk);
  EXPECT_EQ(p.key_id, 1u);
  EXPECT_EQ(Dropped(DropReason::kUnknownKeyId), 0u);
  // Once key 1 is withdrawn, its packets are refused.
  ASSERT_TRUE(dp_->SetKeys({KeyUpdate{2, TestKey(8), true}}).ok());
  from_.SendRaw(from_.Seal(DataHeader(0, 2, 5), inner), dp_in_);
  EXPECT_TRUE(WaitDropped(DropReason::kUnknownKeyId, 1));
  EXPECT_EQ(dp_->counters().forwarded, 2u);
}

// A burst waiting in the socket before the data plane starts is forwarded in order, sizes
// intact; with GSO, runs of equal size leave as UDP GSO messages.
// Sends `datagrams` (all but the last the same size) from `from` to `to` as one UDP GSO
// message: over loopback it reaches a GRO socket whole, as from a neighbour's data plane.
void SendGso(const net::Ipv4Endpoint& from, const std::vector<std::vector<uint8_t>>& datagrams,
             const net::Ipv4Endpoint& to) {
  absl::StatusOr<net::UdpSocket> s = net::UdpSocket::Bind(from);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<uint8_t> data;
  for (const auto& d : datagrams) data.insert(data.end(), d.begin(), d.end());
  const absl::Status sent = s->SendGso(data, static_cast<uint16_t>(datagrams[0].size()), to);
  ASSERT_TRUE(sent.ok()) << sent;
}

// A GSO message from a neighbour arrives as one GRO slot; every datagram in it is still
// checked, counted and forwarded (or dropped) on its own, in order.
TEST_F(TransitTest, ChecksEveryDatagramOfAGroBatch) {
  constexpr int kCount = 20;
  std::vector<std::vector<uint8_t>> datagrams;
  for (int i = 0; i < kCount; ++i) {
    std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 300);
    inner.back() = static_cast<uint8_t>(i);
    datagrams.push_back(from_.Seal(DataHeader(0, 2, i == 12 ? 1 : 9), inner));
  }
  datagrams[7][30] ^= 1;  // corrupt: the hop tag no longer matches
  SendGso(lab_.End(0, 1), datagrams, dp_in_);
  for (int i = 0; i < kCount; ++i) {
    if (i == 7 || i == 12) continue;
    const std::vector<uint8_t> got = to_.Receive(std::chrono::seconds(20));
    ASSERT_FALSE(got.empty()) << "datagram " << i;
    net::OverlayPacket p;
    ASSERT_EQ(to_.Parse(got, &p), net::OverlayStatus::kOk) << i;
    EXPECT_EQ(p.header.hop_limit, 8);
    EXPECT_EQ(p.payload.back(), static_cast<uint8_t>(i));
  }
  ASSERT_TRUE(
      WaitFor([&] { return dp_->counters().sent == kCount - 2; }, std::chrono::seconds(20)));
  const DataplaneCounters c = dp_->counters();
  EXPECT_EQ(c.received, static_cast<uint64_t>(kCount));
  EXPECT_EQ(c.gro_slots, 1u);
  EXPECT_EQ(c.forwarded, static_cast<uint64_t>(kCount - 2));
  EXPECT_EQ(c.dropped(DropReason::kBadHopTag), 1u);
  EXPECT_EQ(c.dropped(DropReason::kHopLimitExhausted), 1u);
  EXPECT_EQ(c.total_dropped(), 2u);
}

// Datagrams longer than the data plane's buffers (a neighbour with a larger MTU) are dropped as
// truncated, also when they arrive coalesced.
TEST_F(TransitTest, DropsGroDatagramsLongerThanItsBuffers) {
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, 3000);
  const std::vector<uint8_t> sealed = from_.Seal(DataHeader(0, 2, 9), inner);
  SendGso(lab_.End(0, 1), {sealed, sealed, sealed}, dp_in_);
  ASSERT_TRUE(WaitDropped(DropReason::kTruncated, 3));
  EXPECT_EQ(dp_->counters().forwarded, 0u);
}

class BurstTest : public ::testing::TestWithParam<bool> {};

TEST_P(BurstTest, ForwardsInOrderWithSizesIntact) {
  const bool gso = GetParam();
  LoopbackLab lab(3);
  lab.Connect(0, 1);
  lab.Connect(1, 2);
  DataplaneConfig c = lab.ConfigFor(1);
  c.probe_interval = Seconds(3600);
  c.udp_gso = gso;
  c.socket_buffer_bytes = 1 << 20;
  std::unique_ptr<Dataplane> dp = MustCreate(c);
  ASSERT_NE(dp, nullptr);
  dp->InstallTables(Routes(3, {{2, lab.cables[1].ab}}));
  FakePeer from(lab.End(0, 1), 0, 1), to(lab.End(2, 1), 2, 1);
  // 40 of 200 bytes, one of 100 (ends a GSO run), 30 of 300, one of 400, 28 of 300.
  std::vector<size_t> sizes;
  sizes.insert(sizes.end(), 40, 200);
  sizes.push_back(100);
  sizes.insert(sizes.end(), 30, 300);
  sizes.push_back(400);
  sizes.insert(sizes.end(), 28, 300);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> inner = UdpPacket("10.77.0.3", 9000, sizes[i]);
    inner.back() = static_cast<uint8_t>(i);
    from.SendRaw(from.Seal(DataHeader(0, 2, 9), inner), lab.End(1, 0));
  }
  ASSERT_TRUE(dp->Start().ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<uint8_t> got = to.Receive(std::chrono::seconds(20));
    ASSERT_FALSE(got.empty()) << "datagram " << i;
    net::OverlayPacket p;
    ASSERT_EQ(to.Parse(got, &p), net::OverlayStatus::kOk) << i;
    ASSERT_EQ(p.payload.size(), net::kIpv4HeaderBytes + net::kUdpHeaderBytes + sizes[i]) << i;
    EXPECT_EQ(p.payload.back(), static_cast<uint8_t>(i));
  }
  ASSERT_TRUE(
      WaitFor([&] { return dp->counters().sent == sizes.size(); }, std::chrono::seconds(20)));
  const DataplaneCounters counters = dp->counters();
  EXPECT_EQ(counters.forwarded, sizes.size());
  if (gso) {
    EXPECT_GT(counters.gso_messages, 0u);
  } else {
    EXPECT_EQ(counters.gso_messages, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Gso, BurstTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("On") : std::string("Off");
                         });

// Without keys nothing authenticates and nothing is sent, probes included; SetKeys starts it.
TEST(DataplaneLoopbackTest, NothingMovesUntilKeysArrive) {
  LoopbackLab lab(2);
  lab.Connect(0, 1);
  DataplaneConfig c = lab.ConfigFor(0);
  c.initial_keys.clear();
  c.probe_interval = Milliseconds(5);
  std::unique_ptr<Dataplane> dp = MustCreate(c);
  ASSERT_NE(dp, nullptr);
  ASSERT_TRUE(dp->Start().ok());
  FakePeer peer(lab.End(1, 0), 1, 0);
  peer.SendRaw(peer.Seal(DataHeader(1, 0, 5), UdpPacket("10.77.0.1", 1, 8)), lab.End(0, 1));
  ASSERT_TRUE(WaitFor([&] { return dp->counters().dropped(DropReason::kUnknownKeyId) == 1; },
                      std::chrono::seconds(20)));
  EXPECT_EQ(dp->counters().probes_sent, 0u);
  EXPECT_TRUE(peer.Receive(std::chrono::milliseconds(0)).empty());
  ASSERT_TRUE(dp->SetKeys({KeyUpdate{1, TestKey(7), true}}).ok());
  const std::vector<uint8_t> got = peer.Receive(std::chrono::seconds(20));
  ASSERT_FALSE(got.empty());
  net::OverlayPacket p;
  ASSERT_EQ(peer.Parse(got, &p), net::OverlayStatus::kOk);
  EXPECT_EQ(p.header.type, net::OverlayType::kProbe);
  // The fake never answers: after three intervals the link is down.
  ASSERT_TRUE(
      WaitFor([&] { return dp->LinksUp() == std::vector<bool>{false}; }, std::chrono::seconds(20)));
}

// Two data planes whose tables send destination 3 to each other: a packet bounces until its
// hop limit runs out, then it is dropped and counted, once.
TEST(DataplaneLoopbackTest, LoopingTablesEndByHopLimit) {
  LoopbackLab lab(4);
  lab.Connect(0, 1);
  lab.Connect(1, 2);
  lab.Connect(2, 3);
  std::vector<std::unique_ptr<Dataplane>> dps;
  for (NodeId n : {1, 2}) {
    DataplaneConfig c = lab.ConfigFor(n);
    c.probe_interval = Milliseconds(50);
    dps.push_back(MustCreate(c));
    ASSERT_NE(dps.back(), nullptr);
  }
  dps[0]->InstallTables(Routes(4, {{3, lab.cables[1].ab}}));  // 1 -> 2
  dps[1]->InstallTables(Routes(4, {{3, lab.cables[1].ba}}));  // 2 -> 1
  for (auto& dp : dps) ASSERT_TRUE(dp->Start().ok());
  FakePeer a(lab.End(0, 1), 0, 1);
  constexpr uint8_t kHopLimit = 16;
  a.SendRaw(a.Seal(DataHeader(0, 3, kHopLimit), UdpPacket("10.77.0.4", 1, 100)), lab.End(1, 0));
  const auto hop_drops = [&] {
    return dps[0]->counters().dropped(DropReason::kHopLimitExhausted) +
           dps[1]->counters().dropped(DropReason::kHopLimitExhausted);
  };
  ASSERT_TRUE(WaitFor([&] { return hop_drops() >= 1; }, std::chrono::seconds(20)));
  EXPECT_EQ(hop_drops(), 1u);
  EXPECT_EQ(dps[0]->counters().forwarded + dps[1]->counters().forwarded, kHopLimit - 1u);
  // Still alive: probes keep flowing.
  const uint64_t before = dps[0]->Samples(Time(0))[1].probes_answered;
  EXPECT_TRUE(WaitFor([&] { return dps[0]->Samples(Time(0))[1].probes_answered > before; },
                      std::chrono::seconds(20)));
}

// The chooser skips a link that is down: with two next hops toward node 3, traffic moves to
// the live one as soon as the other's liveness fails.
TEST(DataplaneLoopbackTest, DeadNextHopIsSkipped) {
  // 0 (fake) - 1 (data plane) - {2, 3} (fakes; 2 never answers probes, 3 does not either, but
  // only 2's silence is given time to count).
  LoopbackLab lab(4);
  lab.Connect(0, 1);
  lab.Connect(1, 2);
  lab.Connect(1, 3);
  DataplaneConfig c = lab.ConfigFor(1);
  c.probe_interval = Milliseconds(10);
  std::unique_ptr<Dataplane> dp = MustCreate(c);
  ASSERT_NE(dp, nullptr);
  // Toward 3 (by destination id) prefer 2 almost always, else go direct.
  auto t = std::make_shared<AgentTables>();
  for (auto& rows : t->rows) {
    rows.assign(4, {});
    rows[3] = {NextHop{lab.cables[1].ab, 0.999}, NextHop{lab.cables[2].ab, 0.001}};
  }
  dp->InstallTables(t);
  FakePeer from(lab.End(0, 1), 0, 1), via2(lab.End(2, 1), 2, 1), via3(lab.End(3, 1), 3, 1);
  std::atomic<bool> answering{true};
  // Fakes 0 and 3 answer probes; fake 2 stops answering at the test's command.
  const auto answer = [&](FakePeer& f, NodeId self) {
    const std::vector<uint8_t> got = f.Receive(std::chrono::milliseconds(2));
    if (got.empty()) return std::vector<uint8_t>();
    net::OverlayPacket p;
    if (f.Parse(got, &p) != net::OverlayStatus::kOk) return got;
    if (p.header.type != net::OverlayType::kProbe) return got;
    if (self == 2 && !answering.load()) return std::vector<uint8_t>();
    absl::StatusOr<net::ProbeBody> b = net::DecodeProbe(p.payload);
    net::OverlayHeader h;
    h.type = net::OverlayType::kProbeReply;
    h.source = static_cast<uint32_t>(self);
    h.destination = 1;
    h.hop_limit = 1;
    f.SendRaw(f.Seal(h, net::EncodeProbeReply({b->sequence, b->t1, b->t1, b->t1})),
              lab.End(1, self));
    return std::vector<uint8_t>();
  };
  std::atomic<bool> done{false};
  std::atomic<int> data_at_2{0}, data_at_3{0};
  std::thread responder([&] {
    while (!done.load()) {
      answer(from, 0);
      if (!answer(via2, 2).empty()) ++data_at_2;
      if (!answer(via3, 3).empty()) ++data_at_3;
    }
  });
  ASSERT_TRUE(dp->Start().ok());
  const std::vector<uint8_t> inner = UdpPacket("10.77.0.4", 9, 32);
  const auto send_until = [&](std::atomic<int>& counter) {
    return WaitFor(
        [&] {
          from.SendRaw(from.Seal(DataHeader(0, 3, 8), inner), lab.End(1, 0));
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          return counter.load() > 0;
        },
        std::chrono::seconds(20));
  };
  EXPECT_TRUE(send_until(data_at_2));
  answering.store(false);
  ASSERT_TRUE(WaitFor([&] { return !dp->LinksUp()[1]; }, std::chrono::seconds(20)));
  EXPECT_TRUE(send_until(data_at_3));
  done.store(true);
  responder.join();
}

}  // namespace
}  // namespace dar::agent
