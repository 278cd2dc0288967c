#include "control/controller_metrics.h"

#include <atomic>
#include <chrono>
#include <cstdlib>

#include "fmt/format.h"
#include "httplib.h"
#include "prometheus/text_serializer.h"

namespace dar::control {
namespace {

prometheus::Counter* NewCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge* NewGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

// 0.25 ms .. ~1 s, doubling.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 0.00025; s < 1.1; s *= 2) b.push_back(s);
  return b;
}

}  // namespace

ControllerMetrics::ControllerMetrics() : registry(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry;
  cycle_seconds = &prometheus::BuildHistogram()
                       .Name("dar_controller_cycle_decision_seconds")
                       .Help("Time from the link view to new tables in one cycle")
                       .Register(r)
                       .Add({}, SecondsBuckets());
  publish_seconds = &prometheus::BuildHistogram()
                         .Name("dar_controller_cycle_publish_seconds")
                         .Help("Time to snapshot a cycle's tables and hand them to the streams")
                         .Register(r)
                         .Add({}, SecondsBuckets());
  cycles = NewCounter(r, "dar_controller_cycles_total", "Decision cycles run");
  full_cycles =
      NewCounter(r, "dar_controller_full_cycles_total", "Cycles that recomputed every destination");
  route_changes = NewCounter(r, "dar_controller_route_changes_total",
                             "(node, destination) rows whose next hops or weights changed");
  sample_messages = NewCounter(r, "dar_controller_sample_messages_total",
                               "LinkSamples messages accepted from agents");
  samples = NewCounter(r, "dar_controller_samples_total", "Link samples accepted from agents");
  samples_dropped = NewCounter(r, "dar_controller_samples_dropped_total",
                               "Link samples dropped because the ingest buffer was full");
  early_cycles = NewCounter(r, "dar_controller_early_cycles_total",
                            "Cycles run at once because a link end was newly reported down");
  tables_sent_full =
      NewCounter(r, "dar_controller_tables_sent_full_total", "Full route tables sent to agents");
  tables_sent_delta =
      NewCounter(r, "dar_controller_tables_sent_delta_total", "Delta route tables sent to agents");
  tables_accepted =
      NewCounter(r, "dar_controller_tables_accepted_total", "Route tables agents accepted");
  tables_refused =
      NewCounter(r, "dar_controller_tables_refused_total", "Route tables agents refused");
  streams_refused = NewCounter(r, "dar_controller_streams_refused_total",
                               "Agent streams ended for a bad Hello or message");
  admin_refused = NewCounter(r, "dar_controller_admin_refused_total",
                             "Admin calls refused for want of an admin identity");
  connections_refused =
      NewCounter(r, "dar_controller_connections_refused_total",
                 "gRPC connections closed at once because max_connections were open");
  config_reloads =
      NewCounter(r, "dar_controller_config_reloads_total", "Configuration reloads applied");
  config_refused = NewCounter(r, "dar_controller_config_refused_total",
                              "Configuration reloads refused (the running one stayed)");
  policy_model_refusals =
      NewCounter(r, "dar_controller_policy_model_refusals_total",
                 "Learned-policy model files refused (the analytic engine or the running model "
                 "stayed)");
  policy_cycles = NewCounter(r, "dar_controller_policy_cycles_total",
                             "Cycles that asked the learned policy for weights");
  policy_failures = NewCounter(r, "dar_controller_policy_failures_total",
                               "Cycles whose tables kept the engine's weights because the learned "
                               "policy failed");
  policy_decisions = NewCounter(r, "dar_controller_policy_decisions_total",
                                "(node, destination, class) rows the learned policy weighed");
  policy_rows_held = NewCounter(r, "dar_controller_policy_rows_held_total",
                                "Rows with a choice that kept the learned policy's last weights "
                                "(policy_refresh_cycles)");
  auto& active = prometheus::BuildGauge()
                     .Name("dar_controller_policy_active")
                     .Help("1 for the policy that makes the tables: learned or analytic")
                     .Register(r);
  policy_learned_active = &active.Add({{"policy", "learned"}});
  policy_analytic_active = &active.Add({{"policy", "analytic"}});
  SetPolicyActive(false);
  agents_connected = NewGauge(r, "dar_controller_agents_connected", "Agents with a live stream");
  links_down = NewGauge(r, "dar_controller_links_down", "Directed links considered down");
  links_drained = NewGauge(r, "dar_controller_links_drained", "Directed links drained");
  table_version = NewGauge(r, "dar_controller_table_version", "Version of the newest tables");
  last_cycle_unix_seconds = NewGauge(r, "dar_controller_last_cycle_unix_seconds",
                                     "When the last cycle finished (Unix time)");
  events_ = &prometheus::BuildCounter()
                 .Name("dar_controller_events_total")
                 .Help("Events recorded, by kind")
                 .Register(r);
}

std::string ControllerMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry->Collect());
}

void ControllerMetrics::CountEvent(const std::string& kind) {
  events_->Add({{"kind", kind}}).Increment();
}

void ControllerMetrics::SetPolicyActive(bool learned) {
  policy_learned_active->Set(learned ? 1 : 0);
  policy_analytic_active->Set(learned ? 0 : 1);
}

ControllerHttp::ControllerHttp(std::function<std::string()> metrics,
                               std::function<std::string()> healthy,
                               std::function<std::string()> ready, int threads)
    : server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server_->set_read_timeout(2, 0);
  server_->set_write_timeout(2, 0);
  server_->set_keep_alive_timeout(5);
  // A health listener answers one request a connection: an idle keep-alive client must not
  // hold one of its few threads.
  server_->set_keep_alive_max_count(metrics ? 100 : 1);
  if (metrics) {
    server_->Get("/metrics",
                 [metrics = std::move(metrics)](const httplib::Request&, httplib::Response& res) {
                   res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
                 });
  }
  const auto probe = [](std::function<std::string()> check, const char* good) {
    return [check = std::move(check), good](const httplib::Request&, httplib::Response& res) {
      const std::string problem = check();
      if (problem.empty()) {
        res.set_content(good, "text/plain");
      } else {
        res.status = 503;
        res.set_content(problem + "\n", "text/plain");
      }
    };
  };
  server_->Get("/healthz", probe(std::move(healthy), "ok\n"));
  server_->Get("/readyz", probe(std::move(ready), "ready\n"));
}

ControllerHttp::~ControllerHttp() { Stop(); }

absl::StatusOr<int> ControllerHttp::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("http address '{}': want host:port", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int port = std::atoi(address.c_str() + colon + 1);
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound < 0) {
    return absl::UnavailableError(fmt::format("http {}: cannot listen there", address));
  }
  auto finished = std::make_shared<std::atomic<bool>>(false);
  thread_ = std::thread([this, finished] {
    server_->listen_after_bind();
    *finished = true;
  });
  // stop() only works on a running server; the socket already listens, so this is short.
  while (!server_->is_running() && !*finished) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (*finished) {
    thread_.join();
    return absl::UnavailableError(fmt::format("http {}: the server stopped at once", address));
  }
  return bound;
}

void ControllerHttp::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace dar::control
