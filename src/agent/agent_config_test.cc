#include "agent/agent_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/routing.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;

// Node B of a diamond A-B, A-C, B-D, C-D, as dar-lab writes it.
constexpr char kConfigNodeB[] = R"(lab: dmd
node: {id: 2, name: B}
netns: dmd-B
controller: 10.255.255.1:50051
tls: {cert: node-2.crt, key: node-2.key, ca: ca.crt}
state_dir: state/B
probe_interval_ms: 50
missed_probes: 4
forwarding_mode: per_packet
line_rate_mbps: 100
initial_key: {id: 7, file: overlay.key}
nodes:
  - {id: 1, name: A, overlay: 10.77.0.1}
  - {id: 2, name: B}
  - {id: 3, name: C, overlay: 10.77.0.3}
  - {id: 4, name: D, overlay: 10.77.0.4}
links:
  - {a: A, b: B, capacity_bps: 100000000}
  - {a: A, b: C}
  - {a: B, b: D, capacity_gbps: 2.5}
  - {a: C, b: D}
neighbours:
  - {id: 1, name: A, link: 0, interface: dmd-0b, address: 10.1.0.2/30, peer_interface: dmd-0a, peer_address: 10.1.0.1, rate_bps: 100000000}
  - {id: 4, name: D, link: 2, interface: dmd-2a, address: 10.1.2.1/30, peer_address: 10.1.2.2}
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<AgentConfig> c = ParseAgentConfig(text, "/etc/dar/B.yaml");
  EXPECT_FALSE(c.ok()) << text;
  return std::string(c.status().message());
}

