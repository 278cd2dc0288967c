#include "control/controller_config.h"

#include <fstream>
#include <string>

#include "control/controller_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::control {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"(# a diamond
listen: 127.0.0.1:50051
tls: {cert: certs/controller.crt, key: certs/controller.key, ca: /etc/dar/ca.crt, crl: certs/ca.crl}
trust_domain: dar.test
http: 127.0.0.1:9100
log: ctl.jsonl
log_level: debug
cycle_ms: 50
table_stale_ms: 2000
forecast_horizon_s: 60
events_kept: 10
probe: {interval_ms: 200, missed_probes: 4}
nodes:
  - {id: 1, name: A, overlay: 10.77.0.1}
  - {id: 2, name: B, overlay: 10.77.0.2}
  - {id: 3, name: C, overlay: 10.77.0.3}
  - {id: 4, name: D, overlay: 10.77.0.4}
links:
  - {a: A, b: B, capacity_mbps: 100}
  - {a: A, b: C, capacity_gbps: 1, delay_us: 500}
  - {a: B, b: D, capacity_bps: 100000000}
  - {a: C, b: D, capacity_mbps: 50}
policy:
  temperature: 0.2
  hysteresis: 0.1
  min_cost_change: 0.1
  full_every: 20
  cycle_threads: 1
  policy_refresh_cycles: 2
  forwarding_mode: per_packet
  reference_delay_us: 300
  latency_weights: {utilisation: 0.7}
  bulk_weights: {capacity: 2}
)";

// The text of kGood with `from` replaced by `to` (which must occur).
std::string With(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(text, "/etc/dar/ctl.yaml");
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : std::string(c.status().message());
}

// An error inside a nested map of the policy names the line of the key it is about, in block
// style as in flow style.
TEST(ControllerConfigTest, NestedPolicyErrorsNameTheirLine) {
  EXPECT_THAT(ErrorOf(With("latency_weights: {utilisation: 0.7}",
                           "latency_weights:\n    utilisation: 0.7\n    hop: 0")),
              HasSubstr("ctl.yaml:34: policy.latency_weights.hop: must be > 0"));
  EXPECT_THAT(ErrorOf(With("latency_weights: {utilisation: 0.7}",
                           "latency_weights:\n    utilisation: 0.7\n    colour: 1")),
              HasSubstr("ctl.yaml:34: policy.latency_weights.colour: unknown key"));
}

TEST(ControllerConfigTest, MarginalDecisionIsChosenInThePolicy) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(
      With("forwarding_mode: per_packet",
           "forwarding_mode: per_packet\n  decision: marginal\n  publish_gain: 0.05"),
      "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->policy.marginal);
  EXPECT_EQ(c->policy.marginal_config.publish_gain, 0.05);
}

TEST(ControllerConfigTest, ParsesEveryField) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(kGood, "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50051");
  EXPECT_EQ(c->tls.cert_file, "/etc/dar/certs/controller.crt");  // relative to the file
  EXPECT_EQ(c->tls.ca_file, "/etc/dar/ca.crt");
  EXPECT_EQ(c->crl_file, "/etc/dar/certs/ca.crl");
  EXPECT_EQ(c->trust_domain, "dar.test");
  EXPECT_EQ(c->http, "127.0.0.1:9100");
  EXPECT_EQ(c->log_file, "/etc/dar/ctl.jsonl");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->policy.cycle, Milliseconds(50));
  EXPECT_EQ(c->table_stale, Seconds(2));
  EXPECT_EQ(c->forecast_horizon, Seconds(60));
  EXPECT_EQ(c->events_kept, 10);
  EXPECT_EQ(c->probe_interval, Milliseconds(200));
  EXPECT_EQ(c->missed_probes, 4);
  EXPECT_EQ(c->sample_timeout, Milliseconds(600));  // 3 probe periods by default
  ASSERT_EQ(c->nodes.size(), 4u);
  EXPECT_EQ(c->nodes[2].id, 3u);
  EXPECT_EQ(c->nodes[2].name, "C");
  EXPECT_EQ(c->nodes[2].overlay_address, "10.77.0.3");
  ASSERT_EQ(c->links.size(), 4u);
  EXPECT_EQ(c->links[0].capacity, DataRate::Mbps(100));
  EXPECT_EQ(c->links[1].capacity, DataRate::Gbps(1));
  EXPECT_EQ(c->links[1].delay, Microseconds(500));
  EXPECT_FALSE(c->links[0].delay.has_value());
  EXPECT_EQ(c->links[2].capacity, DataRate::Mbps(100));
  const RouteComputerConfig& r = c->policy.routes;
  EXPECT_EQ(r.diffusion.temperature, 0.2);
  EXPECT_EQ(r.diffusion.hysteresis, 0.1);
  EXPECT_EQ(r.min_cost_change, 0.1);
  EXPECT_EQ(r.full_every, 20);
  EXPECT_EQ(c->policy.cycle_threads, 1);
  EXPECT_EQ(r.policy_refresh_cycles, 2);
  EXPECT_TRUE(c->policy.marginal);  // decision: marginal unless said
  EXPECT_EQ(r.scales.reference_delay, Microseconds(300));
  EXPECT_EQ(r.latency.utilisation, 0.7);
  EXPECT_EQ(r.latency.loss, 1);  // default kept
  EXPECT_EQ(r.bulk.capacity, 2);
  EXPECT_EQ(r.horizon_periods, 300);  // 60 s at 200 ms
  EXPECT_EQ(c->policy.forwarding_mode, ForwardingMode::kPerPacket);
}

