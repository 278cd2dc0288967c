// The controller's core through its whole contract (admission, samples, the cycle, acks, the
// admin views, reloads and operator state) on a manual clock, without gRPC. One file over
// 600 lines: every test shares the fixture that plays the agents, and splitting it would
// spread that fixture over several files.
#include "control/controller_core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/controller_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learn/policy_model.h"
#include "nlohmann/json.hpp"

namespace dar::control {
namespace {

using ::testing::HasSubstr;
using testing::kTestDomain;
using testing::NodeIdentity;

// What the core offered one agent.
class FakeLink final : public AgentLink {
 public:
  void OfferSnapshot(std::shared_ptr<const RouteSnapshot> s) override {
    std::lock_guard<std::mutex> lock(mu_);
    snapshots.push_back(std::move(s));
  }
  void OfferConfig(std::shared_ptr<const v1::AgentConfig> c) override {
    std::lock_guard<std::mutex> lock(mu_);
    configs.push_back(std::move(c));
  }
  void Close(const absl::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    closed = s;
  }
  std::mutex mu_;
  std::vector<std::shared_ptr<const RouteSnapshot>> snapshots;
  std::vector<std::shared_ptr<const v1::AgentConfig>> configs;
  std::optional<absl::Status> closed;
};

v1::Hello Hello(uint32_t id, std::vector<uint32_t> neighbours, uint64_t installed = 0) {
  v1::Hello h;
  h.set_node_id(id);
  for (uint32_t n : neighbours) h.add_links()->set_neighbor_id(n);
  h.mutable_capabilities()->set_delta_tables(true);
  h.set_installed_version(installed);
  return h;
}

v1::LinkSamples Samples(std::vector<std::pair<uint32_t, bool>> links, double utilisation = 0.1) {
  v1::LinkSamples s;
  for (auto [nb, up] : links) {
    v1::LinkSample* x = s.add_samples();
    x->set_neighbor_id(nb);
    x->set_up(up);
    x->set_rtt_ms(0.2);
    x->set_utilisation(utilisation);
  }
  return s;
}

// The diamond n1 - {n2, n3} - n4, in a core driven by a manual clock.
class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    config_.file = "test.yaml";
    config_.trust_domain = kTestDomain;
    config_.policy.routes = DefaultControllerRoutes();
    config_.events_kept = 50;
    for (uint32_t i = 1; i <= 4; ++i) {
      config_.nodes.push_back({i, "n" + std::to_string(i), "10.77.0." + std::to_string(i)});
    }
    for (auto [a, b] : {std::pair{1, 2}, {1, 3}, {2, 4}, {3, 4}}) {
      config_.links.push_back(
          {"n" + std::to_string(a), "n" + std::to_string(b), DataRate::Gbps(1), std::nullopt});
    }
    log_ = *JsonLog::Open(log_dir_.File("ctl.jsonl"), LogLevel::kDebug,
                          [this] { return clock_.UnixNanos(); });
    core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  }

  // The next hops (wire ids) of node `v` toward `d` in class `cls` of the newest tables.
  std::vector<std::string> NextHops(const std::string& v, const std::string& d, int cls = 0) {
    v1::GetRoutesRequest req;
    req.set_node(v);
    req.set_destination(d);
    req.set_traffic_class(cls);
    absl::StatusOr<v1::GetRoutesResponse> r = core_->GetRoutes(req);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<std::string> out;
    if (!r.ok() || r->routes_size() != 1) return out;
    for (const v1::NextHopView& h : r->routes(0).next_hops()) out.push_back(h.neighbour());
    return out;
  }

  bool HasEvent(const std::string& kind, const std::string& detail_part = "") {
    for (const v1::Event& e : core_->ListEvents(0)) {
      if (e.kind() == kind && e.detail().find(detail_part) != std::string::npos) return true;
    }
    return false;
  }

  // Every node reports every link of its own as `up` (except those in `down`).
  void ReportAll(const std::set<std::pair<uint32_t, uint32_t>>& down = {}) {
    const std::map<uint32_t, std::vector<uint32_t>> nb = {
        {1, {2, 3}}, {2, {1, 4}}, {3, {1, 4}}, {4, {2, 3}}};
    for (const auto& [node, list] : nb) {
      std::vector<std::pair<uint32_t, bool>> s;
      for (uint32_t n : list) s.push_back({n, !down.contains({node, n})});
      ASSERT_TRUE(core_->OnSamples(node, Samples(s)).ok());
    }
  }

  // Node `src` reports `bytes` sent toward node 4 since its last report.
  void ReportSentToN4(uint32_t src, uint64_t bytes) {
    v1::LinkSamples sent;
    v1::SentBytes* x = sent.add_sent();
    x->set_destination_id(4);
    x->set_bytes(bytes);
    ASSERT_TRUE(core_->OnSamples(src, sent).ok());
  }

  // The weight of n1's next hop `via` toward n4 in class `cls` (0 if it is not one).
  double WeightN1ToN4Via(const std::string& via, int cls = 0) {
    v1::GetRoutesRequest req;
    req.set_node("n1");
    req.set_destination("n4");
    req.set_traffic_class(cls);
    absl::StatusOr<v1::GetRoutesResponse> r = core_->GetRoutes(req);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->routes_size() != 1) return -1;
    for (const v1::NextHopView& h : r->routes(0).next_hops()) {
      if (h.neighbour() == via) return h.weight();
    }
    return 0;
  }

  testing::TempDir log_dir_;
  ManualClock clock_;
  ControllerConfig config_;
  ControllerMetrics metrics_;
  std::unique_ptr<JsonLog> log_;
  std::unique_ptr<ControllerCore> core_;
};

TEST_F(CoreTest, HelloMustComeFromTheNodeItNames) {
  auto link = std::make_shared<FakeLink>();
  struct Case {
    security::SpiffeId peer;
    v1::Hello hello;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {NodeIdentity(2), Hello(1, {2}), absl::StatusCode::kPermissionDenied,
       "hello says node 1 but the client's certificate is spiffe://dar.test/node/2"},
      {security::SpiffeId::Admin(kTestDomain, "alice"), Hello(1, {2}),
       absl::StatusCode::kPermissionDenied, "not a node"},
      {security::SpiffeId::Node("other.test", "1"), Hello(1, {2}),
       absl::StatusCode::kPermissionDenied, "outside trust domain dar.test"},
      {NodeIdentity(7), Hello(7, {}), absl::StatusCode::kNotFound, "node 7 is not in"},
      {NodeIdentity(1), Hello(1, {2, 4}), absl::StatusCode::kFailedPrecondition,
       "links[1] to node 4 is not a configured link"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ControllerCore::Admission> a = core_->Admit(c.peer, c.hello, link);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), c.code) << a.status();
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(HasEvent("hello_refused", "PERMISSION_DENIED"));
  EXPECT_EQ(metrics_.streams_refused->Value(), 5);
  EXPECT_EQ(core_->ListNodes()[0].connected(), false);
}

