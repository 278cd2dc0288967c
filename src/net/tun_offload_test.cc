#include "net/tun_offload.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/byte_order.h"
#include "net/ip_packet.h"

namespace dar::net {
namespace {

using ::testing::HasSubstr;

constexpr Ipv4Address kSrc{0x0a4d0001};  // 10.77.0.1
constexpr Ipv4Address kDst{0x0a4d0003};
constexpr uint32_t kSeq = 0xfffff000u;  // wraps within the super-packet
constexpr size_t kOptions = 12;         // NOP, NOP, timestamps
constexpr uint8_t kAck = 0x10, kPsh = 0x08, kFin = 0x01, kCwr = 0x80;

uint8_t PayloadByte(size_t i) { return static_cast<uint8_t>(i * 31 + 7); }

// A TCP/IPv4 packet with timestamp options, `payload` bytes from payload offset `from` of the
// stream, both checksums right (or, with `partial`, the TCP one holding only the pseudo-header
// sum, as the kernel hands it over with CHECKSUM_PARTIAL).
std::vector<uint8_t> TcpPacket(size_t payload, size_t from, uint8_t flags, bool partial = false) {
  const size_t thl = kTcpHeaderBytes + kOptions;
  std::vector<uint8_t> p(kIpv4HeaderBytes + thl + payload);
  uint8_t* ip = p.data();
  ip[0] = 0x45;
  ip[1] = 0x02;  // ECT(0)
  Store16(ip + 2, static_cast<uint16_t>(p.size()));
  Store16(ip + 4, 0x1234);
  Store16(ip + 6, 0x4000);
  ip[8] = 64;
  ip[9] = kIpProtoTcp;
  Store32(ip + 12, kSrc.value);
  Store32(ip + 16, kDst.value);
  Store16(ip + 10, InternetChecksum(absl::MakeConstSpan(ip, kIpv4HeaderBytes)));
  uint8_t* tcp = ip + kIpv4HeaderBytes;
  Store16(tcp, 40000);
  Store16(tcp + 2, 5201);
  Store32(tcp + 4, kSeq + static_cast<uint32_t>(from));
  Store32(tcp + 8, 0x01020304);
  tcp[12] = static_cast<uint8_t>((thl / 4) << 4);
  tcp[13] = flags;
  Store16(tcp + 14, 512);
  const uint8_t options[kOptions] = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};
  std::memcpy(tcp + kTcpHeaderBytes, options, kOptions);
  for (size_t i = 0; i < payload; ++i) tcp[thl + i] = PayloadByte(from + i);
  const size_t tcp_length = thl + payload;
  const uint32_t pseudo = Ipv4PseudoHeaderSum(kSrc, kDst, kIpProtoTcp, tcp_length);
  if (partial) {
    uint32_t s = pseudo;
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    Store16(tcp + 16, static_cast<uint16_t>(s));
  } else {
    Store16(tcp + 16, InternetChecksum(absl::MakeConstSpan(tcp, tcp_length), pseudo));
  }
  return p;
}

bool TcpChecksumOk(absl::Span<const uint8_t> p) {
  const size_t tcp_length = p.size() - kIpv4HeaderBytes;
  return InternetChecksum(p.subspan(kIpv4HeaderBytes),
                          Ipv4PseudoHeaderSum(kSrc, kDst, kIpProtoTcp, tcp_length)) == 0;
}

OffloadInfo TsoInfo(uint16_t mss) {
  OffloadInfo info;
  info.gso = OffloadInfo::Gso::kTcpV4;
  info.needs_checksum = true;
  info.header_bytes = kIpv4HeaderBytes + kTcpHeaderBytes + kOptions;
  info.segment_bytes = mss;
  info.checksum_start = kIpv4HeaderBytes;
  info.checksum_offset = 16;
  return info;
}

TEST(InternetChecksumTest, AgreesWithTheTwoByteDefinitionForEveryLengthAndStart) {
  std::vector<uint8_t> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 151 + 3);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += 7) {
      uint64_t s = 0x1fffe;
      size_t i = start;
      for (; i + 1 < start + n; i += 2) s += Load16(&data[i]);
      if (i < start + n) s += static_cast<uint32_t>(data[i]) << 8;
      while (s >> 16) s = (s & 0xffff) + (s >> 16);
      EXPECT_EQ(InternetChecksum(absl::MakeConstSpan(data).subspan(start, n), 0x1fffe),
                static_cast<uint16_t>(~s))
          << "start " << start << " length " << n;
    }
  }
}

