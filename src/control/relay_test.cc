// The relay end to end: a real controller, a relay with its own certificate, and members
// (scripted TestAgents with theirs) connected to the relay over mutual TLS 1.3 on 127.0.0.1.
#include "agent/relay.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/test_support.h"
#include "control/controller.h"
#include "control/controller_test_util.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::agent {
namespace {

using control::testing::AcceptEvery;
using control::testing::IsConfig;
using control::testing::IsTable;
using control::testing::kTestDomain;
using control::testing::NodeIdentity;
using control::testing::TestAgent;
using control::testing::TestPki;
using ::testing::HasSubstr;

constexpr auto kWait = std::chrono::seconds(10);

bool WaitUntil(const std::function<bool()>& cond) { return test::WaitFor(cond, kWait); }

// Two racks: switch n1 with hosts n2 and n3, switch n4 with host n5; n1 - n4.
const std::vector<std::pair<int, int>> kRacks = {{0, 1}, {0, 2}, {0, 3}, {3, 4}};
const std::map<uint32_t, std::vector<uint32_t>> kNeighbours = {
    {1, {2, 3, 4}}, {2, {1}}, {3, {1}}, {4, {1, 5}}, {5, {4}}};

class RelayTest : public ::testing::Test {
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

  void SetUp() override { StartController("127.0.0.1:0"); }

  // Cycles run by the test.
  void StartController(const std::string& listen) {
    control::ControllerConfig config = control::testing::MakeTestConfig(*pki_, 5, kRacks);
    config.listen = listen;
    control::ControllerOptions o;
    o.cycle_thread = false;
    absl::StatusOr<std::unique_ptr<control::Controller>> c = control::Controller::Start(config, o);
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = std::move(*c);
  }

