// Load balancers from the literature that need no control plane of their own: ECMP's tables
// under the link-state protocol with another forwarding (docs/baselines.md). `wcmp` is a
// table policy (core/routing.h), `conga` and `plb` control planes of their own.
#include "sim/control_plane.h"

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

}  // namespace
}  // namespace dar::sim
