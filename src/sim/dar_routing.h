// The DAR control plane in the simulator: the loop of ARCHITECTURE.md, run on simulated
// time with the same engine code the controller runs.
//
//   agents (SimAgents: probes and counters, every `period`)
//     -> after report_delay: per link, forecast utilisation `horizon` ahead (Holt), queueing
//        delay from the reported queue, loss, capacity, up/down
//     -> per traffic class, link costs (core/link_cost.h) and the diffusion engine
//        (core/diffusion.h): incremental when few costs moved, in full every `full_every`
//     -> after push_delay: the forwarders' TableManager validates and installs, or refuses
//
// Class 0 is the latency class; every other class uses the bulk weights. A link change
// (carrier loss) reaches the controller report_delay after it happens and triggers a cycle
// at once; a forwarder stops using a dead local link immediately (network.h), and one whose
// probes go unanswered (a gray failure that keeps carrier) as soon as its agent says so.
#ifndef DAR_SIM_DAR_ROUTING_H_
#define DAR_SIM_DAR_ROUTING_H_

#include <memory>
#include <vector>

#include "core/diffusion.h"
#include "core/forecast.h"
#include "core/link_cost.h"
#include "core/table_manager.h"
#include "sim/agents.h"
#include "sim/control_plane.h"
#include "sim/delay_line.h"

namespace dar::sim {

struct DarConfig {
  AgentConfig agents;                     // period 100 ms, report delay 1 ms
  Duration push_delay = Milliseconds(1);  // controller -> forwarders
  int horizon_periods = 300;              // forecast horizon: 30 s at 100 ms
  HoltConfig forecast;                    // per-sample smoothing (see forecast.h)
  double min_cost_change = 0.05;          // relative cost move that counts as a change
  int full_every = 50;                    // cycles between full recomputes
  DiffusionConfig diffusion{.temperature = 0.5, .min_weight = 0.001, .hysteresis = 0.3};
  CostScales scales;
  // Light utilisation weights: short-term utilisation is noisy, and chasing it moves flows
  // (reordering) for little gain; capacity and loss are steadier signals.
  ClassWeights latency{.hop = 1, .latency = 0.3, .loss = 1, .utilisation = 0.3, .capacity = 0};
  ClassWeights bulk{.hop = 1, .latency = 0, .loss = 1, .utilisation = 0.5, .capacity = 1};
  TableManagerConfig tables;
};

class DarRouting : public ControlPlane {
 public:
  explicit DarRouting(const DarConfig& config);
  ~DarRouting() override;

  void Start(ControlContext& ctx) override;
  void OnLinkChange(LinkId link) override;
  void Report(nlohmann::json& metrics) const override;

 private:
  static constexpr int kClasses = 2;  // latency, bulk

  void OnSamples(const std::vector<LinkSample>& samples);
  void OnLiveness(LinkId link, bool alive);
  // Recomputes costs from the current link view, runs the engines, pushes tables.
  void Cycle(bool force_full, Duration push_delay);
  void SendTables(std::shared_ptr<const RoutingTables> tables, int cls, Duration delay);
  // The forwarders receive tables: they offer them to their TableManager and install what it
  // then serves.
  void Receive(std::shared_ptr<const RoutingTables> tables, int cls);
  LinkState StateOf(LinkId l) const;

  DarConfig config_;
  ControlContext* ctx_ = nullptr;
  std::unique_ptr<SimAgents> agents_;
  std::vector<HoltForecaster> forecasts_;  // utilisation, by link
  std::vector<LinkSample> last_;           // latest sample, by link
  std::vector<bool> known_down_;           // carrier loss reported, by link
  std::vector<std::unique_ptr<DiffusionEngine>> engines_;
  std::vector<std::vector<double>> costs_;  // by class, by link: what the engine last saw
  std::vector<std::unique_ptr<TableManager>> managers_;  // forwarders' side, by class
  std::unique_ptr<Timer> link_change_;
  uint64_t version_ = 0;
  int cycles_since_full_ = 0;
  int64_t cycles_ = 0;
  int64_t route_changes_ = 0;
  int64_t pushes_ = 0;
  int64_t full_cycles_ = 0;
  int64_t local_failovers_ = 0;
  struct Push {
    std::shared_ptr<const RoutingTables> tables;
    int cls;
  };
  std::unique_ptr<DelayLine<Push>> pushes_line_;  // controller -> forwarders
};

}  // namespace dar::sim

#endif  // DAR_SIM_DAR_ROUTING_H_
