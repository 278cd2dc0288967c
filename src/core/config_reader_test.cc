#include "core/config_reader.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

YamlReader Reader(const std::string& text) {
  absl::StatusOr<YamlReader> r = YamlReader::Create(YAML::Load(text), "s.yaml: block");
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

std::string ReaderErrorOf(const absl::Status& s) {
  EXPECT_FALSE(s.ok());
  return std::string(s.message());
}

template <typename T>
std::string ReaderErrorOf(const absl::StatusOr<T>& s) {
  return ReaderErrorOf(s.status());
}

TEST(YamlReaderTest, ReadsTypedValuesAndDefaults) {
  YamlReader r =
      Reader("n: 3\nbig: 5000000000\nx: 2.5\nname: abc\nflag: true\nnames: [a, b]\nxs: [1, 2.5]\n");
  EXPECT_EQ(*r.Required<int>("n"), 3);
  EXPECT_EQ(*r.Required<int64_t>("big"), 5000000000);
  EXPECT_DOUBLE_EQ(*r.Required<double>("x", Bounds::Positive()), 2.5);
  EXPECT_EQ(*r.Required<std::string>("name"), "abc");
  EXPECT_TRUE(*r.Required<bool>("flag"));
  EXPECT_EQ(*r.Required<std::vector<std::string>>("names"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*r.Required<std::vector<double>>("xs"), (std::vector<double>{1, 2.5}));
  EXPECT_EQ(*r.Optional<int>("absent", 7), 7);
  EXPECT_TRUE(r.CheckNoUnknownKeys().ok());
}

TEST(YamlReaderTest, ErrorsNameWhereAndKey) {
  YamlReader r = Reader("n: -1\nx: abc\ny: 1.5\nxs: [1, -2]\nf: .nan\n");
  EXPECT_EQ(ReaderErrorOf(r.Required<int>("n", Bounds::AtLeast(0))),
            "s.yaml: block.n: must be >= 0, got -1");
  EXPECT_EQ(ReaderErrorOf(r.Required<double>("x")), "s.yaml: block.x: must be a number, got 'abc'");
  EXPECT_EQ(ReaderErrorOf(r.Required<int>("y")), "s.yaml: block.y: must be an integer, got '1.5'");
  EXPECT_EQ(ReaderErrorOf(r.Required<double>("y", Bounds::Fraction())),
            "s.yaml: block.y: must be >= 0 and <= 1, got 1.5");
  EXPECT_EQ(ReaderErrorOf(r.Required<std::vector<double>>("xs", Bounds::Positive())),
            "s.yaml: block.xs[1]: must be > 0, got -2");
  EXPECT_THAT(ReaderErrorOf(r.Required<double>("f")),
              HasSubstr("block.f: must be a finite number"));
  EXPECT_EQ(ReaderErrorOf(r.Required<int>("missing")), "s.yaml: block.missing: required");
  EXPECT_EQ(ReaderErrorOf(r.Required<std::string>("xs")),
            "s.yaml: block.xs: must be a string, got a list");
}

TEST(YamlReaderTest, UnknownKeysAreRejected) {
  YamlReader r = Reader("iterations: 3\niteratons: 4\n");
  ASSERT_TRUE(r.Optional<int>("iterations", 1).ok());
  ASSERT_TRUE(r.OptionalDuration("compute", Duration(0)).ok());
  EXPECT_EQ(ReaderErrorOf(r.CheckNoUnknownKeys()),
            "s.yaml: block.iteratons: unknown key (known: iterations, compute_{s,ms,us,ns})");
}

TEST(YamlReaderTest, DurationsCarryTheirUnitInTheKey) {
  YamlReader r =
      Reader("a_ms: 1.5\nb_us: 20\nc_s: 2\nd_ns: 7\nboth_ms: 1\nboth_us: 2\nneg_ms: -1\n");
  EXPECT_EQ(*r.RequiredDuration("a"), Microseconds(1500));
  EXPECT_EQ(*r.RequiredDuration("b"), Microseconds(20));
  EXPECT_EQ(*r.RequiredDuration("c"), Seconds(2));
  EXPECT_EQ(*r.OptionalDuration("d", Seconds(1)), Nanoseconds(7));
  EXPECT_EQ(*r.OptionalDuration("e", Seconds(1)), Seconds(1));
  EXPECT_THAT(ReaderErrorOf(r.RequiredDuration("both")),
              HasSubstr("block.both_us: give only one of"));
  EXPECT_EQ(ReaderErrorOf(r.RequiredDuration("neg")), "s.yaml: block.neg_ms: must be >= 0, got -1");
  EXPECT_THAT(ReaderErrorOf(r.RequiredDuration("gone")), HasSubstr("block.gone_ms: required"));
  EXPECT_TRUE(r.CheckNoUnknownKeys().ok());
}

TEST(YamlReaderTest, SizesAreBinaryUnits) {
  YamlReader r = Reader("a_mb: 2\nb_kb: 1.5\nc_bytes: 10\nkb: 64\nneg_mb: -1\n");
  EXPECT_EQ(*r.RequiredSize("a"), 2 << 20);
  EXPECT_EQ(*r.RequiredSize("b"), 1536);
  EXPECT_EQ(*r.RequiredSize("c"), 10);
  EXPECT_EQ(*r.RequiredSize(""), 64 << 10);
  EXPECT_EQ(ReaderErrorOf(r.RequiredSize("neg")), "s.yaml: block.neg_mb: must be > 0, got -1");
  EXPECT_THAT(ReaderErrorOf(r.RequiredSize("gone")), HasSubstr("block.gone_mb: required"));
  EXPECT_TRUE(r.CheckNoUnknownKeys().ok());
}

TEST(YamlReaderTest, HostsAreNodeNames) {
  Topology t;
  const NodeId h0 = t.AddNode("h0", NodeKind::kHost);
  const NodeId h1 = t.AddNode("h1", NodeKind::kHost);
  const NodeId s0 = t.AddNode("s0", NodeKind::kSwitch);
  t.AddDuplexLink(h0, s0, LinkParams());
  t.AddDuplexLink(h1, s0, LinkParams());
  YamlReader r = Reader("a: [h1, h0]\nb: [h0, nope]\nc: [h0, s0]\nd: [h0, h0]\none: h1\nsw: s0\n");
  EXPECT_EQ(*r.RequiredHosts("a", t), (std::vector<NodeId>{h1, h0}));
  EXPECT_EQ(ReaderErrorOf(r.RequiredHosts("b", t)), "s.yaml: block.b[1]: unknown node 'nope'");
  EXPECT_THAT(ReaderErrorOf(r.RequiredHosts("c", t)), HasSubstr("block.c[1]: 's0' is not a host"));
  EXPECT_THAT(ReaderErrorOf(r.RequiredHosts("d", t)),
              HasSubstr("block.d[1]: 'h0' is listed twice"));
  EXPECT_EQ(*r.RequiredHost("one", t), h1);
  EXPECT_THAT(ReaderErrorOf(r.RequiredHost("sw", t)), HasSubstr("block.sw: 's0' is not a host"));
  EXPECT_EQ(*r.OptionalHosts("absent", t, {h0}), std::vector<NodeId>{h0});
}

TEST(YamlReaderTest, NestedMapsAndListsKnowTheirPath) {
  YamlReader r = Reader("m: {x: 1, bad: 2}\nl: [{src: a}, {src: b, typo: 1}]\nnot_map: 3\n");
  absl::StatusOr<YamlReader> m = r.RequiredMap("m");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m->Required<int>("x"), 1);
  EXPECT_THAT(ReaderErrorOf(m->CheckNoUnknownKeys()),
              HasSubstr("s.yaml: block.m.bad: unknown key"));
  absl::StatusOr<std::vector<YamlReader>> l = r.RequiredMapList("l");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ(*(*l)[1].Required<std::string>("src"), "b");
  EXPECT_THAT(ReaderErrorOf((*l)[1].CheckNoUnknownKeys()),
              HasSubstr("block.l[1].typo: unknown key"));
  EXPECT_THAT(ReaderErrorOf(r.RequiredMap("not_map")), HasSubstr("block.not_map: must be a map"));
  absl::StatusOr<YamlReader> empty = r.OptionalMap("absent");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty->Optional<int>("x", 4), 4);
}