TEST(ControllerConfigTest, DefaultsForOptionalFields) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(
      "listen: 0.0.0.0:7000\ntls: {cert: c, key: k, ca: a}\nnodes: [{id: 9, name: X, overlay: "
      "10.0.0.9}]\nlinks: []\n",
      "ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->policy.cycle, Milliseconds(100));
  EXPECT_EQ(c->sample_timeout, Milliseconds(300));
  EXPECT_EQ(c->probe_interval, Milliseconds(100));
  EXPECT_EQ(c->policy.forwarding_mode, ForwardingMode::kPerFlowlet);
  EXPECT_EQ(c->policy.routes.horizon_periods, 300);
  EXPECT_EQ(c->policy.cycle_threads, 2);  // the classes side by side
  EXPECT_EQ(c->policy.routes.policy_refresh_cycles, kDeployedPolicyRefreshCycles);
  EXPECT_TRUE(c->http.empty());
  EXPECT_TRUE(c->trust_domain.empty());
  EXPECT_EQ(c->tls.cert_file, "c");
  EXPECT_TRUE(c->crl_file.empty());  // nothing revoked
  EXPECT_EQ(c->max_connections, 2 * 1 + 64);
}

TEST(ControllerConfigTest, ReplicasAreOptional) {
  absl::StatusOr<ControllerConfig> single = ParseControllerConfig(kGood, "/etc/dar/ctl.yaml");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_FALSE(single->replicas.has_value());
  absl::StatusOr<ControllerConfig> c =
      ParseControllerConfig(With("events_kept: 10",
                                 "events_kept: 10\nreplicas: {etcd: 127.0.0.1:2379, advertise: "
                                 "10.0.0.1:50051, lease_ms: 1000, etcd_tls: {ca: etcd/ca.crt}}"),
                            "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->replicas.has_value());
  EXPECT_EQ(c->replicas->etcd, "127.0.0.1:2379");
  EXPECT_EQ(c->replicas->advertise, "10.0.0.1:50051");
  EXPECT_EQ(c->replicas->lease, Seconds(1));
  EXPECT_EQ(c->replicas->prefix, "");  // the controller makes it from the trust domain
  EXPECT_EQ(c->replicas->etcd_ca, "/etc/dar/etcd/ca.crt");
}

TEST(ControllerConfigTest, ErrorsNameFileLineAndField) {
  // Each kind of bad input, with the place the error must point at.
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {With("listen: 127.0.0.1:50051", "listen: nowhere"), "ctl.yaml:2: listen: must be host:port"},
      {With("listen: 127.0.0.1:50051\n", ""), "ctl.yaml:2: listen: required"},
      {With("cycle_ms: 50", "cycle_ms: 0"), "ctl.yaml:8: cycle_ms: must be > 0"},
      // A key named like another with a unit (`nodes_...` beside `nodes`) once made the node
      // list be read from the wrong value (found by fuzz/config_fuzz.cc).
      {With("table_stale_ms: 2000", "nodes_stale_ms: 2000"), "nodes_stale_ms: unknown key"},
      {With("cycle_ms: 50", "cycle_ms: 100000"), "cycle_ms: must be between 1 ms and 60 s"},
      {With("cycle_ms: 50", "cycle_ms: fast"), "ctl.yaml:8: cycle_ms"},
      {With("events_kept: 10", "events_kept: 0"), "ctl.yaml:11: events_kept"},
      // Four nodes: their agents and an operator need five.
      {With("events_kept: 10", "events_kept: 10\nmax_connections: 4"),
       "ctl.yaml:12: max_connections: must be at least 5: one for each of the 4 nodes'"},
      {With("missed_probes: 4", "missed_probes: -1"), "ctl.yaml:12: probe.missed_probes"},
      {With("probe: {interval_ms: 200", "probe: {interval_ms: 200, jitter: 1"),
       "ctl.yaml:12: probe.jitter: unknown key"},
      {With("{id: 2, name: B", "{id: 1, name: B"),
       "ctl.yaml:15: nodes[1].id: 1 is also the id of nodes[0]"},
      {With("{id: 2, name: B", "{id: 0, name: B"), "ctl.yaml:15: nodes[1].id"},
      {With("{id: 2, name: B", "{id: 2, name: A"), "nodes[1].name: 'A' is also the name"},
      {With("name: B", "name: B/2"), "ctl.yaml:15: nodes[1].name"},
      {With("10.77.0.3", "10.77.0.300"), "ctl.yaml:16: nodes[2].overlay: must be an IPv4 address"},
      {With("10.77.0.3", "10.77.0.2"), "nodes[2].overlay: 10.77.0.2 is also the overlay address"},
      {With("{a: A, b: B, capacity_mbps: 100}", "{a: A, b: Z, capacity_mbps: 100}"),
       "ctl.yaml:19: links[0].b: unknown node 'Z'"},
      {With("{a: A, b: B, capacity_mbps: 100}", "{a: A, b: A, capacity_mbps: 100}"),
       "links[0].b: a link joins two different nodes"},
      {With("{a: C, b: D, capacity_mbps: 50}", "{a: B, b: A, capacity_mbps: 50}"),
       "ctl.yaml:22: links[3].b: B-A is also links[0]"},
      {With("capacity_mbps: 100}", "capacity_mbps: -5}"), "ctl.yaml:19: links[0].capacity_mbps"},
      {With("capacity_mbps: 100}", "rate: 100mbit}"), "links[0].capacity_bps: missing"},
      {With("capacity_mbps: 100}", "capacity_mbps: 100, capacity_gbps: 1}"),
       "give only one of capacity_bps"},
      {With("delay_us: 500", "delay_us: 0"), "ctl.yaml:20: links[1].delay_us"},
      {With("forwarding_mode: per_packet", "forwarding_mode: sprinkle"),
       "ctl.yaml:30: policy.forwarding_mode"},
      {With("forwarding_mode: per_packet", "forwarding_mode: per_packet\n  decision: greedy"),
       "ctl.yaml:31: policy.decision"},
      {With("forwarding_mode: per_packet", "forwarding_mode: per_packet\n  publish_gain: 1"),
       "ctl.yaml:31: policy.publish_gain"},
      {With("forwarding_mode: per_packet", "forwarding_mode: per_packet\n  objective_power: 1"),
       "ctl.yaml:31: policy.objective_power"},
      {With("forwarding_mode: per_packet", "forwarding_mode: per_packet\n  cost_decay_periods: 0"),
       "ctl.yaml:31: policy.cost_decay_periods"},
      {With("temperature: 0.2", "temperature: -1"), "ctl.yaml:24: policy.temperature"},
      {With("events_kept: 10", "events_kept: 10\nreplicas: {etcd: 127.0.0.1}"),
       "ctl.yaml:12: replicas.etcd: must be host:port"},
      {With("events_kept: 10", "events_kept: 10\nreplicas: {etcd: 127.0.0.1:2379}"),
       "ctl.yaml:12: replicas.advertise: required"},
      {With("events_kept: 10",
            "events_kept: 10\nreplicas: {etcd: 127.0.0.1:2379, advertise: a:1, lease_ms: 500}"),
       "ctl.yaml:12: replicas.lease_ms: must be between 1 s and 60 s"},
      {With("events_kept: 10",
            "events_kept: 10\nreplicas: {etcd: 127.0.0.1:2379, advertise: a:1, prefix: dar}"),
       "ctl.yaml:12: replicas.prefix: must begin and end with '/'"},
      {With("events_kept: 10",
            "events_kept: 10\nreplicas: {etcd: 127.0.0.1:2379, advertise: "
            "a:1, etcd_tls: {cert: c.crt, key: c.key}}"),
       "replicas.etcd_tls.ca: a client certificate needs a CA"},
      {With("cycle_threads: 1", "cycle_threads: 0"), "ctl.yaml:28: policy.cycle_threads"},
      {With("cycle_threads: 1", "cycle_threads: 65"), "ctl.yaml:28: policy.cycle_threads"},
      {With("policy_refresh_cycles: 2", "policy_refresh_cycles: 0"),
       "ctl.yaml:29: policy.policy_refresh_cycles"},
      {With("latency_weights: {utilisation: 0.7}",
            "latency_weights: {utilisation: 0.7, colour: 1}"),
       "ctl.yaml:32: policy.latency_weights.colour: unknown key"},
      {With("bulk_weights: {capacity: 2}", "bulk_weights: {hop: 0}"),
       "policy.bulk_weights.hop: must be > 0"},
      {With("log_level: debug", "log_level: loud"), "ctl.yaml:7: log_level"},
      {With("trust_domain: dar.test", "trust_domain: Dar.Test"), "ctl.yaml:4: trust_domain"},
      {With("http: 127.0.0.1:9100", "http: 9100"), "ctl.yaml:5: http: must be host:port"},
      {With("table_stale_ms: 2000", "table_stale_ms: 20"),
       "table_stale: must be longer than the cycle"},
      {With("events_kept: 10", "events_kept: 10\nsample_timeout_ms: 100"),
       "sample_timeout: must be longer than the probe interval"},
      {With("tls: {cert: certs/controller.crt, ", "tls: {"), "ctl.yaml:3: tls.cert: required"},
      {With("events_kept: 10", "events_kept: 10\ncolour: blue"),
       "ctl.yaml:12: colour: unknown key"},
      {With("nodes:\n", "nodes: []\nunused:\n"), "nodes: must list at least one node"},
      {"listen: [", "ctl.yaml"},
      {"", "ctl.yaml: the file is empty"},
      {"- just\n- a list\n", "ctl.yaml"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ErrorOf(c.text), HasSubstr(c.expected)) << c.text;
  }
}

