// The controller end to end over real gRPC and mutual TLS 1.3 on 127.0.0.1: agents (scripted
// TestAgents with their own certificates), the admin API, reloads, and the HTTP endpoints.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "base/test_support.h"
#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/web_assets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace dar::control {
namespace {

using testing::AcceptEvery;
using ::testing::HasSubstr;
using testing::HeldRoutes;
using testing::IsConfig;
using testing::IsTable;
using testing::kTestDomain;
using testing::NodeIdentity;
using testing::TestAgent;
using testing::TestPki;

constexpr auto kWait = std::chrono::seconds(10);

// Polls `cond` until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout = kWait) {
  return test::WaitFor(cond, timeout);
}

security::SpiffeId Admin() { return security::SpiffeId::Admin(kTestDomain, "alice"); }

// n1 - {n2, n3} - n4: neighbours by node.
const std::map<uint32_t, std::vector<uint32_t>> kNeighbours = {
    {1, {2, 3}}, {2, {1, 4}}, {3, {1, 4}}, {4, {2, 3}}};
const std::vector<std::pair<int, int>> kDiamond = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};

class ControllerGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<TestPki>> pki = TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki).release();
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  // A controller over the diamond with a manual clock and cycles run by the test.
  void StartController() {
    ControllerConfig config = testing::MakeTestConfig(*pki_, 4, kDiamond);
    absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config, ManualOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = std::move(*c);
  }

  std::unique_ptr<TestAgent> Agent(const security::SpiffeId& id,
                                   TestAgent::TableHandler h = nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = pki_->Channel(id, controller_->port());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return std::make_unique<TestAgent>(*channel, std::move(h));
  }

  std::unique_ptr<v1::AdminService::Stub> AdminStub(const security::SpiffeId& id) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = pki_->Channel(id, controller_->port());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::AdminService::NewStub(*channel);
  }

  // Cycles run by the test, on the manual clock.
  ControllerOptions ManualOptions() {
    ControllerOptions o;
    o.cycle_thread = false;
    o.clock = &clock_;
    return o;
  }

  bool HasEvent(const std::string& kind) {
    for (const v1::Event& e : controller_->core().ListEvents(0)) {
      if (e.kind() == kind) return true;
    }
    return false;
  }

  static TestPki* pki_;
  ManualClock clock_;
  std::unique_ptr<Controller> controller_;
};

TestPki* ControllerGrpcTest::pki_ = nullptr;

// Every route of `table` is downhill with weights summing to 1, and every other node of the
// diamond is a destination in both classes.
void ExpectCompleteAndDownhill(uint32_t self, const HeldRoutes& held) {
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const auto& [key, r] : held) {
    seen.insert(key);
    EXPECT_NE(r.destination_id(), self);
    double sum = 0;
    ASSERT_GT(r.next_hops_size(), 0);
    for (const v1::NextHop& h : r.next_hops()) {
      EXPECT_LT(h.potential(), r.potential()) << "toward " << r.destination_id();
      const auto& nb = kNeighbours.at(self);
      EXPECT_TRUE(std::find(nb.begin(), nb.end(), h.neighbor_id()) != nb.end());
      sum += h.weight();
    }
    EXPECT_NEAR(sum, 1, 1e-9);
  }
  EXPECT_EQ(seen.size(), 3u * 2);
}