  // The relay of node `id`, to the controller; `adjust` changes its options.
  std::unique_ptr<Relay> StartRelay(uint32_t id,
                                    const std::function<void(RelayOptions&)>& adjust = {}) {
    RelayOptions o;
    o.listen = "127.0.0.1:0";
    absl::StatusOr<security::TlsFiles> files = pki_->NodeFiles(id);
    EXPECT_TRUE(files.ok()) << files.status();
    o.tls = *files;
    o.controllers = {fmt::format("127.0.0.1:{}", controller_->port())};
    o.controller_name = "localhost";
    if (adjust) adjust(o);
    absl::StatusOr<std::unique_ptr<Relay>> r = Relay::Start(o, log_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  // Member `id`'s channel to the relay of node `relay_id`, which must present that node's
  // certificate.
  std::shared_ptr<grpc::Channel> MemberChannel(uint32_t id, const Relay& relay, uint32_t relay_id) {
    absl::StatusOr<security::TlsFiles> files = pki_->NodeFiles(id);
    EXPECT_TRUE(files.ok()) << files.status();
    security::ChannelTlsOptions tls{*files};
    tls.server_identity = NodeIdentity(relay_id);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        security::CreateSecureChannel(fmt::format("127.0.0.1:{}", relay.port()), tls, absl::Now());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? *channel : nullptr;
  }

  // Member `id`'s stream to the relay of node `relay_id`, its hello sent.
  std::unique_ptr<TestAgent> Member(uint32_t id, const Relay& relay, uint32_t relay_id) {
    auto agent = std::make_unique<TestAgent>(MemberChannel(id, relay, relay_id), AcceptEvery);
    agent->SendHello(id, kNeighbours.at(id), /*delta_tables=*/true);
    return agent;
  }

  std::unique_ptr<TestAgent> Direct(uint32_t id) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        pki_->Channel(NodeIdentity(id), controller_->port());
    EXPECT_TRUE(channel.ok()) << channel.status();
    auto agent = std::make_unique<TestAgent>(*channel, AcceptEvery);
    agent->SendHello(id, kNeighbours.at(id), /*delta_tables=*/true);
    return agent;
  }

  std::string Events() {
    std::string out;
    for (const v1::Event& e : controller_->core().ListEvents(0)) {
      out += e.kind() + ": " + e.detail() + "\n";
    }
    return out;
  }

  // The table version node `id` acknowledged, as the controller knows it.
  uint64_t Acked(uint32_t id) {
    for (const v1::NodeView& v : controller_->core().ListNodes()) {
      if (v.node_id() == id) return v.acked_version();
    }
    return 0;
  }

  double Connected() { return controller_->metrics().agents_connected->Value(); }

  static TestPki* pki_;
  JsonLog log_{[](std::string_view) {}, LogLevel::kError};
  std::unique_ptr<control::Controller> controller_;
};

TestPki* RelayTest::pki_ = nullptr;

TEST_F(RelayTest, MembersAreAdmittedAndServedThroughTheirSwitchsRelay) {
  std::unique_ptr<Relay> relay = StartRelay(1);
  ASSERT_NE(relay, nullptr);
  std::unique_ptr<TestAgent> n1 = Direct(1);
  std::unique_ptr<TestAgent> n2 = Member(2, *relay, 1);
  std::unique_ptr<TestAgent> n3 = Member(3, *relay, 1);
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 3; })) << Connected();
  EXPECT_EQ(relay->status().members, 2);

  size_t c2 = 0, c3 = 0;
  ASSERT_TRUE(n2->WaitFor(IsConfig, &c2).has_value());
  ASSERT_TRUE(n3->WaitFor(IsConfig, &c3).has_value());
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> t2 = n2->WaitFor(IsTable, &c2);
  ASSERT_TRUE(t2.has_value());
  // n2's rows: every other node, both classes, all through its one link to n1.
  EXPECT_EQ(t2->table().routes_size(), 8);
  for (const v1::Route& r : t2->table().routes()) {
    ASSERT_EQ(r.next_hops_size(), 1);
    EXPECT_EQ(r.next_hops(0).neighbor_id(), 1u);
  }
  std::optional<v1::ControllerMessage> t3 = n3->WaitFor(IsTable, &c3);
  ASSERT_TRUE(t3.has_value());

  // The members' samples and acks reach the controller.
  const double samples = controller_->metrics().samples->Value();
  v1::AgentMessage m;
  v1::LinkSample* s = m.mutable_samples()->add_samples();
  s->set_neighbor_id(1);
  s->set_up(true);
  s->set_rtt_ms(0.4);
  n2->Send(m);
  ASSERT_TRUE(WaitUntil([&] { return controller_->metrics().samples->Value() == samples + 1; }))
      << controller_->metrics().samples->Value() - samples << " up " << relay->status().messages_up
      << " in " << relay->status().batches_up << " dropped " << relay->status().dropped_up;
  ASSERT_TRUE(WaitUntil([&] { return Acked(2) == t2->table().version(); }));
  ASSERT_TRUE(WaitUntil([&] { return Acked(3) == t3->table().version(); }));
  // Batched: fewer writes to the controller than messages.
  const RelayStatus st = relay->status();
  EXPECT_TRUE(st.connected);
  EXPECT_EQ(st.streams, 1);
  EXPECT_GE(st.messages_up, 5);  // two hellos, two acks, a sample
  EXPECT_LE(st.batches_up, st.messages_up);

  // A member that leaves is gone from the controller at once.
  n3.reset();
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 2; })) << Connected();
  EXPECT_EQ(relay->status().members, 1);
}

