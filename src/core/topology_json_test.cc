#include "core/topology_json.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kAbilene = std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json";

// Writes `text` to a fresh file in the test's temporary directory; returns its path.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

absl::StatusOr<Topology> LoadText(const std::string& name, const std::string& text) {
  return LoadNodeLinkJson(WriteTemp(name, text), JsonImportOptions());
}

TEST(TopologyJsonTest, LoadsAbilene) {
  JsonImportOptions options;
  options.capacity = DataRate::Gbps(40);
  options.queue_bytes = 5000;
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(kAbilene, options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->num_nodes(), 11);
  EXPECT_EQ(topo->num_links(), 28);
  EXPECT_TRUE(topo->Hosts().empty());
  EXPECT_EQ(topo->Endpoints().size(), 11u);
  EXPECT_EQ(topo->node(0).name, "0");
  EXPECT_EQ(topo->node(0).label, "New York");
  ASSERT_TRUE(topo->node(0).position.has_value());
  EXPECT_DOUBLE_EQ(topo->node(0).position->first, -74.01);
  EXPECT_DOUBLE_EQ(topo->node(0).position->second, 40.71);
  // Edge 0: "0" - "1", 1146.16 km, both directions.
  const Link& l0 = topo->link(0);
  EXPECT_EQ(l0.src, 0);
  EXPECT_EQ(l0.dst, 1);
  EXPECT_EQ(l0.reverse, 1);
  EXPECT_NEAR(ToSeconds(l0.params.delay), 1146.16 / 200000.0, 1e-9);
  EXPECT_EQ(topo->link(1).params.delay, l0.params.delay);
  EXPECT_EQ(l0.params.capacity, DataRate::Gbps(40));
  EXPECT_EQ(l0.params.queue_bytes, 5000);
  for (NodeId n = 0; n < topo->num_nodes(); ++n) {
    EXPECT_EQ(topo->node(n).kind, NodeKind::kSwitch);
  }
}

TEST(TopologyJsonTest, AcceptsLinksKeyNumericIdsAndDirectedGraphs) {
  absl::StatusOr<Topology> topo = LoadText("directed.json", R"({
    "directed": true,
    "nodes": [{"id": 7, "weight": 2.5}, {"id": 9, "pos": [0, 0]}, {"id": "x", "pos": [1, 0]}],
    "links": [{"source": 7, "target": 9},
              {"source": 9, "target": "x", "capacity": 2.5e9},
              {"source": "x", "target": 9}]
  })");
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->num_nodes(), 3);
  EXPECT_EQ(topo->num_links(), 3);
  EXPECT_EQ(topo->node(0).name, "7");
  EXPECT_EQ(topo->node(1).name, "9");
  EXPECT_EQ(topo->node(0).weight, 2.5);
  EXPECT_FALSE(topo->node(1).weight.has_value());
  EXPECT_EQ(topo->link(0).reverse, kNoLink);
  // No dist and a missing pos: the default delay.
  EXPECT_EQ(topo->link(0).params.delay, JsonImportOptions().default_delay);
  // No dist: one degree of longitude on the equator, about 111.19 km.
  EXPECT_NEAR(ToSeconds(topo->link(1).params.delay), 111.19 / kFibreKmPerSecond, 1e-7);
  EXPECT_EQ(topo->link(1).params.capacity, DataRate::Mbps(2500));
  EXPECT_EQ(topo->link(2).params.capacity, JsonImportOptions().capacity);
}

TEST(TopologyJsonTest, GreatCircle) {
  // New York to Chicago, about 1145 km.
  EXPECT_NEAR(GreatCircleKm({-74.01, 40.71}, {-87.65, 41.85}), 1145, 5);
  EXPECT_DOUBLE_EQ(GreatCircleKm({10, 20}, {10, 20}), 0);
}

struct BadFile {
  const char* file;
  const char* text;
  const char* problem;
};