TEST_F(CoreTest, AdmissionCarriesConfigKeysAndTablesAndReplacesAnOlderStream) {
  // Versions start from the clock, in milliseconds.
  const uint64_t first_version = static_cast<uint64_t>(clock_.UnixNanos() / 1'000'000);
  core_->RunCycle();
  auto first = std::make_shared<FakeLink>();
  absl::StatusOr<ControllerCore::Admission> a =
      core_->Admit(NodeIdentity(1), Hello(1, {2, 3}, first_version + 41), first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(a->config, nullptr);
  EXPECT_EQ(a->config->probe_interval_ms(), 100u);
  EXPECT_EQ(a->config->missed_probes(), 3u);
  EXPECT_EQ(a->config->table_stale_ms(), 3000u);
  EXPECT_EQ(a->config->forwarding_mode(), "per_flowlet");
  ASSERT_EQ(a->config->keys_size(), 1);
  EXPECT_EQ(a->config->keys(0).key_id(), 1u);
  EXPECT_EQ(a->config->keys(0).key().size(), 32u);
  EXPECT_NE(a->config->keys(0).key(), std::string(32, '\0'));
  EXPECT_TRUE(a->config->keys(0).active());
  ASSERT_EQ(a->config->nodes_size(), 4);
  EXPECT_EQ(a->config->nodes(3).overlay_address(), "10.77.0.4");
  ASSERT_NE(a->snapshot, nullptr);
  EXPECT_EQ(a->snapshot->version, first_version);
  EXPECT_EQ(a->ack_timeout, Milliseconds(1500));
  EXPECT_TRUE(core_->ListNodes()[0].connected());
  EXPECT_EQ(metrics_.agents_connected->Value(), 1);

  // Versions continue above what the agent forwards with (a little above the controller's own:
  // the clock went back and nothing was persisted).
  EXPECT_TRUE(HasEvent("table_versions_adopted", "version " + std::to_string(first_version + 41)));
  EXPECT_EQ(core_->RunCycle().version, first_version + 42);
  ASSERT_EQ(first->snapshots.size(), 1u);
  EXPECT_EQ(first->snapshots[0]->version, first_version + 42);

  auto second = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), second).ok());
  ASSERT_TRUE(first->closed.has_value());
  EXPECT_EQ(first->closed->code(), absl::StatusCode::kAborted);
  core_->Detach(1, first.get());  // the old stream ending does not disconnect the node
  EXPECT_TRUE(core_->ListNodes()[0].connected());
  core_->Detach(1, second.get());
  EXPECT_FALSE(core_->ListNodes()[0].connected());
  EXPECT_TRUE(HasEvent("agent_disconnected"));
}

TEST_F(CoreTest, AHelloClaimingAVersionFarAboveTheControllersIsRefusedAndChangesNothing) {
  const uint64_t before = core_->RunCycle().version;
  auto link = std::make_shared<FakeLink>();
  // A version near 2^64, as one that once wrapped the counter and made every agent refuse
  // every table.
  absl::StatusOr<ControllerCore::Admission> a =
      core_->Admit(NodeIdentity(1), Hello(1, {2, 3}, ~uint64_t{0} - 7), link);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("not taken"));
  EXPECT_TRUE(HasEvent("hello_refused", "installed table version 18446744073709551608"));
  EXPECT_FALSE(core_->ListNodes()[0].connected());
  // The other agents' versions go on from where they were.
  ASSERT_TRUE(
      core_->Admit(NodeIdentity(2), Hello(2, {1, 4}, before), std::make_shared<FakeLink>()).ok());
  EXPECT_EQ(core_->RunCycle().version, before + 1);
}

TEST_F(CoreTest, SamplesOnlyForOwnLinksWithSaneValues) {
  absl::Status s = core_->OnSamples(1, Samples({{2, true}, {4, true}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("samples[1] for a link to node 4"));
  s = core_->OnSamples(1, Samples({{9, true}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);

  v1::LinkSamples bad = Samples({{2, true}, {3, true}});
  bad.mutable_samples(1)->set_loss(1.5);
  s = core_->OnSamples(1, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("samples[1].loss from node 1 (link to node 3)"));
  bad.mutable_samples(1)->set_loss(0);
  bad.mutable_samples(1)->set_rtt_ms(std::nan(""));
  EXPECT_THAT(std::string(core_->OnSamples(1, bad).message()), HasSubstr("rtt_ms"));
  bad.mutable_samples(1)->set_rtt_ms(1);
  bad.mutable_samples(1)->set_queue_bytes(-1);
  EXPECT_THAT(std::string(core_->OnSamples(1, bad).message()), HasSubstr("queue_bytes"));
  EXPECT_EQ(core_->RunCycle().samples_applied, 0);  // refused messages are not applied at all

  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, true}}, 0.4)).ok());
  EXPECT_EQ(core_->RunCycle().samples_applied, 2);
  EXPECT_EQ(metrics_.samples->Value(), 2);
  for (const v1::LinkView& l : core_->ListLinks()) {
    if (l.src_name() == "n1" && l.dst_name() == "n2") {
      EXPECT_DOUBLE_EQ(l.utilisation(), 0.4);
      EXPECT_DOUBLE_EQ(l.rtt_ms(), 0.2);
      EXPECT_EQ(l.last_sample_unix_ns(), clock_.UnixNanos());
      EXPECT_GT(l.cost_latency(), 0);
      EXPECT_EQ(l.horizon_s(), 30);
    }
  }
}

// The base RTT crosses the wire exactly (rtt_min_ns) and is what the engine takes for
// propagation, not the smoothed RTT, which carries queueing.
TEST_F(CoreTest, TheAgentsBaseRttIsTheEngines) {
  v1::LinkSamples s = Samples({{2, true}, {3, true}});
  s.mutable_samples(0)->set_rtt_min_ns(123'457);
  ASSERT_TRUE(core_->OnSamples(1, s).ok());
  core_->RunCycle();
  int checked = 0;
  for (const v1::LinkView& l : core_->ListLinks()) {
    if (l.src_name() != "n1") continue;
    EXPECT_EQ(l.base_rtt_ns(), l.dst_name() == "n2" ? 123'457 : 200'000) << l.dst_name();
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST_F(CoreTest, LinkIsDownWhenBothEndsSaySoNotWhenOneDoes) {
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));
  ReportAll({{1, 2}});  // n1 says n1-n2 is down, n2 says it is up
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));
  EXPECT_FALSE(HasEvent("link_down"));

  ReportAll({{1, 2}, {2, 1}});
  const CycleReport r = core_->RunCycle();
  EXPECT_EQ(r.links_down, 2);
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::ElementsAre("n3"));
  EXPECT_THAT(NextHops("n2", "n1", 1), ::testing::ElementsAre("n4"));
  EXPECT_TRUE(HasEvent("link_down", "n1-n2: n1 says down, n2 says down"));
  EXPECT_EQ(metrics_.links_down->Value(), 2);

  ReportAll();
  core_->RunCycle();
  EXPECT_TRUE(HasEvent("link_up", "n1-n2"));
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));
}

TEST_F(CoreTest, AFloodingNodeLosesItsOwnSamplesNotOthers) {
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), std::make_shared<FakeLink>()).ok());
  core_->RunCycle();
  // n1 (two links) floods between two cycles: its share is 64 a link end and 64 more, 192.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, true}}, 0.5)).ok());
  }
  EXPECT_EQ(metrics_.samples_dropped->Value(), 2000 - 192);
  // The others' samples of the same cycle are all kept, whatever n1 sent.
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(3, Samples({{1, true}, {4, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(4, Samples({{2, true}, {3, true}})).ok());
  EXPECT_EQ(metrics_.samples_dropped->Value(), 2000 - 192);
  const std::vector<v1::NodeView> nodes = core_->ListNodes();
  EXPECT_EQ(nodes[0].samples_dropped(), 2000u - 192);
  EXPECT_TRUE(HasEvent("samples_dropped", "share (192 samples a cycle)"));
  // A cycle starts every share afresh.
  core_->RunCycle();
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, true}})).ok());
  EXPECT_EQ(metrics_.samples_dropped->Value(), 2000 - 192);
  // Reports of what it sent have a share too: 64 a destination, 256 in the diamond.
  v1::LinkSamples reports;
  for (uint32_t d : {2, 3, 4}) {
    v1::SentBytes* x = reports.add_sent();
    x->set_destination_id(d);
    x->set_bytes(1000);
  }
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(core_->OnSamples(1, reports).ok());
  EXPECT_EQ(core_->ListNodes()[0].samples_dropped(), 2000u - 192 + 300 - 256);
}

