// The DAR control plane in the simulator: the loop of ARCHITECTURE.md, run on simulated
// time with the same engine code the controller runs.
//
//   agents (SimAgents: probes and counters, every `period`)
//     -> after report_delay, the route computer (core/route_computer.h, as in the controller):
//        per link, forecast utilisation `horizon` ahead (Holt), queueing delay from the
//        reported queue, loss, capacity, up/down; per traffic class, link costs
//        (core/link_cost.h) and the diffusion engine (core/diffusion.h): incremental when
//        few costs moved, in full every `full_every`
//     -> after push_delay: the forwarders' TableManager validates and installs, or refuses
//
// Class 0 is the latency class; every other class uses the bulk weights. A link change
// (carrier loss) reaches the controller report_delay after it happens and triggers a cycle
// at once; a forwarder stops using a dead local link immediately (network.h), and one whose
// probes go unanswered (a gray failure that keeps carrier) as soon as its agent says so.
//
// The engine's keys are the controller's, read by the same code with the same defaults and
// bounds (core/engine_settings.h). The decision layer is DAR's objective by default
// (`decision: marginal`, core/marginal_decision.h), as in the controller; with `decision:
// diffusion` it is the diffusion engine above. In the marginal layer the agents count the traffic
// their node sends to every destination, and every cycle the controller minimises the objective for
// the smoothed demand, starting from the tables in force, over the links it knows to be usable, and
// puts new tables in force only when that pays (`publish_gain`); otherwise it renews the tables in
// force (a new version, the same routes). Link samples still feed the route computer, which this
// layer does not consult, and give it the links' throughput. A weight policy (dar-learned, the
// trainer's) always runs with the diffusion engine.
//
// "dar-learned" is the same loop with a learned policy refining the engine's weights
// (RouteComputer::set_weight_policy), loaded through the run's WeightPolicyLoader
// (RunOptions::policy_loader; dar-sim gives learn/policy_loader.h's): the settings of "dar", plus
// `model: <path>` (relative to the scenario's directory) and `precision: int8|float`
// (default int8), and `audit: float` to run the FP32 model beside the INT8 one on every
// decision and report how often they agree ("int8_vs_float", learn/policy_audit.h; slower,
// and the INT8 weights still route). A model file that is missing, corrupt or made for other
// features is refused with a warning that names it, and the policy runs the analytic engine: the
// metrics say so ("learned_policy": "refused: ...", "policy_fallbacks": every cycle), as does a run
// given no loader. A run given a
// policy (RunOptions::weight_policy) uses it in "dar" and "dar-learned" alike.
#ifndef DAR_SIM_DAR_ROUTING_H_
#define DAR_SIM_DAR_ROUTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/engine_settings.h"
#include "core/marginal_decision.h"
#include "core/route_computer.h"
#include "core/table_manager.h"
#include "sim/agents.h"
#include "sim/control_plane.h"
#include "sim/delay_line.h"

namespace dar::sim {

struct DarConfig {
  enum class Decision { kDiffusion, kMarginal };
  Decision decision =
      DeployedEngineSettings().marginal ? Decision::kMarginal : Decision::kDiffusion;
  // kMarginal: the layer's settings (its period is the agents').
  MarginalDecisionConfig marginal;
  AgentConfig agents;                     // period 100 ms, report delay 1 ms
  Duration push_delay = Milliseconds(1);  // controller -> forwarders
  // Forecasts, costs, engines (core/route_computer.h).
  RouteComputerConfig routes = DeployedEngineSettings().routes;
  TableManagerConfig tables;
  // Refines the engine's weights (RouteComputer::set_weight_policy); null: the engine's.
  std::shared_ptr<WeightPolicy> weight_policy;
  // Whether a learned policy was asked for (dar-learned), and why it was refused (then
  // weight_policy is null and the analytic engine runs); empty if it was not.
  bool learned = false;
  std::string learned_refusal;
  // Set when the policy is audited against its FP32 original (`audit: float`): their
  // agreement so far, reported as "int8_vs_float".
  std::function<nlohmann::json()> audit;
};

class DarRouting : public ControlPlane {
 public:
  explicit DarRouting(const DarConfig& config);
  ~DarRouting() override;

  void Start(ControlContext& ctx) override;
  void OnLinkChange(LinkId link) override;
  void Report(nlohmann::json& metrics) const override;

 private:
  void OnSamples(const std::vector<LinkSample>& samples);
  void OnLiveness(LinkId link, bool alive);
  // Copies a link's capacity, delay and carrier state from the network into the computer.
  void SyncLink(LinkId l);
  // The links the controller knows down: carrier down as the agents last reported it, or
  // the cable judged down from the two ends' samples (CableUp); into the computer.
  void ApplyKnownDown();
  // Runs the route computer on the current link view and pushes its tables.
  void Cycle(bool force_full, Duration push_delay);
  // The marginal decision layer's cycle: the tables it keeps in force, pushed as a new
  // version.
  void MarginalCycle(Duration push_delay);
  // The topology as the controller knows it: the network's, less the links known down.
  Topology KnownTopology() const;
  void SendTables(std::shared_ptr<const RoutingTables> tables, int cls, Duration delay);
  // The forwarders receive tables: they offer them to their TableManager and install what it
  // then serves.
  void Receive(const std::shared_ptr<const RoutingTables>& tables, int cls);

  DarConfig config_;
  ControlContext* ctx_ = nullptr;
  std::unique_ptr<SimAgents> agents_;
  std::unique_ptr<RouteComputer> computer_;              // the controller's decision loop
  std::vector<std::unique_ptr<TableManager>> managers_;  // forwarders' side, by class
  std::unique_ptr<Timer> link_change_;
  std::vector<bool> carrier_down_;  // by link, as reported: one report delay behind
  std::vector<bool> cables_up_;     // by link, from the last samples (CablesUp)
  int64_t pushes_ = 0;
  int64_t local_failovers_ = 0;
  std::set<std::string> policy_errors_logged_;  // each distinct message is logged once
  struct Push {
    std::shared_ptr<const RoutingTables> tables;
    int cls;
  };
  std::unique_ptr<DelayLine<Push>> pushes_line_;  // controller -> forwarders

  // The marginal decision layer (null: the diffusion engine decides).
  std::unique_ptr<MarginalDecision> marginal_;
  uint64_t version_ = 0;
};

}  // namespace dar::sim

#endif  // DAR_SIM_DAR_ROUTING_H_
