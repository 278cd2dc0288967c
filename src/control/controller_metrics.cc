#include "control/controller_metrics.h"

#include <cmath>
#include <functional>

#include "base/build_info_metric.h"
#include "fmt/format.h"
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
  replica_leading = NewGauge(r, "dar_controller_replica_leading",
                             "1 while this replica leads (a single controller: always)");
  replica_term = NewGauge(r, "dar_controller_replica_term",
                          "The term this replica leads or last led (0: never; single: 0)");
  last_cycle_unix_seconds = NewGauge(r, "dar_controller_last_cycle_unix_seconds",
                                     "When the last cycle finished (Unix time)");
  events_ = &prometheus::BuildCounter()
                 .Name("dar_controller_events_total")
                 .Help("Events recorded, by kind")
                 .Register(r);
}

std::string ControllerMetrics::Serialize(const std::vector<prometheus::MetricFamily>& extra) const {
  std::vector<prometheus::MetricFamily> families = registry->Collect();
  families.push_back(BuildInfoFamily("dar-controller"));
  families.insert(families.end(), extra.begin(), extra.end());
  return prometheus::TextSerializer().Serialize(families);
}

namespace {

// A family of gauges (or counters) with one sample per element of `items`.
template <typename T>
prometheus::MetricFamily Family(
    const std::string& name, const std::string& help, prometheus::MetricType type,
    const std::vector<T>& items,
    const std::function<std::vector<prometheus::ClientMetric::Label>(const T&)>& labels,
    const std::function<double(const T&)>& value) {
  prometheus::MetricFamily f{name, help, type, {}};
  for (const T& item : items) {
    prometheus::ClientMetric m;
    m.label = labels(item);
    const double v = value(item);
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f.metric.push_back(std::move(m));
  }
  return f;
}

}  // namespace