TEST(AgentConfigTest, ParsesANodeConfig) {
  absl::StatusOr<AgentConfig> c = ParseAgentConfig(kConfigNodeB, "/etc/dar/B.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->lab, "dmd");
  EXPECT_EQ(c->self, 1);
  EXPECT_EQ(c->self_node().id, 2u);
  EXPECT_EQ(net::ToString(c->self_node().overlay), "10.77.0.2");  // the default
  EXPECT_EQ(c->controller, "10.255.255.1:50051");
  EXPECT_EQ(c->tls.cert_file, "/etc/dar/node-2.crt");
  EXPECT_EQ(c->tls.ca_file, "/etc/dar/ca.crt");
  EXPECT_EQ(c->state_dir, "/etc/dar/state/B");
  EXPECT_EQ(c->tun_name, "dar0");
  EXPECT_EQ(c->overlay_prefix_length, 16);
  EXPECT_EQ(c->data_port, 7000);
  EXPECT_EQ(c->probe_interval, Milliseconds(50));
  EXPECT_EQ(c->missed_probes, 4);
  EXPECT_EQ(c->forwarding_mode, ForwardingMode::kPerPacket);
  EXPECT_EQ(c->line_rate, DataRate::Mbps(100));
  EXPECT_EQ(c->table_stale, Seconds(3));
  ASSERT_TRUE(c->initial_key.has_value());
  EXPECT_EQ(c->initial_key->id, 7u);
  EXPECT_EQ(c->initial_key->file, "/etc/dar/overlay.key");
  ASSERT_EQ(c->links.size(), 4u);
  EXPECT_EQ(c->links[0].capacity, DataRate::Mbps(100));
  EXPECT_TRUE(c->links[1].capacity.is_zero());
  EXPECT_EQ(c->links[2].capacity, DataRate::Mbps(2500));  // the controller's units too

  ASSERT_EQ(c->neighbours.size(), 2u);
  const NeighbourConfig& a = c->neighbours[0];
  EXPECT_EQ(a.id, 1u);
  EXPECT_EQ(a.node, 0);
  EXPECT_EQ(a.out_link, 1);  // link 0 is A -> B (0) and B -> A (1)
  EXPECT_EQ(a.in_link, 0);
  EXPECT_EQ(a.interface, "dmd-0b");
  EXPECT_EQ(net::ToString(a.local_address), "10.1.0.2");
  EXPECT_EQ(a.prefix_length, 30);
  EXPECT_EQ(net::ToString(a.peer_address), "10.1.0.1");
  EXPECT_EQ(a.rate, DataRate::Mbps(100));
  const NeighbourConfig& d = c->neighbours[1];
  EXPECT_EQ(d.out_link, 4);  // link 2 is B -> D (4)
  EXPECT_EQ(d.peer_interface, "");
  EXPECT_EQ(c->FindNeighbour(4), &d);
  EXPECT_EQ(c->FindNeighbour(3), nullptr);
}

TEST(AgentConfigTest, TopologyMatchesTheLinkNumbering) {
  absl::StatusOr<AgentConfig> c = ParseAgentConfig(kConfigNodeB, "B.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const Topology topo = BuildAgentTopology(*c);
  ASSERT_EQ(topo.num_nodes(), 4);
  ASSERT_EQ(topo.num_links(), 8);
  for (const NeighbourConfig& n : c->neighbours) {
    EXPECT_EQ(topo.link(n.out_link).src, c->self);
    EXPECT_EQ(topo.link(n.out_link).dst, n.node);
    EXPECT_EQ(topo.link(n.in_link).src, n.node);
    EXPECT_EQ(topo.link(n.out_link).reverse, n.in_link);
  }
  // Every node is a destination, and B's static next hop toward C is one of its links.
  EXPECT_EQ(topo.Destinations().size(), 4u);
  const RoutingTables tables = ComputeStaticTables(topo);
  ASSERT_EQ(tables.Lookup(c->self, 2).size(), 1u);
  EXPECT_EQ(topo.link(tables.Lookup(c->self, 2)[0].link).src, c->self);
}

TEST(AgentConfigTest, ErrorsNameFileAndField) {
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "node: {id: 2, name: B}", "node: {id: 9, name: B}")),
              HasSubstr("/etc/dar/B.yaml: node.id: no node with id 9"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "node: {id: 2, name: B}", "node: {id: 2, name: X}")),
              HasSubstr("node.name: 'X' but node 2 is named 'B'"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "10.255.255.1:50051", "10.255.255.1")),
              HasSubstr("controller: must be host:port"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "10.255.255.1:50051", "ctl:99999")),
              HasSubstr("controller: bad port"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "per_packet", "per_byte")),
              HasSubstr("forwarding_mode"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "line_rate_mbps: 100", "line_rate_mbps: -1")),
              HasSubstr("line_rate_mbps"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "missed_probes: 4", "missed_probes: 0")),
              HasSubstr("missed_probes"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "overlay: 10.77.0.3", "overlay: 10.77.0.300")),
              HasSubstr("nodes[2].overlay: not an IPv4 address: '10.77.0.300'"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "overlay: 10.77.0.3", "overlay: 10.77.0.1")),
              HasSubstr("nodes[2].overlay: duplicate address 10.77.0.1"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "{id: 3, name: C,", "{id: 1, name: C,")),
              HasSubstr("nodes[2].id: duplicate id 1"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "{a: B, b: D,", "{a: B, b: E,")),
              HasSubstr("links[2].b: unknown node 'E'"));
  EXPECT_THAT(
      ErrorOf(Replace(kConfigNodeB, "capacity_gbps: 2.5", "capacity_gbps: 2.5, capacity_bps: 1")),
      HasSubstr("links[2].capacity_gbps: give only one of capacity_{bps,kbps,mbps,gbps}"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "capacity_gbps: 2.5", "capacity_mbps: -1")),
              HasSubstr("links[2].capacity_mbps"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "address: 10.1.0.2/30", "address: 10.1.0.2/33")),
              HasSubstr("neighbours[0].address: bad prefix length"));
  EXPECT_THAT(
      ErrorOf(Replace(kConfigNodeB, "{id: 4, name: D, link: 2", "{id: 4, name: D, link: 3")),
      HasSubstr("neighbours[1].link: link 3 joins C and D, not this node and D"));
  EXPECT_THAT(
      ErrorOf(Replace(kConfigNodeB, "{id: 4, name: D, link: 2", "{id: 4, name: D, link: 9")),
      HasSubstr("neighbours[1].link: no link 9"));
  EXPECT_THAT(
      ErrorOf(Replace(kConfigNodeB, "{id: 4, name: D, link: 2", "{id: 4, name: C, link: 2")),
      HasSubstr("neighbours[1].name: 'C' but node 4 is named 'D'"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "{id: 4, name: D, link: 2", "{id: 2, link: 2")),
              HasSubstr("neighbours[1].id: is this node's own id"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB,
                              "  - {id: 4, name: D, link: 2, interface: dmd-2a, "
                              "address: 10.1.2.1/30, peer_address: 10.1.2.2}\n",
                              "")),
              HasSubstr("neighbours: link 2 (B-D) of this node has no entry"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "state_dir: state/B\n", "")),
              HasSubstr("state_dir: required"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "tls: {cert: node-2.crt,", "tls: {crt: node-2.crt,")),
              HasSubstr("tls"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "lab: dmd", "lab: dmd\nprobe_intervall_ms: 5")),
              HasSubstr("probe_intervall_ms"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "lab: dmd",
                              "lab: dmd\ncontroller_id: spiffe://dmd.dar/node/1")),
              HasSubstr("controller_id: spiffe://dmd.dar/node/1 is the identity of"));
  EXPECT_THAT(
      ErrorOf(Replace(kConfigNodeB, "lab: dmd", "lab: dmd\ncontroller_id: https://x/controller")),
      HasSubstr("controller_id"));
  EXPECT_THAT(ErrorOf("- just a list"), HasSubstr("/etc/dar/B.yaml: must be a map"));
  EXPECT_THAT(ErrorOf("node: {id: [1"), HasSubstr("/etc/dar/B.yaml"));
}

