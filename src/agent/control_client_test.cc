// The control client against a fake controller: the real generated service, real mutual TLS
// 1.3 on 127.0.0.1, certificates made in a temp dir.
#include "agent/control_client.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/saved_keys.h"
#include "base/test_support.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "security/certs.h"
#include "security/identity.h"
#include "security/tls.h"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;
constexpr auto kTimeout = std::chrono::seconds(20);
constexpr char kDomain[] = "test.dar";

// Polls `done` until it holds or kTimeout passes (the client's thread, the gRPC streams).
bool Eventually(const std::function<bool()>& done) { return test::WaitFor(done, kTimeout); }

using test::TempDir;

// Plays the controller: records what agents send, sends what the test says.
class FakeController final : public v1::AgentService::Service {
 public:
  using AgentStream = grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>;

  // A replica that does not lead: every stream is ended after its first message with `status`.
  explicit FakeController(grpc::Status refuse = grpc::Status::OK) : refuse_(std::move(refuse)) {}

  grpc::Status Connect(grpc::ServerContext* context, AgentStream* stream) override {
    absl::StatusOr<security::SpiffeId> peer = security::PeerSpiffeId(*context);
    {
      std::lock_guard<std::mutex> lock(mu_);
      peers_.push_back(peer.ok() ? peer->ToString() : "unauthenticated");
    }
    if (!refuse_.ok()) {
      v1::AgentMessage hello;
      stream->Read(&hello);
      return refuse_;
    }
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      stream_ = stream;
    }
    v1::AgentMessage m;
    while (stream->Read(&m)) {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(m);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(send_mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  bool Send(const v1::ControllerMessage& m) {
    std::lock_guard<std::mutex> lock(send_mu_);
    return stream_ != nullptr && stream_->Write(m);
  }
  bool SendTable(const v1::RouteTable& t) {
    v1::ControllerMessage m;
    *m.mutable_table() = t;
    return Send(m);
  }

  // The first message from position `cursor` on that satisfies `match`; advances `cursor`
  // past it. Fails the test after kTimeout.
  v1::AgentMessage Next(size_t& cursor, const std::function<bool(const v1::AgentMessage&)>& match) {
    std::unique_lock<std::mutex> lock(mu_);
    v1::AgentMessage found;
    const bool ok = cv_.wait_for(lock, kTimeout, [&] {
      for (; cursor < received_.size(); ++cursor) {
        if (match(received_[cursor])) {
          found = received_[cursor++];
          return true;
        }
      }
      return false;
    });
    EXPECT_TRUE(ok) << "no matching message from the agent";
    return found;
  }
  v1::TableAck NextAck(size_t& cursor) {
    return Next(cursor, [](const v1::AgentMessage& m) { return m.has_ack(); }).ack();
  }
  v1::Hello NextHello(size_t& cursor) {
    return Next(cursor, [](const v1::AgentMessage& m) { return m.has_hello(); }).hello();
  }
  bool connected() {
    std::lock_guard<std::mutex> lock(send_mu_);
    return stream_ != nullptr;
  }
  // How many messages received so far satisfy `match` (no waiting).
  int Count(const std::function<bool(const v1::AgentMessage&)>& match) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count_if(received_.begin(), received_.end(), match));
  }
  std::vector<std::string> peers() {
    std::lock_guard<std::mutex> lock(mu_);
    return peers_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::AgentMessage> received_;
  std::vector<std::string> peers_;
  std::mutex send_mu_;
  AgentStream* stream_ = nullptr;
  const grpc::Status refuse_;
};

// Records what the client asks of the data plane.
class FakeDataplane final : public DataplaneControl {
 public:
  std::vector<NeighbourSample> Samples(Time now) override {
    NeighbourSample a;
    a.neighbour = 0;  // A
    a.link = 1;
    a.sample.at = now;
    a.sample.up = true;
    a.sample.rtt_smoothed = Microseconds(1500);
    a.sample.rtt_min = Duration(1'200'345);
    a.sample.rtt_p95 = Milliseconds(3);
    a.sample.loss = 0.25;
    a.sample.throughput = DataRate::Mbps(20);
    a.sample.utilisation = 0.2;
    a.sample.queue_bytes = 1234;
    a.probes_sent = 40;
    a.probes_answered = 30;
    NeighbourSample d = a;
    d.neighbour = 3;  // D
    d.link = 4;
    d.sample.up = false;
    return {a, d};
  }
  // Totals since the start: 1,000 more bytes toward D (NodeId 3) at every call, none
  // elsewhere.
  std::vector<uint64_t> SentBytes() override {
    std::lock_guard<std::mutex> lock(mu_);
    sent_to_d_ += 1000;
    return {0, 0, 0, sent_to_d_};
  }
  absl::Status SetKeys(const std::vector<KeyUpdate>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    keys_ = keys;
    return absl::OkStatus();
  }
  absl::Status SetForwarding(const ForwardingConfig& config) override {
    std::lock_guard<std::mutex> lock(mu_);
    forwarding_.push_back(config);
    return absl::OkStatus();
  }
  void InstallTables(std::shared_ptr<const AgentTables> tables) override {
    std::lock_guard<std::mutex> lock(mu_);
    tables_ = std::move(tables);
  }