TEST_F(CoreTest, LinkIsDownWhenSamplesStop) {
  ReportAll();
  core_->RunCycle();
  // n3 goes silent and n1 and n4 lose it: n1-n3 and n3-n4 have one end saying down and one
  // silent.
  clock_.Advance(Milliseconds(200));
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, false}})).ok());
  ASSERT_TRUE(core_->OnSamples(4, Samples({{2, true}, {3, false}})).ok());
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, true}})).ok());
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));  // n3 fresh
  clock_.Advance(Milliseconds(150));  // n3's samples are 350 ms old: past the 300 ms timeout
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::ElementsAre("n2"));
  EXPECT_TRUE(HasEvent("link_down", "n1 says down, n3 silent for 350 ms"));
}

// A (re)started controller keeps links up until an end speaks: agents reconnect one by one,
// and the first ones must not get tables that route around the others. Once heard from, ends
// that go silent take their links down.
TEST_F(CoreTest, LinksStayUpUntilHeardFromAndGoDownWhenTheirEndsFallSilent) {
  core_->RunCycle();
  clock_.Advance(Seconds(5));
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  EXPECT_EQ(NextHops("n1", "n4").size(), 2u);
  // Only n1 and n2 are back: their links are up by their word, n3-n4 by nobody's.
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, true}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  // An end that says down is believed when the other end is silent or unheard.
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, false}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 2);
  ReportAll();
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  // Everyone falls silent: every link goes down.
  clock_.Advance(Milliseconds(301));
  EXPECT_EQ(core_->RunCycle().links_down, 8);
  EXPECT_TRUE(NextHops("n1", "n4").empty());
}