TEST(CompleteChecksumTest, FinishesWhatTheKernelLeft) {
  std::vector<uint8_t> p = TcpPacket(1000, 0, kAck, /*partial=*/true);
  EXPECT_FALSE(TcpChecksumOk(p));
  OffloadInfo info;
  info.needs_checksum = true;
  info.checksum_start = kIpv4HeaderBytes;
  info.checksum_offset = 16;
  ASSERT_TRUE(CompleteChecksum(absl::MakeSpan(p), info));
  EXPECT_TRUE(TcpChecksumOk(p));
  EXPECT_EQ(p, TcpPacket(1000, 0, kAck));
}

TEST(CompleteChecksumTest, RefusesOffsetsOutsideThePacket) {
  std::vector<uint8_t> p = TcpPacket(10, 0, kAck, /*partial=*/true);
  const std::vector<uint8_t> before = p;
  OffloadInfo info;
  info.needs_checksum = true;
  info.checksum_start = static_cast<uint16_t>(p.size());
  EXPECT_FALSE(CompleteChecksum(absl::MakeSpan(p), info));
  info.checksum_start = kIpv4HeaderBytes;
  info.checksum_offset = static_cast<uint16_t>(p.size() - kIpv4HeaderBytes - 1);
  EXPECT_FALSE(CompleteChecksum(absl::MakeSpan(p), info));
  EXPECT_EQ(p, before);
  info.needs_checksum = false;  // nothing to do
  EXPECT_TRUE(CompleteChecksum(absl::MakeSpan(p), info));
}

TEST(TcpSegmenterTest, SplitsAKnownSuperPacketIntoValidSegments) {
  constexpr size_t kPayload = 10000;
  constexpr uint16_t kMss = 1380;
  const std::vector<uint8_t> super =
      TcpPacket(kPayload, 0, kAck | kPsh | kFin | kCwr, /*partial=*/true);
  absl::StatusOr<TcpSuperPacket> sp = ParseTcpSuperPacket(super, TsoInfo(kMss));
  ASSERT_TRUE(sp.ok()) << sp.status();
  ASSERT_EQ(sp->segments, 8);  // 7 full segments and 340 bytes
  EXPECT_EQ(sp->header_bytes, kIpv4HeaderBytes + kTcpHeaderBytes + kOptions);
  EXPECT_EQ(sp->max_segment_bytes(), sp->header_bytes + kMss);

  std::vector<uint8_t> stream;
  for (int i = 0; i < sp->segments; ++i) {
    std::vector<uint8_t> out(sp->max_segment_bytes() + 5, 0xee);
    const size_t n = WriteTcpSegment(*sp, i, absl::MakeSpan(out));
    out.resize(n);
    const size_t payload = i < 7 ? kMss : kPayload - 7 * kMss;
    ASSERT_EQ(n, sp->header_bytes + payload) << "segment " << i;
    EXPECT_EQ(Load16(&out[2]), n) << "IPv4 total length of segment " << i;
    EXPECT_EQ(Load16(&out[4]), 0x1234 + i) << "IPv4 id of segment " << i;
    EXPECT_EQ(InternetChecksum(absl::MakeConstSpan(out).first(kIpv4HeaderBytes)), 0)
        << "IPv4 checksum of segment " << i;
    EXPECT_TRUE(TcpChecksumOk(out)) << "TCP checksum of segment " << i;
    const uint8_t* tcp = &out[kIpv4HeaderBytes];
    EXPECT_EQ(Load32(tcp + 4), kSeq + static_cast<uint32_t>(i * kMss)) << "segment " << i;
    EXPECT_EQ(Load32(tcp + 8), 0x01020304u);
    const uint8_t flags = tcp[13];
    EXPECT_EQ((flags & kCwr) != 0, i == 0) << "CWR only on the first, segment " << i;
    EXPECT_EQ((flags & (kPsh | kFin)) != 0, i == 7) << "PSH, FIN only on the last, " << i;
    EXPECT_TRUE(flags & kAck);
    stream.insert(stream.end(), out.begin() + sp->header_bytes, out.end());
  }
  ASSERT_EQ(stream.size(), kPayload);
  for (size_t i = 0; i < kPayload; ++i) ASSERT_EQ(stream[i], PayloadByte(i)) << i;
}

