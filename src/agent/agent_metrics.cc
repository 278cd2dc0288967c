#include "agent/agent_metrics.h"

#include <utility>

#include "base/build_info_metric.h"
#include "fmt/format.h"
#include "prometheus/text_serializer.h"

namespace dar::agent {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// One sample: a gauge's or a counter's value with its labels.
ClientMetric Sample(MetricType type, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

MetricFamily One(const std::string& name, const std::string& help, MetricType type, double value) {
  return MetricFamily{name, help, type, {Sample(type, value)}};
}

}  // namespace

std::string AgentMetricsText(const AgentConfig& config, const AgentMetricsSnapshot& s) {
  std::vector<MetricFamily> out;
  out.push_back(BuildInfoFamily("dar-agent"));

  s.dataplane.ForEach([&](std::string_view name, std::string_view help, uint64_t value) {
    out.push_back(One(fmt::format("dar_agent_dataplane_{}_total", name), std::string(help),
                      MetricType::Counter, static_cast<double>(value)));
  });
  MetricFamily drops{"dar_agent_drops_total",
                     "Packets the data plane dropped, by reason",
                     MetricType::Counter,
                     {}};
  for (size_t r = 0; r < kDropReasons; ++r) {
    drops.metric.push_back(
        Sample(MetricType::Counter, static_cast<double>(s.dataplane.drops[r]),
               {{"reason", std::string(DropReasonName(static_cast<DropReason>(r)))}}));
  }
  out.push_back(std::move(drops));

  // Per neighbour link: its last sample and its probes.
  const auto per_neighbour = [&](const std::string& name, const std::string& help, MetricType type,
                                 auto value) {
    MetricFamily f{name, help, type, {}};
    for (const NeighbourSample& n : s.neighbours) {
      const std::string who =
          n.neighbour >= 0 && static_cast<size_t>(n.neighbour) < config.nodes.size()
              ? config.nodes[n.neighbour].name
              : std::to_string(n.neighbour);
      f.metric.push_back(Sample(type, value(n), {{"neighbour", who}}));
    }
    out.push_back(std::move(f));
  };
  per_neighbour("dar_agent_neighbour_up", "1 while the link to the neighbour is up",
                MetricType::Gauge,
                [](const NeighbourSample& n) { return n.sample.up ? 1.0 : 0.0; });
  per_neighbour("dar_agent_neighbour_rtt_seconds", "Smoothed probe round-trip time",
                MetricType::Gauge,
                [](const NeighbourSample& n) { return ToSeconds(n.sample.rtt_smoothed); });
  per_neighbour("dar_agent_neighbour_rtt_min_seconds", "Smallest recent probe round-trip time",
                MetricType::Gauge,
                [](const NeighbourSample& n) { return ToSeconds(n.sample.rtt_min); });
  per_neighbour("dar_agent_neighbour_loss_ratio", "Probe loss over the sliding window",
                MetricType::Gauge, [](const NeighbourSample& n) { return n.sample.loss; });
  per_neighbour("dar_agent_neighbour_utilisation_ratio",
                "Throughput over the link's capacity (0 if its capacity is unknown)",
                MetricType::Gauge, [](const NeighbourSample& n) { return n.sample.utilisation; });
  per_neighbour("dar_agent_neighbour_queue_bytes", "Queue toward the neighbour", MetricType::Gauge,
                [](const NeighbourSample& n) { return static_cast<double>(n.sample.queue_bytes); });
  per_neighbour(
      "dar_agent_neighbour_throughput_bytes_per_second",
      "What was delivered on the link over the last interval", MetricType::Gauge,
      [](const NeighbourSample& n) { return static_cast<double>(n.sample.throughput.bps()) / 8; });
  per_neighbour("dar_agent_neighbour_probes_sent_total", "Probes sent on the link",
                MetricType::Counter,
                [](const NeighbourSample& n) { return static_cast<double>(n.probes_sent); });
  per_neighbour("dar_agent_neighbour_probes_answered_total", "Probes the neighbour answered",
                MetricType::Counter,
                [](const NeighbourSample& n) { return static_cast<double>(n.probes_answered); });

  const ControlClientStatus& c = s.control;
  out.push_back(One("dar_agent_controller_connected",
                    "1 while a stream to the controller is open and answered", MetricType::Gauge,
                    c.connected ? 1 : 0));
  out.push_back(One("dar_agent_controller_disconnects_total",
                    "Streams that ended after the controller answered", MetricType::Counter,
                    static_cast<double>(c.disconnects)));
  out.push_back(One("dar_agent_controller_connect_failures_total",
                    "Attempts to reach the controller that failed", MetricType::Counter,
                    static_cast<double>(c.connect_failures)));
  out.push_back(One("dar_agent_samples_sent_total", "Sample messages sent to the controller",
                    MetricType::Counter, static_cast<double>(c.samples_sent)));
  out.push_back(One("dar_agent_table_version",
                    "Version of the controller table accepted last (dar_agent_static_table says "
                    "whether the data plane forwards on it or on the static table)",
                    MetricType::Gauge, static_cast<double>(s.installed_version)));
  out.push_back(One("dar_agent_static_table", "1 while the data plane forwards on the static table",
                    MetricType::Gauge, s.static_table ? 1 : 0));
  out.push_back(One("dar_agent_tables_accepted_total", "Controller tables accepted",
                    MetricType::Counter, static_cast<double>(s.tables.accepted)));
  out.push_back(One("dar_agent_tables_refused_total", "Controller tables refused",
                    MetricType::Counter, static_cast<double>(s.tables.refused)));
  out.push_back(MetricFamily{
      "dar_agent_fallbacks_total",
      "Times the current table went stale: to the last good one, or to the static table",
      MetricType::Counter,
      {Sample(MetricType::Counter, static_cast<double>(s.tables.fallbacks_to_last_good),
              {{"to", "last_good"}}),
       Sample(MetricType::Counter, static_cast<double>(s.tables.fallbacks_to_static),
              {{"to", "static"}})}});
  return prometheus::TextSerializer().Serialize(out);
}

}  // namespace dar::agent