TEST(AgentConfigTest, ListsTheControllersReplicas) {
  absl::StatusOr<AgentConfig> one = ParseAgentConfig(kConfigNodeB, "B.yaml");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->controllers, std::vector<std::string>{"10.255.255.1:50051"});
  absl::StatusOr<AgentConfig> three = ParseAgentConfig(
      Replace(kConfigNodeB, "controller: 10.255.255.1:50051",
              "controllers: [10.255.255.1:50051, 10.255.255.1:50052, 10.255.255.1:50053]"),
      "B.yaml");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->controller, "10.255.255.1:50051");
  EXPECT_EQ(three->controllers.size(), 3u);
  EXPECT_EQ(three->controllers[2], "10.255.255.1:50053");
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "controller: 10.255.255.1:50051",
                              "controller: 10.255.255.1:50051\ncontrollers: [10.255.255.1:50052]")),
              HasSubstr("controllers: give controller (one) or controllers (replicas), not both"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "controller: 10.255.255.1:50051", "controllers: []")),
              HasSubstr("controllers: must list at least one host:port"));
  EXPECT_THAT(ErrorOf(Replace(kConfigNodeB, "controller: 10.255.255.1:50051",
                              "controllers: [10.255.255.1:50051, nowhere]")),
              HasSubstr("controllers: must be host:port"));
}

