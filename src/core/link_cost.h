// Link costs for the diffusion engine: what one traffic class pays for crossing a link in a
// given (predicted) state.
//
// Every term is dimensionless and weighted per class, so a latency-sensitive class can weigh
// delay and loss while a bulk class weighs free capacity. The reward terms of the design —
// low latency, low loss, short queues, free capacity — each appear as a cost term here.
#ifndef DAR_CORE_LINK_COST_H_
#define DAR_CORE_LINK_COST_H_

#include <limits>

#include "core/units.h"

namespace dar {

// The state of one directed link as the engine predicts it.
struct LinkState {
  bool up = true;
  DataRate capacity = DataRate::Gbps(10);
  Duration propagation = Microseconds(1);  // one-way base delay
  Duration queueing{0};                    // predicted one-way queueing delay
  double loss = 0;                         // fraction of packets lost, [0, 1]
  double utilisation = 0;                  // predicted, [0, 1]
};

// How much one traffic class cares about each term (all >= 0).
struct ClassWeights {
  double hop = 1;          // a constant per hop: keeps costs > 0 and paths short
  double latency = 0;      // (propagation + queueing) / reference_delay
  double loss = 0;         // loss / reference_loss
  double utilisation = 0;  // u / (1 - u): steep as the link fills (linear past max_utilisation)
  double capacity = 0;     // reference_capacity / capacity: prefers fat links
};

// Scales that make the terms dimensionless. Defaults suit a 10 Gb/s data centre.
struct CostScales {
  Duration reference_delay = Microseconds(10);
  double reference_loss = 0.01;
  DataRate reference_capacity = DataRate::Gbps(10);
  double max_utilisation = 0.98;  // u / (1 - u) continues along its tangent past this
};

inline constexpr double kUnusable = std::numeric_limits<double>::infinity();

// The cost of crossing a link in state `s` for a class with weights `w`: finite and > 0 for
// an up link (REQUIRES: w.hop > 0 or some other term positive), kUnusable for a down one.
double LinkCost(const LinkState& s, const ClassWeights& w, const CostScales& scales);

}  // namespace dar

#endif  // DAR_CORE_LINK_COST_H_