TEST(ControllerConfigTest, LoadNamesAMissingFile) {
  absl::StatusOr<ControllerConfig> c = LoadControllerConfig("/nonexistent/ctl.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/nonexistent/ctl.yaml"));
}

TEST(ControllerConfigTest, LoadsAFile) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  {
    std::ofstream out(dir.File("ctl.yaml"));
    out << kGood;
  }
  absl::StatusOr<ControllerConfig> c = LoadControllerConfig(dir.File("ctl.yaml"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->file, dir.File("ctl.yaml"));
  EXPECT_EQ(c->tls.key_file, dir.File("certs/controller.key"));
}

TEST(ControllerConfigTest, TopologyHasEveryNodeAsRouterAndDestination) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(kGood, "ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const Topology topo = BuildTopology(*c);
  EXPECT_EQ(topo.num_nodes(), 4);
  EXPECT_EQ(topo.num_links(), 8);
  EXPECT_EQ(topo.Destinations(), (std::vector<NodeId>{0, 1, 2, 3}));
  const LinkId ac = topo.FindLink(*topo.FindNode("A"), *topo.FindNode("C"));
  ASSERT_NE(ac, kNoLink);
  EXPECT_EQ(topo.link(ac).params.capacity, DataRate::Gbps(1));
  EXPECT_EQ(topo.link(ac).params.delay, Microseconds(500));
  EXPECT_EQ(topo.link(topo.link(ac).reverse).src, *topo.FindNode("C"));
}