TEST_F(ControllerGrpcTest, AgentGetsConfigAndFullTableThenDeltasAfterAcks) {
  StartController();
  auto agent = Agent(NodeIdentity(1));
  agent->SendHello(1, {2, 3}, /*delta_tables=*/true);
  size_t cursor = 0;
  std::optional<v1::ControllerMessage> config = agent->WaitFor(IsConfig, &cursor);
  ASSERT_TRUE(config.has_value());
  // Its own row of pair keys, one for each other node; never the epoch's secret.
  EXPECT_TRUE(config->config().keys(0).key().empty());
  ASSERT_EQ(config->config().keys(0).peers_size(), 3);
  for (const v1::PeerKey& p : config->config().keys(0).peers()) {
    EXPECT_NE(p.node_id(), 1u);
    EXPECT_EQ(p.key().size(), 32u);
  }
  EXPECT_EQ(config->config().nodes_size(), 4);
  std::optional<v1::ControllerMessage> full = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->table().base_version(), 0u);
  HeldRoutes held;
  ASSERT_TRUE(testing::ApplyTable(full->table(), 0, held).ok());
  ExpectCompleteAndDownhill(1, held);

  // Nothing more comes until the agent acks (stop-and-wait), even after new cycles.
  controller_->RunCycleNow();
  agent->SendAck(full->table().version(), true);
  ASSERT_TRUE(WaitUntil([&] {
    return controller_->core().ListNodes()[0].acked_version() == full->table().version();
  }));
  // Nothing changed: the next table is the refresh, once it is due.
  clock_.Advance(Seconds(1));
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> delta = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->table().base_version(), full->table().version());
  EXPECT_GT(delta->table().version(), full->table().version());
  ASSERT_TRUE(testing::ApplyTable(delta->table(), full->table().version(), held).ok());
  ExpectCompleteAndDownhill(1, held);
  EXPECT_GE(controller_->metrics().tables_sent_delta->Value(), 1);
}

TEST_F(ControllerGrpcTest, SamplesSayingALinkIsDownMoveRoutesOffIt) {
  StartController();
  std::map<uint32_t, std::unique_ptr<TestAgent>> agents;
  for (uint32_t id : {1u, 2u}) {
    agents[id] = Agent(NodeIdentity(id), AcceptEvery);
    agents[id]->SendHello(id, kNeighbours.at(id), /*delta_tables=*/false);
  }
  size_t cursor = 0;
  ASSERT_TRUE(agents[1]->WaitFor(IsTable, &cursor).has_value());
  for (uint32_t id : {1u, 2u}) {
    v1::AgentMessage m;
    for (uint32_t nb : kNeighbours.at(id)) {
      v1::LinkSample* s = m.mutable_samples()->add_samples();
      s->set_neighbor_id(nb);
      s->set_up(nb > 2);  // n1-n2 down from both ends; n1-n3 and n2-n4 up
      s->set_rtt_ms(0.3);
    }
    agents[id]->Send(m);
  }
  ASSERT_TRUE(WaitUntil([&] { return controller_->metrics().samples->Value() >= 4; }));
  const CycleReport r = controller_->RunCycleNow();
  EXPECT_EQ(r.links_down, 2);
  // The newest full table of n1 reaches n4 only over n3, in both classes.
  std::optional<v1::ControllerMessage> t = agents[1]->WaitFor(
      [&](const v1::ControllerMessage& m) {
        return m.has_table() && m.table().version() == r.version;
      },
      &cursor);
  ASSERT_TRUE(t.has_value());
  int toward_n4 = 0;
  for (const v1::Route& route : t->table().routes()) {
    for (const v1::NextHop& h : route.next_hops()) EXPECT_NE(h.neighbor_id(), 2u);
    if (route.destination_id() == 4) ++toward_n4;
  }
  EXPECT_EQ(toward_n4, 2);
  EXPECT_TRUE(HasEvent("link_down"));
}

TEST_F(ControllerGrpcTest, RefusedTableGivesAnEventAndAFullTable) {
  StartController();
  auto agent = Agent(NodeIdentity(4));
  agent->SendHello(4, {2, 3}, true);
  size_t cursor = 0;
  std::optional<v1::ControllerMessage> first = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(first.has_value());
  agent->SendAck(first->table().version(), true);
  ASSERT_TRUE(WaitUntil([&] { return controller_->core().ListNodes()[3].acked_version() > 0; }));
  clock_.Advance(Seconds(1));  // nothing changed: the refresh is due
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> delta = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(delta.has_value());
  EXPECT_NE(delta->table().base_version(), 0u);
  agent->SendAck(delta->table().version(), false, "potential not above next hop");
  ASSERT_TRUE(WaitUntil([&] { return HasEvent("table_refused"); }));
  EXPECT_EQ(controller_->core().ListNodes()[3].refused_tables(), 1u);
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> again = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->table().base_version(), 0u);
  HeldRoutes held;
  ASSERT_TRUE(testing::ApplyTable(again->table(), 0, held).ok());
  EXPECT_EQ(held.size(), 6u);
}

