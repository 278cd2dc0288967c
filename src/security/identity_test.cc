#include "security/identity.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::security {
namespace {

using ::testing::HasSubstr;

TEST(SpiffeIdTest, ParsesTheThreeKinds) {
  absl::StatusOr<SpiffeId> node = ParseSpiffeId("spiffe://example.org/node/n-7.a_B");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(*node, SpiffeId::Node("example.org", "n-7.a_B"));

  absl::StatusOr<SpiffeId> controller = ParseSpiffeId("spiffe://dar.example-1.org/controller");
  ASSERT_TRUE(controller.ok()) << controller.status();
  EXPECT_EQ(controller->kind, PeerKind::kController);
  EXPECT_EQ(controller->trust_domain, "dar.example-1.org");
  EXPECT_EQ(controller->name, "");

  absl::StatusOr<SpiffeId> admin = ParseSpiffeId("spiffe://example.org/admin/alice");
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(*admin, SpiffeId::Admin("example.org", "alice"));
}

TEST(SpiffeIdTest, ToStringRoundTrips) {
  for (const SpiffeId& id :
       {SpiffeId::Controller("example.org"), SpiffeId::Node("example.org", "n1"),
        SpiffeId::Admin("corp_x", "bob.smith")}) {
    absl::StatusOr<SpiffeId> parsed = ParseSpiffeId(id.ToString());
    ASSERT_TRUE(parsed.ok()) << id.ToString() << ": " << parsed.status();
    EXPECT_EQ(*parsed, id);
  }
  EXPECT_EQ(SpiffeId::Node("example.org", "n1").ToString(), "spiffe://example.org/node/n1");
  EXPECT_EQ(SpiffeId::Controller("example.org").ToString(), "spiffe://example.org/controller");
}

TEST(SpiffeIdTest, RejectsMalformedIdsWithAReason) {
  struct Case {
    std::string uri;
    std::string reason;
  };
  const Case cases[] = {
      {"", "does not start with 'spiffe://'"},
      {"https://example.org/node/n1", "does not start with 'spiffe://'"},
      {"SPIFFE://example.org/node/n1", "does not start with 'spiffe://'"},
      {"spiffe:///node/n1", "trust domain is empty"},
      {"spiffe://Example.org/node/n1", "has the character 'E'"},
      {"spiffe://example.org:443/node/n1", "has a port"},
      {"spiffe://user@example.org/node/n1", "has user info"},
      {"spiffe://example.org/node/n1?x=1", "query or fragment"},
      {"spiffe://example.org/node/n1#frag", "query or fragment"},
      {"spiffe://example.org", "has no path"},
      {"spiffe://example.org/", "has no path"},
      {"spiffe://example.org/router/r1", "unknown kind 'router'"},
      {"spiffe://example.org/node", "exactly one segment after /node"},
      {"spiffe://example.org/node/", "the name is empty"},
      {"spiffe://example.org/node/a/b", "exactly one segment after /node"},
      {"spiffe://example.org/node/..", "the name '..' is not allowed"},
      {"spiffe://example.org/node/n%41", "has the character '%'"},
      {"spiffe://example.org/admin/a b", "has the character ' '"},
      {"spiffe://example.org/controller/x", "nothing after /controller"},
      {"spiffe://example.org//node/n1", "unknown kind ''"},
      {"spiffe://" + std::string(256, 'a') + "/controller", "longer than 255 bytes"},
      {"spiffe://example.org/node/" + std::string(2100, 'a'), "longer than 2048 bytes"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SpiffeId> id = ParseSpiffeId(c.uri);
    ASSERT_FALSE(id.ok()) << c.uri;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << c.uri;
    EXPECT_THAT(std::string(id.status().message()), HasSubstr(c.reason)) << c.uri;
  }
}

TEST(SpiffeIdTest, ErrorsEscapeUnprintableBytes) {
  absl::StatusOr<SpiffeId> id = ParseSpiffeId(std::string("spiffe://example.org/node/a\x01\n"));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("a\\x01\\n"));
  EXPECT_EQ(std::string(id.status().message()).find('\n'), std::string::npos);
}

TEST(SpiffeIdTest, TrustDomainIds) {
  absl::StatusOr<std::string> domain = ParseTrustDomainId("spiffe://example.org");
  ASSERT_TRUE(domain.ok()) << domain.status();
  EXPECT_EQ(*domain, "example.org");
  EXPECT_FALSE(ParseTrustDomainId("spiffe://example.org/controller").ok());
  EXPECT_FALSE(ParseTrustDomainId("spiffe://").ok());
}

TEST(SpiffeIdTest, ValidateChecksEveryField) {
  EXPECT_TRUE(ValidateSpiffeId(SpiffeId::Node("example.org", "n1")).ok());
  EXPECT_TRUE(ValidateSpiffeId(SpiffeId::Controller("example.org")).ok());
  EXPECT_FALSE(ValidateSpiffeId(SpiffeId::Node("example.org", "")).ok());
  EXPECT_FALSE(ValidateSpiffeId(SpiffeId::Admin("example.org", "a/b")).ok());
  EXPECT_FALSE(ValidateSpiffeId(SpiffeId::Node("", "n1")).ok());
  EXPECT_FALSE(ValidateSpiffeId(SpiffeId{"example.org", PeerKind::kController, "x"}).ok());
}

}  // namespace
}  // namespace dar::security
