// The agent's Prometheus metrics: what its /metrics serves (agent config `http`). Made from
// snapshots at each scrape, so nothing here is kept between scrapes.
//
//   dar_build_info{program="dar-agent", version, commit} 1
//   dar_agent_dataplane_<counter>_total      the data plane's event counters (dataplane.h)
//   dar_agent_drops_total{reason}            packets the data plane dropped, by reason
//   dar_agent_neighbour_up{neighbour}        1 while the link to the neighbour is up
//   dar_agent_neighbour_rtt_seconds, _rtt_min_seconds, _loss_ratio, _utilisation_ratio,
//   _queue_bytes, _throughput_bytes_per_second {neighbour}   the link's last sample
//   dar_agent_neighbour_probes_sent_total, _probes_answered_total {neighbour}
//   dar_agent_controller_connected, dar_agent_controller_disconnects_total,
//   dar_agent_controller_connect_failures_total, dar_agent_samples_sent_total
//   dar_agent_table_version, dar_agent_static_table, dar_agent_tables_accepted_total,
//   dar_agent_tables_refused_total, dar_agent_fallbacks_total{to="last_good"|"static"}
#ifndef DAR_AGENT_AGENT_METRICS_H_
#define DAR_AGENT_AGENT_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/control_client.h"
#include "agent/dataplane.h"
#include "agent/table_store.h"

namespace dar::agent {

// Everything one scrape reports.
struct AgentMetricsSnapshot {
  DataplaneCounters dataplane;
  std::vector<NeighbourSample> neighbours;
  TableStoreCounters tables;
  uint64_t installed_version = 0;
  bool static_table = false;
  ControlClientStatus control;
};

// The text exposition format of `s`; neighbours are labelled by their names in `config`.
std::string AgentMetricsText(const AgentConfig& config, const AgentMetricsSnapshot& s);

}  // namespace dar::agent

#endif  // DAR_AGENT_AGENT_METRICS_H_