// A controller behind on its samples hears nothing from agents whose streams are open: a node
// silent on every link is taken to be behind, and its links keep their state for up to ten
// sample timeouts (3 s). A link silent at both ends while its nodes report their other links,
// an agent whose stream ended, and the end of the grace take links down.
TEST_F(CoreTest, ANodeBehindOnItsSamplesTakesNoLinkDown) {
  std::vector<std::shared_ptr<FakeLink>> links;
  for (uint32_t n = 1; n <= 4; ++n) {
    links.push_back(std::make_shared<FakeLink>());
    const std::vector<uint32_t> nbs =
        n == 1 || n == 4 ? std::vector<uint32_t>{2, 3} : std::vector<uint32_t>{1, 4};
    ASSERT_TRUE(core_->Admit(NodeIdentity(n), Hello(n, nbs), links.back()).ok());
  }
  ReportAll();
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  clock_.Advance(Seconds(2));
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  EXPECT_EQ(NextHops("n1", "n4").size(), 2u);
  EXPECT_FALSE(HasEvent("link_down"));
  // A fresh word still counts at once: n1 says n1-n2 is down, n2 is behind.
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, false}, {3, true}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 2);
  EXPECT_TRUE(HasEvent("link_down", "n1 says down, n2 silent for 2000 ms (its node behind)"));
  // n3's and n4's streams end: n3-n4 has no node behind at either end and goes down; n1-n3
  // and n2-n4 keep n2's (n1 is fresh and says up).
  core_->Detach(3, links[2].get());
  core_->Detach(4, links[3].get());
  clock_.Advance(Milliseconds(100));
  EXPECT_EQ(core_->RunCycle().links_down, 4);
  EXPECT_TRUE(HasEvent("link_down", "n3-n4: n3 silent for 2100 ms, n4 silent for 2100 ms"));
  // The grace ends 3 s after n2's last report: n2-n4 goes down; n1 still says n1-n3 is up.
  clock_.Advance(Milliseconds(850));
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, false}, {3, true}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 4);
  clock_.Advance(Milliseconds(100));
  ASSERT_TRUE(core_->OnSamples(1, Samples({{2, false}, {3, true}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 6);
  EXPECT_TRUE(HasEvent("link_down", "n2 silent for 3050 ms"));
}

// A replica that leads again has heard nothing of this term's agents yet: links it last knew
// up stay up until their ends speak, however long it was away.
TEST_F(CoreTest, AReplicaThatLeadsAgainStartsWithEveryEndUnheard) {
  ReportAll();
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  core_->StepDown("a test");
  clock_.Advance(Seconds(5));
  ASSERT_TRUE(core_->Lead(2).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  EXPECT_FALSE(HasEvent("link_down"));
  // Heard from again, its ends count as before.
  ReportAll();
  core_->RunCycle();
  clock_.Advance(Milliseconds(301));
  EXPECT_EQ(core_->RunCycle().links_down, 8);
}

// A node that reports its other links but not this one is not behind: a link its agent no
// longer reports (its configuration lost it) goes down by silence as before.
TEST_F(CoreTest, ALinkSilentAtBothEndsOfNodesHeardOtherwiseGoesDown) {
  for (uint32_t n : {1u, 2u}) {
    ASSERT_TRUE(
        core_
            ->Admit(NodeIdentity(n),
                    Hello(n, n == 1 ? std::vector<uint32_t>{2, 3} : std::vector<uint32_t>{1, 4}),
                    std::make_shared<FakeLink>())
            .ok());
  }
  ReportAll();
  EXPECT_EQ(core_->RunCycle().links_down, 0);
  clock_.Advance(Milliseconds(350));
  ASSERT_TRUE(core_->OnSamples(1, Samples({{3, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(2, Samples({{4, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(3, Samples({{1, true}, {4, true}})).ok());
  ASSERT_TRUE(core_->OnSamples(4, Samples({{2, true}, {3, true}})).ok());
  EXPECT_EQ(core_->RunCycle().links_down, 2);
  EXPECT_TRUE(HasEvent("link_down", "n1-n2: n1 silent for 350 ms, n2 silent for 350 ms"));
}

TEST_F(CoreTest, DrainMovesRoutesOffTheLink) {
  core_->RunCycle();
  absl::StatusOr<bool> changed = core_->Drain("n2", "1", true);  // names or ids
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_FALSE(*core_->Drain("n1", "n2", true));
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::ElementsAre("n3"));
  EXPECT_THAT(NextHops("n2", "n1"), ::testing::ElementsAre("n4"));
  int drained = 0;
  for (const v1::LinkView& l : core_->ListLinks()) {
    drained += l.drained();
    if (l.drained()) {
      EXPECT_EQ(l.cost_latency(), kUnusable);
    }
    EXPECT_TRUE(l.up());
  }
  EXPECT_EQ(drained, 2);
  EXPECT_TRUE(HasEvent("link_drained", "n1-n2"));
  // Why: the drained link says so, and n1's routes say why they avoid it.
  for (const v1::LinkView& l : core_->ListLinks()) {
    if (l.drained()) {
      EXPECT_THAT(l.why(), ::testing::StartsWith("drained")) << l.ShortDebugString();
      EXPECT_EQ(l.share_latency(), 0) << l.ShortDebugString();
    }
  }
  v1::ExplainRouteRequest why;
  why.set_node("n1");
  why.set_destination("4");  // names or ids
  absl::StatusOr<v1::RouteExplanation> x = core_->ExplainRoute(why);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_EQ(x->next_hops_size(), 1);
  EXPECT_EQ(x->next_hops(0).neighbour(), "n3");
  EXPECT_EQ(x->next_hops(0).weight(), 1);
  bool said = false;
  for (const std::string& note : x->notes()) {
    said |= note.find("n1->n2 is not used: drained") != std::string::npos;
  }
  EXPECT_TRUE(said) << x->ShortDebugString();

  EXPECT_TRUE(*core_->Drain("n1", "n2", false));
  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));
  EXPECT_TRUE(HasEvent("link_undrained"));

  EXPECT_EQ(core_->Drain("n1", "n4", true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->Drain("n1", "x9", true).status().code(), absl::StatusCode::kNotFound);
}

// `decision: marginal`: the agents report what they send, the controller minimises DAR's
// objective for it. n1 sends 800 Mb/s to n4 while n2-n4 carries 100 Mb/s: the tables split
// n1's traffic by what each branch can carry (about 9% via n2, where an even split would load
// n2-n4 four times over), the ranks make every next hop downhill, and sent-bytes entries the
// controller cannot use are left out.
TEST_F(CoreTest, MarginalDecisionSplitsByTheDemandAgentsReport) {
  config_.policy.marginal = true;
  for (ControllerLinkConfig& l : config_.links) {
    if (l.a == "n2" && l.b == "n4") l.capacity = DataRate::Mbps(100);
  }
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  const auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), link).ok());
  for (int cycle = 0; cycle < 10; ++cycle) {
    ReportAll();
    ReportSentToN4(1, 10'000'000);  // 800 Mb/s over the 100 ms cycle
    clock_.Advance(Milliseconds(100));
    core_->RunCycle();
  }
  EXPECT_NEAR(WeightN1ToN4Via("n2", 1), 0.09, 0.03);

  // What the agent is sent: every next hop strictly below the node's potential.
  std::shared_ptr<const RouteSnapshot> snapshot;
  {
    std::lock_guard<std::mutex> lock(link->mu_);
    ASSERT_FALSE(link->snapshots.empty());
    snapshot = link->snapshots.back();
  }
  v1::RouteTable table;
  BuildRouteTable(*snapshot, 0, nullptr, table);
  ASSERT_GT(table.routes_size(), 0);
  for (const v1::Route& route : table.routes()) {
    for (const v1::NextHop& h : route.next_hops()) {
      EXPECT_LT(h.potential(), route.potential());
    }
  }

  // Entries the controller cannot use are left out and said once; the message still counts.
  v1::LinkSamples bad = Samples({{2, true}, {3, true}});
  bad.add_sent()->set_destination_id(9);
  bad.add_sent()->set_destination_id(1);
  bad.add_sent()->set_destination_id(4);
  bad.mutable_sent(2)->set_bytes(uint64_t{1} << 63);
  EXPECT_TRUE(core_->OnSamples(1, bad).ok());
  EXPECT_TRUE(core_->OnSamples(1, bad).ok());
  EXPECT_TRUE(HasEvent("sent_ignored", "destination 9: not a node of the overlay"));
  EXPECT_TRUE(HasEvent("sent_ignored", "destination 1: the node itself"));
  EXPECT_TRUE(HasEvent("sent_ignored", "bytes in one report"));
  int events = 0;
  for (const v1::Event& e : core_->ListEvents(0)) events += e.kind() == "sent_ignored";
  EXPECT_EQ(events, 3);
  core_->RunCycle();  // and the layer goes on
}

// A link slower than configured (a shaper the configuration does not know of): n2-n4 is
// configured at 1 Gb/s but delivers 100 Mb/s while its queue stands. The marginal layer
// routes at what the link is measured to deliver, as if it had been configured so.
TEST_F(CoreTest, MarginalDecisionRoutesAtWhatALinkDelivers) {
  config_.policy.marginal = true;
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  const auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), link).ok());
  for (int cycle = 0; cycle < 12; ++cycle) {
    ASSERT_TRUE(core_->OnSamples(1, Samples({{2, true}, {3, true}})).ok());
    ASSERT_TRUE(core_->OnSamples(3, Samples({{1, true}, {4, true}})).ok());
    ASSERT_TRUE(core_->OnSamples(4, Samples({{2, true}, {3, true}})).ok());
    v1::LinkSamples shaped = Samples({{1, true}, {4, true}});
    v1::LinkSample* to_n4 = shaped.mutable_samples(1);
    to_n4->set_rtt_ms(0.2 + 4.5 * std::min(cycle + 1, 10));  // a standing queue
    to_n4->set_tx_bps(100e6);
    to_n4->set_utilisation(0.1);
    to_n4->set_loss(0.05);
    ASSERT_TRUE(core_->OnSamples(2, shaped).ok());
    ReportSentToN4(1, 10'000'000);  // 800 Mb/s over the 100 ms cycle
    clock_.Advance(Milliseconds(100));
    core_->RunCycle();
  }
  const double via_n2 = WeightN1ToN4Via("n2");
  EXPECT_GE(via_n2, 0);
  EXPECT_LT(via_n2, 0.15);  // an even split would send 400 Mb/s into 100

  // Why, as an operator sees it: n2->n4 is slow, counted at what it delivers until a time to
  // come (its estimate returns toward 1 Gb/s over capacity_recovery_periods); the demand puts
  // load on n1's branches, and the paths n1 uses cost alike.
  const int64_t now = clock_.UnixNanos();
  int slow = 0;
  for (const v1::LinkView& l : core_->ListLinks()) {
    if (l.src_name() == "n2" && l.dst_name() == "n4") {
      EXPECT_TRUE(l.slow()) << l.ShortDebugString();
      EXPECT_LT(l.delivery_capacity_bps(), 500'000'000u) << l.ShortDebugString();
      EXPECT_GT(l.slow_until_unix_ns(), now + 1'000'000'000) << l.ShortDebugString();
      EXPECT_THAT(l.why(), ::testing::StartsWith("slow: delivers")) << l.ShortDebugString();
      EXPECT_GT(l.queueing_ms(), 1) << l.ShortDebugString();
    }
    if (l.src_name() == "n1" && l.dst_name() == "n3") {
      EXPECT_GT(l.planned_utilisation(), 0.5) << l.ShortDebugString();
      EXPECT_GT(l.marginal_cost(), 0) << l.ShortDebugString();
    }
    slow += l.slow();
  }
  EXPECT_EQ(slow, 1);
  v1::ExplainRouteRequest why;
  why.set_node("n1");
  why.set_destination("n4");
  absl::StatusOr<v1::RouteExplanation> x = core_->ExplainRoute(why);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->decision(), "marginal");
  EXPECT_NEAR(x->demand_bps(), 800e6, 80e6);
  double weights = 0;
  for (const v1::NextHopExplanation& h : x->next_hops()) {
    weights += h.weight();
    EXPECT_DOUBLE_EQ(h.path_cost(), h.link_cost() + h.neighbour_distance());
    if (h.neighbour() == "n2") {
      EXPECT_EQ(h.bottleneck(), "n2->n4");
    }
  }
  EXPECT_NEAR(weights, 1, 1e-9);

  // What cannot be explained is refused with the reason.
  why.set_destination("n9");
  EXPECT_EQ(core_->ExplainRoute(why).status().code(), absl::StatusCode::kNotFound);
  why.set_destination("n1");
  EXPECT_EQ(core_->ExplainRoute(why).status().code(), absl::StatusCode::kInvalidArgument);
  why.set_destination("n4");
  why.set_traffic_class(2);
  EXPECT_EQ(core_->ExplainRoute(why).status().code(), absl::StatusCode::kInvalidArgument);
}

// A reload may switch the decision layer: to diffusion, whose first cycle recomputes every
// destination, and back, which starts the marginal layer afresh from its demand. Versions
// keep rising and the split follows each layer. While the marginal layer decides, the link
// costs the admin view shows stay current (the diffusion engines idle, the costs do not).
TEST_F(CoreTest, ReloadSwitchesTheDecisionLayer) {
  for (ControllerLinkConfig& l : config_.links) {
    if (l.a == "n2" && l.b == "n4") l.capacity = DataRate::Mbps(100);
  }
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(config_.policy.marginal);  // the default
  const auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), link).ok());
  uint64_t version = 0;
  const auto cycles = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ReportAll();
      ReportSentToN4(1, 10'000'000);  // 800 Mb/s over the 100 ms cycle
      clock_.Advance(Milliseconds(100));
      const CycleReport r = core_->RunCycle();
      EXPECT_GT(r.version, version);
      version = r.version;
    }
  };
  cycles(10);
  EXPECT_NEAR(WeightN1ToN4Via("n2"), 0.09, 0.03);  // the demand's optimum
  const std::vector<v1::LinkView> links = core_->ListLinks();
  ASSERT_FALSE(links.empty());
  for (const v1::LinkView& l : links) {
    EXPECT_TRUE(std::isfinite(l.cost_latency())) << l.src_name() << "-" << l.dst_name();
    EXPECT_GT(l.cost_latency(), 0) << l.src_name() << "-" << l.dst_name();
  }

  ControllerConfig diffusion = config_;
  diffusion.policy.marginal = false;
  ASSERT_TRUE(core_->Reload(diffusion).ok());
  ReportAll();
  clock_.Advance(Milliseconds(100));
  EXPECT_TRUE(core_->RunCycle().full);
  // The diffusion engine splits by link costs, not by the demand: n2's share is not the 9%.
  const double diffusion_share = WeightN1ToN4Via("n2");
  EXPECT_GT(diffusion_share, 0.15);

  ASSERT_TRUE(core_->Reload(config_).ok());
  cycles(10);
  EXPECT_NEAR(WeightN1ToN4Via("n2"), 0.09, 0.03);
}

