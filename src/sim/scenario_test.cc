#include "sim/scenario.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/random.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/runner.h"

namespace dar::sim {
namespace {

using ::testing::HasSubstr;

constexpr char kSmallFatTree[] = R"(
name: small
seed: 3
duration_ms: 5
topology:
  type: fat_tree
  k: 4
  host_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
  fabric_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
network: {ecn_threshold_kb: 64}
workloads:
  - {type: background, cdf: websearch, load: 0.4}
  - {type: allreduce, group_size: 8, message_mb: 1, iterations: 1, compute_ms: 0.1}
events:
  - {at_ms: 1, link_down: [a0, c0]}
  - {at_ms: 3, link_up: [a0, c0]}
  - {at_ms: 0, load: {link: [a3, c2], from: 0.1, to: 0.6, ramp_ms: 4}}
policies:
  - {name: static, reconvergence_ms: 0.5}
  - {name: ecmp, reconvergence_ms: 0.5}
  - {name: spray, routing: ecmp, forwarding: per_packet, reconvergence_ms: 0.5}
)";

absl::StatusOr<Scenario> Parse(const std::string& text) {
  return ParseScenario(text, std::string(DAR_SOURCE_DIR) + "/scenarios/test.yaml");
}

void StripWallTime(nlohmann::json& results) {
  for (auto& p : results["policies"]) p["metrics"].erase("wall_time_s");
}

TEST(ScenarioTest, SameSeedGivesIdenticalResults) {
  absl::StatusOr<Scenario> s = Parse(kSmallFatTree);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<nlohmann::json> a = RunScenario(*s, {});
  // Policies run side by side (one thread each) give the same document as one after another.
  RunOptions parallel;
  parallel.jobs = 3;
  absl::StatusOr<nlohmann::json> b = RunScenario(*s, parallel);
  ASSERT_TRUE(a.ok() && b.ok());
  StripWallTime(*a);
  StripWallTime(*b);
  EXPECT_EQ(a->dump(2), b->dump(2));
  s->seed = 4;
  absl::StatusOr<nlohmann::json> c = RunScenario(*s, {});
  ASSERT_TRUE(c.ok());
  StripWallTime(*c);
  EXPECT_NE(a->dump(2), c->dump(2));
}

TEST(ScenarioTest, EveryPolicyCompletesAllWorkWithoutLoops) {
  absl::StatusOr<Scenario> s = Parse(kSmallFatTree);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<nlohmann::json> r = RunScenario(*s, {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["policies"].size(), 3u);
  for (const auto& p : (*r)["policies"]) {
    const auto& m = p["metrics"];
    SCOPED_TRACE(p["name"].get<std::string>());
    EXPECT_TRUE(m["completed"].get<bool>());
    EXPECT_EQ(m["messages_incomplete"], 0);
    EXPECT_EQ(m["routing_loops"], 0);
    EXPECT_GT(m["flows_completed"].get<int64_t>(), 10);
    EXPECT_GT(m["iteration_time_s"].get<double>(), 0);
    EXPECT_GT(m["tables_installed"].get<int64_t>(), 1);  // reconverged after the failure
    for (const char* key : {"packets_dropped", "retransmissions", "events", "sim_time_s",
                            "wall_time_s", "fct_mean_s", "fct_p99_s", "comm_time_s"}) {
      EXPECT_TRUE(m.contains(key)) << key;
    }
  }
}

// The collision effect (e.g. Al-Fares et al. 2008, Hedera 2010): ECMP hashes whole flows, so
// a permutation puts several flows on one core link while others idle; spraying packets over
// all equal-cost paths balances them.
TEST(ScenarioTest, SprayingBeatsEcmpOnAPermutation) {
  std::vector<int> perm(16);
  std::iota(perm.begin(), perm.end(), 0);
  Random rng(11);
  // A derangement across pods: host i sends to a host in another pod.
  do {
    for (int i = 15; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  } while (std::any_of(perm.begin(), perm.end(), [&](int& x) {
    const int i = static_cast<int>(&x - perm.data());
    return x / 4 == i / 4;
  }));
  std::string transfers;
  for (int i = 0; i < 16; ++i)
    transfers += fmt::format("      - {{src: h{}, dst: h{}}}\n", i, perm[i]);
  const std::string text = fmt::format(R"(
name: permutation
duration_ms: 1
topology:
  type: fat_tree
  k: 4
  host_link: {{capacity_gbps: 10, delay_us: 1, queue_kb: 512}}
  fabric_link: {{capacity_gbps: 10, delay_us: 1, queue_kb: 512}}
network: {{ecn_threshold_kb: 64}}
workloads:
  - type: bulk
    size_mb: 2
    repeat: 1
    transfers:
{}
policies:
  - ecmp
  - {{name: spray, routing: ecmp, forwarding: per_packet}}
)",
                                       transfers);
  absl::StatusOr<Scenario> s = Parse(text);
  ASSERT_TRUE(s.ok()) << s.status();
  double worst_ratio = 1e9;
  for (uint64_t seed : {1, 2, 3}) {
    s->seed = seed;
    absl::StatusOr<nlohmann::json> r = RunScenario(*s, {});
    ASSERT_TRUE(r.ok()) << r.status();
    const double ecmp = (*r)["policies"][0]["metrics"]["completion_mean_s"].get<double>();
    const double spray = (*r)["policies"][1]["metrics"]["completion_mean_s"].get<double>();
    std::printf("seed %lu: ECMP mean completion %.3f ms, spraying %.3f ms, ratio %.2f\n", seed,
                ecmp * 1e3, spray * 1e3, ecmp / spray);
    worst_ratio = std::min(worst_ratio, ecmp / spray);
  }
  EXPECT_GT(worst_ratio, 1.4);
}

// Every scenario shipped in scenarios/ loads (their models load: dar_learned_test.cc).
TEST(ScenarioTest, ShippedScenariosLoad) {
  int files = 0;
  for (const char* dir : {"/scenarios", "/scenarios/train"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(DAR_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".yaml") continue;
      ++files;
      absl::StatusOr<Scenario> s = LoadScenario(entry.path().string());
      ASSERT_TRUE(s.ok()) << s.status();
    }
  }
  EXPECT_GE(files, 10);
}

// A policy's line rate is the hosts' fastest link unless the policy gives its own.
TEST(ScenarioTest, TheLineRateIsTheHostsUnlessGiven) {
  std::string text = kSmallFatTree;
  const std::string host_link = "host_link: {capacity_gbps: 10,";
  text.replace(text.find(host_link), host_link.size(), "host_link: {capacity_gbps: 25,");
  const std::string spray = "forwarding: per_packet,";
  text.replace(text.find(spray), spray.size(), "forwarding: per_packet, line_rate_gbps: 40,");
  absl::StatusOr<Scenario> s = Parse(text);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->policies[0].forwarding.line_rate, DataRate::Gbps(25));
  EXPECT_EQ(s->policies[2].forwarding.line_rate, DataRate::Gbps(40));
}

// The annotated example in scenarios/README.md is a valid scenario, so the schema page
// cannot drift from the parser.
TEST(ScenarioTest, TheReadmeExampleIsValid) {
  const std::string path = std::string(DAR_SOURCE_DIR) + "/scenarios/README.md";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  absl::StatusOr<Scenario> s = ParseScenario(doc.substr(begin + 8, end - begin - 8), path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->policies.size(), 13u);
  EXPECT_EQ(s->events.size(), 5u);
  EXPECT_EQ(s->workloads.size(), 6u);
  EXPECT_EQ(s->topology.Hosts().size(), 128u);
}

struct BadCase {
  std::string name;
  std::string from;  // text to replace in kSmallFatTree
  std::string to;
  std::string expect;  // in the error message
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadScenarioTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadScenarioTest, NamesTheKeyAndTheProblem) {
  std::string text = kSmallFatTree;
  const BadCase& c = GetParam();
  const size_t at = text.find(c.from);
  ASSERT_NE(at, std::string::npos) << c.from;
  text.replace(at, c.from.size(), c.to);
  absl::StatusOr<Scenario> s = Parse(text);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.expect));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("test.yaml"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadScenarioTest,
    ::testing::Values(
        BadCase{"UnknownTopKey", "seed: 3", "sede: 3", "sede"},
        BadCase{"MissingDuration", "duration_ms: 5", "", "duration"},
        BadCase{"NegativeDuration", "duration_ms: 5", "duration_ms: -5", "duration_ms"},
        BadCase{"BadK", "k: 4", "k: three", "topology.k"},
        BadCase{"UnknownWorkload", "type: background", "type: nope", "unknown workload 'nope'"},
        BadCase{"BadLoad", "load: 0.4", "load: 1.5", "load"},
        BadCase{"UnknownNodeInEvent", "link_down: [a0, c0]", "link_down: [a0, zz]", "'zz'"},
        BadCase{"NoSuchLink", "link_down: [a0, c0]", "link_down: [a0, a1]", "no link"},
        BadCase{"EventWithoutKind", "{at_ms: 3, link_up: [a0, c0]}", "{at_ms: 3}",
                "exactly one of"},
        BadCase{"UnknownRouting", "name: static", "name: warp", "unknown routing 'warp'"},
        BadCase{"UnknownPolicyKey", "forwarding: per_packet,", "forwarding: per_packet, colour: 1,",
                "colour"},
        BadCase{"BadForwarding", "forwarding: per_packet", "forwarding: sideways",
                "unknown forwarding mode"},
        BadCase{"NegativeBulkHold", "forwarding: per_packet,",
                "forwarding: per_packet, bulk_sticky_packets: -1,",
                "bulk_sticky_packets: must be >= 0"},
        BadCase{"ZeroLineRate", "forwarding: per_packet,",
                "forwarding: per_packet, line_rate_gbps: 0,", "line_rate_gbps: must be > 0"},
        BadCase{"NoWorkloads", "workloads:", "worklods:", "workloads: must be a non-empty list"},
        BadCase{"TinyCapacityFraction", "  k: 4\n",
                "  k: 4\n  overrides: [{link: [a0, c0], capacity_fraction: 1e-320}]\n",
                "leaves the link under 1000 b/s"},
        BadCase{"CapacityFractionAboveOne", "  k: 4\n",
                "  k: 4\n  overrides: [{link: [a0, c0], capacity_fraction: 2}]\n",
                "capacity_fraction must be in (0, 1]"},
        BadCase{"TinyCapacityEvent", "{at_ms: 1, link_down: [a0, c0]}",
                "{at_ms: 1, capacity: {link: [a0, c0], fraction: 1e-320}}",
                "capacity.fraction: 1e-320 leaves the link under 1000 b/s"},
        BadCase{"HugeLinkCapacity", "capacity_gbps: 10", "capacity_gbps: 1e300",
                "host_link.capacity_gbps: must be"},
        BadCase{"HugeQueue", "queue_kb: 256", "queue_gb: 2",
                "host_link.queue_gb: 2 is too large: at most 1073741824 bytes"},
        BadCase{"HugeFatTree", "k: 4", "k: 66", "topology.k: must be >= 2 and <= 64, got 66"},
        BadCase{"HugeArrivalRate", "{type: background, cdf: websearch, load: 0.4}",
                "{type: incast, fan_in: 2, response_kb: 64, rate_per_s: 1e308}",
                "workloads[0].rate_per_s: must be"},
        BadCase{"HugeMessage", "message_mb: 1", "message_mb: 1e9",
                "workloads[1].message_mb: 1e+09 is too large: at most 4294967296 bytes"},
        BadCase{"LongDuration", "duration_ms: 5", "duration_ms: 1e12",
                "duration_{s,ms,us,ns}: 1e+09 s is too long: at most 3600 s"},
        BadCase{"DuplicatePolicy", "name: ecmp,", "name: static,", "listed twice"},
        BadCase{"NotYaml", "policies:", "policies: [", "test.yaml"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

}  // namespace
}  // namespace dar::sim