  std::shared_ptr<const AgentTables> tables() {
    std::lock_guard<std::mutex> lock(mu_);
    return tables_;
  }
  std::vector<KeyUpdate> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }
  std::vector<ForwardingConfig> forwarding() {
    std::lock_guard<std::mutex> lock(mu_);
    return forwarding_;
  }
  absl::Status SetProbeSettings(Duration interval, int missed) override {
    std::lock_guard<std::mutex> lock(mu_);
    probes_.emplace_back(interval, missed);
    return absl::OkStatus();
  }
  std::vector<std::pair<Duration, int>> probes() {
    std::lock_guard<std::mutex> lock(mu_);
    return probes_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<const AgentTables> tables_;
  uint64_t sent_to_d_ = 0;
  std::vector<KeyUpdate> keys_;
  std::vector<ForwardingConfig> forwarding_;
  std::vector<std::pair<Duration, int>> probes_;
};

v1::Route ClientRoute(uint32_t dest, uint32_t cls, double phi,
                      std::vector<std::pair<uint32_t, double>> hops) {
  v1::Route r;
  r.set_destination_id(dest);
  r.set_traffic_class(cls);
  r.set_potential(phi);
  for (const auto& [n, w] : hops) {
    v1::NextHop* h = r.add_next_hops();
    h->set_neighbor_id(n);
    h->set_weight(w);
    h->set_potential(phi - 1);
  }
  return r;
}

// A valid full table for B (neighbours A = 1 and D = 4; C = 3 over both).
v1::RouteTable ClientTable(uint64_t version) {
  v1::RouteTable t;
  t.set_version(version);
  for (uint32_t cls = 0; cls < 2; ++cls) {
    *t.add_routes() = ClientRoute(1, cls, 1, {{1, 1}});
    *t.add_routes() = ClientRoute(4, cls, 1, {{4, 1}});
    *t.add_routes() = ClientRoute(3, cls, 2, {{1, 0.5}, {4, 0.5}});
  }
  return t;
}

class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    certs_ = dir_.path() + "/certs";
    security::InitCertDirOptions init;
    init.dir = certs_;
    init.trust_domain = kDomain;
    init.not_before = absl::Now() - absl::Hours(1);
    init.not_after = absl::Now() + absl::Hours(1);
    ASSERT_TRUE(security::InitCertDir(init).ok());
    security::IssueOptions node;
    node.dir = certs_;
    node.name = "2";
    node.not_before = init.not_before;
    node.not_after = init.not_after;
    ASSERT_TRUE(security::IssueFromCertDir(node).ok());
    StartServer(0);
    ASSERT_NE(port_, 0);

