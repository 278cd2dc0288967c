#include "core/topology_config.h"

#include <string>

#include "core/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Topology> Build(const std::string& yaml, const std::string& base_dir = "") {
  return BuildTopology(YAML::Load(yaml), "scenario.yaml", base_dir);
}

// The error message of building `yaml`, or "" if it builds.
std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<Topology> topo = Build(yaml);
  if (topo.ok()) return "";
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(topo.status().message());
}

TEST(TopologyConfigTest, TypesAreRegistered) {
  EXPECT_NE(Registry<TopologyFactory>::Find("fat_tree"), nullptr);
  EXPECT_NE(Registry<TopologyFactory>::Find("leaf_spine"), nullptr);
  EXPECT_NE(Registry<TopologyFactory>::Find("node_link_json"), nullptr);
  EXPECT_EQ(Registry<TopologyFactory>::Find("torus"), nullptr);
}

TEST(TopologyConfigTest, FatTree) {
  absl::StatusOr<Topology> topo = Build(R"(
type: fat_tree
k: 4
host_link: {capacity_gbps: 25, delay_us: 2, queue_kb: 512}
fabric_link: {capacity_gbps: 100}
)");
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->num_nodes(), 36);
  const Link& host = topo->link(topo->node(0).out_links[0]);
  EXPECT_EQ(host.params.capacity, DataRate::Gbps(25));
  EXPECT_EQ(host.params.delay, Microseconds(2));
  EXPECT_EQ(host.params.queue_bytes, 512 * 1024);
  const NodeId e0 = topo->FindNode("e0").value();
  const NodeId a0 = topo->FindNode("a0").value();
  const Link& fabric = topo->link(topo->FindLink(e0, a0));
  EXPECT_EQ(fabric.params.capacity, DataRate::Gbps(100));
  EXPECT_EQ(fabric.params.delay, LinkParams().delay);
  EXPECT_EQ(fabric.params.queue_bytes, LinkParams().queue_bytes);
}

TEST(TopologyConfigTest, LinkParamsTakeOtherUnits) {
  absl::StatusOr<Topology> topo = Build(R"(
type: fat_tree
k: 2
host_link: {delay_ms: 0.5, queue_mb: 2}
fabric_link: {delay_ns: 700, queue_bytes: 1500}
)");
  ASSERT_TRUE(topo.ok()) << topo.status();
  const Link& host = topo->link(topo->node(0).out_links[0]);
  EXPECT_EQ(host.params.delay, Microseconds(500));
  EXPECT_EQ(host.params.queue_bytes, 2 * 1024 * 1024);
  const Link& fabric =
      topo->link(topo->FindLink(topo->FindNode("e0").value(), topo->FindNode("a0").value()));
  EXPECT_EQ(fabric.params.delay, Nanoseconds(700));
  EXPECT_EQ(fabric.params.queue_bytes, 1500);
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 2, host_link: {delay_us: 1, delay_ms: 1}}"),
              HasSubstr("topology.host_link.delay_"));
}

TEST(TopologyConfigTest, LeafSpineWithOverrides) {
  absl::StatusOr<Topology> topo = Build(R"(
type: leaf_spine
leaves: 2
spines: 2
hosts_per_leaf: 3
overrides:
  - {link: [leaf0, spine0], capacity_fraction: 0.25}
  - {link: [leaf1, spine1], down: true}
  - {link: [leaf1, spine0], metric: 3}
)");
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->Hosts().size(), 6u);
  auto link = [&](const std::string& a, const std::string& b) {
    return topo->link(topo->FindLink(topo->FindNode(a).value(), topo->FindNode(b).value()));
  };
  EXPECT_EQ(link("spine0", "leaf0").params.capacity, DataRate::Gbps(2.5));
  EXPECT_FALSE(link("leaf1", "spine1").up);
  EXPECT_FALSE(link("spine1", "leaf1").up);
  EXPECT_EQ(link("spine0", "leaf1").params.metric, 3);
  EXPECT_TRUE(link("leaf0", "spine1").up);
}

TEST(TopologyConfigTest, NodeLinkJsonResolvesAgainstBaseDirAndAttachesHosts) {
  absl::StatusOr<Topology> topo = Build(R"(
type: node_link_json
file: topologies/abilene.json
capacity_gbps: 40
queue_kb: 100
hosts_per_node: 2
host_link: {capacity_gbps: 100}
overrides: [{link: ["0", "1"], down: true}]
)",
                                        std::string(DAR_SOURCE_DIR) + "/data");
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->num_nodes(), 11 + 22);
  EXPECT_EQ(topo->num_links(), 28 + 44);
  EXPECT_EQ(topo->link(2).params.capacity, DataRate::Gbps(40));
  EXPECT_EQ(topo->link(2).params.queue_bytes, 100 * 1024);
  EXPECT_FALSE(topo->link(0).up);
  const NodeId h = topo->FindNode("10-h1").value();
  EXPECT_EQ(topo->node(h).kind, NodeKind::kHost);
  EXPECT_EQ(topo->link(topo->node(h).out_links[0]).params.capacity, DataRate::Gbps(100));
  EXPECT_EQ(topo->Destinations().size(), 11u);
}