TEST(AgentConfigTest, TheControllersIdentityIsOptional) {
  absl::StatusOr<AgentConfig> c = ParseAgentConfig(kConfigNodeB, "B.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->controller_id.has_value());  // the controller of the certificate's domain
  c = ParseAgentConfig(
      Replace(kConfigNodeB, "lab: dmd", "lab: dmd\ncontroller_id: spiffe://x.dar/controller"),
      "B.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->controller_id, security::SpiffeId::Controller("x.dar"));
}

TEST(AgentConfigTest, ParallelLinksToOneNeighbourAreRefused) {
  std::string text =
      Replace(kConfigNodeB, "  - {a: C, b: D}\n", "  - {a: C, b: D}\n  - {a: B, b: A}\n");
  text += "  - {id: 1, link: 4, interface: dmd-4a, address: 10.1.4.1/30, peer_address: 10.1.4.2}\n";
  EXPECT_THAT(ErrorOf(text), HasSubstr("neighbours[2].id: a second link to node 1"));
}

TEST(AgentConfigTest, MakesTheDataplaneConfig) {
  const std::string key_path =
      (std::filesystem::temp_directory_path() / fmt::format("dar-agent-dpkey-{}", getpid()))
          .string();
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{key_path};
  std::ofstream(key_path) << std::string(64, 'f');
  std::string text = Replace(kConfigNodeB, "file: overlay.key", "file: " + key_path);
  text = Replace(text, "lab: dmd", "lab: dmd\ndata_port: 7100\noverlay: {tun: t0, mtu: 1300}");
  absl::StatusOr<AgentConfig> c = ParseAgentConfig(text, "B.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const Topology topo = BuildAgentTopology(*c);
  absl::StatusOr<DataplaneConfig> d = MakeDataplaneConfig(*c, topo, 42);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->Validate().ok()) << d->Validate();
  EXPECT_EQ(d->node, 1);
  EXPECT_EQ(d->topology, &topo);
  ASSERT_EQ(d->overlay_addresses.size(), 4u);
  EXPECT_EQ(net::ToString(d->overlay_addresses[3]), "10.77.0.4");
  ASSERT_EQ(d->neighbours.size(), 2u);
  EXPECT_EQ(d->neighbours[0].neighbour, 0);
  EXPECT_EQ(d->neighbours[0].link, 1);
  EXPECT_EQ(net::ToString(d->neighbours[0].local), "10.1.0.2:7100");
  EXPECT_EQ(net::ToString(d->neighbours[0].peer), "10.1.0.1:7100");
  EXPECT_EQ(d->neighbours[0].capacity, DataRate::Mbps(100));
  EXPECT_EQ(d->neighbours[1].interface, "dmd-2a");
  EXPECT_EQ(d->tun.name, "t0");
  EXPECT_EQ(d->tun.mtu, 1300);
  EXPECT_EQ(net::ToString(d->tun.address), "10.77.0.2");
  EXPECT_EQ(d->tun.prefix_length, 16);
  EXPECT_EQ(d->probe_interval, Milliseconds(50));
  EXPECT_EQ(d->liveness.missed_probes, 4);
  EXPECT_EQ(d->forwarding.mode, ForwardingMode::kPerPacket);
  EXPECT_EQ(d->forwarding.line_rate, DataRate::Mbps(100));
  EXPECT_EQ(d->seed, 42u);
  ASSERT_EQ(d->initial_keys.size(), 1u);
  EXPECT_EQ(d->initial_keys[0].id, 7u);
  EXPECT_TRUE(d->initial_keys[0].active);
  EXPECT_EQ(d->initial_keys[0].key[0], 0xff);
  // A missing key file is an error naming it.
  std::filesystem::remove(key_path);
  EXPECT_THAT(std::string(MakeDataplaneConfig(*c, topo, 1).status().message()),
              HasSubstr(key_path));
}

}  // namespace
}  // namespace dar::agent

namespace dar::agent {
namespace {

// The agent's example (configs/examples/agent.yaml, docs/operations.md) loads with the function
// dar-agent loads its file with and makes a valid data plane: what `dar-agent --check-config`
// checks, but the certificate, which the example names under /etc/dar and which does not exist
// here (the parser does not read it). ControllerConfigTest.TheExampleConfigurationLoads checks
// that it describes the controller example's overlay.
TEST(AgentConfigTest, TheExampleConfigurationLoads) {
  absl::StatusOr<AgentConfig> c =
      LoadAgentConfig(std::string(DAR_SOURCE_DIR) + "/configs/examples/agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->self_node().id, 1u);
  EXPECT_EQ(c->self_node().name, "gpu01");
  EXPECT_EQ(c->tls.cert_file, "/etc/dar/tls/node-1.crt");
  EXPECT_EQ(c->state_dir, "/var/lib/dar-agent");
  EXPECT_FALSE(c->initial_key.has_value());
  ASSERT_EQ(c->neighbours.size(), 3u);
  const Topology topology = BuildAgentTopology(*c);
  absl::StatusOr<DataplaneConfig> d = MakeDataplaneConfig(*c, topology, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  const absl::Status valid = d->Validate();
  EXPECT_TRUE(valid.ok()) << valid;
}

}  // namespace
}  // namespace dar::agent