TEST(YamlReaderTest, ChoicesAndStatusCauses) {
  YamlReader r = Reader("mode: fast\n");
  EXPECT_EQ(ReaderErrorOf(r.RequiredChoice("mode", {"slow", "medium"})),
            "s.yaml: block.mode: must be one of slow, medium, got 'fast'");
  EXPECT_EQ(*r.OptionalChoice("other", "slow", {"slow"}), "slow");
  const absl::Status cause = absl::NotFoundError("x.cdf: cannot open");
  const absl::Status s = r.Error("cdf", cause);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "s.yaml: block.cdf: x.cdf: cannot open");
}

TEST(YamlReaderTest, TopLevelOfAFile) {
  absl::StatusOr<YamlReader> r = YamlReader::Create(YAML::Load("network: {ecn_kb: -1}"), "s.yaml:");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ReaderErrorOf(r->Required<int>("seed")), "s.yaml: seed: required");
  absl::StatusOr<YamlReader> network = r->RequiredMap("network");
  ASSERT_TRUE(network.ok());
  EXPECT_EQ(ReaderErrorOf(network->RequiredSize("ecn")),
            "s.yaml: network.ecn_kb: must be > 0, got -1");
}

TEST(YamlReaderTest, NonMapsAndBadYamlAreErrors) {
  EXPECT_THAT(ReaderErrorOf(YamlReader::Create(YAML::Load("[1, 2]"), "w")),
              HasSubstr("w: must be a map"));
  EXPECT_TRUE(YamlReader::Create(YAML::Node(), "w").ok());
  EXPECT_THAT(ReaderErrorOf(ParseYaml("a: [1, 2", "bad.yaml")), HasSubstr("bad.yaml"));
  EXPECT_EQ(LoadYamlFile("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dar