TEST(TopologyConfigTest, ErrorsNameTheKeyPath) {
  EXPECT_EQ(ErrorOf("{type: fat_tree, k: 4, fabric_link: {capacity_gbps: x}}"),
            "scenario.yaml: topology.fabric_link.capacity_gbps: must be a number, got 'x'");
  EXPECT_EQ(
      ErrorOf("{type: fat_tree, k: 4, fabric_link: {capacity_gbps: -1}}"),
      "scenario.yaml: topology.fabric_link.capacity_gbps: must be >= 1e-06 and <= 1e+06, got -1");
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 4, fabric_link: {delay_us: 0}}"),
              HasSubstr("topology.fabric_link.delay_us: must be > 0, got 0"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 4, fabric_link: {queue_kb: 0}}"),
              HasSubstr("topology.fabric_link.queue_kb: must be > 0, got 0"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 3}"), HasSubstr("topology.k: must be even, got 3"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: four}"),
              HasSubstr("topology.k: must be an integer, got 'four'"));
  EXPECT_THAT(ErrorOf("{type: fat_tree}"), HasSubstr("scenario.yaml: topology.k: required"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 4, kk: 4}"), HasSubstr("topology.kk: unknown key"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 4, host_link: {capacity: 4}}"),
              HasSubstr("topology.host_link.capacity: unknown key"));
  EXPECT_THAT(ErrorOf("{type: fat_tree, k: 4, host_link: 5}"),
              HasSubstr("topology.host_link: must be a map, got '5'"));
  EXPECT_THAT(ErrorOf("{type: torus}"),
              HasSubstr("topology.type: unknown topology type 'torus' (known: fat_tree, "));
  EXPECT_THAT(ErrorOf("{k: 4}"), HasSubstr("topology.type: required"));
  EXPECT_THAT(ErrorOf("[1, 2]"), HasSubstr("scenario.yaml: topology: must be a map"));
  EXPECT_THAT(ErrorOf("{type: leaf_spine, leaves: 0, spines: 1, hosts_per_leaf: 1}"),
              HasSubstr("topology.leaves: must be >= 1 and <= 131072, got 0"));
  EXPECT_THAT(ErrorOf("{type: node_link_json}"), HasSubstr("topology.file: required"));
  EXPECT_THAT(ErrorOf("{type: node_link_json, file: /nonexistent/x.json}"),
              HasSubstr("cannot open '/nonexistent/x.json'"));
}

TEST(TopologyConfigTest, OverrideErrorsNameTheEntry) {
  const std::string base = "{type: leaf_spine, leaves: 2, spines: 2, hosts_per_leaf: 1, ";
  EXPECT_THAT(ErrorOf(base + "overrides: [{link: [leaf0, spine9], down: true}]}"),
              HasSubstr("scenario.yaml: topology.overrides[0]: link leaf0 - spine9: unknown node "
                        "'spine9'"));
  EXPECT_THAT(ErrorOf(base + "overrides: [{down: true}, {link: [leaf0, leaf1], down: true}]}"),
              HasSubstr("topology.overrides[0].link: must be a list of two node names"));
  EXPECT_THAT(ErrorOf(base + "overrides: [{link: [leaf0, leaf1], down: true}]}"),
              HasSubstr("topology.overrides[0]: link leaf0 - leaf1: no link between"));
  EXPECT_THAT(ErrorOf(base + "overrides: [{link: [leaf0, spine0], down: maybe}]}"),
              HasSubstr("topology.overrides[0].down: must be true or false, got 'maybe'"));
  EXPECT_THAT(ErrorOf(base + "overrides: [{link: [leaf0, spine0], capacity_fraction: 0}]}"),
              HasSubstr("topology.overrides[0].capacity_fraction: must be > 0, got 0"));
  EXPECT_THAT(ErrorOf(base + "overrides: [{link: [leaf0, spine0], colour: red}]}"),
              HasSubstr("topology.overrides[0].colour: unknown key"));
  EXPECT_THAT(ErrorOf(base + "overrides: {link: [leaf0, spine0]}}"),
              HasSubstr("topology.overrides: must be a list"));
}

}  // namespace
}  // namespace dar
