// dar-agent: the DAR agent of one node. main() parses flags, loads the configuration, builds
// the data plane, the table store (on the table saved on disk, else the static table) and the
// control client, and stops them on SIGINT or SIGTERM (SIGHUP is logged and ignored).
//
//   dar-agent --config node.yaml [--log agent.jsonl]
//   dar-agent --config node.yaml --check-config     exit 0 if valid, else 1 with the error
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/control_client.h"
#include "agent/dataplane.h"
#include "agent/saved_keys.h"
#include "agent/sequence_floor.h"
#include "agent/table_store.h"
#include "base/clock.h"
#include "base/json_log.h"
#include "base/version.h"
#include "fmt/format.h"
#include "net/http_server.h"
#include "security/tls.h"

namespace dar::cli {
namespace {

// The configuration, the TLS files it names (this node's certificate) and the data plane's
// settings, checked as a start would, without opening anything.
int CheckConfig(const std::string& path) {
  absl::StatusOr<agent::AgentConfig> config = agent::LoadAgentConfig(path);
  if (!config.ok()) {
    std::cerr << "dar-agent: " << config.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<security::TlsMaterial> tls = security::LoadTlsMaterial(config->tls, absl::Now());
  if (!tls.ok()) {
    std::cerr << "dar-agent: " << path << ": tls: " << tls.status().message() << "\n";
    return 1;
  }
  const std::string self = std::to_string(config->self_node().id);
  if (tls->identity.kind != security::PeerKind::kNode || tls->identity.name != self) {
    std::cerr << fmt::format(
        "dar-agent: {}: tls.cert {} is the certificate of {}, not of node {}\n", path,
        config->tls.cert_file, tls->identity.ToString(), self);
    return 1;
  }
  const Topology topology = agent::BuildAgentTopology(*config);
  absl::StatusOr<agent::DataplaneConfig> dataplane =
      agent::MakeDataplaneConfig(*config, topology, 1);
  if (!dataplane.ok() || !dataplane->Validate().ok()) {
    std::cerr << "dar-agent: " << path << ": "
              << (dataplane.ok() ? dataplane->Validate() : dataplane.status()).message() << "\n";
    return 1;
  }
  std::cout << fmt::format("{}: OK (node {} '{}', {} nodes, {} links, {} neighbours)\n", path, self,
                           config->self_node().name, config->nodes.size(), config->links.size(),
                           config->neighbours.size());
  return 0;
}

int Run(const std::string& path, const std::string& log_path) {
  absl::StatusOr<agent::AgentConfig> config = agent::LoadAgentConfig(path);
  if (!config.ok()) {
    std::cerr << "dar-agent: " << config.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<JsonLog>> log =
      JsonLog::Open(log_path, *ParseLogLevel(config->log_level));
  if (!log.ok()) {
    std::cerr << "dar-agent: " << log.status().message() << "\n";
    return 1;
  }
  JsonLog& out = **log;
  // Signals are taken synchronously by this thread; every thread started later inherits the
  // mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const uint64_t seed = (static_cast<uint64_t>(std::random_device()()) << 32) ^
                        static_cast<uint64_t>(std::random_device()());
  const Topology topology = agent::BuildAgentTopology(*config);
  absl::StatusOr<agent::DataplaneConfig> dataplane_config =
      agent::MakeDataplaneConfig(*config, topology, seed);
  if (!dataplane_config.ok()) {
    out.Error("cannot start", {{"error", std::string(dataplane_config.status().message())}});
    return 1;
  }
  // The keys the controller handed out last win over the config's initial key, which a
  // rotation retires (agent/saved_keys.h).
  if (absl::StatusOr<std::vector<agent::KeyUpdate>> saved = agent::LoadKeys(config->state_dir);
      saved.ok()) {
    dataplane_config->initial_keys = *std::move(saved);
    out.Info("data-plane keys read from the state dir",
             {{"keys", agent::KeyIds(dataplane_config->initial_keys)}});
  } else if (!absl::IsNotFound(saved.status())) {
    out.Warn(
        "saved data-plane keys not used",
        {{"error", std::string(saved.status().message())},
         {"instead", config->initial_key ? "the initial key" : "none until the controller's"}});
  }
  // Sequence numbers begin above what this node's peers accepted before, even if the clock was
  // set back (agent/sequence_floor.h).
  std::optional<agent::SequenceFloor> floor;
  if (absl::StatusOr<agent::SequenceFloor> f =
          agent::SequenceFloor::Start(config->state_dir, RealClock::Instance().UnixNanos());
      f.ok()) {
    floor = *std::move(f);
    dataplane_config->sequence_floor_ms = floor->start_ms();
  } else {
    out.Warn("sequence numbers start from the clock alone",
             {{"error", std::string(f.status().message())}});
  }
  absl::StatusOr<std::unique_ptr<agent::Dataplane>> dataplane =
      agent::Dataplane::Create(*dataplane_config);
  if (!dataplane.ok()) {
    out.Error("cannot start the data plane",
              {{"error", std::string(dataplane.status().message())}});
    return 1;
  }
  out.Info("starting", {{"version", VersionLine("dar-agent")},
                        {"config", path},
                        {"node", config->self_node().id},
                        {"name", config->self_node().name},
                        {"controller", config->controller},
                        {"seed", seed}});

  // Forward at once: on the table from disk if there is a good one, else the static table.
  agent::TableStore store(*config, topology, config->table_stale, &out);
  store.LoadFromDisk(RealClock::Instance().Now()).IgnoreError();  // logged by the store
  (*dataplane)->InstallTables(store.TakeChange(RealClock::Instance().Now()));
  agent::DataplaneBridge bridge(**dataplane);
  agent::ControlClientOptions options;
  options.forwarding = dataplane_config->forwarding;
  options.seed = seed;
  agent::ControlClient client(*config, store, bridge, out, options);
  // A link's liveness changes: the static table follows, and the controller hears at once.
  (*dataplane)->SetLivenessCallback([&store, &out, &config, &client](NodeId neighbour, bool up) {
    store.SetNeighbourUp(neighbour, up);
    client.NotifyLinkChange();
    out.Info(up ? "neighbour up" : "neighbour down",
             {{"neighbour", config->nodes[neighbour].id}, {"name", config->nodes[neighbour].name}});
  });
  // The data plane read the clock again: reserve from where it really starts, before it sends.
  if (floor) {
    if (absl::Status s = floor->Keep((*dataplane)->HighestSequence()); !s.ok()) {
      out.Warn("sequence floor not kept", {{"error", std::string(s.message())}});
    }
  }
  if (absl::Status s = (*dataplane)->Start(); !s.ok()) {
    out.Error("cannot start the data plane", {{"error", std::string(s.message())}});
    return 1;
  }
  if (absl::Status s = client.Start(); !s.ok()) {
    out.Error("cannot start the control client", {{"error", std::string(s.message())}});
    (*dataplane)->Stop();  // before the store its callback uses goes away
    return 1;
  }
  // /metrics and /healthz, made at each scrape from what the parts count (agent_metrics.h).
  std::unique_ptr<net::HttpServer> http;
  if (!config->http.empty()) {
    http = std::make_unique<net::HttpServer>(/*threads=*/2, /*keep_alive_requests=*/100);
    http->GetText(
        "/metrics",
        [&config, &store, &client, dp = dataplane->get()] {
          agent::AgentMetricsSnapshot s;
          s.dataplane = dp->counters();
          s.neighbours = dp->Samples(RealClock::Instance().Now());
          s.tables = store.counters();
          s.installed_version = store.installed_version();
          s.static_table = client.table_status().static_table();
          s.control = client.status();
          return agent::AgentMetricsText(*config, s);
        },
        "text/plain; version=0.0.4; charset=utf-8");
    http->GetProbe(
        "/healthz", [] { return std::string(); }, "ok\n");
    absl::StatusOr<int> port = http->Start(config->http);
    if (!port.ok()) {
      out.Error("cannot serve http", {{"error", std::string(port.status().message())}});
      client.Stop();
      (*dataplane)->Stop();
      return 1;
    }
    out.Info("serving /metrics and /healthz", {{"http", config->http}, {"port", *port}});
  }

  // SIGHUP is logged and ignored: what the file holds (who this node is, the overlay, the
  // neighbours, the TLS files) is read once at start, and what may change at run time (the
  // forwarding mode, the keys, the tables' staleness) comes from the controller.
  // Once a second meanwhile, whatever signals come, the sequence floor reserves further
  // ahead if it must; and once more when the data plane has stopped.
  bool floor_failed = false;
  const auto keep_floor = [&] {
    if (!floor) return;
    const absl::Status s = floor->Keep((*dataplane)->HighestSequence());
    if (!s.ok() && !floor_failed) {
      out.Warn("sequence floor not kept", {{"error", std::string(s.message())}});
    } else if (s.ok() && floor_failed) {
      out.Info("sequence floor kept again", {});
    }
    floor_failed = !s.ok();
  };
  int sig = 0;
  auto next_keep = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    const auto wait = std::max(next_keep - std::chrono::steady_clock::now(),
                               std::chrono::steady_clock::duration::zero());
    const timespec until{
        static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
        static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count() %
                          1'000'000'000)};
    sig = sigtimedwait(&signals, nullptr, &until);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig == SIGHUP) {
      out.Warn("SIGHUP ignored", {{"why",
                                   "the configuration file is read at start only; "
                                   "restart dar-agent to apply a changed one"}});
    }
    if (std::chrono::steady_clock::now() >= next_keep) {
      keep_floor();
      next_keep = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  }
  out.Info("stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  if (http != nullptr) http->Stop();  // its handlers read the client and the data plane
  client.Stop();
  (*dataplane)->Stop();
  keep_floor();
  const agent::DataplaneCounters c = (*dataplane)->counters();
  const agent::TableStoreCounters t = store.counters();
  nlohmann::json drops = nlohmann::json::object();
  for (size_t r = 0; r < agent::kDropReasons; ++r) {
    if (c.drops[r] != 0) {
      drops[std::string(agent::DropReasonName(static_cast<agent::DropReason>(r)))] = c.drops[r];
    }
  }
  nlohmann::json counters = nlohmann::json::object();
  c.ForEach([&](std::string_view name, std::string_view, uint64_t value) {
    counters[std::string(name)] = value;
  });
  out.Info("stopped", {{"dataplane", counters},
                       {"drops", drops},
                       {"tables_accepted", t.accepted},
                       {"tables_refused", t.refused},
                       {"fallbacks_to_static", t.fallbacks_to_static},
                       {"installed_version", store.installed_version()}});
  return 0;
}

}  // namespace
}  // namespace dar::cli

int main(int argc, char** argv) {
  // Before any thread or TLS object exists (security/tls.h).
  if (absl::Status s = dar::security::EnforceTls13(); !s.ok()) {
    std::cerr << "dar-agent: " << s.message() << "\n";
    return 1;
  }
  CLI::App app{
      "dar-agent: probes this node's links, forwards the overlay, talks to the "
      "controller"};
  app.set_version_flag("--version", dar::VersionLine("dar-agent"));
  std::string config;
  std::string log;
  bool check = false;
  app.add_option("--config", config, "the node's configuration file (dar-lab writes one)")
      ->required();
  app.add_flag("--check-config", check, "check the configuration and its files, then exit");
  app.add_option("--log", log, "append JSON-lines logs to FILE (default: stderr)");
  CLI11_PARSE(app, argc, argv);
  return check ? dar::cli::CheckConfig(config) : dar::cli::Run(config, log);
}
