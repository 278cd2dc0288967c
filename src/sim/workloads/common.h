// Helpers shared by the workload implementations in this directory. Internal to them.
#ifndef DAR_SIM_WORKLOADS_COMMON_H_
#define DAR_SIM_WORKLOADS_COMMON_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/topology.h"
#include "core/units.h"
#include "nlohmann/json.hpp"
#include "sim/stats.h"
#include "sim/workload.h"

namespace dar::sim::workloads {

// Traffic classes a workload may use: 0 (latency) .. kMaxTrafficClass.
inline constexpr int kMaxTrafficClass = 7;

// A reader over a workload's block that already knows `type` (read by the registry).
// Fails if the block is not a map or ctx carries no topology (hosts are resolved by name).
inline absl::StatusOr<YamlReader> OpenWorkloadBlock(const YAML::Node& node,
                                                    const ConfigContext& ctx) {
  if (ctx.topology == nullptr) {
    return absl::InvalidArgumentError(ctx.where + ": no topology to resolve host names in");
  }
  absl::StatusOr<YamlReader> reader = YamlReader::Create(node, ctx.where);
  if (reader.ok()) reader->Ignore("type");
  return reader;
}

// `traffic_class`, an integer in [0, kMaxTrafficClass].
inline absl::StatusOr<uint8_t> ReadTrafficClass(YamlReader& r, int default_class) {
  absl::StatusOr<int> tc =
      r.Optional<int>("traffic_class", default_class, Bounds::InRange(0, kMaxTrafficClass));
  if (!tc.ok()) return tc.status();
  return static_cast<uint8_t>(*tc);
}

// The hosts a transport can send from (host nodes with one link), in id order: the default
// wherever a workload's host list is omitted.
inline std::vector<NodeId> SendingHosts(const Topology& topo) {
  std::vector<NodeId> out;
  for (NodeId h : topo.Hosts()) {
    if (topo.node(h).out_links.size() == 1) out.push_back(h);
  }
  return out;
}

// The capacity of a host's single link.
inline DataRate HostLinkRate(const Topology& topo, NodeId host) {
  return topo.link(topo.node(host).out_links[0]).params.capacity;
}

// A random duration in seconds as integer nanoseconds (rounded to nearest).
inline Duration FromSeconds(double s) { return Duration(std::llround(s * 1e9)); }

// Statistics for reports: JSON null when there are no samples.
inline nlohmann::json MeanOrNull(const std::vector<double>& v) {
  return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(Mean(v));
}
inline nlohmann::json QuantileOrNull(const std::vector<double>& v, double q) {
  return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(Quantile(v, q));
}

}  // namespace dar::sim::workloads

#endif  // DAR_SIM_WORKLOADS_COMMON_H_