TEST_F(RelayTest, ARelayCarriesOnlyItsRack) {
  std::unique_ptr<Relay> relay = StartRelay(1);
  ASSERT_NE(relay, nullptr);
  // n5 hangs off n4, and n4 is a switch with two links: neither is n1's to carry.
  std::unique_ptr<TestAgent> n5 = Member(5, *relay, 1);
  std::unique_ptr<TestAgent> n4 = Member(4, *relay, 1);
  std::unique_ptr<TestAgent> n2 = Member(2, *relay, 1);
  std::optional<grpc::Status> done5 = n5->WaitDone();
  ASSERT_TRUE(done5.has_value());
  EXPECT_EQ(done5->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(done5->error_message(), HasSubstr("may not relay for node 5"));
  std::optional<grpc::Status> done4 = n4->WaitDone();
  ASSERT_TRUE(done4.has_value());
  EXPECT_EQ(done4->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Its own member is served all the same.
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 1; })) << Connected();
  size_t c = 0;
  ASSERT_TRUE(n2->WaitFor(IsConfig, &c).has_value());
}

TEST_F(RelayTest, AMemberMayOnlySpeakForItsOwnCertificate) {
  std::unique_ptr<Relay> relay = StartRelay(1);
  ASSERT_NE(relay, nullptr);
  std::unique_ptr<TestAgent> n2 = Member(2, *relay, 1);
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 1; }));
  // n3's certificate, n2's hello.
  absl::StatusOr<security::TlsFiles> files = pki_->NodeFiles(3);
  ASSERT_TRUE(files.ok());
  security::ChannelTlsOptions tls{*files};
  tls.server_identity = NodeIdentity(1);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::CreateSecureChannel(fmt::format("127.0.0.1:{}", relay->port()), tls, absl::Now());
  ASSERT_TRUE(channel.ok());
  TestAgent liar(*channel, AcceptEvery);
  liar.SendHello(2, {1}, true);
  std::optional<grpc::Status> done = liar.WaitDone();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(done->error_message(), HasSubstr("hello says node 2"));
  // The real n2 keeps its stream, and is still served.
  EXPECT_FALSE(n2->WaitDone(std::chrono::milliseconds(200)).has_value());
  EXPECT_EQ(Connected(), 1);
  size_t c = 0;
  controller_->RunCycleNow();
  EXPECT_TRUE(n2->WaitFor(IsTable, &c).has_value());
}

TEST_F(RelayTest, AMemberThatReconnectsReplacesItsOldStream) {
  std::unique_ptr<Relay> relay = StartRelay(1);
  ASSERT_NE(relay, nullptr);
  std::unique_ptr<TestAgent> old = Member(2, *relay, 1);
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 1; }));
  // n2 again, its first stream still open (as after a reboot, before keepalive notices).
  std::unique_ptr<TestAgent> fresh = Member(2, *relay, 1);
  std::optional<grpc::Status> done = old->WaitDone();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->error_code(), grpc::StatusCode::ABORTED);
  size_t c = 0;
  ASSERT_TRUE(fresh->WaitFor(IsConfig, &c).has_value());
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> t = fresh->WaitFor(IsTable, &c);
  ASSERT_TRUE(t.has_value());
  ASSERT_TRUE(WaitUntil([&] { return Acked(2) == t->table().version(); }));
  EXPECT_EQ(Connected(), 1);
  EXPECT_FALSE(fresh->WaitDone(std::chrono::milliseconds(200)).has_value());
}

TEST_F(RelayTest, OnlyANodeMayRelay) {
  // The relay presents an admin's certificate to the controller.
  RelayOptions o;
  o.listen = "127.0.0.1:0";
  absl::StatusOr<security::TlsFiles> files =
      pki_->Files(security::SpiffeId::Admin(kTestDomain, "alice"));
  ASSERT_TRUE(files.ok());
  o.tls = *files;
  o.controllers = {fmt::format("127.0.0.1:{}", controller_->port())};
  absl::StatusOr<std::unique_ptr<Relay>> relay = Relay::Start(o, log_);
  ASSERT_TRUE(relay.ok()) << relay.status();
  ASSERT_TRUE(
      WaitUntil([&] { return (*relay)->status().streams >= 1 && !(*relay)->status().connected; }));
  ASSERT_TRUE(WaitUntil([&] {
    return (*relay)->status().last_error.find("only a node may relay") != std::string::npos;
  })) << (*relay)->status().last_error;
}