    ParseConfig(fmt::format("controller: 127.0.0.1:{}", port_));
  }

  // Parses B's configuration with `controller` (a line naming the controller or its replicas)
  // into config_, and makes the table store for it.
  void ParseConfig(const std::string& controller) {
    const std::string text = fmt::format(R"(node: {{id: 2, name: B}}
{}
tls: {{cert: {}/node-2.crt, key: {}/node-2.key, ca: {}/ca.crt}}
state_dir: {}/state
probe_interval_ms: 20
forwarding_mode: per_flow
nodes:
  - {{id: 1, name: A}}
  - {{id: 2, name: B}}
  - {{id: 3, name: C}}
  - {{id: 4, name: D}}
links:
  - {{a: A, b: B, capacity_bps: 100000000}}
  - {{a: A, b: C}}
  - {{a: B, b: D}}
  - {{a: C, b: D}}
neighbours:
  - {{id: 1, link: 0, interface: b-a, address: 10.1.0.2/30, peer_address: 10.1.0.1}}
  - {{id: 4, link: 2, interface: b-d, address: 10.1.2.1/30, peer_address: 10.1.2.2}}
)",
                                         controller, certs_, certs_, certs_, dir_.path());
    absl::StatusOr<AgentConfig> c = ParseAgentConfig(text, "B.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
    topology_ = BuildAgentTopology(config_);
    store_ = std::make_unique<TableStore>(config_, topology_, config_.table_stale, &log_);
  }

  void TearDown() override {
    if (client_ != nullptr) client_->Stop();
    StopServer();
  }

  // A controller presenting the certificate <certs>/<cert>.crt.
  void StartServer(int port, const std::string& cert = "controller") {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
        security::MakeServerCredentials(
            {certs_ + "/" + cert + ".crt", certs_ + "/" + cert + ".key", certs_ + "/ca.crt"},
            absl::Now());
    ASSERT_TRUE(creds.ok()) << creds.status();
    controller_ = std::make_unique<FakeController>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(fmt::format("127.0.0.1:{}", port), *creds, &port_);
    builder.RegisterService(controller_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  void StopServer() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }

  void StartClient(ControlClientOptions options = {}) {
    options.backoff_min = Milliseconds(10);
    options.backoff_max = Milliseconds(100);
    options.clock = &clock_;
    client_ = std::make_unique<ControlClient>(config_, *store_, dataplane_, log_, options);
    ASSERT_TRUE(client_->Start().ok());
  }

  bool Logged(const std::string& text) {
    std::lock_guard<std::mutex> lock(lines_mu_);
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

  // Every decision the client makes on time (staleness, silence, stamps) reads this clock,
  // which moves only when a test says: none depends on how fast this machine runs the test.
  // It starts at the real Unix time, inside the certificates' validity.
  ManualClock clock_{absl::ToUnixNanos(absl::Now())};
  TempDir dir_;
  std::string certs_;
  int port_ = 0;
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<grpc::Server> server_;
  AgentConfig config_;
  Topology topology_;
  std::mutex lines_mu_;
  std::vector<std::string> lines_;
  JsonLog log_{[this](std::string_view line) {
                 std::lock_guard<std::mutex> lock(lines_mu_);
                 lines_.emplace_back(line);
               },
               LogLevel::kDebug};
  std::unique_ptr<TableStore> store_;
  FakeDataplane dataplane_;
  std::unique_ptr<ControlClient> client_;
};

TEST_F(ControlClientTest, SaysHelloOverMutualTlsThenSendsSamples) {
  StartClient();
  size_t cursor = 0;
  const v1::Hello hello = controller_->NextHello(cursor);
  EXPECT_EQ(controller_->peers(), std::vector<std::string>{"spiffe://test.dar/node/2"});
  EXPECT_EQ(hello.node_id(), 2u);
  EXPECT_EQ(hello.node_name(), "B");
  EXPECT_EQ(hello.installed_version(), 0u);
  ASSERT_EQ(hello.links_size(), 2);
  EXPECT_EQ(hello.links(0).neighbor_id(), 1u);
  EXPECT_EQ(hello.links(0).local_address(), "10.1.0.2:7000");
  EXPECT_EQ(hello.links(0).remote_address(), "10.1.0.1:7000");
  EXPECT_EQ(hello.links(0).capacity_bps(), 100'000'000u);
  EXPECT_EQ(hello.links(1).neighbor_id(), 4u);
  EXPECT_EQ(hello.links(1).capacity_bps(), 0u);
  EXPECT_TRUE(hello.capabilities().delta_tables());
  EXPECT_THAT(hello.capabilities().forwarding_modes(),
              ::testing::ElementsAre("per_flow", "per_flowlet", "per_packet", "per_packet_p2c",
                                     "drill", "drill_flowlet"));

  const v1::LinkSamples samples =
      controller_->Next(cursor, [](const v1::AgentMessage& m) { return m.has_samples(); })
          .samples();
  ASSERT_EQ(samples.samples_size(), 2);
  const v1::LinkSample& a = samples.samples(0);
  EXPECT_EQ(a.neighbor_id(), 1u);
  EXPECT_TRUE(a.up());
  EXPECT_DOUBLE_EQ(a.rtt_ms(), 1.5);
  EXPECT_EQ(a.rtt_min_ns(), 1'200'345);  // the base RTT, exact
  EXPECT_DOUBLE_EQ(a.rtt_p95_ms(), 3);
  EXPECT_DOUBLE_EQ(a.loss(), 0.25);
  EXPECT_DOUBLE_EQ(a.tx_bps(), 20e6);
  EXPECT_DOUBLE_EQ(a.utilisation(), 0.2);
  EXPECT_EQ(a.queue_bytes(), 1234);
  EXPECT_EQ(a.probes_sent(), 40u);
  EXPECT_EQ(a.probes_answered(), 30u);
  EXPECT_EQ(a.time_unix_ns(), clock_.UnixNanos());  // stamped by the client's clock
  EXPECT_EQ(samples.samples(1).neighbor_id(), 4u);
  EXPECT_FALSE(samples.samples(1).up());
  // What the node sent since its previous samples, per destination: D's 1,000 bytes, each
  // time anew.
  for (int i = 0; i < 2; ++i) {
    const v1::LinkSamples s =
        i == 0
            ? samples
            : controller_->Next(cursor, [](const v1::AgentMessage& m) { return m.has_samples(); })
                  .samples();
    ASSERT_EQ(s.sent_size(), 1);
    EXPECT_EQ(s.sent(0).destination_id(), 4u);
    EXPECT_EQ(s.sent(0).bytes(), 1000u);
  }
  // The static table is installed from the start.
  ASSERT_TRUE(Eventually([&] { return dataplane_.tables() != nullptr; }));
  EXPECT_TRUE(dataplane_.tables()->is_static);
}

// Replicas of the controller: the agent skips one that does not answer, follows a refusal to
// the replica it names as leading, and streams to that one.
TEST_F(ControlClientTest, FollowsTheReplicasToTheLeader) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = security::MakeServerCredentials(
      {certs_ + "/controller.crt", certs_ + "/controller.key", certs_ + "/ca.crt"}, absl::Now());
  ASSERT_TRUE(creds.ok()) << creds.status();
  const std::string leader = fmt::format("127.0.0.1:{}", port_);
  FakeController follower(grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      fmt::format("this replica does not lead; the leading replica is at {}", leader)));
  int follower_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", *creds, &follower_port);
  builder.RegisterService(&follower);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  // A port nothing listens on: a replica that is down.
  const int dead = [] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return static_cast<int>(ntohs(a.sin_port));
  }();
  // The leader last, so that only the hint leads there from the follower.
  ParseConfig(fmt::format("controllers: [127.0.0.1:{}, 127.0.0.1:{}, 127.0.0.1:{}]", dead,
                          follower_port, port_));
  ASSERT_EQ(config_.controllers.size(), 3u);
  StartClient();
  size_t cursor = 0;
  EXPECT_EQ(controller_->NextHello(cursor).node_id(), 2u);
  EXPECT_EQ(follower.peers().size(), 1u);
  const ControlClientStatus status = client_->status();
  EXPECT_GE(status.connect_failures, 2);  // the dead one and the follower
  // The leader answers: the agent stays with it.
  ASSERT_TRUE(controller_->SendTable(ClientTable(5)));
  EXPECT_EQ(controller_->NextAck(cursor).version(), 5u);
  EXPECT_TRUE(client_->status().connected);
  EXPECT_EQ(follower.peers().size(), 1u);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST_F(ControlClientTest, AcksAcceptedTablesAndRefusesBadOnesWithTheReason) {
  StartClient();
  size_t cursor = 0;
  controller_->NextHello(cursor);
  ASSERT_TRUE(controller_->SendTable(ClientTable(5)));
  v1::TableAck ack = controller_->NextAck(cursor);
  EXPECT_EQ(ack.version(), 5u);
  EXPECT_TRUE(ack.accepted());
  EXPECT_EQ(ack.reason(), "");
  // Installed before the ack went out.
  ASSERT_NE(dataplane_.tables(), nullptr);
  EXPECT_EQ(dataplane_.tables()->version, 5u);

  ASSERT_TRUE(controller_->SendTable(ClientTable(5)));
  ack = controller_->NextAck(cursor);
  EXPECT_FALSE(ack.accepted());
  EXPECT_EQ(ack.reason(), "version 5 is not newer than the installed version 5");

  v1::RouteTable bad = ClientTable(6);
  *bad.add_routes() = ClientRoute(3, 0, 2, {{3, 1}});
  ASSERT_TRUE(controller_->SendTable(bad));
  ack = controller_->NextAck(cursor);
  EXPECT_EQ(ack.version(), 6u);
  EXPECT_FALSE(ack.accepted());
  EXPECT_THAT(ack.reason(), HasSubstr("next hop 3 is not a neighbour of node 2"));

  v1::RouteTable delta;
  delta.set_version(7);
  delta.set_base_version(5);
  *delta.add_routes() = ClientRoute(3, 0, 2, {{4, 1}});
  ASSERT_TRUE(controller_->SendTable(delta));
  ack = controller_->NextAck(cursor);
  EXPECT_TRUE(ack.accepted()) << ack.reason();
  EXPECT_EQ(dataplane_.tables()->version, 7u);
  EXPECT_EQ(dataplane_.tables()->Lookup(0, 2).size(), 1u);

  const ControlClientStatus status = client_->status();
  EXPECT_TRUE(status.connected);
  EXPECT_EQ(status.tables_accepted, 2);
  EXPECT_EQ(status.tables_refused, 2);
  EXPECT_TRUE(Logged("table refused"));
}