TEST(TcpSegmenterTest, ASuperPacketWithoutPayloadIsOneSegment) {
  const std::vector<uint8_t> ack = TcpPacket(0, 0, kAck, /*partial=*/true);
  absl::StatusOr<TcpSuperPacket> sp = ParseTcpSuperPacket(ack, TsoInfo(1380));
  ASSERT_TRUE(sp.ok()) << sp.status();
  ASSERT_EQ(sp->segments, 1);
  std::vector<uint8_t> out(sp->max_segment_bytes());
  out.resize(WriteTcpSegment(*sp, 0, absl::MakeSpan(out)));
  EXPECT_EQ(out, TcpPacket(0, 0, kAck));
}

TEST(TcpSegmenterTest, RefusesMalformedSuperPackets) {
  const std::vector<uint8_t> good = TcpPacket(5000, 0, kAck, /*partial=*/true);
  struct Case {
    std::string name;
    std::vector<uint8_t> packet;
    OffloadInfo info;
    std::string error;
  };
  std::vector<Case> cases;
  const auto add = [&](std::string name, auto mutate, std::string error) {
    Case c{std::move(name), good, TsoInfo(1380), std::move(error)};
    mutate(c.packet, c.info);
    cases.push_back(std::move(c));
  };
  using P = std::vector<uint8_t>&;
  using I = OffloadInfo&;
  add(
      "empty", [](P p, I) { p.clear(); }, "not an IPv4 packet");
  add(
      "IPv6", [](P p, I) { p[0] = 0x60; }, "not an IPv4 packet");
  add(
      "header length", [](P p, I) { p[0] = 0x44; }, "IPv4 header");
  add(
      "total length", [](P p, I) { Store16(&p[2], static_cast<uint16_t>(p.size() + 1)); }, "total");
  add(
      "cut short", [](P p, I) { p.resize(p.size() - 1); }, "total");
  add(
      "fragment", [](P p, I) { Store16(&p[6], 0x2000); }, "fragment");
  add(
      "UDP", [](P p, I) { p[9] = kIpProtoUdp; }, "not TCP");
  add(
      "data offset", [](P p, I) { p[kIpv4HeaderBytes + 12] = 0x40; }, "data offset");
  add(
      "huge data offset",
      [](P p, I) {
        p.resize(kIpv4HeaderBytes + 24);
        Store16(&p[2], 44);
      },
      "data offset");
  add(
      "segment size 0", [](P, I info) { info.segment_bytes = 0; }, "segment size 0");
  add(
      "not TSO", [](P, I info) { info.gso = OffloadInfo::Gso::kUdp; }, "not TCP/IPv4");
  for (const Case& c : cases) {
    absl::StatusOr<TcpSuperPacket> sp = ParseTcpSuperPacket(c.packet, c.info);
    EXPECT_FALSE(sp.ok()) << c.name;
    EXPECT_THAT(sp.status().message(), HasSubstr(c.error)) << c.name;
  }
}