// stub_hosts: n5 hangs off n4. Its table is its uplink toward every node; the other nodes reach
// it as they reach n4, and a step further. Both tables are what agents accept.
TEST_F(ControllerGrpcTest, AStubHostIsReachedThroughItsSwitch) {
  std::vector<std::pair<int, int>> links = kDiamond;
  links.emplace_back(3, 4);
  ControllerConfig config = testing::MakeTestConfig(*pki_, 5, links);
  config.stub_hosts = true;
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config, ManualOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  auto host = Agent(NodeIdentity(5), AcceptEvery);
  host->SendHello(5, {4}, /*delta_tables=*/false);
  auto n1 = Agent(NodeIdentity(1), AcceptEvery);
  n1->SendHello(1, {2, 3}, /*delta_tables=*/false);
  ASSERT_TRUE(WaitUntil([&] { return controller_->core().ListNodes()[0].connected(); }));
  controller_->RunCycleNow();

  size_t cursor = 0;
  std::optional<v1::ControllerMessage> t = host->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->table().routes_size(), 4 * 2);
  for (const v1::Route& r : t->table().routes()) {
    ASSERT_EQ(r.next_hops_size(), 1) << r.destination_id();
    EXPECT_EQ(r.next_hops(0).neighbor_id(), 4u);
    EXPECT_EQ(r.next_hops(0).weight(), 1.0);
    EXPECT_LT(r.next_hops(0).potential(), r.potential());
  }

  cursor = 0;
  t = n1->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(t.has_value());
  std::map<std::pair<uint32_t, uint32_t>, v1::Route> rows;
  for (const v1::Route& r : t->table().routes()) {
    rows[{r.destination_id(), r.traffic_class()}] = r;
  }
  ASSERT_EQ(rows.size(), 4u * 2);
  for (uint32_t cls : {0u, 1u}) {
    const v1::Route& to4 = rows[{4, cls}];
    const v1::Route& to5 = rows[{5, cls}];
    ASSERT_EQ(to5.next_hops_size(), to4.next_hops_size());
    ASSERT_GT(to5.next_hops_size(), 0);
    for (int i = 0; i < to5.next_hops_size(); ++i) {
      EXPECT_EQ(to5.next_hops(i).neighbor_id(), to4.next_hops(i).neighbor_id());
      EXPECT_EQ(to5.next_hops(i).weight(), to4.next_hops(i).weight());
      EXPECT_LT(to5.next_hops(i).potential(), to5.potential());
    }
    EXPECT_GT(to5.potential(), to4.potential());
  }
}

TEST_F(ControllerGrpcTest, HelloWithAnotherNodesIdIsRefused) {
  StartController();
  auto agent = Agent(NodeIdentity(2));
  agent->SendHello(1, {2, 3}, true);
  std::optional<grpc::Status> done = agent->WaitDone();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(done->error_message(), HasSubstr("hello says node 1"));
  EXPECT_FALSE(controller_->core().ListNodes()[0].connected());
}

TEST_F(ControllerGrpcTest, SamplesForAForeignLinkAreRefused) {
  StartController();
  auto agent = Agent(NodeIdentity(1));
  agent->SendHello(1, {2, 3}, true);
  size_t cursor = 0;
  ASSERT_TRUE(agent->WaitFor(IsTable, &cursor).has_value());
  v1::AgentMessage m;
  v1::LinkSample* s = m.mutable_samples()->add_samples();
  s->set_neighbor_id(4);  // n2-n4 is not n1's
  s->set_up(false);
  agent->Send(m);
  std::optional<grpc::Status> done = agent->WaitDone();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(done->error_message(), HasSubstr("not one of its links"));
  EXPECT_TRUE(WaitUntil([&] { return !controller_->core().ListNodes()[0].connected(); }));
}