TEST_F(ControlClientTest, AppliesTheControllersConfig) {
  StartClient();
  size_t cursor = 0;
  controller_->NextHello(cursor);
  v1::ControllerMessage m;
  v1::AgentConfig* c = m.mutable_config();
  c->set_forwarding_mode("per_packet");
  c->set_table_stale_ms(200);
  c->set_probe_interval_ms(50);  // the file says 20 ms and 3 missed probes
  c->set_missed_probes(5);
  for (uint32_t id : {1u, 2u}) {
    v1::OverlayKey* k = c->add_keys();
    k->set_key_id(id);
    k->set_key(std::string(32, static_cast<char>('a' + id)));
    k->set_active(id == 2);
  }
  ASSERT_TRUE(controller_->Send(m));
  ASSERT_TRUE(Eventually([&] { return dataplane_.keys().size() == 2; }));
  const std::vector<KeyUpdate> keys = dataplane_.keys();
  EXPECT_EQ(keys[0].id, 1u);
  EXPECT_FALSE(keys[0].active);
  EXPECT_EQ(keys[0].key[31], 'b');
  EXPECT_TRUE(keys[1].active);
  ASSERT_TRUE(Eventually([&] { return !dataplane_.forwarding().empty(); }));
  EXPECT_EQ(dataplane_.forwarding()[0].mode, ForwardingMode::kPerPacket);
  // Saved for a restart before the controller is back (just after they are applied).
  absl::StatusOr<std::vector<KeyUpdate>> saved;
  ASSERT_TRUE(Eventually([&] {
    saved = LoadKeys(config_.state_dir);
    return saved.ok();
  })) << saved.status();
  ASSERT_EQ(saved->size(), 2u);
  EXPECT_EQ((*saved)[1].id, 2u);
  EXPECT_TRUE((*saved)[1].active);
  EXPECT_EQ((*saved)[1].key[0], 'c');
  // The controller's probe settings apply at once, not after a restart.
  ASSERT_EQ(dataplane_.probes().size(), 1u);
  EXPECT_EQ(dataplane_.probes()[0], std::make_pair(Duration(Milliseconds(50)), 5));

  // The short staleness timeout applies: a table that is not refreshed for longer gives way
  // to the static one, installed by the client on its own.
  ASSERT_TRUE(controller_->SendTable(ClientTable(3)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());
  ASSERT_TRUE(Eventually([&] { return !dataplane_.tables()->is_static; }));
  clock_.Advance(Milliseconds(250));
  ASSERT_TRUE(Eventually([&] { return dataplane_.tables()->is_static; }));
  EXPECT_TRUE(Logged("table stale: falling back to the static table"));

  // A key of the wrong size is not applied; the keys stay as they were.
  c->clear_keys();
  c->add_keys()->set_key("short");
  c->mutable_keys(0)->set_active(true);
  ASSERT_TRUE(controller_->Send(m));
  ASSERT_TRUE(Eventually([&] { return Logged("data-plane keys not applied"); }));
  EXPECT_EQ(dataplane_.keys().size(), 2u);
  EXPECT_TRUE(Logged("key 0 has 5 bytes, not 32"));
  saved = LoadKeys(config_.state_dir);  // nor saved
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->size(), 2u);
}