TEST(TcpCoalescerTest, JoinsInOrderSegmentsIntoOneSuperPacket) {
  constexpr size_t kMss = 1000;
  TcpCoalescer c;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(c.Add(TcpPacket(kMss, i * kMss, kAck))) << i;
  }
  ASSERT_TRUE(c.Add(TcpPacket(300, 5 * kMss, kAck | kPsh)));
  EXPECT_FALSE(c.Add(TcpPacket(kMss, 5 * kMss + 300, kAck))) << "PSH ends a super-packet";
  EXPECT_EQ(c.segments(), 6);

  OffloadInfo info;
  const absl::Span<const uint8_t> super = c.Take(&info);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(info.gso, OffloadInfo::Gso::kTcpV4);
  EXPECT_EQ(info.segment_bytes, kMss);
  EXPECT_TRUE(info.needs_checksum);
  EXPECT_EQ(info.checksum_start, kIpv4HeaderBytes);
  EXPECT_EQ(info.checksum_offset, 16);
  EXPECT_EQ(info.header_bytes, kIpv4HeaderBytes + kTcpHeaderBytes + kOptions);
  ASSERT_EQ(super.size(), info.header_bytes + 5 * kMss + 300);
  EXPECT_EQ(Load16(&super[2]), super.size());
  EXPECT_EQ(InternetChecksum(super.first(kIpv4HeaderBytes)), 0);
  EXPECT_TRUE(super[kIpv4HeaderBytes + 13] & kPsh);
  EXPECT_EQ(Load32(&super[kIpv4HeaderBytes + 4]), kSeq);
  for (size_t i = 0; i < 5 * kMss + 300; ++i) {
    ASSERT_EQ(super[info.header_bytes + i], PayloadByte(i)) << i;
  }
  // What the kernel does with it: finishing the checksum gives a valid packet.
  std::vector<uint8_t> finished(super.begin(), super.end());
  ASSERT_TRUE(CompleteChecksum(absl::MakeSpan(finished), info));
  EXPECT_TRUE(TcpChecksumOk(finished));
  // And the segmenter takes it back apart into the segments that went in.
  absl::StatusOr<TcpSuperPacket> sp = ParseTcpSuperPacket(super, info);
  ASSERT_TRUE(sp.ok()) << sp.status();
  ASSERT_EQ(sp->segments, 6);
  std::vector<uint8_t> out(sp->max_segment_bytes());
  out.resize(WriteTcpSegment(*sp, 2, absl::MakeSpan(out)));
  std::vector<uint8_t> want = TcpPacket(kMss, 2 * kMss, kAck);
  Store16(&want[4], 0x1234 + 2);
  Store16(&want[10], 0);
  Store16(&want[10], InternetChecksum(absl::MakeConstSpan(want).first(kIpv4HeaderBytes)));
  EXPECT_EQ(out, want);
}

TEST(TcpCoalescerTest, ASingleSegmentComesBackUnchanged) {
  TcpCoalescer c;
  const std::vector<uint8_t> p = TcpPacket(700, 0, kAck);
  ASSERT_TRUE(c.Add(p));
  OffloadInfo info;
  info.gso = OffloadInfo::Gso::kUdp;  // overwritten
  const absl::Span<const uint8_t> out = c.Take(&info);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()), p);
  EXPECT_EQ(info.gso, OffloadInfo::Gso::kNone);
  EXPECT_FALSE(info.needs_checksum);
}

