// One link sample on the wire: the single mapping between core's LinkSample (what the agent's
// LinkMonitor measures and the route computer observes, core/telemetry.h) and the
// v1::LinkSample an agent streams to the controller (proto/dar/v1/agent.proto). The agent
// writes with ToWire, the controller checks with CheckWireSample and reads with FromWire; the
// simulator hands LinkSample over as it is.
//
// What crosses, and how: liveness as the agent judged it; the smoothed and p95 RTT in
// milliseconds (doubles); the base RTT (rtt_min) in integer nanoseconds, exact; loss,
// throughput, utilisation and queue depth. The sample's time is the receiver's: clocks of two
// machines are not compared.
#ifndef DAR_WIRE_LINK_SAMPLE_WIRE_H_
#define DAR_WIRE_LINK_SAMPLE_WIRE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/telemetry.h"
#include "core/units.h"
#include "dar/v1/agent.pb.h"

namespace dar::wire {

// Fills the measurement fields of `out` from `sample` (not the neighbour id, the time or the
// probe counts, which the agent's port holds).
void ToWire(const LinkSample& sample, v1::LinkSample* out);

// OK if every measurement of `sample` is in range (finite, RTTs in [0, 1e6] ms, base RTT in
// [0, 1000 s], loss in [0, 1], rate in [0, 1e15] b/s, utilisation in [0, 100], queue >= 0);
// otherwise InvalidArgument naming samples[`index`], the field, the sending node and the
// neighbour.
absl::Status CheckWireSample(const v1::LinkSample& sample, int index, uint32_t node);

// The sample as the controller observes it, received at `received`. A utilisation the agent
// could not compute (0, with traffic) is the rate over `capacity`; it is clamped to [0, 1].
// REQUIRES: CheckWireSample(sample, ...).ok().
LinkSample FromWire(const v1::LinkSample& sample, DataRate capacity, Time received);

}  // namespace dar::wire

#endif  // DAR_WIRE_LINK_SAMPLE_WIRE_H_
