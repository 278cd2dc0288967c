// The "reactive adaptive" baseline in the simulator (ARCHITECTURE.md, "Baselines"): traffic
// takes the least-loaded path by the latest measurement (core/least_loaded.h), re-picked at
// flow or flowlet start by the forwarders; no forecast, no potentials.
//
//   agents (SimAgents: probes and counters, every `period`)
//     -> after report_delay: per link, the utilisation of the last interval (throughput over
//        the link's current capacity) and up/down: down if the network knows it down (carrier
//        loss) or the controller's rule over both ends' probes says so (CableUp,
//        core/link_liveness.h)
//     -> least-loaded tables, validated (core/validator.h); invalid ones are refused
//     -> after push_delay: installed for every traffic class
//
// A link change (carrier loss) reaches the controller report_delay after it happens and
// triggers a computation at once. The first tables are installed at time 0 from the
// configuration alone (every link idle).
//
// Registered as control plane "adaptive". Policy keys (all optional):
//   period_ms (100), report_delay_ms (1), push_delay_ms (1)   (any duration unit)
//   tolerance (0.05), cost_slack (0.1), max_stretch (none)    (LeastLoadedConfig)
//   base_cost: delay | hops | metric (delay)
// Metrics: tables_installed, tables_refused, routing_loops (tables refused for a loop),
// route_changes ((node, destination) rows that differ from the tables installed before),
// cycles (table computations).
//
// Single-threaded; driven by the simulation's event loop.
#ifndef DAR_SIM_ADAPTIVE_ROUTING_H_
#define DAR_SIM_ADAPTIVE_ROUTING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/least_loaded.h"
#include "core/telemetry.h"
#include "sim/agents.h"
#include "sim/control_plane.h"
#include "sim/delay_line.h"

namespace dar::sim {

// What a path's base cost counts (before load is considered).
enum class BaseCost : uint8_t {
  kDelay,   // propagation delay in microseconds plus kHopCostUs per link
  kHops,    // 1 per link
  kMetric,  // LinkParams::metric, as static and ECMP use
};

struct AdaptiveConfig {
  // Per-link cost added to the delay in kDelay mode, in microseconds: a switch's forwarding
  // latency (about one 1500-byte packet at 10 Gb/s). Keeps costs > 0 on zero-delay links.
  static constexpr double kHopCostUs = 1.0;

  AgentConfig agents;                     // period 100 ms, report delay 1 ms
  Duration push_delay = Milliseconds(1);  // controller -> forwarders
  LeastLoadedConfig tables;               // tolerance 0.05, cost_slack 0.1, no stretch limit
  BaseCost base_cost = BaseCost::kDelay;
};

// Reads the keys documented above from a policy block. Errors name the key.
absl::StatusOr<AdaptiveConfig> ReadAdaptiveConfig(YamlReader& policy);

class AdaptiveRouting : public ControlPlane {
 public:
  explicit AdaptiveRouting(const AdaptiveConfig& config);
  ~AdaptiveRouting() override;

  // Installs the first tables at once, then starts the agents.
  void Start(ControlContext& ctx) override;
  void OnLinkChange(LinkId link) override;
  void Report(nlohmann::json& metrics) const override;

  // The tables installed last (null before Start).
  std::shared_ptr<const RoutingTables> installed() const { return installed_; }
  int64_t tables_installed() const { return installed_count_; }
  int64_t tables_refused() const { return refused_; }
  int64_t cycles() const { return cycles_; }

 private:
  void OnSamples(const std::vector<LinkSample>& samples);
  // Computes and validates tables from the latest samples and the network's link states.
  // Returns null (and counts a refusal) if they fail validation.
  std::shared_ptr<const RoutingTables> Compute();
  // Sends `tables` (if not null) to the forwarders; they install them push_delay from now.
  void Push(std::shared_ptr<const RoutingTables> tables);
  void Install(std::shared_ptr<const RoutingTables> tables);
  double LinkBaseCost(const Link& link) const;

  AdaptiveConfig config_;
  ControlContext* ctx_ = nullptr;
  std::unique_ptr<SimAgents> agents_;
  std::vector<LinkSample> latest_;   // by link; empty before the first batch
  Topology believed_;                // the network with links found unusable marked down
  std::vector<double> cost_;         // by link, scratch
  std::vector<double> utilisation_;  // by link, scratch
  std::unique_ptr<Timer> link_change_;
  std::unique_ptr<DelayLine<std::shared_ptr<const RoutingTables>>> pushes_;  // -> forwarders
  std::shared_ptr<const RoutingTables> installed_;
  uint64_t version_ = 0;
  int64_t installed_count_ = 0;
  int64_t refused_ = 0;
  int64_t loop_tables_ = 0;
  int64_t route_changes_ = 0;
  int64_t cycles_ = 0;
};

}  // namespace dar::sim

#endif  // DAR_SIM_ADAPTIVE_ROUTING_H_