TEST_F(RelayTest, MembersStayConnectedAcrossARestartedController) {
  std::unique_ptr<Relay> relay = StartRelay(1);
  ASSERT_NE(relay, nullptr);
  std::unique_ptr<TestAgent> n2 = Member(2, *relay, 1);
  ASSERT_TRUE(WaitUntil([&] { return Connected() == 1; }));
  size_t c = 0;
  controller_->RunCycleNow();
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> first = n2->WaitFor(IsTable, &c);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(WaitUntil([&] { return Acked(2) == first->table().version(); }));
  // A new controller on the same address, with no memory of the versions it sent: the relay
  // opens a stream to it and says n2's hello again, with the version n2 accepted since.
  const int port = controller_->port();
  controller_.reset();
  StartController(fmt::format("127.0.0.1:{}", port));
  ASSERT_TRUE(WaitUntil([&] { return relay->status().streams >= 2 && Connected() == 1; }))
      << relay->status().streams << " " << Connected() << " " << Events();
  controller_->RunCycleNow();
  std::optional<v1::ControllerMessage> next = n2->WaitFor(IsTable, &c);
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(next->table().version(), first->table().version());
  EXPECT_EQ(next->table().base_version(), 0u);  // a new session: full
  // n2's own stream never ended.
  EXPECT_FALSE(n2->WaitDone(std::chrono::milliseconds(100)).has_value());
}

TEST_F(RelayTest, AStreamWithoutAHelloIsClosedAndSuchStreamsAreBounded) {
  // The relay's clock moves only when the test says, so that the first stream's time runs
  // out only then, however slowly the streams open.
  ManualClock clock(absl::ToUnixNanos(absl::Now()));
  std::unique_ptr<Relay> relay = StartRelay(1, [&](RelayOptions& o) {
    o.clock = &clock;
    o.hello_timeout = Milliseconds(300);
    o.max_without_hello = 1;
  });
  ASSERT_NE(relay, nullptr);
  std::unique_ptr<v1::AgentService::Stub> stub =
      v1::AgentService::NewStub(MemberChannel(2, *relay, 1));
  // Deadlines, so that a relay that never ends the streams fails the test rather than hangs it.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(5);
  grpc::ClientContext silent_context;
  silent_context.set_deadline(deadline);
  auto silent = stub->Connect(&silent_context);
  ASSERT_TRUE(WaitUntil([&] { return relay->status().without_hello == 1; }));

  // One more stream saying nothing is one too many while the first still has time.
  grpc::ClientContext refused_context;
  refused_context.set_deadline(deadline);
  auto refused = stub->Connect(&refused_context);
  v1::ControllerMessage m;
  EXPECT_FALSE(refused->Read(&m));
  const grpc::Status r = refused->Finish();
  EXPECT_EQ(r.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.error_message();
  EXPECT_THAT(r.error_message(), HasSubstr("waiting for their hello"));

  // Past its time, the silent stream is closed when the next one opens, and that one, a
  // member with its hello, is carried.
  clock.Advance(Milliseconds(300));
  std::unique_ptr<TestAgent> n3 = Member(3, *relay, 1);
  EXPECT_FALSE(silent->Read(&m));
  const grpc::Status s = silent->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no hello within 300 ms"));
  ASSERT_TRUE(WaitUntil([&] { return relay->status().members == 1; }));
  size_t cursor = 0;
  EXPECT_TRUE(n3->WaitFor(IsConfig, &cursor).has_value());
  const RelayStatus status = relay->status();
  EXPECT_EQ(status.silent_streams, 1);
  EXPECT_EQ(status.refused_streams, 1);
  EXPECT_EQ(status.without_hello, 0);
}

}  // namespace
}  // namespace dar::agent
