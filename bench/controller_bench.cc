// The controller under the load of a real deployment, in one process: a 200-node overlay
// (a ring plus random chords, degree ~6), one agent stream per node over mutual TLS 1.3 on
// loopback, every agent reporting all its links at 10 Hz with noisy values and acking every
// table. The controller runs its own cycle thread (100 ms). Reports the cycle's decision time
// (median, p99, max, from the controller's JSON log) and what gRPC carried.
//
// Every agent also reports the bytes its node sent toward `--destinations` random others
// (each pair's rate drifting around 1-20 Mbit/s), which the marginal decision layer
// (`--decision marginal`) minimises its objective for; `--cycle_iterations N` caps its
// iterations per cycle (one reference round), `--max_link_scans N` its work per cycle.
//
//   controller_bench [--nodes 200] [--degree 6] [--seconds 10] [--rate_hz 10] [--seed 1]
//                    [--topology random|fattree|leafspine [--k 8] [--leaves 16 --spines 4
//                     --hosts_per_leaf 16]]
//                    [--decision diffusion|marginal [--cycle_iterations N] [--max_link_scans N]]
//                    [--destinations 4] [--replica] [--stub_hosts] [--direct] [--relays]
//                    [--policy_model models/dar-policy.json [--precision int8|float]
//                     [--policy_refresh_cycles 4]]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "agent/relay.h"
#include "base/status_macros.h"
#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/etcd_test_util.h"
#include "core/random.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "security/tls.h"