class BadFileTest : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadFileTest, ErrorNamesFileAndProblem) {
  const BadFile& bad = GetParam();
  absl::StatusOr<Topology> topo = LoadText(bad.file, bad.text);
  ASSERT_FALSE(topo.ok());
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topo.status().message(), AllOf(HasSubstr(bad.file), HasSubstr(bad.problem)));
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, BadFileTest,
    ::testing::Values(
        BadFile{"notjson.json", "{\"nodes\": [", "not valid JSON"},
        BadFile{"array.json", "[1, 2]", "top level must be an object"},
        BadFile{"nonodes.json", R"({"edges": []})", "no \"nodes\" array"},
        BadFile{"nodesobj.json", R"({"nodes": {}})", "nodes: must be an array"},
        BadFile{"noid.json", R"({"nodes": [{"id": "a"}, {"name": "b"}]})",
                "nodes[1]: has no \"id\""},
        BadFile{"boolid.json", R"({"nodes": [{"id": true}]})", "nodes[0]: id must be"},
        BadFile{"dupid.json", R"({"nodes": [{"id": "a"}, {"id": "b"}, {"id": "a"}]})",
                "nodes[2]: duplicate id 'a'"},
        BadFile{"badpos.json", R"({"nodes": [{"id": "a", "pos": [1]}]})", "nodes[0]: pos must be"},
        BadFile{"badtarget.json",
                R"({"nodes": [{"id": "0"}, {"id": "1"}],
                    "edges": [{"source": "0", "target": "1"}, {"source": "1", "target": "42"}]})",
                "edges[1]: target '42' is not a node"},
        BadFile{"badsource.json",
                R"({"nodes": [{"id": 0}], "links": [{"source": 5, "target": 0}]})",
                "links[0]: source '5' is not a node"},
        BadFile{"nosource.json", R"({"nodes": [{"id": 0}], "links": [{"target": 0}]})",
                "links[0]: has no \"source\""},
        BadFile{"textdist.json",
                R"({"nodes": [{"id": 0}, {"id": 1}],
                    "edges": [{"source": 0, "target": 1, "dist": "far"}]})",
                "edges[0]: dist must be a non-negative number"},
        BadFile{"negdist.json",
                R"({"nodes": [{"id": 0}, {"id": 1}],
                    "edges": [{"source": 0, "target": 1, "dist": -3}]})",
                "edges[0]: dist must be a non-negative number"},
        BadFile{"selfloop.json",
                R"({"nodes": [{"id": 0}, {"id": 1}],
                    "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 1}]})",
                "edges[1]: self loop at '1'"},
        BadFile{"badcap.json",
                R"({"nodes": [{"id": 0}, {"id": 1}],
                    "edges": [{"source": 0, "target": 1, "capacity": 0}]})",
                "edges[0]: capacity must be"},
        BadFile{"negweight.json", R"({"nodes": [{"id": 0, "weight": -1}]})",
                "nodes[0]: weight must be a non-negative number"},
        BadFile{"textweight.json", R"({"nodes": [{"id": 0, "weight": "big"}]})",
                "nodes[0]: weight must be a non-negative number"},
        BadFile{"edgesobj.json", R"({"nodes": [], "edges": 3})", "edges: must be an array"},
        BadFile{"directedstr.json", R"({"directed": "no", "nodes": []})", "directed: must be"}));

TEST(TopologyJsonTest, MissingFileIsAnError) {
  const std::string path = ::testing::TempDir() + "/does-not-exist.json";
  absl::StatusOr<Topology> topo = LoadNodeLinkJson(path, JsonImportOptions());
  ASSERT_FALSE(topo.ok());
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topo.status().message(), AllOf(HasSubstr(path), HasSubstr("cannot open")));
  topo = LoadNodeLinkJson(::testing::TempDir(), JsonImportOptions());
  EXPECT_THAT(topo.status().message(), HasSubstr("is a directory"));
}

}  // namespace
}  // namespace dar