TEST_F(CoreTest, PolicyIsValidatedAndAppliedAndTellsAgentsOfANewMode) {
  config_.policy.marginal = false;  // the diffusion engine, whose cycles can be full
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2}), link).ok());
  v1::PolicySettings p = core_->GetPolicy();
  EXPECT_EQ(p.temperature(), 0.5);
  EXPECT_EQ(p.cycle_ms(), 100u);
  EXPECT_EQ(p.forwarding_mode(), "per_flowlet");
  p.set_temperature(-1);
  EXPECT_THAT(std::string(core_->SetPolicy(p).status().message()), HasSubstr("policy.temperature"));
  p.set_temperature(0);
  p.set_forwarding_mode("sideways");
  EXPECT_THAT(std::string(core_->SetPolicy(p).status().message()),
              HasSubstr("policy.forwarding_mode"));
  p.set_forwarding_mode("per_packet");
  p.set_cycle_ms(0);  // keep
  p.set_bulk_utilisation_weight(2);
  absl::StatusOr<v1::PolicySettings> set = core_->SetPolicy(p);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->temperature(), 0);
  EXPECT_EQ(set->cycle_ms(), 100u);
  EXPECT_EQ(set->bulk_utilisation_weight(), 2);
  ASSERT_EQ(link->configs.size(), 1u);
  EXPECT_EQ(link->configs[0]->forwarding_mode(), "per_packet");
  EXPECT_TRUE(core_->RunCycle().full);  // a new policy recomputes everything
  EXPECT_TRUE(HasEvent("policy_changed"));
}

TEST_F(CoreTest, ReloadAppliesANewOverlayAndKeepsWhatNeedsARestart) {
  core_->RunCycle();
  auto n4 = std::make_shared<FakeLink>();
  auto n1 = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(4), Hello(4, {2, 3}), n4).ok());
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), n1).ok());
  ASSERT_TRUE(*core_->Drain("n1", "n2", true));
  ASSERT_TRUE(*core_->Drain("n3", "n4", true));

  ControllerConfig next = config_;
  next.nodes.pop_back();  // n4 goes, and its links
  next.links.pop_back();
  next.links.pop_back();
  next.nodes.push_back({5, "n5", "10.77.0.5"});
  next.links.push_back({"n3", "n5", DataRate::Gbps(1), std::nullopt});
  next.listen = "127.0.0.1:1";
  next.probe_interval = Milliseconds(50);
  ASSERT_TRUE(core_->Reload(next).ok());

  ASSERT_TRUE(n4->closed.has_value());
  EXPECT_EQ(n4->closed->code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(n1->configs.size(), 1u);
  EXPECT_EQ(n1->configs[0]->probe_interval_ms(), 50u);
  EXPECT_EQ(n1->configs[0]->nodes_size(), 4);
  EXPECT_EQ(core_->config().listen, config_.listen);
  EXPECT_TRUE(HasEvent("config_restart_needed", "listen"));
  EXPECT_TRUE(HasEvent("config_reloaded"));
  EXPECT_EQ(core_->ListNodes().size(), 4u);

  core_->RunCycle();
  EXPECT_THAT(NextHops("n1", "n5"), ::testing::ElementsAre("n3"));  // n1-n2 still drained
  EXPECT_TRUE(NextHops("n2", "n5").empty());                        // its only link is drained
  int drained = 0;
  for (const v1::LinkView& l : core_->ListLinks()) drained += l.drained();
  EXPECT_EQ(drained, 2);  // the n3-n4 drain went with its link
  // The removed node's samples are refused now.
  EXPECT_EQ(core_->OnSamples(4, Samples({{2, true}})).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A rotation step is pushed to every connected agent as a new config with the new key set.
TEST_F(CoreTest, KeyRotationIsPushedToEveryAgent) {
  auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(1), Hello(1, {2, 3}), link).ok());
  const v1::KeyRingView before = core_->GetKeys();
  ASSERT_EQ(before.keys_size(), 1);
  EXPECT_EQ(before.phase(), "steady");
  absl::StatusOr<v1::KeyRingView> r = core_->RotateKeys();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->rotation_started());
  EXPECT_EQ(r->phase(), "announced");
  ASSERT_EQ(r->keys_size(), 2);
  {
    std::lock_guard<std::mutex> lock(link->mu_);
    ASSERT_FALSE(link->configs.empty());
    const v1::AgentConfig& c = *link->configs.back();
    ASSERT_EQ(c.keys_size(), 2);
    EXPECT_TRUE(c.keys(0).active());  // the old key still seals
    EXPECT_FALSE(c.keys(1).active());
  }
  EXPECT_FALSE(core_->RotateKeys()->rotation_started());  // one at a time
  EXPECT_TRUE(HasEvent("keys", "rotation requested: announced"));
  // The next step is due one rollout later (5 s by default), taken by a cycle.
  const size_t pushed = link->configs.size();
  clock_.Advance(Seconds(5));
  core_->RunCycle();
  EXPECT_EQ(core_->GetKeys().phase(), "activated");
  std::lock_guard<std::mutex> lock(link->mu_);
  ASSERT_EQ(link->configs.size(), pushed + 1);
  EXPECT_TRUE(link->configs.back()->keys(1).active());
}