namespace dar::control {
namespace {

using testing::TestAgent;

struct Flags {
  // The overlay: "random" (a ring plus chords: `nodes`, `degree`), "fattree" (`k`) or
  // "leafspine" (`leaves`, `spines`, `hosts_per_leaf`); an agent on every node, hosts and
  // switches alike. In the fabrics only hosts send.
  std::string topology = "random";
  int k = 8;
  int leaves = 16;
  int spines = 4;
  int hosts_per_leaf = 16;
  int nodes = 200;
  int degree = 6;
  double seconds = 10;
  // How long to wait for every agent to connect before measuring (they all connect at once).
  double connect_seconds = 60;
  double rate_hz = 10;
  uint64_t seed = 1;
  // Each link's load drifts (a random walk of up to +-drift a sample, within [0.05, 0.95]) and
  // every sample adds uniform noise of width `noise` around it.
  double drift = 0.002;
  double noise = 0.1;
  // Hand the samples to the controller's core directly, without agents or gRPC: the decision
  // time without the agents' load on the same cores.
  bool direct = false;
  // The controller's stub_hosts: hosts are decided through their switch.
  bool stub_hosts = false;
  // Every switch with hosts runs a relay (agent/relay.h), and its hosts' agents connect to it
  // over mutual TLS instead of to the controller: the controller holds a stream per switch.
  bool relays = false;
  // The learned policy's model (policy.policy_model); empty: the analytic engine alone.
  std::string policy_model;
  std::string precision = "int8";
  int policy_refresh_cycles = kDeployedPolicyRefreshCycles;  // the controller's default
  std::string decision = "marginal";                         // the controller's default
  int destinations = 4;                                      // per node, with traffic toward them
  int cycle_iterations = 0;                                  // 0: the layer's own limits
  int64_t max_link_scans = -1;                               // -1: the controller's default
  // Node 1 floods: besides its samples at rate_hz, it sends valid samples of its own links
  // (4,096 a message) as fast as its stream takes them.
  bool flood = false;
  // The controller as the one replica of a set coordinated through a real etcd that the bench
  // starts (control/leadership.h): the cycle with leadership checks and the lease kept beside
  // it, to compare with the single controller's.
  bool replica = false;
};

// A ring (connected) plus random chords until the mean degree is reached; no parallel links.
std::vector<std::pair<int, int>> RandomOverlay(int n, int degree, Random& rng) {
  std::set<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.insert(std::minmax(i, (i + 1) % n));
  const size_t target = static_cast<size_t>(n) * degree / 2;
  while (edges.size() < target) {
    const int a = static_cast<int>(rng.Below(n));
    const int b = static_cast<int>(rng.Below(n));
    if (a != b) edges.insert(std::minmax(a, b));
  }
  return {edges.begin(), edges.end()};
}

// The cables of the overlay `flags` names (node indices from 0, a < b), how many nodes it has,
// and how many of them (the first ones) send traffic.
struct Overlay {
  std::vector<std::pair<int, int>> links;
  int nodes = 0;
  int senders = 0;
};

Overlay MakeOverlay(const Flags& flags, Random& rng) {
  if (flags.topology == "random") {
    return {RandomOverlay(flags.nodes, flags.degree, rng), flags.nodes, flags.nodes};
  }
  Topology topo;
  int hosts = 0;
  if (flags.topology == "fattree") {
    topo = FatTree(FatTreeParams{.k = flags.k});
    hosts = flags.k * flags.k * flags.k / 4;
  } else {
    topo = LeafSpine(LeafSpineParams{
        .leaves = flags.leaves, .spines = flags.spines, .hosts_per_leaf = flags.hosts_per_leaf});
    hosts = flags.leaves * flags.hosts_per_leaf;
  }
  Overlay out{{}, topo.num_nodes(), hosts};
  for (const Link& l : topo.links()) {
    if (l.src < l.dst) out.links.emplace_back(l.src, l.dst);
  }
  return out;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

int Run(const Flags& flags) {
  // As dar-controller does: gRPC's mutexes are absl's, whose cycle detection costs CPU.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::Status s = security::EnforceTls13(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<testing::TestPki>> pki = testing::TestPki::Create();
  if (!pki.ok()) {
    std::fprintf(stderr, "certificates: %s\n", std::string(pki.status().message()).c_str());
    return 1;
  }
  Random rng(flags.seed);
  const Overlay overlay = MakeOverlay(flags, rng);
  const std::vector<std::pair<int, int>>& links = overlay.links;
  const int nodes = overlay.nodes;
  std::map<uint32_t, std::vector<uint32_t>> neighbours;
  for (auto [a, b] : links) {
    neighbours[a + 1].push_back(b + 1);
    neighbours[b + 1].push_back(a + 1);
  }
  testing::TempDir dir;
  ControllerConfig config =
      testing::MakeTestConfig(**pki, nodes, links, dir.File("controller.jsonl"));
  config.log_level = "debug";  // a line per cycle, with its decision time
  config.stub_hosts = flags.stub_hosts;
  config.policy.marginal = flags.decision == "marginal";
  if (flags.cycle_iterations > 0) {
    config.policy.marginal_config.routing.max_iterations = flags.cycle_iterations;
    config.policy.marginal_config.routing.reference_rounds = 1;
  }
  if (flags.max_link_scans >= 0) {
    config.policy.marginal_config.routing.max_link_scans = flags.max_link_scans;
  }
  if (!flags.policy_model.empty()) {
    config.policy.policy_model = std::filesystem::absolute(flags.policy_model).string();
    config.policy.routes.policy_refresh_cycles = flags.policy_refresh_cycles;
    config.policy.policy_precision = flags.precision == "float"
                                         ? learn::LearnedPolicy::Precision::kFloat
                                         : learn::LearnedPolicy::Precision::kInt8;
  }
  std::unique_ptr<testing::EtcdProcess> etcd;
  if (flags.replica) {
    absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> started = testing::EtcdProcess::Start();
    if (!started.ok()) {
      std::fprintf(stderr, "etcd: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    etcd = *std::move(started);
    config.replicas = ControllerConfig::Replicas{};
    config.replicas->etcd = etcd->endpoint();
    config.replicas->advertise = "127.0.0.1:1";  // nobody is sent there: one replica
    config.replicas->lease = Seconds(1);
  }
  absl::StatusOr<std::unique_ptr<Controller>> controller = Controller::Start(config);
  if (!controller.ok()) {
    std::fprintf(stderr, "controller: %s\n", std::string(controller.status().message()).c_str());
    return 1;
  }
  Controller& c = **controller;
  if (flags.replica) {
    const auto lead_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!c.core().NotLeading().empty() && std::chrono::steady_clock::now() < lead_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!c.core().NotLeading().empty()) {
      std::fprintf(stderr, "the replica did not come to lead within 20 s\n");
      return 1;
    }
  }

  // Relays: the switch of every node on a single link (its rack's), and where it listens.
  JsonLog relay_log([](std::string_view) {}, LogLevel::kError);
  std::map<uint32_t, std::unique_ptr<agent::Relay>> relays;
  std::map<uint32_t, uint32_t> relay_of;
  if (flags.relays && !flags.direct) {
    for (const auto& [node, list] : neighbours) {
      if (list.size() == 1 && neighbours[list[0]].size() > 1) relay_of[node] = list[0];
    }
    for (const auto& [host, sw] : relay_of) {
      if (relays.count(sw) != 0) continue;
      absl::StatusOr<security::TlsFiles> files = (*pki)->NodeFiles(sw);
      if (!files.ok()) {
        std::fprintf(stderr, "relay: %s\n", std::string(files.status().message()).c_str());
        return 1;
      }
      agent::RelayOptions o;
      o.listen = "127.0.0.1:0";
      o.tls = *files;
      o.controllers = {fmt::format("127.0.0.1:{}", c.port())};
      o.controller_name = "localhost";
      o.seed = sw;
      absl::StatusOr<std::unique_ptr<agent::Relay>> r = agent::Relay::Start(o, relay_log);
      if (!r.ok()) {
        std::fprintf(stderr, "relay: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      relays[sw] = *std::move(r);
    }
    std::fprintf(stderr, "%zu relays for %zu hosts\n", relays.size(), relay_of.size());
  }

  std::atomic<int64_t> tables{0};
  std::vector<std::unique_ptr<TestAgent>> agents;
  if (!flags.direct) std::fprintf(stderr, "issuing %d certificates and connecting...\n", nodes);
  for (int i = 1; i <= nodes && !flags.direct; ++i) {
    if (absl::StatusOr<security::TlsFiles> files = (*pki)->NodeFiles(static_cast<uint32_t>(i));
        !files.ok()) {
      std::fprintf(stderr, "certificate: %s\n", std::string(files.status().message()).c_str());
      return 1;
    }
  }
  // Node i's agent, on a stream of its own to its relay or to the controller.
  const auto open = [&](int i) -> absl::StatusOr<std::unique_ptr<TestAgent>> {
    const auto id = static_cast<uint32_t>(i);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel;
    if (auto r = relay_of.find(id); r != relay_of.end()) {
      ASSIGN_OR_RETURN(const security::TlsFiles files, (*pki)->NodeFiles(id));
      security::ChannelTlsOptions tls{files};
      tls.server_identity =
          security::SpiffeId::Node(testing::kTestDomain, std::to_string(r->second));
      channel = security::CreateSecureChannel(
          fmt::format("127.0.0.1:{}", relays[r->second]->port()), tls, absl::Now());
    } else {
      channel = (*pki)->Channel(security::SpiffeId::Node(testing::kTestDomain, std::to_string(i)),
                                c.port());
    }
    if (!channel.ok()) return channel.status();
    auto agent = std::make_unique<TestAgent>(
        *channel,
        [&tables](const v1::RouteTable& t) {
          tables.fetch_add(1, std::memory_order_relaxed);
          v1::TableAck ack;
          ack.set_version(t.version());
          ack.set_accepted(true);
          return ack;
        },
        // Node 1's, for the size of its configuration (the rest it keeps are small: tables
        // of a host, or of a switch's few changed rows).
        /*keep_messages=*/i == 1);
    agent->SendHello(id, neighbours[id], /*delta_tables=*/true, /*installed_version=*/0,
                     /*compact_tables=*/true);
    return agent;
  };
  const auto connect_start = std::chrono::steady_clock::now();
  for (int i = 1; i <= nodes && !flags.direct; ++i) {
    absl::StatusOr<std::unique_ptr<TestAgent>> agent = open(i);
    if (!agent.ok()) {
      std::fprintf(stderr, "agent: %s\n", std::string(agent.status().message()).c_str());
      return 1;
    }
    agents.push_back(*std::move(agent));
  }
  const auto connect_deadline =
      connect_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(flags.connect_seconds));
  while (!flags.direct && c.metrics().agents_connected->Value() < nodes &&
         std::chrono::steady_clock::now() < connect_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(
      stderr, "%.0f agents connected in %.1f s; measuring for %.0f s\n",
      c.metrics().agents_connected->Value(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - connect_start).count(),
      flags.seconds);
  if (!flags.direct) {
    size_t cursor = 0;
    const std::optional<v1::ControllerMessage> config =
        agents[0]->WaitFor([](const v1::ControllerMessage& m) { return m.has_config(); }, &cursor,
                           std::chrono::seconds(5));
    if (config.has_value()) {
      std::fprintf(stderr, "node 1's configuration: %zu bytes\n", config->ByteSizeLong());
    } else {
      std::fprintf(stderr, "node 1's configuration: not received\n");
    }
  }
  // Streams that ended while they all connected at once (a handshake past its timeout, or
  // keepalive pings unanswered): the bench does not open them again, and their samples are
  // neither sent nor counted as sent. Each agent is let go, channel and all: a channel in
  // transient failure may go on reconnecting in the background, on the cores measured.
  int ended = 0;
  std::string first_end;
  for (std::unique_ptr<TestAgent>& agent : agents) {
    const std::optional<grpc::Status> done = agent->WaitDone(std::chrono::milliseconds(0));
    if (!done.has_value()) continue;
    if (ended++ == 0) first_end = done->error_message();
    agent.reset();
  }
  if (ended > 0) {
    std::fprintf(stderr,
                 "%d streams ended while connecting (the first: %s); connections refused at the "
                 "cap: %.0f, streams refused: %.0f\n",
                 ended, first_end.c_str(), c.metrics().connections_refused->Value(),
                 c.metrics().streams_refused->Value());
  }

  // The measured window: samples from every agent at rate_hz, noisy utilisation and RTT.
  const double samples_before = c.metrics().samples->Value();
  const double messages_before = c.metrics().sample_messages->Value();
  const int64_t tables_before = tables.load();
  const double cycles_before = c.metrics().cycles->Value();
  const double policy_cycles_before = c.metrics().policy_cycles->Value();
  const double policy_failures_before = c.metrics().policy_failures->Value();
  const double policy_decisions_before = c.metrics().policy_decisions->Value();
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / flags.rate_hz));
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(flags.seconds));
  int64_t sent = 0;
  // Per directed link: a drifting load, a base RTT, and a steady loss rate (a sliding window's
  // loss moves slowly): one link in twenty loses 1%.
  struct LinkModel {
    double load, rtt_ms, loss;
  };
  std::map<std::pair<uint32_t, uint32_t>, LinkModel> model;
  for (const auto& [node, list] : neighbours) {
    for (uint32_t nb : list) {
      model[{node, nb}] = LinkModel{0.2 + 0.5 * rng.Uniform(), 0.2 + 0.3 * rng.Uniform(),
                                    rng.Uniform() < 0.05 ? 0.01 : 0.0};
    }
  }
  // Per node: destinations and the rate (bits per second) it sends toward each.
  std::map<uint32_t, std::vector<std::pair<uint32_t, double>>> demand;
  const auto senders = static_cast<uint32_t>(overlay.senders);
  for (int i = 1; i <= overlay.senders; ++i) {
    for (int k = 0; k < flags.destinations; ++k) {
      uint32_t d = 1 + static_cast<uint32_t>(rng.Below(senders));
      if (d == static_cast<uint32_t>(i)) d = 1 + d % senders;
      demand[i].push_back({d, 1e6 + 19e6 * rng.Uniform()});
    }
  }
  const double period_s = 1.0 / flags.rate_hz;
  std::atomic<bool> flooding{flags.flood && !flags.direct && agents[0] != nullptr};
  std::atomic<int64_t> flooded{0};
  std::thread flooder;
  if (flooding) {
    flooder = std::thread([&] {
      v1::AgentMessage m;
      for (int k = 0; k < 4096; ++k) {
        v1::LinkSample* s = m.mutable_samples()->add_samples();
        s->set_neighbor_id(neighbours[1][static_cast<size_t>(k) % neighbours[1].size()]);
        s->set_up(true);
        s->set_rtt_ms(0.3);
        s->set_utilisation(0.5);
      }
      while (flooding.load(std::memory_order_relaxed)) {
        if (agents[0]->unsent() >= 8) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          continue;
        }
        agents[0]->Send(m);
        flooded.fetch_add(4096, std::memory_order_relaxed);
      }
    });
  }
  for (auto tick = start; tick < end; tick += period) {
    std::this_thread::sleep_until(tick);
    for (int i = 1; i <= nodes; ++i) {
      if (!flags.direct && agents[i - 1] == nullptr) continue;  // its stream ended
      v1::AgentMessage m;
      for (auto& [d, bps] : demand[i]) {
        bps = std::clamp(bps * (0.98 + 0.04 * rng.Uniform()), 1e6, 20e6);
        v1::SentBytes* x = m.mutable_samples()->add_sent();
        x->set_destination_id(d);
        x->set_bytes(static_cast<uint64_t>(bps * period_s / 8));
      }
      for (uint32_t nb : neighbours[i]) {
        v1::LinkSample* s = m.mutable_samples()->add_samples();
        s->set_neighbor_id(nb);
        s->set_up(true);
        LinkModel& l = model[{static_cast<uint32_t>(i), nb}];
        l.load = std::clamp(l.load + 2 * flags.drift * (rng.Uniform() - 0.5), 0.05, 0.95);
        s->set_rtt_ms(l.rtt_ms * (0.95 + 0.1 * rng.Uniform()));
        s->set_rtt_p95_ms(0.6);
        s->set_loss(l.loss);
        s->set_utilisation(std::clamp(l.load + flags.noise * (rng.Uniform() - 0.5), 0.0, 1.0));
        s->set_queue_bytes(static_cast<int64_t>(rng.Below(20000)));
        ++sent;
      }
      if (flags.direct) {
        c.core().OnSamples(i, m.samples()).IgnoreError();
      } else {
        agents[i - 1]->Send(std::move(m));
      }
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double ingested = c.metrics().samples->Value() - samples_before;
  const double messages = c.metrics().sample_messages->Value() - messages_before;
  const double cycles = c.metrics().cycles->Value() - cycles_before;
  const int64_t tables_received = tables.load() - tables_before;
  const double policy_cycles = c.metrics().policy_cycles->Value() - policy_cycles_before;
  const double policy_failures = c.metrics().policy_failures->Value() - policy_failures_before;
  const double policy_decisions = c.metrics().policy_decisions->Value() - policy_decisions_before;
  flooding = false;
  if (flooder.joinable()) flooder.join();
  // Who lost samples, and how often a link was declared down (nothing failed: each one is
  // false).
  uint64_t dropped_flooder = 0, dropped_others = 0;
  for (const v1::NodeView& n : c.core().ListNodes()) {
    (n.node_id() == 1 ? dropped_flooder : dropped_others) += n.samples_dropped();
  }
  int links_down = 0;
  std::string first_down;  // why the first link went down
  for (const v1::Event& e : c.core().ListEvents(0)) {
    if (e.kind() != "link_down") continue;
    if (links_down++ == 0) first_down = e.detail();
  }
  // What an operator's views cost at this size, while the agents still stream: a /metrics
  // scrape (every link and node), `show links`, and `explain route` from node 1 to the
  // farthest-numbered node; each copies the links' inputs under the cycle lock and plans
  // without it (controller_explain.cc).
  std::vector<double> scrape_ms, links_ms, explain_ms;
  const auto time_ms = [](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  size_t scraped_bytes = 0;
  v1::ExplainRouteRequest why;
  why.set_node("1");
  why.set_destination(std::to_string(overlay.senders));
  for (int i = 0; i < 20; ++i) {
    scrape_ms.push_back(time_ms([&] {
      scraped_bytes = c.metrics()
                          .Serialize(TopologyFamilies(c.core().ListNodes(), c.core().ListLinks()))
                          .size();
    }));
    links_ms.push_back(time_ms([&] { c.core().ListLinks(); }));
    explain_ms.push_back(time_ms([&] { c.core().ExplainRoute(why).IgnoreError(); }));
  }
  // What the relays carried.
  int64_t relay_up = 0, relay_batches = 0, relay_dropped = 0, relay_streams = 0;
  for (const auto& [sw, r] : relays) {
    const agent::RelayStatus st = r->status();
    relay_up += st.messages_up;
    relay_batches += st.batches_up;
    relay_dropped += st.dropped_up;
    relay_streams += st.streams;
  }
  const size_t relay_count = relays.size();
  // The controller first: agents that leave one by one would be links going silent, and cycles
  // at full cost for each.
  c.Shutdown();
  agents.clear();
  relays.clear();

  // Decision and publish times of the cycles in the window, from the log.
  std::vector<double> decision, publish;
  double changed = 0, recomputed = 0, route_changes = 0;
  std::ifstream log(dir.File("controller.jsonl"));
  std::string line;
  int skip = static_cast<int>(cycles_before);
  while (std::getline(log, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.value("msg", "") == "publish") {
      if (!decision.empty()) publish.push_back(j["publish_ms"].get<double>());
      continue;
    }
    if (j.value("msg", "") != "cycle") continue;
    if (skip-- > 0) continue;
    if (decision.size() >= static_cast<size_t>(cycles)) break;
    decision.push_back(j["decision_ms"].get<double>());
    changed += j["changed_links"].get<double>();
    recomputed += j["classes_recomputed"].get<double>();
    route_changes += j["route_changes"].get<double>();
  }
  std::printf(
      "controller_bench: %s, %d nodes (%d sending), %zu links (%zu directed), %d agent "
      "streams%s, %.0f Hz, drift %.3f, noise %.2f, %.1f s\n",
      flags.topology.c_str(), nodes, overlay.senders, links.size(), 2 * links.size(),
      flags.direct ? 0 : nodes - static_cast<int>(relay_of.size()) + static_cast<int>(relay_count),
      flags.direct    ? " (samples straight into the core)"
      : flags.replica ? " (the controller a replica leading through etcd)"
                      : "",
      flags.rate_hz, flags.drift, flags.noise, elapsed);
  const double logged = std::max<double>(1, static_cast<double>(decision.size()));
  std::printf(
      "  cycles: %.0f; per cycle: %.0f link cost changes, %.2f classes recomputed whole, "
      "%.0f route changes\n",
      cycles, changed / logged, recomputed / logged, route_changes / logged);
  if (flags.policy_model.empty()) {
    std::printf("  policy: the analytic engine alone\n");
  } else {
    std::printf(
        "  policy: %s, %s, refresh every %d cycles; %.0f cycles asked it (%.0f kept the "
        "engine's weights), %.0f rows weighed a cycle\n",
        flags.policy_model.c_str(), flags.precision.c_str(), flags.policy_refresh_cycles,
        policy_cycles, policy_failures, policy_decisions / std::max(1.0, policy_cycles));
  }
  std::printf("  decision ms: median %.2f  p99 %.2f  max %.2f\n", Percentile(decision, 0.5),
              Percentile(decision, 0.99), Percentile(decision, 1.0));
  std::printf("  publish ms:  median %.2f  p99 %.2f  max %.2f\n", Percentile(publish, 0.5),
              Percentile(publish, 0.99), Percentile(publish, 1.0));
  std::printf("  ingest: %.0f samples/s in %.0f messages/s (sent %.0f samples/s)\n",
              ingested / elapsed, messages / elapsed, static_cast<double>(sent) / elapsed);
  std::printf("  tables received by agents: %.0f/s\n",
              static_cast<double>(tables_received) / elapsed);
  if (!relay_of.empty()) {
    std::printf(
        "  relays: %zu hosts' streams carried by %zu relays; %lld messages up in %lld batches "
        "(%.1f a batch), %lld dropped; %lld streams to the controller opened\n",
        relay_of.size(), relay_count, static_cast<long long>(relay_up),
        static_cast<long long>(relay_batches),
        static_cast<double>(relay_up) / std::max<double>(1, static_cast<double>(relay_batches)),
        static_cast<long long>(relay_dropped), static_cast<long long>(relay_streams));
  }
  if (flooding.load() || flooded.load() > 0) {
    std::printf("  flooding node 1: sent %.0f samples/s more\n",
                static_cast<double>(flooded.load()) / elapsed);
  }
  std::printf(
      "  views ms (median of 20): /metrics %.2f (%zu bytes), show links %.2f, explain route "
      "%.2f\n",
      Percentile(scrape_ms, 0.5), scraped_bytes, Percentile(links_ms, 0.5),
      Percentile(explain_ms, 0.5));
  std::printf(
      "  samples dropped: %llu of node 1, %llu of the other nodes; links declared down: %d\n",
      static_cast<unsigned long long>(dropped_flooder),
      static_cast<unsigned long long>(dropped_others), links_down);
  if (links_down > 0) std::printf("  the first: %s\n", first_down.c_str());
  return 0;
}

}  // namespace
}  // namespace dar::control

int main(int argc, char** argv) {
  CLI::App app("controller_bench: the controller with many agent streams on loopback");
  dar::control::Flags flags;
  app.add_option("--topology", flags.topology, "The overlay")
      ->check(CLI::IsMember({"random", "fattree", "leafspine"}))
      ->capture_default_str();
  app.add_option("--k", flags.k, "fattree: switch radix (k^3/4 hosts)")
      ->check(CLI::Range(2, 32))
      ->capture_default_str();
  app.add_option("--leaves", flags.leaves, "leafspine: leaves")->check(CLI::Range(1, 512));
  app.add_option("--spines", flags.spines, "leafspine: spines")->check(CLI::Range(1, 128));
  app.add_option("--hosts_per_leaf", flags.hosts_per_leaf, "leafspine: hosts per leaf")
      ->check(CLI::Range(1, 128));
  app.add_option("--nodes", flags.nodes, "random: nodes (one agent each)")
      ->check(CLI::Range(3, 8192));
  app.add_option("--degree", flags.degree, "Mean degree")->check(CLI::Range(2, 32));
  app.add_option("--seconds", flags.seconds, "Measured time")->check(CLI::Range(1.0, 600.0));
  app.add_option("--connect_seconds", flags.connect_seconds,
                 "Longest wait for every agent to connect before measuring, counted from "
                 "the first stream opened")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--rate_hz", flags.rate_hz, "Samples per second per agent")
      ->check(CLI::Range(0.1, 100.0));
  app.add_option("--seed", flags.seed, "Topology and noise seed");
  app.add_option("--drift", flags.drift, "Largest load step of a link per sample")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--noise", flags.noise, "Width of the per-sample utilisation noise")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--policy_model", flags.policy_model,
                 "The learned policy's model file (default: the analytic engine alone)")
      ->check(CLI::ExistingFile);
  app.add_option("--precision", flags.precision, "How the model runs")
      ->check(CLI::IsMember({"int8", "float"}));
  app.add_option("--policy_refresh_cycles", flags.policy_refresh_cycles,
                 "Each row weighed at least every this many cycles (policy.policy_refresh_cycles)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--direct", flags.direct, "Samples straight into the core: no agents, no gRPC");
  app.add_flag("--stub_hosts", flags.stub_hosts,
               "Hosts (a single link) reached through their switch (stub_hosts)");
  app.add_flag("--relays", flags.relays,
               "Every switch with hosts relays their streams (fattree, leafspine)");
  app.add_flag("--replica", flags.replica,
               "The controller as a replica leading through a real etcd the bench starts");
  app.add_flag("--flood", flags.flood,
               "Node 1 also sends valid samples of its links as fast as its stream takes them");
  app.add_option("--decision", flags.decision, "The decision layer")
      ->check(CLI::IsMember({"marginal", "diffusion"}));
  app.add_option("--destinations", flags.destinations, "Destinations each node sends to")
      ->check(CLI::Range(0, 100));
  app.add_option("--cycle_iterations", flags.cycle_iterations,
                 "Marginal layer: iterations per cycle at most (0: its defaults)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--max_link_scans", flags.max_link_scans,
                 "Marginal layer: link scans per cycle at most (0: unbounded; default: the "
                 "controller's)");
  CLI11_PARSE(app, argc, argv);
  return dar::control::Run(flags);
}