// The controller hears which table the agent forwards with: in the hello, and again when its
// table goes stale (a fallback to static) and when a new one replaces the static table.
TEST_F(ControlClientTest, ReportsItsTableAndEveryFallbackToStatic) {
  // As the agent's main does: the static table is taken (and installed) before the client
  // starts; the hello must still say static.
  ASSERT_NE(store_->TakeChange(clock_.Now()), nullptr);
  StartClient();
  size_t cursor = 0;
  const v1::Hello hello = controller_->NextHello(cursor);
  EXPECT_TRUE(hello.table_status().static_table());  // nothing accepted yet
  EXPECT_EQ(hello.table_status().fallbacks(), 0u);
  EXPECT_EQ(hello.table_status().last_fallback_unix_ns(), 0);
  const auto next_status = [&] {
    return controller_->Next(cursor, [](const v1::AgentMessage& m) { return m.has_status(); })
        .status();
  };

  ASSERT_TRUE(controller_->SendTable(ClientTable(3)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());
  v1::TableStatus status = next_status();
  EXPECT_FALSE(status.static_table());
  EXPECT_EQ(status.fallbacks(), 0u);

  // A short staleness timeout, and no refresh: once the clock has passed it, the agent falls
  // back and says so, stamped with the time it did.
  v1::ControllerMessage m;
  m.mutable_config()->set_table_stale_ms(150);
  ASSERT_TRUE(controller_->Send(m));
  clock_.Advance(Milliseconds(200));
  status = next_status();
  EXPECT_TRUE(status.static_table());
  EXPECT_EQ(status.fallbacks(), 1u);
  EXPECT_EQ(status.last_fallback_unix_ns(), clock_.UnixNanos());

  // A new table replaces the static one; the clock stands still, so it stays fresh.
  ASSERT_TRUE(controller_->SendTable(ClientTable(4)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());
  status = next_status();
  EXPECT_FALSE(status.static_table());
  EXPECT_EQ(status.fallbacks(), 1u);
  EXPECT_EQ(client_->table_status().fallbacks(), 1u);
}

// A link's liveness change sends the samples at once, not at the next probe interval (here
// 30 s away, so a samples message within the test's timeout can only be the early one).
TEST_F(ControlClientTest, SendsSamplesAtOnceWhenALinkChanges) {
  config_.probe_interval = Seconds(30);
  StartClient();
  size_t cursor = 0;
  controller_->NextHello(cursor);
  client_->NotifyLinkChange();
  const v1::LinkSamples samples =
      controller_->Next(cursor, [](const v1::AgentMessage& m) { return m.has_samples(); })
          .samples();
  ASSERT_EQ(samples.samples_size(), 2);
  EXPECT_FALSE(samples.samples(1).up());  // what the data plane says of the link to 4
  // Counted just after the write returns, which may be after the controller has it.
  EXPECT_TRUE(Eventually([&] { return client_->status().samples_sent == 1; }))
      << client_->status().samples_sent;
}

// A fallback made while the controller was away is in the next hello.
TEST_F(ControlClientTest, AFallbackWhileDisconnectedIsInTheNextHello) {
  StartClient();
  size_t cursor = 0;
  controller_->NextHello(cursor);
  v1::ControllerMessage m;
  m.mutable_config()->set_table_stale_ms(2000);
  ASSERT_TRUE(controller_->Send(m));
  ASSERT_TRUE(controller_->SendTable(ClientTable(5)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());
  const int port = port_;
  StopServer();
  ASSERT_TRUE(Eventually([&] { return !client_->status().connected; }));
  // The table goes stale only now, while no controller listens.
  EXPECT_FALSE(client_->table_status().static_table());
  clock_.Advance(Milliseconds(2500));
  ASSERT_TRUE(Eventually([&] { return client_->table_status().static_table(); }));
  // The old stream never heard of it: it happened while disconnected.
  EXPECT_EQ(controller_->Count([](const v1::AgentMessage& x) {
    return x.has_status() && x.status().static_table();
  }),
            0);
  StartServer(port);
  ASSERT_EQ(port_, port);
  cursor = 0;
  const v1::Hello hello = controller_->NextHello(cursor);
  EXPECT_EQ(hello.installed_version(), 5u);
  EXPECT_TRUE(hello.table_status().static_table());
  EXPECT_EQ(hello.table_status().fallbacks(), 1u);
  EXPECT_EQ(hello.table_status().last_fallback_unix_ns(), clock_.UnixNanos());
}

TEST_F(ControlClientTest, ReconnectsAfterTheControllerRestarts) {
  StartClient();
  size_t cursor = 0;
  controller_->NextHello(cursor);
  ASSERT_TRUE(controller_->SendTable(ClientTable(5)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());

  const int port = port_;
  StopServer();
  ASSERT_TRUE(Eventually([&] { return !client_->status().connected; }));
  // Attempts fail while no controller listens.
  ASSERT_TRUE(Eventually([&] { return client_->status().connect_failures >= 1; }));
  EXPECT_GE(client_->status().disconnects, 1);
  StartServer(port);
  ASSERT_EQ(port_, port);

  cursor = 0;
  const v1::Hello hello = controller_->NextHello(cursor);
  EXPECT_EQ(hello.installed_version(), 5u);  // continues above what it forwards with
  ASSERT_TRUE(controller_->SendTable(ClientTable(6)));
  EXPECT_TRUE(controller_->NextAck(cursor).accepted());
  EXPECT_TRUE(client_->status().connected);
  EXPECT_TRUE(Logged("disconnected from the controller"));
  EXPECT_TRUE(Logged("reconnecting to the controller"));
}

TEST_F(ControlClientTest, TalksOnlyToTheControllersIdentity) {
  // A node's certificate listing the controller's address, as any certificate of the cluster's
  // CA may: the agent must not take it for the controller (nor a data-plane key from it).
  security::IssueOptions impostor;
  impostor.dir = certs_;
  impostor.name = "9";
  impostor.hosts = {"127.0.0.1"};
  impostor.not_before = absl::Now() - absl::Hours(1);
  impostor.not_after = absl::Now() + absl::Hours(1);
  ASSERT_TRUE(security::IssueFromCertDir(impostor).ok());
  const int port = port_;
  StopServer();
  StartServer(port, "node-9");
  StartClient();
  ASSERT_TRUE(Eventually([&] { return client_->status().connect_failures >= 2; }));
  EXPECT_EQ(controller_->Count([](const v1::AgentMessage& m) { return m.has_hello(); }), 0);
  EXPECT_TRUE(controller_->peers().empty());
  client_->Stop();
  client_.reset();

  // The real controller, but the config names another one: refused too.
  StopServer();
  StartServer(port);
  config_.controller_id = security::SpiffeId::Controller("elsewhere.example");
  StartClient();
  ASSERT_TRUE(Eventually([&] { return client_->status().connect_failures >= 2; }));
  EXPECT_EQ(controller_->Count([](const v1::AgentMessage& m) { return m.has_hello(); }), 0);
  client_->Stop();
  client_.reset();

  // The controller the config names: the hello goes through.
  config_.controller_id = security::SpiffeId::Controller(kDomain);
  StartClient();
  size_t cursor = 0;
  EXPECT_EQ(controller_->NextHello(cursor).node_id(), 2u);
}

TEST_F(ControlClientTest, GivesUpASilentStream) {
  ControlClientOptions options;
  options.silence_timeout = Milliseconds(200);
  StartClient(options);
  size_t cursor = 0;
  controller_->NextHello(cursor);
  // The controller never answers, but the clock has not moved: the stream is kept, however
  // long the samples take in real time.
  for (int i = 0; i < 3; ++i) {
    controller_->Next(cursor, [](const v1::AgentMessage& x) { return x.has_samples(); });
  }
  EXPECT_EQ(controller_->Count([](const v1::AgentMessage& x) { return x.has_hello(); }), 1);
  EXPECT_EQ(client_->status().connect_failures, 0);
  // Past the timeout, the client drops the stream and says hello again.
  clock_.Advance(Milliseconds(250));
  controller_->NextHello(cursor);
  EXPECT_GE(client_->status().connect_failures, 1);
  EXPECT_THAT(client_->status().last_error, HasSubstr("sent nothing for 200 ms"));
}

TEST_F(ControlClientTest, StopsWhileBackingOff) {
  StopServer();
  StartClient();
  ASSERT_TRUE(Eventually([&] { return client_->status().connect_failures >= 2; }));
  client_->Stop();
  EXPECT_FALSE(client_->status().connected);
  // Stopped for good: a second Start is refused.
  EXPECT_FALSE(client_->Start().ok());
}

}  // namespace
}  // namespace dar::agent