std::vector<prometheus::MetricFamily> TopologyFamilies(const std::vector<v1::NodeView>& nodes,
                                                       const std::vector<v1::LinkView>& links) {
  using prometheus::MetricType;
  using Labels = std::vector<prometheus::ClientMetric::Label>;
  std::vector<prometheus::MetricFamily> out;
  const std::function<Labels(const v1::LinkView&)> link = [](const v1::LinkView& l) {
    return Labels{{"dst", l.dst_name()}, {"src", l.src_name()}};
  };
  const auto gauge = [&](const std::string& name, const std::string& help,
                         const std::function<double(const v1::LinkView&)>& value) {
    out.push_back(Family<v1::LinkView>(name, help, MetricType::Gauge, links, link, value));
  };
  gauge("dar_link_up", "1 while the link is up, as the controller judges it",
        [](const v1::LinkView& l) { return l.up() ? 1.0 : 0.0; });
  gauge("dar_link_drained", "1 while an operator drains the link",
        [](const v1::LinkView& l) { return l.drained() ? 1.0 : 0.0; });
  gauge("dar_link_slow",
        "1 while the link delivers below slow_fraction of its capacity (suppressed: counted at "
        "what it delivers)",
        [](const v1::LinkView& l) { return l.slow() ? 1.0 : 0.0; });
  gauge("dar_link_slow_until_timestamp_seconds",
        "When, without new evidence, the link stops counting as slow (0 when it is not)",
        [](const v1::LinkView& l) { return static_cast<double>(l.slow_until_unix_ns()) * 1e-9; });
  gauge("dar_link_capacity_bytes_per_second", "The link's configured capacity",
        [](const v1::LinkView& l) { return static_cast<double>(l.capacity_bps()) / 8; });
  gauge("dar_link_delivery_capacity_bytes_per_second",
        "What the decision counts the link at: its capacity, or what it was measured to deliver",
        [](const v1::LinkView& l) { return static_cast<double>(l.delivery_capacity_bps()) / 8; });
  gauge("dar_link_utilisation_ratio", "The link's utilisation in its tail's last sample",
        [](const v1::LinkView& l) { return l.utilisation(); });
  gauge("dar_link_planned_utilisation_ratio",
        "The utilisation the decision plans for (marginal: the reported demand routed by the "
        "tables in force; diffusion: the forecast)",
        [](const v1::LinkView& l) { return l.planned_utilisation(); });
  gauge("dar_link_forecast_utilisation_ratio", "The utilisation forecast, horizon_s ahead",
        [](const v1::LinkView& l) { return l.forecast_utilisation(); });
  gauge("dar_link_queue_bytes", "The queue its tail reported",
        [](const v1::LinkView& l) { return static_cast<double>(l.queue_bytes()); });
  gauge("dar_link_queueing_seconds", "One-way queueing measured on the link",
        [](const v1::LinkView& l) { return l.queueing_ms() * 1e-3; });
  gauge("dar_link_loss_ratio", "Probe loss over its tail's window",
        [](const v1::LinkView& l) { return l.loss(); });
  gauge("dar_link_rtt_seconds", "Smoothed probe round-trip time",
        [](const v1::LinkView& l) { return l.rtt_ms() * 1e-3; });
  gauge("dar_link_base_rtt_seconds", "The smallest recent round-trip time (no queues)",
        [](const v1::LinkView& l) { return static_cast<double>(l.base_rtt_ns()) * 1e-9; });
  gauge("dar_link_marginal_cost",
        "What one more unit of traffic on the link adds to DAR's objective (marginal layer)",
        [](const v1::LinkView& l) { return l.marginal_cost(); });
  gauge("dar_link_last_sample_timestamp_seconds", "When its tail last reported it (0: never)",
        [](const v1::LinkView& l) { return static_cast<double>(l.last_sample_unix_ns()) * 1e-9; });
  // Per class: the engine's cost (+Inf where unusable) and the link's route share.
  std::vector<std::pair<std::string, const v1::LinkView*>> by_class;
  by_class.reserve(2 * links.size());
  for (const v1::LinkView& l : links) by_class.emplace_back("latency", &l);
  for (const v1::LinkView& l : links) by_class.emplace_back("bulk", &l);
  using Entry = std::pair<std::string, const v1::LinkView*>;
  const std::function<Labels(const Entry&)> class_link = [](const Entry& e) {
    return Labels{{"class", e.first}, {"dst", e.second->dst_name()}, {"src", e.second->src_name()}};
  };
  out.push_back(Family<Entry>(
      "dar_link_cost", "The diffusion engine's cost of the link, by traffic class",
      MetricType::Gauge, by_class, class_link, [](const Entry& e) {
        return e.first == "latency" ? e.second->cost_latency() : e.second->cost_bulk();
      }));
  out.push_back(Family<Entry>(
      "dar_link_route_share_ratio",
      "The link's share of its tail's routes (its weight averaged over every destination)",
      MetricType::Gauge, by_class, class_link, [](const Entry& e) {
        return e.first == "latency" ? e.second->share_latency() : e.second->share_bulk();
      }));

  const std::function<Labels(const v1::NodeView&)> node = [](const v1::NodeView& n) {
    return Labels{{"node", n.name()}};
  };
  const auto node_family = [&](const std::string& name, const std::string& help, MetricType type,
                               const std::function<double(const v1::NodeView&)>& value) {
    out.push_back(Family<v1::NodeView>(name, help, type, nodes, node, value));
  };
  node_family("dar_node_connected", "1 while the node's agent has a live stream", MetricType::Gauge,
              [](const v1::NodeView& n) { return n.connected() ? 1.0 : 0.0; });
  node_family("dar_node_table_version", "The last table version the node's agent accepted",
              MetricType::Gauge,
              [](const v1::NodeView& n) { return static_cast<double>(n.acked_version()); });
  node_family("dar_node_static_table", "1 while the node's agent forwards on its static table",
              MetricType::Gauge,
              [](const v1::NodeView& n) { return n.static_table() ? 1.0 : 0.0; });
  node_family("dar_node_fallbacks_total",
              "Times a controller table went stale at the node since its agent started",
              MetricType::Counter,
              [](const v1::NodeView& n) { return static_cast<double>(n.fallbacks()); });
  node_family("dar_node_tables_refused_total", "Tables the node's agent refused",
              MetricType::Counter,
              [](const v1::NodeView& n) { return static_cast<double>(n.refused_tables()); });
  node_family("dar_node_samples_dropped_total",
              "The node's samples the controller dropped (it sent more than its share)",
              MetricType::Counter,
              [](const v1::NodeView& n) { return static_cast<double>(n.samples_dropped()); });
  node_family("dar_node_last_seen_timestamp_seconds", "When the node's agent was last heard",
              MetricType::Gauge, [](const v1::NodeView& n) {
                return static_cast<double>(n.last_seen_unix_ns()) * 1e-9;
              });
  return out;
}

void ControllerMetrics::CountEvent(const std::string& kind) {
  events_->Add({{"kind", kind}}).Increment();
}

void ControllerMetrics::SetPolicyActive(bool learned) {
  policy_learned_active->Set(learned ? 1 : 0);
  policy_analytic_active->Set(learned ? 0 : 1);
}

}  // namespace dar::control