// Two replicas over one shared store (as etcd holds it for them): only the one that leads admits
// agents and decides; the one that takes over reads the drains and the key ring its predecessor
// left, and numbers its tables above all of the predecessor's; the deposed one closes its
// streams and offers nothing more.
TEST_F(CoreTest, ReplicasActOnlyWhileLeadingAndTakeOverTheSharedState) {
  testing::TempDir dir;
  const auto store = std::make_shared<DirectoryStateStore>(dir.File("shared"));
  std::atomic<bool> a_leads{false}, b_leads{false};
  ControllerCore a(config_, clock_, *log_, metrics_, false, std::nullopt, std::nullopt, store);
  ControllerCore b(config_, clock_, *log_, metrics_, false, std::nullopt, std::nullopt, store);
  a.SetReplica({[&] { return a_leads.load(); }, [] { return std::string("10.0.0.1:50051"); }});
  b.SetReplica({[&] { return b_leads.load(); }, [] { return std::string("10.0.0.1:50051"); }});

  a_leads = true;
  ASSERT_TRUE(a.Lead(1).ok());
  auto link_a = std::make_shared<FakeLink>();
  const absl::StatusOr<ControllerCore::Admission> admitted =
      a.Admit(NodeIdentity(1), Hello(1, {2, 3}), link_a);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  const absl::StatusOr<ControllerCore::Admission> refused =
      b.Admit(NodeIdentity(1), Hello(1, {2, 3}), std::make_shared<FakeLink>());
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the leading replica is at 10.0.0.1:50051"));
  EXPECT_EQ(b.RunCycle().version, 0u);
  EXPECT_EQ(b.HealthProblem(), "");
  EXPECT_THAT(b.ReadinessProblem(), HasSubstr("does not lead"));

  ASSERT_TRUE(*a.Drain("n1", "n2", true));
  const CycleReport first = a.RunCycle();
  EXPECT_EQ(first.version, (uint64_t{1} << TableVersions::kTermShift) + 1);
  EXPECT_EQ(TableVersions::TermOf(first.version), 1u);
  absl::StatusOr<std::optional<std::string>> ring = store->Read("overlay-keys.json");
  ASSERT_TRUE(ring.ok() && ring->has_value());

  // A loses the lead; B takes it.
  a_leads = false;
  a.StepDown("the lease was not renewed in time");
  {
    std::lock_guard<std::mutex> lock(link_a->mu_);
    ASSERT_TRUE(link_a->closed.has_value());
    EXPECT_TRUE(absl::IsUnavailable(*link_a->closed)) << *link_a->closed;
  }
  b_leads = true;
  ASSERT_TRUE(b.Lead(2).ok());
  // The same ring, not a new one (a new one would make every agent's keys change at once).
  EXPECT_EQ(**store->Read("overlay-keys.json"), **ring);
  const CycleReport second = b.RunCycle();
  EXPECT_GT(second.version, first.version);
  EXPECT_EQ(TableVersions::TermOf(second.version), 2u);
  // The drain made on A holds on B.
  std::vector<std::string> hops;
  {
    v1::GetRoutesRequest req;
    req.set_node("n1");
    req.set_destination("n2");
    absl::StatusOr<v1::GetRoutesResponse> r = b.GetRoutes(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->routes_size(), 1);
    for (const v1::NextHopView& h : r->routes(0).next_hops()) hops.push_back(h.neighbour());
  }
  EXPECT_EQ(hops, std::vector<std::string>{"n3"});
  // A, deposed, decides nothing and offers nothing.
  const size_t offered = link_a->snapshots.size();
  EXPECT_EQ(a.RunCycle().version, 0u);
  EXPECT_EQ(link_a->snapshots.size(), offered);
  // A node whose table is of term 2 is not B's to claim back: B's next versions stay above.
  const absl::StatusOr<ControllerCore::Admission> again =
      b.Admit(NodeIdentity(1), Hello(1, {2, 3}, second.version), std::make_shared<FakeLink>());
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->config->keys_size(), admitted->config->keys_size());
  EXPECT_EQ(again->config->keys(0).key(), admitted->config->keys(0).key());
  EXPECT_GT(b.RunCycle().version, second.version);
}

// Drains and the policy set at run time survive a restart (a new core on the same state dir);
// a reload drops the policy override but keeps the drains.
TEST_F(CoreTest, DrainsAndPolicySurviveARestart) {
  testing::TempDir state;
  config_.state_dir = state.File("ctl");
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(core_->RestoreOperatorState().ok());  // nothing yet
  ASSERT_TRUE(*core_->Drain("n1", "n2", true));
  v1::PolicySettings p = core_->GetPolicy();
  p.set_temperature(0.125);
  ASSERT_TRUE(core_->SetPolicy(p).ok());

  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(core_->RestoreOperatorState().ok());
  EXPECT_DOUBLE_EQ(core_->GetPolicy().temperature(), 0.125);
  EXPECT_TRUE(HasEvent("link_drained", "n1-n2"));
  core_->RunCycle();
  EXPECT_EQ(NextHops("n1", "n2"), std::vector<std::string>{"n3"});

  ASSERT_TRUE(core_->Reload(config_).ok());
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(core_->RestoreOperatorState().ok());
  EXPECT_DOUBLE_EQ(core_->GetPolicy().temperature(), config_.policy.routes.diffusion.temperature);
  EXPECT_TRUE(HasEvent("link_drained", "n1-n2"));

  // A file that is not ours is refused, naming it, and left alone.
  const std::string file = config_.state_dir + "/operator.json";
  std::ofstream(file) << "{\"drained\": 3}";
  const absl::Status bad = core_->RestoreOperatorState();
  EXPECT_THAT(std::string(bad.message()), HasSubstr(file));
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{\"drained\": 3}");
}

TEST_F(CoreTest, AcksAreRecorded) {
  auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(2), Hello(2, {1, 4}), link).ok());
  v1::TableAck ack;
  ack.set_version(7);
  ack.set_accepted(true);
  core_->OnAck(2, ack, AckOutcome::kAccepted);
  ack.set_version(8);
  ack.set_accepted(false);
  ack.set_reason("loop toward n4");
  core_->OnAck(2, ack, AckOutcome::kRefused);
  const v1::NodeView v = core_->ListNodes()[1];
  EXPECT_EQ(v.acked_version(), 7u);
  EXPECT_EQ(v.refused_tables(), 1u);
  EXPECT_EQ(v.last_seen_unix_ns(), clock_.UnixNanos());
  EXPECT_TRUE(HasEvent("table_refused", "version 8: loop toward n4"));
  EXPECT_EQ(metrics_.tables_refused->Value(), 1);
}

// A link end newly reported down asks for a cycle at once; an end that stays down, or comes
// up, does not.
TEST_F(CoreTest, ALinkEndNewlyReportedDownAsksForACycleAtOnce) {
  int requests = 0;
  core_->SetEarlyCycleRequest([&] { ++requests; });
  ReportAll();  // every end up: nothing urgent
  EXPECT_EQ(requests, 0);
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, false}})).ok());
  EXPECT_EQ(requests, 1);
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, false}})).ok());  // still down
  EXPECT_EQ(requests, 1);
  ASSERT_TRUE(core_->OnSamples(4, Samples({{2, false}, {3, true}})).ok());  // the other end
  EXPECT_EQ(requests, 2);
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, true}})).ok());  // back up
  EXPECT_EQ(requests, 2);
  ASSERT_TRUE(core_->OnSamples(2, Samples({{1, true}, {4, false}})).ok());  // down again
  EXPECT_EQ(requests, 3);
  // A link end whose first word to a controller is "down" (as after a controller restart)
  // asks too.
  ControllerCore fresh(config_, clock_, *log_, metrics_);
  int fresh_requests = 0;
  fresh.SetEarlyCycleRequest([&] { ++fresh_requests; });
  ASSERT_TRUE(fresh.OnSamples(3, Samples({{1, false}, {4, true}})).ok());
  EXPECT_EQ(fresh_requests, 1);
}