TEST(TcpCoalescerTest, RefusesWhatCannotJoin) {
  constexpr size_t kMss = 1000;
  const std::vector<uint8_t> first = TcpPacket(kMss, 0, kAck);
  struct Case {
    std::string name;
    std::vector<uint8_t> packet;
  };
  std::vector<Case> cases;
  const auto mutated = [&](auto mutate) {
    std::vector<uint8_t> p = TcpPacket(kMss, kMss, kAck);
    mutate(p);
    return p;
  };
  // Edits after which both checksums are fixed up, so that only the edit itself matters.
  const auto fixed = [&](auto mutate) {
    std::vector<uint8_t> p = mutated(mutate);
    Store16(&p[10], 0);
    Store16(&p[10], InternetChecksum(absl::MakeConstSpan(p).first(kIpv4HeaderBytes)));
    const size_t tcp_length = p.size() - kIpv4HeaderBytes;
    Store16(&p[kIpv4HeaderBytes + 16], 0);
    Store16(&p[kIpv4HeaderBytes + 16],
            InternetChecksum(
                absl::MakeConstSpan(p).subspan(kIpv4HeaderBytes),
                Ipv4PseudoHeaderSum(Ipv4Address{Load32(&p[12])}, Ipv4Address{Load32(&p[16])},
                                    kIpProtoTcp, tcp_length)));
    return p;
  };
  cases.push_back({"gap in sequence", TcpPacket(kMss, kMss + 1, kAck)});
  cases.push_back({"longer than the first", TcpPacket(kMss + 1, kMss, kAck)});
  cases.push_back({"SYN", TcpPacket(kMss, kMss, kAck | 0x02)});
  cases.push_back({"no ACK", TcpPacket(kMss, kMss, 0)});
  cases.push_back({"pure ACK", TcpPacket(0, kMss, kAck)});
  cases.push_back({"other destination", fixed([](std::vector<uint8_t>& p) { p[19] ^= 1; })});
  cases.push_back({"other port", fixed([](std::vector<uint8_t>& p) { p[23] ^= 1; })});
  cases.push_back({"other TTL", fixed([](std::vector<uint8_t>& p) { p[8] = 63; })});
  cases.push_back({"other TOS", fixed([](std::vector<uint8_t>& p) { p[1] = 0; })});
  cases.push_back(
      {"other ack", fixed([](std::vector<uint8_t>& p) { p[kIpv4HeaderBytes + 11]++; })});
  cases.push_back(
      {"other window", fixed([](std::vector<uint8_t>& p) { p[kIpv4HeaderBytes + 15]++; })});
  cases.push_back({"other timestamp", fixed([](std::vector<uint8_t>& p) { p[47]++; })});
  cases.push_back({"bad TCP checksum",
                   mutated([](std::vector<uint8_t>& p) { p[kIpv4HeaderBytes + 40] ^= 1; })});
  cases.push_back({"bad IPv4 checksum", mutated([](std::vector<uint8_t>& p) { p[10] ^= 1; })});
  cases.push_back({"not TCP", fixed([](std::vector<uint8_t>& p) { p[9] = kIpProtoUdp; })});
  cases.push_back({"garbage", std::vector<uint8_t>(30, 0x45)});
  for (const Case& c : cases) {
    TcpCoalescer coalescer;
    ASSERT_TRUE(coalescer.Add(first));
    EXPECT_FALSE(coalescer.Add(c.packet)) << c.name;
    EXPECT_EQ(coalescer.segments(), 1) << c.name;
  }
  // A segment with a bad checksum does not start a super-packet either.
  TcpCoalescer coalescer;
  EXPECT_FALSE(coalescer.Add(cases[12].packet));
  EXPECT_TRUE(coalescer.empty());
}