// stub_hosts: a node on a single link to a node with more is a host its switch stands for; a
// pair of nodes joined by a lone link stays two destinations.
TEST(ControllerConfigTest, StubHostsAreTheNodesOnASingleLinkToASwitch) {
  const std::string yaml = With("events_kept: 10", "events_kept: 10\nstub_hosts: true");
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(yaml, "ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->stub_hosts);
  c->nodes.push_back({5, "H", "10.77.0.5"});
  c->links.push_back({"D", "H", DataRate::Gbps(1), std::nullopt});
  c->nodes.push_back({6, "X", "10.77.0.6"});
  c->nodes.push_back({7, "Y", "10.77.0.7"});
  c->links.push_back({"X", "Y", DataRate::Gbps(1), std::nullopt});
  const Topology topo = BuildTopology(*c);
  const NodeId h = *topo.FindNode("H");
  EXPECT_EQ(topo.node(h).kind, NodeKind::kHost);
  EXPECT_EQ(topo.RouteTarget(h), *topo.FindNode("D"));
  EXPECT_EQ(topo.node(*topo.FindNode("X")).kind, NodeKind::kSwitch);
  EXPECT_EQ(topo.Destinations(), (std::vector<NodeId>{0, 1, 2, 3, 5, 6}));
  c->stub_hosts = false;
  EXPECT_EQ(BuildTopology(*c).Destinations().size(), 7u);

  const absl::Status bad =
      ParseControllerConfig(With("events_kept: 10", "events_kept: 10\nstub_hosts: 3"), "ctl.yaml")
          .status();
  EXPECT_THAT(std::string(bad.message()), HasSubstr("stub_hosts"));
}

// The model checked in with the repository (dar-train's default config).
std::string ShippedModel() { return std::string(DAR_SOURCE_DIR) + "/models/dar-policy.json"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ControllerConfigTest, PolicyModelKeys) {
  absl::StatusOr<ControllerConfig> c = ParseControllerConfig(kGood, "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->policy.policy_model.empty());  // absent: the analytic engine alone
  EXPECT_EQ(c->policy.policy_precision, learn::LearnedPolicy::Precision::kInt8);

  c = ParseControllerConfig(With("full_every: 20",
                                 "full_every: 20\n  policy_model: models/p.json\n"
                                 "  policy_precision: float"),
                            "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->policy.policy_model, "/etc/dar/models/p.json");  // relative to the file
  EXPECT_EQ(c->policy.policy_precision, learn::LearnedPolicy::Precision::kFloat);
  EXPECT_THAT(ErrorOf(With("full_every: 20",
                           "full_every: 20\n  policy_model: p.json\n  decision: marginal")),
              HasSubstr("ctl.yaml:29: policy.decision: policy_model refines the diffusion"));
  c = ParseControllerConfig(With("full_every: 20", "full_every: 20\n  policy_model: /m/p.json"),
                            "/etc/dar/ctl.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->policy.policy_model, "/m/p.json");

  EXPECT_THAT(ErrorOf(With("full_every: 20", "full_every: 20\n  policy_precision: int4")),
              HasSubstr("ctl.yaml:28: policy.policy_precision"));
  EXPECT_THAT(ErrorOf(With("full_every: 20", "full_every: 20\n  policy_model: \"\"")),
              HasSubstr("ctl.yaml:28: policy.policy_model: must name a model file"));
  EXPECT_THAT(ErrorOf(With("full_every: 20", "full_every: 20\n  model: p.json")),
              HasSubstr("ctl.yaml:28: policy.model: unknown key"));
}

// A good model loads; a missing, cut short or edited one is refused with the configuration
// file, the key and the model's path in the message.
TEST(ControllerConfigTest, LoadLearnedPolicyRefusesBadModelsNamingThem) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string good = ReadAll(ShippedModel());
  ASSERT_FALSE(good.empty()) << ShippedModel();
  std::ofstream(dir.File("model.json")) << good;
  {
    std::ofstream out(dir.File("ctl.yaml"));
    out << With("full_every: 20", "full_every: 20\n  policy_model: model.json");
  }
  absl::StatusOr<ControllerConfig> c = LoadControllerConfig(dir.File("ctl.yaml"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->policy.policy_model, dir.File("model.json"));
  absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> policy = LoadLearnedPolicy(*c);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_THAT((*policy)->Describe(), HasSubstr("int8"));

  const size_t seed = good.find("\"seed\": 1");
  ASSERT_NE(seed, std::string::npos);
  std::string edited = good;
  edited.replace(seed, 9, "\"seed\": 2");  // the checksum no longer matches
  std::ofstream(dir.File("edited.json")) << edited;
  std::ofstream(dir.File("short.json")) << good.substr(0, good.size() / 2);
  for (const std::string& bad :
       {dir.File("missing.json"), dir.File("edited.json"), dir.File("short.json")}) {
    c->policy.policy_model = bad;
    policy = LoadLearnedPolicy(*c);
    ASSERT_FALSE(policy.ok()) << bad;
    const std::string message(policy.status().message());
    EXPECT_THAT(message, HasSubstr(dir.File("ctl.yaml") + ": policy.policy_model: "));
    EXPECT_THAT(message, HasSubstr(bad));
  }
}

}  // namespace
}  // namespace dar::control

namespace dar::control {
namespace {

// The examples an operator starts from (configs/examples/, docs/operations.md).
std::string Example(const std::string& name) {
  return std::string(DAR_SOURCE_DIR) + "/configs/examples/" + name;
}

// The controller's example loads with the function dar-controller loads its file with. The
// TLS files it names under /etc/dar do not exist here, and the parser does not read them
// (`dar-controller --check-config` and the start do). The agent's example describes the same
// overlay and dials the controller's address.
TEST(ControllerConfigTest, TheExampleConfigurationLoads) {
  absl::StatusOr<ControllerConfig> c = LoadControllerConfig(Example("controller.yaml"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "10.0.0.10:50051");
  EXPECT_EQ(c->tls.cert_file, "/etc/dar/tls/controller.crt");
  EXPECT_EQ(c->crl_file, "/etc/dar/tls/ca.crl");
  EXPECT_EQ(c->trust_domain, "dar.example.org");
  EXPECT_EQ(c->state_dir, "/var/lib/dar-controller");
  EXPECT_FALSE(c->initial_key.has_value());
  EXPECT_EQ(c->key_rotate_every, Seconds(86400));
  ASSERT_EQ(c->nodes.size(), 4u);
  ASSERT_EQ(c->links.size(), 5u);

  // What its comments call the defaults is what the parser gives without the keys.
  std::string text = ReadAll(Example("controller.yaml"));
  for (const std::string_view key :
       {"max_connections: 72\n", "sample_timeout_ms: 300\n", "decision: marginal\n"}) {
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    text.erase(at, key.size());
  }
  absl::StatusOr<ControllerConfig> defaults =
      ParseControllerConfig(text, Example("controller.yaml"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->max_connections, c->max_connections);
  EXPECT_EQ(defaults->sample_timeout, c->sample_timeout);
  EXPECT_TRUE(defaults->policy.marginal);
  EXPECT_TRUE(c->policy.marginal);

  absl::StatusOr<YAML::Node> agent = LoadYamlFile(Example("agent.yaml"));
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)["controller"].as<std::string>(), c->listen);
  const YAML::Node nodes = (*agent)["nodes"];
  ASSERT_EQ(nodes.size(), c->nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i]["id"].as<uint32_t>(), c->nodes[i].id) << "nodes[" << i << "]";
    EXPECT_EQ(nodes[i]["name"].as<std::string>(), c->nodes[i].name) << "nodes[" << i << "]";
    EXPECT_EQ(nodes[i]["overlay"].as<std::string>(), c->nodes[i].overlay_address)
        << "nodes[" << i << "]";
  }
  const YAML::Node links = (*agent)["links"];
  ASSERT_EQ(links.size(), c->links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    EXPECT_EQ(links[i]["a"].as<std::string>(), c->links[i].a) << "links[" << i << "]";
    EXPECT_EQ(links[i]["b"].as<std::string>(), c->links[i].b) << "links[" << i << "]";
    EXPECT_DOUBLE_EQ(links[i]["capacity_gbps"].as<double>() * 1e9,
                     static_cast<double>(c->links[i].capacity.bps()))
        << "links[" << i << "]";
  }
}

}  // namespace
}  // namespace dar::control