// Which table an agent forwards with, from its hello and its TableStatus messages: the node
// view shows it, and each new fallback to static is one event.
TEST_F(CoreTest, AgentFallbacksToStaticAreShownAndEachIsAnEvent) {
  const auto count = [&](const std::string& kind) {
    int n = 0;
    for (const v1::Event& e : core_->ListEvents(0)) n += e.kind() == kind && e.node() == "n2";
    return n;
  };
  // A hello from an agent that fell back while it could not reach the controller, 2 s ago.
  v1::Hello hello = Hello(2, {1, 4}, 9);
  hello.mutable_table_status()->set_static_table(true);
  hello.mutable_table_status()->set_fallbacks(1);
  hello.mutable_table_status()->set_last_fallback_unix_ns(clock_.UnixNanos() - 2'000'000'000);
  auto link = std::make_shared<FakeLink>();
  ASSERT_TRUE(core_->Admit(NodeIdentity(2), hello, link).ok());
  v1::NodeView v = core_->ListNodes()[1];
  EXPECT_TRUE(v.static_table());
  EXPECT_EQ(v.fallbacks(), 1u);
  EXPECT_EQ(count("fallback"), 1);
  EXPECT_TRUE(HasEvent("fallback", "went stale 2.0 s ago"));
  EXPECT_TRUE(HasEvent("fallback", "still does (1 fallbacks"));

  // The same status again is no new event; back on a controller table is one.
  core_->OnTableStatus(2, hello.table_status());
  EXPECT_EQ(count("fallback"), 1);
  v1::TableStatus status = hello.table_status();
  status.set_static_table(false);
  core_->OnTableStatus(2, status);
  EXPECT_EQ(count("fallback_recovered"), 1);
  v = core_->ListNodes()[1];
  EXPECT_FALSE(v.static_table());
  EXPECT_EQ(v.fallbacks(), 1u);

  // A second fallback, heard of after it ended: one event, none for a recovery.
  clock_.Advance(Seconds(5));
  status.set_fallbacks(2);
  status.set_last_fallback_unix_ns(clock_.UnixNanos() - 500'000'000);
  core_->OnTableStatus(2, status);
  EXPECT_EQ(count("fallback"), 2);
  EXPECT_EQ(count("fallback_recovered"), 1);
  EXPECT_TRUE(HasEvent("fallback", "back on a controller table (2 fallbacks"));
  EXPECT_EQ(core_->ListNodes()[1].fallbacks(), 2u);

  // An agent that starts on its static table (no table yet) and takes one made no fallback.
  auto link3 = std::make_shared<FakeLink>();
  v1::Hello fresh = Hello(3, {1, 4});
  fresh.mutable_table_status()->set_static_table(true);
  ASSERT_TRUE(core_->Admit(NodeIdentity(3), fresh, link3).ok());
  core_->OnTableStatus(3, v1::TableStatus());
  for (const v1::Event& e : core_->ListEvents(0)) {
    EXPECT_FALSE(e.node() == "n3" && e.kind().starts_with("fallback")) << e.ShortDebugString();
  }
}

// A fallback heard of before a restart is not an event again when the agent's hello repeats
// it to the restarted controller; a newer one is.
TEST_F(CoreTest, AFallbackHeardOfIsNotAnEventAgainAfterARestart) {
  testing::TempDir state;
  config_.state_dir = state.File("ctl");
  const auto fallbacks = [&] {
    int n = 0;
    for (const v1::Event& e : core_->ListEvents(0)) n += e.kind() == "fallback";
    return n;
  };
  const auto hello = [&](int64_t fallback_at) {
    v1::Hello h = Hello(2, {1, 4});
    h.mutable_table_status()->set_fallbacks(1);
    h.mutable_table_status()->set_last_fallback_unix_ns(fallback_at);
    return h;
  };
  const int64_t first = clock_.UnixNanos() - 1'000'000'000;
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(core_->RestoreOperatorState().ok());
  ASSERT_TRUE(core_->Admit(NodeIdentity(2), hello(first), std::make_shared<FakeLink>()).ok());
  EXPECT_EQ(fallbacks(), 1);

  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_TRUE(core_->RestoreOperatorState().ok());
  ASSERT_TRUE(core_->Admit(NodeIdentity(2), hello(first), std::make_shared<FakeLink>()).ok());
  EXPECT_EQ(fallbacks(), 0);
  ASSERT_TRUE(core_->Admit(NodeIdentity(2), hello(first + 1), std::make_shared<FakeLink>()).ok());
  EXPECT_EQ(fallbacks(), 1);

  // A malformed entry is refused, naming the file and the key.
  const std::string file = config_.state_dir + "/operator.json";
  std::ofstream(file) << R"({"format": "dar-operator-state/1", "fallbacks_heard": {"x": 1}})";
  EXPECT_THAT(std::string(core_->RestoreOperatorState().message()), HasSubstr("fallbacks_heard.x"));
}

TEST_F(CoreTest, RoutesEventsHealthAndMetrics) {
  EXPECT_EQ(core_->GetRoutes({}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(core_->HealthProblem(), HasSubstr("no decision cycle"));
  core_->RunCycle();
  EXPECT_EQ(core_->HealthProblem(), "");
  absl::StatusOr<v1::GetRoutesResponse> all = core_->GetRoutes({});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->routes_size(), 12);  // 4 nodes x 3 destinations, class 0
  v1::GetRoutesRequest bad;
  bad.set_node("n9");
  EXPECT_EQ(core_->GetRoutes(bad).status().code(), absl::StatusCode::kNotFound);
  bad.set_node("");
  bad.set_traffic_class(2);
  EXPECT_EQ(core_->GetRoutes(bad).status().code(), absl::StatusCode::kInvalidArgument);

  for (int i = 0; i < 60; ++i) core_->RecordEvent("test", "", std::to_string(i));
  const std::vector<v1::Event> newest = core_->ListEvents(3);
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest[0].detail(), "59");
  EXPECT_EQ(core_->ListEvents(0).size(), 50u);  // events_kept

  clock_.Advance(Seconds(2));
  EXPECT_THAT(core_->HealthProblem(), HasSubstr("no decision cycle for 2000 ms"));
  const std::string text = metrics_.Serialize();
  EXPECT_THAT(text, HasSubstr("dar_controller_cycle_decision_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("dar_controller_events_total{kind=\"test\"} 60"));
}

std::string GoodModel() { return std::string(DAR_SOURCE_DIR) + "/models/dar-policy.json"; }

// The lines of the core's log whose msg is `msg`.
std::vector<nlohmann::json> LogLines(const std::string& file, const std::string& msg) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("msg", "") == msg) out.push_back(std::move(j));
  }
  return out;
}

