// The controller's Prometheus metrics (prometheus-cpp), served at /metrics (net/http_server.h).
//
// Metric updates are thread-safe (prometheus-cpp's counters, gauges and histograms are).
#ifndef DAR_CONTROL_CONTROLLER_METRICS_H_
#define DAR_CONTROL_CONTROLLER_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "dar/v1/admin.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace dar::control {

// Every metric the controller exports, registered in its own registry (no global one).
struct ControllerMetrics {
  ControllerMetrics();

  // The text exposition format of every metric (what /metrics serves), with `extra` (the
  // per-link and per-node families, made at scrape time) after the registry's.
  std::string Serialize(const std::vector<prometheus::MetricFamily>& extra = {}) const;
  // Counts an event of `kind` (dar_controller_events_total{kind=...}).
  void CountEvent(const std::string& kind);
  // Which policy makes the tables: dar_controller_policy_active{policy="learned"} is 1 and
  // {policy="analytic"} 0 with a learned policy, the other way round without.
  void SetPolicyActive(bool learned);

  std::shared_ptr<prometheus::Registry> registry;
  // Decision time of a cycle: link view to new tables (steady clock), and the time to
  // snapshot and hand them to the streams.
  prometheus::Histogram* cycle_seconds;
  prometheus::Histogram* publish_seconds;
  prometheus::Counter* cycles;
  prometheus::Counter* full_cycles;
  prometheus::Counter* route_changes;
  prometheus::Counter* sample_messages;  // LinkSamples messages accepted
  prometheus::Counter* samples;          // LinkSample entries accepted
  prometheus::Counter* samples_dropped;  // accepted but dropped: the ingest buffer was full
  prometheus::Counter* early_cycles;     // run before their tick: a link end newly down
  prometheus::Counter* tables_sent_full;
  prometheus::Counter* tables_sent_delta;
  prometheus::Counter* tables_accepted;
  prometheus::Counter* tables_refused;
  prometheus::Counter* streams_refused;      // Hellos and messages that ended a stream
  prometheus::Counter* admin_refused;        // admin calls without an admin identity
  prometheus::Counter* connections_refused;  // closed at once: max_connections reached
  prometheus::Counter* config_reloads;
  prometheus::Counter* config_refused;
  // Learned-policy model files refused (missing, corrupt, incompatible), at start or reload.
  prometheus::Counter* policy_model_refusals;
  // The route computer's weight-policy counts (RouteComputerStats): cycles that asked the
  // learned policy, cycles that kept the engine's weights because it failed, rows it weighed.
  prometheus::Counter* policy_cycles;
  prometheus::Counter* policy_failures;
  prometheus::Counter* policy_decisions;
  prometheus::Counter* policy_rows_held;      // RouteComputerStats::policy_rows_held
  prometheus::Gauge* policy_learned_active;   // policy_active{policy="learned"}
  prometheus::Gauge* policy_analytic_active;  // policy_active{policy="analytic"}
  prometheus::Gauge* agents_connected;
  prometheus::Gauge* links_down;  // directed links
  prometheus::Gauge* links_drained;
  prometheus::Gauge* table_version;
  // Replicas (control/leadership.h): 1 while this one leads, and the term it leads or last led.
  prometheus::Gauge* replica_leading;
  prometheus::Gauge* replica_term;
  prometheus::Gauge* last_cycle_unix_seconds;

 private:
  prometheus::Family<prometheus::Counter>* events_;
};

// The per-link and per-node families, from the admin API's views (made at each scrape, so a
// link or node that leaves the topology leaves no stale series). Links are labelled
// {src, dst} by node name, nodes {node}; a gauge per class is labelled {class="latency"|"bulk"}.
std::vector<prometheus::MetricFamily> TopologyFamilies(const std::vector<v1::NodeView>& nodes,
                                                       const std::vector<v1::LinkView>& links);

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_METRICS_H_
