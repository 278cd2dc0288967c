// Load balancers from the literature that are ECMP's tables under the link-state protocol
// with another forwarding or host behaviour (docs/baselines.md). `wcmp` is a table policy
// (core/routing.h), `conga` a control plane of its own (sim/conga.h).
#include <cassert>
#include <memory>

#include "base/status_macros.h"
#include "core/routing.h"
#include "sim/control_plane.h"
#include "sim/link_state_routing.h"
#include "sim/plb.h"
#include "sim/transport.h"

namespace dar::sim {
namespace {

// Congestion-oblivious per-packet spraying over the equal-cost next hops (random packet
// spraying, Dixit et al., INFOCOM 2013): a weighted-random draw per packet, no queue term.
REGISTER_POLICY_PRESET("spray", (PolicyPreset{"ecmp", {.mode = ForwardingMode::kPerPacket}}));

// LetFlow (Vanini et al., NSDI 2017): a flowlet (a gap of more than the flowlet timeout in a
// flow) takes a random next hop, blind to load. The paper's timeout is 500 µs.
REGISTER_POLICY_PRESET("letflow", (PolicyPreset{"ecmp",
                                                {.mode = ForwardingMode::kPerFlowlet,
                                                 .flowlet_gap = Microseconds(500)}}));

// DRILL (Ghorbani et al., SIGCOMM 2017): per packet, the shortest local queue among two random
// next hops and the last choice's winner, DRILL(2, 1).
REGISTER_POLICY_PRESET(
    "drill", (PolicyPreset{
                 "ecmp", {.mode = ForwardingMode::kDrill, .drill_samples = 2, .drill_memory = 1}}));

// PLB (Qureshi et al., SIGCOMM 2022): ECMP, and hosts that repath a flow whose ECN marks stay
// high (sim/plb.h, Transport::EnablePlb).
class PlbRouting : public ControlPlane {
 public:
  PlbRouting(const PlbConfig& plb, const LinkStateConfig& link_state)
      : plb_(plb), routing_(ComputeEcmpTables, link_state) {}

  void Start(ControlContext& ctx) override {
    assert(ctx.transport != nullptr);  // RunPolicy always passes the hosts' transport
    transport_ = ctx.transport;
    transport_->EnablePlb(plb_);
    routing_.Start(ctx);
  }
  void OnLinkChange(LinkId link) override { routing_.OnLinkChange(link); }
  void Report(nlohmann::json& metrics) const override {
    routing_.Report(metrics);
    metrics["plb_repaths"] = transport_->counters().repaths;
  }

 private:
  PlbConfig plb_;
  LinkStateRouting routing_;
  Transport* transport_ = nullptr;
};

REGISTER_CONTROL_PLANE("plb",
                       [](YamlReader& policy,
                          const ConfigContext&) -> absl::StatusOr<ControlPlanePtr> {
                         ASSIGN_OR_RETURN(PlbConfig plb, ReadPlbConfig(policy));
                         ASSIGN_OR_RETURN(LinkStateConfig link_state, ReadLinkStateConfig(policy));
                         return std::make_unique<PlbRouting>(plb, link_state);
                       });

}  // namespace
}  // namespace dar::sim