TEST_F(ControllerGrpcTest, MessagesBeforeHelloAreRefused) {
  StartController();
  auto agent = Agent(NodeIdentity(1));
  agent->SendAck(1, true);
  std::optional<grpc::Status> done = agent->WaitDone();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(done->error_message(), HasSubstr("an ack before hello"));
}

TEST_F(ControllerGrpcTest, AdminApiNeedsAnAdminIdentity) {
  StartController();
  {
    auto stub = AdminStub(NodeIdentity(1));
    grpc::ClientContext ctx;
    v1::ListNodesResponse r;
    const grpc::Status s = stub->ListNodes(&ctx, v1::ListNodesRequest(), &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(s.error_message(), HasSubstr("not an admin"));
    grpc::ClientContext ctx2;
    v1::DrainLinkRequest drain;
    drain.set_a("n1");
    drain.set_b("n2");
    drain.set_drain(true);
    v1::DrainLinkResponse dr;
    EXPECT_EQ(stub->DrainLink(&ctx2, drain, &dr).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(controller_->metrics().admin_refused->Value(), 2);
  auto stub = AdminStub(Admin());
  grpc::ClientContext ctx;
  v1::TopologyView topo;
  ASSERT_TRUE(stub->GetTopology(&ctx, v1::GetTopologyRequest(), &topo).ok());
  EXPECT_EQ(topo.nodes_size(), 4);
  EXPECT_EQ(topo.links_size(), 8);
  for (const v1::LinkView& l : topo.links()) EXPECT_FALSE(l.drained());
}

TEST_F(ControllerGrpcTest, DrainAndUndrainThroughTheAdminApi) {
  StartController();
  auto stub = AdminStub(Admin());
  const auto drain = [&](bool on) {
    grpc::ClientContext ctx;
    v1::DrainLinkRequest req;
    req.set_a("n1");
    req.set_b("2");
    req.set_drain(on);
    v1::DrainLinkResponse resp;
    const grpc::Status s = stub->DrainLink(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.changed();
  };
  const auto next_hops = [&] {
    grpc::ClientContext ctx;
    v1::GetRoutesRequest req;
    req.set_node("n1");
    req.set_destination("n4");
    v1::GetRoutesResponse resp;
    EXPECT_TRUE(stub->GetRoutes(&ctx, req, &resp).ok());
    std::set<std::string> out;
    if (resp.routes_size() == 1) {
      for (const v1::NextHopView& h : resp.routes(0).next_hops()) out.insert(h.neighbour());
    }
    return out;
  };
  EXPECT_EQ(next_hops(), (std::set<std::string>{"n2", "n3"}));
  EXPECT_TRUE(drain(true));
  EXPECT_FALSE(drain(true));
  controller_->RunCycleNow();
  EXPECT_EQ(next_hops(), (std::set<std::string>{"n3"}));
  EXPECT_TRUE(drain(false));
  controller_->RunCycleNow();
  EXPECT_EQ(next_hops(), (std::set<std::string>{"n2", "n3"}));

  grpc::ClientContext ctx;
  v1::DrainLinkRequest bad;
  bad.set_a("n1");
  bad.set_b("n4");
  v1::DrainLinkResponse resp;
  EXPECT_EQ(stub->DrainLink(&ctx, bad, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext ev;
  v1::ListEventsRequest req;
  req.set_limit(2);
  v1::ListEventsResponse events;
  ASSERT_TRUE(stub->ListEvents(&ev, req, &events).ok());
  ASSERT_EQ(events.events_size(), 2);
  EXPECT_EQ(events.events(0).kind(), "link_undrained");
  EXPECT_EQ(events.events(1).kind(), "link_drained");
}

TEST_F(ControllerGrpcTest, BadConfigOnReloadKeepsTheRunningOne) {
  testing::TempDir dir;
  const std::string path = dir.File("ctl.yaml");
  const auto write = [&](const std::string& text) {
    std::ofstream out(path);
    out << text;
  };
  const std::string good = testing::TestConfigYaml(*pki_, 4, kDiamond);
  write(good);
  absl::StatusOr<ControllerConfig> config = LoadControllerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(*config, ManualOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  auto agent = Agent(NodeIdentity(1));
  agent->SendHello(1, {2, 3}, true);
  size_t cursor = 0;
  ASSERT_TRUE(agent->WaitFor(IsConfig, &cursor).has_value());

  write(good + "links_extra: 1\n");
  absl::Status s = controller_->Reload();
  EXPECT_THAT(std::string(s.message()), HasSubstr("ctl.yaml:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("links_extra: unknown key"));
  write("nodes: [");
  EXPECT_FALSE(controller_->Reload().ok());
  EXPECT_EQ(controller_->metrics().config_refused->Value(), 2);
  EXPECT_TRUE(HasEvent("config_refused"));
  EXPECT_EQ(controller_->core().config().probe_interval, Milliseconds(100));
  EXPECT_EQ(controller_->core().ListNodes().size(), 4u);
  controller_->RunCycleNow();  // still running on the old configuration

  write(good + "probe: {interval_ms: 50}\n");
  ASSERT_TRUE(controller_->Reload().ok());
  std::optional<v1::ControllerMessage> update = agent->WaitFor(IsConfig, &cursor);
  ASSERT_TRUE(update.has_value());
  EXPECT_EQ(update->config().probe_interval_ms(), 50u);
}

// The learned policy through the file, a reload and the admin API: a model refused on reload
// refuses the reload (counted twice: a refused configuration, a refused model) and the running
// model stays; GetPolicy shows it, with the refusal.
TEST_F(ControllerGrpcTest, LearnedPolicyModelOnStartReloadAndAdminApi) {
  testing::TempDir dir;
  const std::string path = dir.File("ctl.yaml");
  {
    std::ifstream in(std::string(DAR_SOURCE_DIR) + "/models/dar-policy.json");
    std::ofstream(dir.File("model.json")) << in.rdbuf();
  }
  const auto write = [&](const std::string& model) {
    std::ofstream(path) << testing::TestConfigYaml(*pki_, 4, kDiamond)
                        << "policy: {policy_model: " << model << "}\n";
  };
  write("model.json");
  absl::StatusOr<ControllerConfig> config = LoadControllerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(*config, ManualOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  EXPECT_EQ(controller_->metrics().policy_cycles->Value(), 1);  // Start runs a first cycle

  write("gone.json");
  const absl::Status s = controller_->Reload();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir.File("gone.json")));
  EXPECT_EQ(controller_->metrics().config_refused->Value(), 1);
  EXPECT_EQ(controller_->metrics().policy_model_refusals->Value(), 1);
  EXPECT_TRUE(HasEvent("config_refused"));
  controller_->RunCycleNow();
  EXPECT_EQ(controller_->metrics().policy_cycles->Value(), 2);

  auto stub = AdminStub(Admin());
  grpc::ClientContext ctx;
  v1::PolicySettings policy;
  ASSERT_TRUE(stub->GetPolicy(&ctx, v1::GetPolicyRequest(), &policy).ok());
  EXPECT_EQ(policy.learned().active(), "learned");
  EXPECT_EQ(policy.learned().model_file(), dir.File("model.json"));
  EXPECT_EQ(policy.learned().name(), "dar-policy");
  EXPECT_THAT(policy.learned().refusal(), HasSubstr(dir.File("gone.json")));
  EXPECT_EQ(policy.learned().policy_cycles(), 2u);
  // A client that sends the view back with SetPolicy changes nothing of the model.
  grpc::ClientContext set_ctx;
  v1::PolicySettings after;
  ASSERT_TRUE(stub->SetPolicy(&set_ctx, policy, &after).ok());
  EXPECT_EQ(after.learned().model_file(), dir.File("model.json"));
}

TEST_F(ControllerGrpcTest, CycleThreadPushesTablesAndHttpServesMetricsAndHealth) {
  testing::TempDir dir;
  ControllerConfig config = testing::MakeTestConfig(*pki_, 4, kDiamond, dir.File("ctl.jsonl"));
  config.http = "127.0.0.1:0";
  config.policy.cycle = Milliseconds(20);
  config.log_level = "debug";
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config);
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  ASSERT_GT(controller_->http_port(), 0);

  auto agent = Agent(NodeIdentity(3), AcceptEvery);
  agent->SendHello(3, {1, 4}, true);
  uint64_t last = 0;
  size_t cursor = 0;
  for (int i = 0; i < 5; ++i) {  // versions keep growing without anyone calling RunCycleNow
    std::optional<v1::ControllerMessage> t = agent->WaitFor(IsTable, &cursor);
    ASSERT_TRUE(t.has_value());
    EXPECT_GT(t->table().version(), last);
    last = t->table().version();
  }

  httplib::Client http("127.0.0.1", controller_->http_port());
  httplib::Result metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("dar_controller_cycle_decision_seconds_bucket"));
  EXPECT_THAT(metrics->body, HasSubstr("dar_controller_agents_connected 1"));
  httplib::Result health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  EXPECT_THAT(metrics->body, HasSubstr("dar_link_up{dst=\"n4\",src=\"n3\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("dar_node_connected{node=\"n3\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("dar_build_info{commit="));

  // The page, from the binary (unless built with DAR_WEB=OFF).
  httplib::Result page = http.Get("/");
  ASSERT_TRUE(page);
  if (!WebAssets().empty()) {
    EXPECT_EQ(page->status, 200);
    EXPECT_THAT(page->get_header_value("Content-Type"), HasSubstr("text/html"));
    EXPECT_THAT(page->body, HasSubstr("<script"));
  }
  // Asked for by a name, as another site's page rebound to this address would: refused.
  httplib::Result rebound = http.Get("/api/topology", {{"Host", "attacker.example:9090"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  // An event whose text is not UTF-8 does not take the stream (or the controller) down.
  controller_->core().RecordEvent("test", "n1", "bytes \xff\xfe from a file");
  // The web view's API: JSON with typed numbers; bad requests say what is wrong.
  const auto json = [&](const std::string& path, int status) {
    httplib::Result r = http.Get(path);
    EXPECT_TRUE(r) << path;
    if (!r) return nlohmann::json();
    EXPECT_EQ(r->status, status) << path << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    return nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  };
  const nlohmann::json topology = json("/api/topology", 200);
  EXPECT_EQ(topology["nodes"].size(), 4u);
  EXPECT_EQ(topology["links"].size(), 8u);
  EXPECT_TRUE(topology["version"].is_number_unsigned());
  EXPECT_TRUE(topology["nodes"][0]["acked_version"].is_number());
  EXPECT_EQ(topology["decision"], "marginal");
  const nlohmann::json routes = json("/api/routes?dest=n4&class=bulk", 200);
  EXPECT_EQ(routes["routes"].size(), 3u);  // every other node's row toward n4
  for (const nlohmann::json& r : routes["routes"]) EXPECT_EQ(r["traffic_class"], 1);
  EXPECT_EQ(json("/api/routes?dest=n9", 404)["error"], "destination 'n9': no such name or id");
  EXPECT_EQ(json("/api/routes?dest=n4&class=2", 400)["error"],
            "class '2': want latency or bulk (or 0, 1)");
  EXPECT_EQ(json("/api/routes", 400)["error"], "missing the query parameter 'dest'");
  EXPECT_FALSE(json("/api/explain?node=n1&dest=n4", 200)["next_hops"].empty());
  const nlohmann::json series = json("/api/series?src=n3&dst=n4", 200);
  EXPECT_GE(series["t"].size(), 1u);
  EXPECT_EQ(series["t"].size(), series["forecast"].size());
  json("/api/series?src=n1&dst=n4", 404);  // no such link
  // The event stream: the events so far, then it keeps going until the client leaves.
  std::string stream;
  httplib::Client sse("127.0.0.1", controller_->http_port());
  sse.Get("/api/events", [&](const char* data, size_t n) {
    stream.append(data, n);
    return stream.find("event: cycle") == std::string::npos;  // stop once a cycle came
  });
  EXPECT_THAT(stream, HasSubstr("event: event\ndata: {"));
  EXPECT_THAT(stream, HasSubstr("\"kind\":\"agent_connected\""));
  EXPECT_THAT(stream, HasSubstr("event: cycle\ndata: {\"time_unix_ns\":"));

  controller_->Shutdown();
  std::ifstream log(dir.File("ctl.jsonl"));
  std::string line;
  int cycles = 0, lines = 0;
  while (std::getline(log, line)) {
    ++lines;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_TRUE(j.contains("time") && j.contains("level") && j.contains("msg")) << line;
    if (j["msg"] == "cycle") {
      ++cycles;
      EXPECT_TRUE(j["decision_ms"].is_number());
    }
  }
  EXPECT_GE(cycles, 5);
  EXPECT_GT(lines, cycles);
}

// Clients that connect and stall hold nothing for long: a TCP connection that never starts
// TLS is closed after the handshake timeout, a stream that sends no hello after the hello
// timeout; slow HTTP clients on the metrics listener do not reach the health listener; and
// readiness (an agent connected, the cycle running) is not liveness.
TEST_F(ControllerGrpcTest, StalledClientsAreBoundedAndHealthIsServedApart) {
  testing::TempDir dir;
  ControllerConfig config = testing::MakeTestConfig(*pki_, 4, kDiamond, dir.File("ctl.jsonl"));
  config.http = "127.0.0.1:0";
  config.health = "127.0.0.1:0";
  config.hello_timeout = Milliseconds(300);
  config.policy.cycle = Milliseconds(20);
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config);
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  ASSERT_GT(controller_->health_port(), 0);
  httplib::Client health("127.0.0.1", controller_->health_port());
  health.set_read_timeout(1, 0);
  // Alive, not ready: no agent yet.
  ASSERT_TRUE(WaitUntil([&] {
    httplib::Result r = health.Get("/healthz");
    return r && r->status == 200;
  }));
  httplib::Result ready = health.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_THAT(ready->body, HasSubstr("no agent connected (0 of 4 nodes)"));

  // Twelve clients (more than the listener's threads) that start a request on the metrics
  // listener and stall.
  const auto connect_raw = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
    return fd;
  };
  std::vector<int> slow;
  for (int i = 0; i < 12; ++i) {
    slow.push_back(connect_raw(controller_->http_port()));
    const char partial[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    EXPECT_GT(::send(slow.back(), partial, sizeof partial - 1, MSG_NOSIGNAL), 0);
  }
  const auto asked = std::chrono::steady_clock::now();
  httplib::Result alive = health.Get("/healthz");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(900));
  // The metrics listener frees its threads as the stalled reads time out.
  httplib::Client http("127.0.0.1", controller_->http_port());
  http.set_read_timeout(15, 0);
  httplib::Result metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);

  // A stream that never says hello is closed after the hello timeout.
  auto silent = Agent(NodeIdentity(2));
  std::optional<grpc::Status> done = silent->WaitDone(std::chrono::seconds(10));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(done->error_message(), HasSubstr("no hello within 300 ms"));
  EXPECT_EQ(controller_->agent_service().streams_without_hello(), 0u);

  // An agent that says hello is kept, and the controller is ready.
  auto agent = Agent(NodeIdentity(3), AcceptEvery);
  agent->SendHello(3, {1, 4}, true);
  ASSERT_TRUE(WaitUntil([&] {
    httplib::Result r = health.Get("/readyz");
    return r && r->status == 200;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_FALSE(agent->WaitDone(std::chrono::milliseconds(0)).has_value());

  // A TCP connection that never starts its TLS handshake is closed by the server.
  const int idle = connect_raw(controller_->port());
  pollfd p{idle, POLLIN, 0};
  const auto opened = std::chrono::steady_clock::now();
  ASSERT_EQ(::poll(&p, 1, Controller::kHandshakeTimeoutMs + 5000), 1);
  char byte;
  EXPECT_LE(::recv(idle, &byte, 1, 0), 0);  // closed (EOF or reset)
  EXPECT_GE(std::chrono::steady_clock::now() - opened,
            std::chrono::milliseconds(Controller::kHandshakeTimeoutMs - 500));
  ::close(idle);
  for (int fd : slow) ::close(fd);
}

// With the real cycle thread on a 60 s period, a sample saying a link went down brings a table
// without that link at once: only the early cycle can have made it.
TEST_F(ControllerGrpcTest, ALinkReportedDownGetsACycleAtOnce) {
  ControllerConfig config = testing::MakeTestConfig(*pki_, 4, kDiamond);
  config.policy.cycle = Seconds(60);
  config.table_stale = Seconds(120);
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config);
  ASSERT_TRUE(c.ok()) << c.status();
  controller_ = std::move(*c);
  auto agent = Agent(NodeIdentity(1), AcceptEvery);
  agent->SendHello(1, {2, 3}, /*delta_tables=*/false);
  size_t cursor = 0;
  std::optional<v1::ControllerMessage> first = agent->WaitFor(IsTable, &cursor);
  ASSERT_TRUE(first.has_value());
  const auto sample = [&](bool n2_up) {
    v1::AgentMessage m;
    for (uint32_t nb : {2u, 3u}) {
      v1::LinkSample* s = m.mutable_samples()->add_samples();
      s->set_neighbor_id(nb);
      s->set_up(nb == 2 ? n2_up : true);
      s->set_rtt_ms(0.3);
    }
    agent->Send(m);
  };
  sample(true);  // up: no cycle
  sample(false);
  std::optional<v1::ControllerMessage> moved = agent->WaitFor(
      [&](const v1::ControllerMessage& m) {
        if (!m.has_table() || m.table().version() <= first->table().version()) return false;
        for (const v1::Route& r : m.table().routes()) {
          for (const v1::NextHop& h : r.next_hops()) {
            if (h.neighbor_id() == 2) return false;
          }
        }
        return true;
      },
      &cursor);
  ASSERT_TRUE(moved.has_value()) << "no table without n1-n2 before the next 60 s tick";
  EXPECT_EQ(controller_->metrics().early_cycles->Value(), 1);
  EXPECT_TRUE(HasEvent("link_down"));
}

TEST_F(ControllerGrpcTest, StartFailsClearlyOnABadCertificateOrAddress) {
  ControllerConfig config = testing::MakeTestConfig(*pki_, 4, kDiamond);
  config.tls.cert_file = "/nonexistent/controller.crt";
  absl::StatusOr<std::unique_ptr<Controller>> c = Controller::Start(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/nonexistent/controller.crt"));

  config = testing::MakeTestConfig(*pki_, 4, kDiamond);
  absl::StatusOr<security::TlsFiles> node = pki_->NodeFiles(1);
  ASSERT_TRUE(node.ok());
  config.tls = *node;
  c = Controller::Start(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("not of a controller"));

  config = testing::MakeTestConfig(*pki_, 4, kDiamond);
  config.trust_domain = "other.test";
  c = Controller::Start(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("trust_domain"));
}

}  // namespace
}  // namespace dar::control
