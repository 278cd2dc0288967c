#include "net/ip_packet.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::net {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(Ipv4AddressTest, ParsesAndPrints) {
  absl::StatusOr<Ipv4Address> a = ParseIpv4Address("10.99.0.1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->value, 0x0a630001u);
  EXPECT_EQ(ToString(*a), "10.99.0.1");
  for (const char* bad :
       {"", "10.99.0", "10.99.0.256", "a.b.c.d", "10.99.0.1 ", "1.2.3.4.5", "255.255.255.255255"}) {
    absl::StatusOr<Ipv4Address> r = ParseIpv4Address(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(std::string("'") + bad + "'"));
  }
}

TEST(Ipv4EndpointTest, ParsesAndPrints) {
  absl::StatusOr<Ipv4Endpoint> e = ParseIpv4Endpoint("127.0.0.1:4789");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->address.value, 0x7f000001u);
  EXPECT_EQ(e->port, 4789);
  EXPECT_EQ(ToString(*e), "127.0.0.1:4789");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:12x", "localhost:80", ":80"}) {
    absl::StatusOr<Ipv4Endpoint> r = ParseIpv4Endpoint(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
  }
}

TEST(InternetChecksumTest, KnownValues) {
  // RFC 1071 section 3's example sums to 0xddf2; the checksum is its complement.
  const std::vector<uint8_t> rfc = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(rfc), 0x220d);
  // A textbook IPv4 header (192.168.0.1 -> 192.168.0.199, UDP), checksum field zeroed.
  std::vector<uint8_t> header = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(InternetChecksum(header), 0xb861);
  header[10] = 0xb8;
  header[11] = 0x61;
  EXPECT_EQ(InternetChecksum(header), 0);
  // An odd length pads with a zero byte.
  EXPECT_EQ(InternetChecksum(std::vector<uint8_t>{0x12}), static_cast<uint16_t>(~0x1200));
}

class UdpIpv4Test : public ::testing::Test {
 protected:
  std::vector<uint8_t> Build(const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> out(kIpv4HeaderBytes + kUdpHeaderBytes + payload.size());
    absl::StatusOr<size_t> n = BuildUdpIpv4Packet(src_, dst_, payload, absl::MakeSpan(out), 9);
    EXPECT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, out.size());
    return out;
  }

  const Ipv4Endpoint src_{Ipv4Address{0x0a630002}, 7777};
  const Ipv4Endpoint dst_{Ipv4Address{0x0a630001}, 40000};
};

TEST_F(UdpIpv4Test, BuildsWhatParses) {
  const std::vector<uint8_t> payload = {'p', 'o', 'n', 'g', '!'};
  const std::vector<uint8_t> p = Build(payload);
  EXPECT_EQ(p[0], 0x45);
  EXPECT_EQ(p[9], 17);
  EXPECT_EQ(InternetChecksum(absl::MakeConstSpan(p).subspan(0, 20)), 0);
  absl::StatusOr<UdpIpv4Packet> parsed = ParseUdpIpv4Packet(p);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->source, src_);
  EXPECT_EQ(parsed->destination, dst_);
  EXPECT_EQ(parsed->ttl, 9);
  EXPECT_THAT(parsed->payload, ElementsAreArray(payload));
  // Trailing bytes beyond the IPv4 total length (link padding) are ignored.
  std::vector<uint8_t> padded = p;
  padded.resize(p.size() + 6);
  EXPECT_TRUE(ParseUdpIpv4Packet(padded).ok());
}

TEST_F(UdpIpv4Test, RejectsDamage) {
  const std::vector<uint8_t> good = Build(std::vector<uint8_t>(33, 7));
  auto error = [](const std::vector<uint8_t>& p) {
    absl::StatusOr<UdpIpv4Packet> r = ParseUdpIpv4Packet(p);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  std::vector<uint8_t> p = good;
  p[40] ^= 1;
  EXPECT_THAT(error(p), HasSubstr("UDP checksum"));
  p = good;
  p[15] ^= 1;  // source address: both checksums break, the header's is checked first
  EXPECT_THAT(error(p), HasSubstr("header checksum"));
  EXPECT_THAT(error(std::vector<uint8_t>(good.begin(), good.begin() + 19)), HasSubstr("shorter"));
  EXPECT_THAT(error(std::vector<uint8_t>(good.begin(), good.end() - 1)), HasSubstr("total length"));
  p = good;
  p[0] = 0x65;
  EXPECT_THAT(error(p), HasSubstr("version"));
  p = good;
  p[0] = 0x44;
  EXPECT_THAT(error(p), HasSubstr("header length"));

  // A packet with valid header checksums but a fragment, or not UDP.
  auto reseal_header = [](std::vector<uint8_t>& q) {
    q[10] = q[11] = 0;
    const uint16_t c = InternetChecksum(absl::MakeConstSpan(q).subspan(0, 20));
    q[10] = static_cast<uint8_t>(c >> 8);
    q[11] = static_cast<uint8_t>(c);
  };
  p = good;
  p[6] = 0x20;  // more fragments
  reseal_header(p);
  EXPECT_THAT(error(p), HasSubstr("fragment"));
  p = good;
  p[9] = 6;
  reseal_header(p);
  EXPECT_THAT(error(p), HasSubstr("not UDP"));
  p = good;
  p[25] = 200;  // UDP length beyond the packet
  EXPECT_THAT(error(p), HasSubstr("UDP length"));

  // UDP checksum 0 means "none".
  p = good;
  p[26] = p[27] = 0;
  p[40] ^= 1;
  EXPECT_EQ(error(p), "ok");
}

TEST_F(UdpIpv4Test, BuildChecksItsBuffer) {
  std::vector<uint8_t> small(30);
  absl::StatusOr<size_t> n =
      BuildUdpIpv4Packet(src_, dst_, std::vector<uint8_t>(3), absl::MakeSpan(small));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kResourceExhausted);
  std::vector<uint8_t> big(70000), out(70100);
  n = BuildUdpIpv4Packet(src_, dst_, big, absl::MakeSpan(out));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dar::net