TEST(TcpCoalescerTest, StopsAtTheSegmentLimitAnd64Kilobytes) {
  TcpCoalescer few(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(few.Add(TcpPacket(100, i * 100, kAck)));
  EXPECT_FALSE(few.Add(TcpPacket(100, 300, kAck)));

  TcpCoalescer big;
  constexpr size_t kMss = 8000;
  int joined = 0;
  while (big.Add(TcpPacket(kMss, joined * kMss, kAck))) ++joined;
  EXPECT_EQ(joined, 8);  // a ninth would pass 65535 bytes
  OffloadInfo info;
  EXPECT_LE(big.Take(&info).size(), TunDevice::kMaxSuperPacketBytes);
}

// A UDP/IPv4 datagram from 10.77.0.1:40000 to 10.77.0.3:9000 with both checksums.
std::vector<uint8_t> UdpDatagram(size_t payload, uint8_t fill, uint16_t source_port = 40000) {
  std::vector<uint8_t> data(payload, fill);
  std::vector<uint8_t> p(kIpv4HeaderBytes + kUdpHeaderBytes + payload);
  absl::StatusOr<size_t> n =
      BuildUdpIpv4Packet({kSrc, source_port}, {kDst, 9000}, data, absl::MakeSpan(p));
  EXPECT_TRUE(n.ok()) << n.status();
  return p;
}

TEST(UdpCoalescerTest, JoinsEqualDatagramsOfAFlowAndTheKernelCanSplitThemBack) {
  UdpCoalescer c;
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 4; ++i) sent.push_back(UdpDatagram(1000, static_cast<uint8_t>(i)));
  sent.push_back(UdpDatagram(10, 0x99));  // a shorter one ends it
  for (const auto& d : sent) ASSERT_TRUE(c.Add(d));
  EXPECT_FALSE(c.Add(UdpDatagram(10, 0x98)));
  EXPECT_EQ(c.segments(), 5);

  OffloadInfo info;
  const absl::Span<const uint8_t> super = c.Take(&info);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(info.gso, OffloadInfo::Gso::kUdp);
  EXPECT_EQ(info.segment_bytes, 1000);
  EXPECT_TRUE(info.needs_checksum);
  EXPECT_EQ(info.checksum_start, kIpv4HeaderBytes);
  EXPECT_EQ(info.checksum_offset, 6);
  ASSERT_EQ(super.size(), kIpv4HeaderBytes + kUdpHeaderBytes + 4010);
  EXPECT_EQ(Load16(&super[2]), super.size());
  EXPECT_EQ(Load16(&super[kIpv4HeaderBytes + 4]), super.size() - kIpv4HeaderBytes);
  EXPECT_EQ(InternetChecksum(super.first(kIpv4HeaderBytes)), 0);
  std::vector<uint8_t> finished(super.begin(), super.end());
  ASSERT_TRUE(CompleteChecksum(absl::MakeSpan(finished), info));
  EXPECT_TRUE(ParseUdpIpv4Packet(finished).ok()) << "valid as one large datagram";
  // Split as the kernel does: the headers, then segment_bytes of payload each.
  for (size_t i = 0; i < sent.size(); ++i) {
    const size_t from = kIpv4HeaderBytes + kUdpHeaderBytes + i * 1000;
    const size_t n = std::min<size_t>(1000, super.size() - from);
    absl::StatusOr<UdpIpv4Packet> original = ParseUdpIpv4Packet(sent[i]);
    ASSERT_TRUE(original.ok());
    EXPECT_TRUE(std::equal(original->payload.begin(), original->payload.end(), &super[from],
                           &super[from] + n))
        << "datagram " << i;
  }
}

TEST(UdpCoalescerTest, RefusesWhatCannotJoin) {
  const std::vector<uint8_t> first = UdpDatagram(500, 1);
  std::vector<uint8_t> no_checksum = UdpDatagram(500, 2);
  Store16(&no_checksum[kIpv4HeaderBytes + 6], 0);
  std::vector<uint8_t> bad_checksum = UdpDatagram(500, 2);
  bad_checksum.back() ^= 1;
  std::vector<uint8_t> fragment = UdpDatagram(500, 2);
  Store16(&fragment[6], 0x2000);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"longer", UdpDatagram(501, 2)},
      {"other port", UdpDatagram(500, 2, 40001)},
      {"no checksum", no_checksum},
      {"bad checksum", bad_checksum},
      {"fragment", fragment},
      {"TCP", TcpPacket(500, 0, kAck)},
      {"empty payload", UdpDatagram(0, 2)},
      {"garbage", std::vector<uint8_t>(40, 0x45)},
  };
  for (const auto& [name, packet] : cases) {
    UdpCoalescer c;
    ASSERT_TRUE(c.Add(first));
    EXPECT_FALSE(c.Add(packet)) << name;
    EXPECT_EQ(c.segments(), 1) << name;
  }
  UdpCoalescer c;
  ASSERT_TRUE(c.Add(first));
  OffloadInfo info;
  const absl::Span<const uint8_t> alone = c.Take(&info);
  EXPECT_EQ(std::vector<uint8_t>(alone.begin(), alone.end()), first) << "one comes back as it was";
  EXPECT_EQ(info.gso, OffloadInfo::Gso::kNone);
}

}  // namespace
}  // namespace dar::net
