// Link costs for the diffusion engine: what one traffic class pays for crossing a link in a
// given (predicted) state.
//
// Every term is dimensionless and weighted per class, so a latency-sensitive class can weigh
// delay and loss while a bulk class weighs free capacity. The reward terms of the design —
// low latency, low loss, short queues, free capacity — each appear as a cost term here.
//
// Measured congestion (queueing delay, loss) is what traffic pays; utilisation only predicts
// it (u / (1 - u) is the M/M/1 queue). A link can be busy without being congested — one
// elastic flow fills whatever path it is given — so on a measured link the load there is now
// may cost more than `unconfirmed_utilisation` by no more than the congestion measured there
// (LinkState::measured_congestion). Otherwise the traffic a link carries would make it look
// worse than a congested one, and routes would follow the traffic back and forth. The
// forecast's rise above the present load (a trend: load that is coming) is charged in full.
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
  double present_utilisation = 0;          // measured now, [0, utilisation]
  // Congestion measured on the link, queueing / reference_delay + loss / reference_loss:
  // the most u / (1 - u) of the present load may exceed its value at unconfirmed_utilisation.
  // +infinity (the default): not measured, utilisation is trusted alone, as a fluid model
  // without queues must (present_utilisation is then not used).
  double measured_congestion = std::numeric_limits<double>::infinity();
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
  // The utilisation charged on a measured link without queueing or loss, however busy it is:
  // u / (1 - u) = 1 at 0.5. In [0, 1]; 1 turns the bound off.
  double unconfirmed_utilisation = 0.5;
};

inline constexpr double kUnusable = std::numeric_limits<double>::infinity();

// The cost of crossing a link in state `s` for a class with weights `w`: finite and > 0 for
// an up link (REQUIRES: w.hop > 0 or some other term positive), kUnusable for a down one.
double LinkCost(const LinkState& s, const ClassWeights& w, const CostScales& scales);

}  // namespace dar

#endif  // DAR_CORE_LINK_COST_H_