// With a model, the learned policy weighs the diamond's rows with a choice (n1 to n4 via n2 or
// n3, and back), and says so in the metrics and the admin view.
TEST_F(CoreTest, LearnedPolicyRunsAndIsCounted) {
  config_.policy.policy_model = GoodModel();
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  for (int i = 0; i < 3; ++i) {
    ReportAll();
    clock_.Advance(Milliseconds(100));
    EXPECT_EQ(core_->RunCycle().policy_error, "");
  }
  EXPECT_EQ(metrics_.policy_cycles->Value(), 3);
  EXPECT_GT(metrics_.policy_decisions->Value(), 0);
  // Each row weighed at least every 4 cycles (the controller's default): after the first
  // cycle, most of the diamond's rows keep their weights.
  EXPECT_GT(metrics_.policy_rows_held->Value(), 0);
  EXPECT_EQ(metrics_.policy_failures->Value(), 0);
  EXPECT_EQ(metrics_.policy_model_refusals->Value(), 0);
  const std::string text = metrics_.Serialize();
  EXPECT_THAT(text, HasSubstr("dar_controller_policy_active{policy=\"learned\"} 1"));
  EXPECT_THAT(text, HasSubstr("dar_controller_policy_active{policy=\"analytic\"} 0"));
  EXPECT_THAT(text, HasSubstr("dar_controller_policy_cycles_total 3"));

  const v1::LearnedPolicyView l = core_->GetPolicy().learned();
  EXPECT_EQ(l.active(), "learned");
  EXPECT_EQ(l.model_file(), GoodModel());
  EXPECT_EQ(l.precision(), "int8");
  EXPECT_EQ(l.name(), "dar-policy");
  EXPECT_EQ(l.format_version(), 1);
  EXPECT_THAT(l.checksum(), ::testing::StartsWith("fnv1a64:"));
  EXPECT_EQ(l.policy_cycles(), 3u);
  EXPECT_GT(l.policy_decisions(), 0u);
  EXPECT_EQ(l.refusal(), "");
  EXPECT_TRUE(HasEvent("policy_model_loaded", "dar-policy"));
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));

  // SetPolicy leaves the model alone and does not keep its view as a setting.
  v1::PolicySettings p = core_->GetPolicy();
  p.set_temperature(0.25);
  ASSERT_TRUE(core_->SetPolicy(p).ok());
  core_->RunCycle();
  EXPECT_EQ(metrics_.policy_cycles->Value(), 4);
}

// A model refused at start: the analytic engine runs; the refusal is logged (JSON line with
// the path and the reason), counted, an event and in the admin view.
TEST_F(CoreTest, ModelRefusedAtStartRunsTheAnalyticEngine) {
  config_.policy.policy_model = log_dir_.File("missing.json");
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ReportAll();
  const CycleReport report = core_->RunCycle();
  EXPECT_EQ(report.policy_error, "");
  EXPECT_EQ(metrics_.policy_model_refusals->Value(), 1);
  EXPECT_EQ(metrics_.policy_cycles->Value(), 0);
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr("dar_controller_policy_active{policy=\"analytic\"} 1"));
  const v1::LearnedPolicyView l = core_->GetPolicy().learned();
  EXPECT_EQ(l.active(), "analytic");
  EXPECT_EQ(l.model_file(), config_.policy.policy_model);
  EXPECT_THAT(l.refusal(), HasSubstr("test.yaml: policy.policy_model: "));
  EXPECT_THAT(l.refusal(), HasSubstr(config_.policy.policy_model));
  EXPECT_TRUE(HasEvent("policy_model_refused", "the analytic engine runs"));
  const std::vector<nlohmann::json> lines =
      LogLines(log_dir_.File("ctl.jsonl"), "learned policy model refused");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["level"], "error");
  EXPECT_EQ(lines[0]["model"], config_.policy.policy_model);
  EXPECT_THAT(lines[0]["error"].get<std::string>(), HasSubstr(config_.policy.policy_model));
}

// A model refused on reload refuses the whole reload: the running model and configuration
// stay. A reload without a model goes back to the analytic engine.
TEST_F(CoreTest, ModelRefusedOnReloadKeepsTheRunningOne) {
  config_.policy.policy_model = GoodModel();
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  core_->RunCycle();
  ASSERT_EQ(metrics_.policy_cycles->Value(), 1);

  std::ofstream(log_dir_.File("corrupt.json")) << "{\"format\": \"dar-policy\", \"format_";
  ControllerConfig next = config_;
  next.policy.policy_model = log_dir_.File("corrupt.json");
  next.probe_interval = Milliseconds(50);
  const absl::Status s = core_->Reload(next);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(log_dir_.File("corrupt.json")));
  EXPECT_EQ(metrics_.policy_model_refusals->Value(), 1);
  EXPECT_EQ(metrics_.config_reloads->Value(), 0);
  EXPECT_EQ(core_->config().probe_interval, config_.probe_interval);  // nothing applied
  EXPECT_TRUE(HasEvent("policy_model_refused", "the running configuration and policy stay"));
  v1::LearnedPolicyView l = core_->GetPolicy().learned();
  EXPECT_EQ(l.active(), "learned");
  EXPECT_EQ(l.model_file(), GoodModel());
  EXPECT_THAT(l.refusal(), HasSubstr(log_dir_.File("corrupt.json")));
  core_->RunCycle();
  EXPECT_EQ(metrics_.policy_cycles->Value(), 2);  // still the learned policy

  // A good reload replaces the view (no refusal); one without a model stops the policy.
  ASSERT_TRUE(core_->Reload(config_).ok());
  EXPECT_EQ(core_->GetPolicy().learned().refusal(), "");
  next = config_;
  next.policy.policy_model.clear();
  ASSERT_TRUE(core_->Reload(next).ok());
  core_->RunCycle();
  EXPECT_EQ(metrics_.policy_cycles->Value(), 2);
  l = core_->GetPolicy().learned();
  EXPECT_EQ(l.active(), "analytic");
  EXPECT_EQ(l.model_file(), "");
  EXPECT_EQ(l.policy_cycles(), 2u);  // since start
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr("dar_controller_policy_active{policy=\"analytic\"} 1"));
}

// A model whose logits overflow (finite parameters, infinite sums) fails every cycle: the
// tables keep the engine's weights, every failure is counted, and the log says so at most
// once a minute.
TEST_F(CoreTest, PolicyFailuresAreCountedAndLoggedOnceAMinute) {
  std::array<float, kPolicyFeatures> w;
  w.fill(3e38f);
  w[kFeatAnalyticLogit] = 0;  // the only feature that can be negative
  const learn::PolicyModel m = learn::LinearPolicyModel("overflow", w);
  ASSERT_TRUE(learn::SavePolicyModel(m, log_dir_.File("overflow.json")).ok());
  config_.policy.policy_model = log_dir_.File("overflow.json");
  config_.policy.policy_precision = learn::LearnedPolicy::Precision::kFloat;
  core_ = std::make_unique<ControllerCore>(config_, clock_, *log_, metrics_);
  ASSERT_EQ(core_->GetPolicy().learned().active(), "learned");

  const std::string msg = "learned policy failed: the cycle's tables keep the engine's weights";
  ReportAll();
  EXPECT_NE(core_->RunCycle().policy_error, "");
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(Milliseconds(100));
    ReportAll();
    core_->RunCycle();
  }
  EXPECT_EQ(metrics_.policy_failures->Value(), 6);
  EXPECT_EQ(LogLines(log_dir_.File("ctl.jsonl"), msg).size(), 1u);
  EXPECT_THAT(NextHops("n1", "n4"), ::testing::UnorderedElementsAre("n2", "n3"));
  EXPECT_NE(core_->GetPolicy().learned().last_failure(), "");

  clock_.Advance(Seconds(60));
  ReportAll();
  core_->RunCycle();
  const std::vector<nlohmann::json> lines = LogLines(log_dir_.File("ctl.jsonl"), msg);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["level"], "warn");
  EXPECT_EQ(lines[1]["failures"], 6);  // the 5 not logged, and this one
  EXPECT_EQ(metrics_.policy_failures->Value(), 7);
}

}  // namespace
}  // namespace dar::control
