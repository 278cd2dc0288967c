// The forwarder's fast, local layer (ARCHITECTURE.md, "Two speeds"): given the weighted next
// hops a routing table holds for one (node, destination), pick the one a packet leaves on —
// per flow, per flowlet, per packet or by power of two choices — corrected by the local queue
// depth and skipping next hops whose link is not forwardable right now.
//
// Shared by the simulator's forwarders and the agent's data plane, so that both make the same
// choices. The chooser has no clock and no randomness of its own: the caller passes the time,
// a Random and a view of its ports with every call.
#ifndef DAR_CORE_NEXT_HOP_CHOOSER_H_
#define DAR_CORE_NEXT_HOP_CHOOSER_H_

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/random.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

// How a forwarder spreads traffic over the next hops of one (node, destination).
enum class ForwardingMode : uint8_t {
  kPerFlow,       // a hash of the flow id picks a next hop by weight; sticky
  kPerFlowlet,    // re-pick by weight after the flow has been idle for flowlet_gap
  kPerPacket,     // weighted random per packet
  kPerPacketP2C,  // two weighted-random candidates, the one with the shorter queue wins
  kDrill,         // DRILL(d, m): d weighted-random candidates and the m last best, per packet
  kDrillFlowlet   // DRILL's choice per flowlet, held, then sprayed; LetFlow's on even rows
};
// "per_flow", "per_flowlet", "per_packet", "per_packet_p2c", "drill" or "drill_flowlet";
// InvalidArgument otherwise.
absl::StatusOr<ForwardingMode> ParseForwardingMode(std::string_view name);
std::string_view ForwardingModeName(ForwardingMode mode);

struct ForwardingConfig {
  ForwardingMode mode = ForwardingMode::kPerFlow;
  // Local correction by queue depth: when a forwarder picks a next hop afresh (per packet, or
  // at a flowlet's start) each weight is divided by (1 + queued bytes / queue_bias_bytes), so
  // a next hop with a long local queue gets less new traffic. 0 = off.
  int64_t queue_bias_bytes = 0;
  Duration flowlet_gap = Microseconds(100);
  int flowlet_table_size = 4096;  // entries per forwarder, indexed by flow hash (as in hardware)
  // DRILL (Ghorbani et al., SIGCOMM 2017): per packet, the shortest local queue among
  // `drill_samples` next hops drawn by weight and the `drill_memory` (0 or 1) next hop that
  // won the previous choice toward the same destination. The paper's default is DRILL(2, 1).
  int drill_samples = 2;
  int drill_memory = 1;
  // drill_flowlet: a flowlet keeps its next hop while that one's local queue holds at most
  // this many bytes more than DRILL's choice; past it the flowlet moves there. Cautious
  // rerouting as in Hermes (Zhang et al., SIGCOMM 2017): a move skips at most the old queue's
  // excess, so the reordering it causes stays within what the receiver's reordering window
  // absorbs, and short flows on a quiet fabric are not split at all. The default, 15 KB
  // (about ten full segments, 12 us at 10 Gb/s), is well inside the simulator's 50 us
  // minimum reordering window (docs/transport.md).
  int64_t reroute_threshold_bytes = int64_t{15} * 1024;
  // drill_flowlet: a flowlet of the latency class (0) is held as above for its first
  // sticky_packets packets only; after them every packet takes DRILL's choice. Hermes
  // reroutes only flows that have sent more than 100 KB: the short ones (RPCs, query
  // responses) are where reordering costs most and balancing buys least, the long ones where
  // per-packet balancing buys most. 68 packets are 100 KB of full-sized (1,500-byte) packets.
  int sticky_packets = 68;
  // drill_flowlet: the same for the bulk class (1: collectives, replication), whose
  // transfers are long and judged by when they complete, not by their first packets' delay.
  // Holding their first 100 KB on one path cost AllReduce a sixth of its gain over failed
  // core links; 16 packets (24 KB) did not, at a cost of 2 points of MoE's gain, and left
  // the web-search and serving scenarios level (docs/results.md: chosen on development
  // seeds 1-5). Every other class counts as latency.
  int bulk_sticky_packets = 16;
  // drill_flowlet: the packets after those spread by the table's weights alone (a weighted
  // random draw each, as spraying does) instead of DRILL's choice by local queues. Where a
  // failure upstream leaves paths of unequal capacity that the local queues do not show,
  // the weights do (docs/results.md: chosen on development seeds 1-5, where it was ahead or
  // level on every scenario tried).
  bool spray_long_flows = true;
  // drill_flowlet: the rate one flow can send at (the hosts' line rate); zero = unknown.
  // When known, DRILL's choices and spraying are used only where they can buy something: the
  // row's weights are uneven (the controller knows of an asymmetry that the local queues do
  // not show), or a next hop is no faster than this, so that two long flows hashed onto it
  // would fill it (the low flow entropy of collectives and long requests). On any other row,
  // equal paths faster than any flow, a flowlet is LetFlow's: drawn by weight at its start
  // and never moved. There, collisions cost nothing; moving flowlets costs reordering, and
  // steering every new flowlet to the shortest queue, or spraying, herds bursts onto one
  // path and hands the receivers' ports the bursts the fabric's queues had absorbed
  // (docs/results.md, incast).
  DataRate line_rate;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// What a NextHopChooser reads about the forwarder's own ports, by outgoing link: whether it
// may send on the link now (carrier up and not ruled out by its own liveness check) and how
// many bytes wait in the link's local queue, both called on the per-packet path; and the
// link's capacity, read only by drill_flowlet with line_rate set, at a flowlet's start and
// every kRowRecheckPackets of its packets.
template <typename P>
concept LocalPortState = requires(const P& ports, LinkId link) {
  { ports.forwardable(link) } -> std::convertible_to<bool>;
  { ports.queued_bytes(link) } -> std::convertible_to<int64_t>;
  { ports.capacity(link) } -> std::convertible_to<DataRate>;  // zero: unknown
};

// The next-hop choice of one forwarder (one node). Holds the forwarding configuration, the
// node's hash salt and its flowlet table.
//
// Per flow: a hash of (flow, salt) draws a next hop by the table's weights; the same flow
// takes the same next hop while the next hops and their liveness are unchanged. Queue depth
// is not consulted (it would move flows).
// Per flowlet: a flowlet table entry, indexed by a hash of (flow, destination), remembers
// the next hop of one direction of a flow; a packet within flowlet_gap of the previous one
// of the same flow follows it while that next hop is still offered and forwardable, otherwise
// a next hop is drawn afresh by queue-corrected weight. Colliding flows share (overwrite) an
// entry, as in hardware.
// Per packet: a draw by queue-corrected weight for every packet.
// Power of two choices: two draws by plain weight, the one with fewer queued bytes wins (the
// first on a tie).
// DRILL: drill_samples draws by plain weight plus, with drill_memory, the next hop that won
// last time toward this destination (if still offered and forwardable); the one with fewer
// queued bytes wins (the remembered one on a tie, then the earliest draw) and is remembered.
// The memory is a table of destinations indexed by hash; colliding destinations share an
// entry.
// DRILL per flowlet: the flowlet table of per-flowlet mode. With line_rate known, a flowlet
// that starts where neither DRILL nor spraying can buy anything (even weights, every next hop
// faster than line_rate) is drawn by queue-corrected weight and kept, as in per-flowlet mode;
// every 64 packets (kRowRecheckPackets) the row is read again, and a flowlet whose row has
// become one where they can buy something goes on as below from there, one whose row has
// become even is kept where it is.
// Any other flowlet's first packet takes DRILL's choice; a later one, among its first
// sticky_packets (bulk_sticky_packets in the bulk class), stays on the flowlet's next hop
// unless DRILL's choice has more than reroute_threshold_bytes fewer bytes queued, and then
// moves the flowlet there; the packets after those are each drawn by weight
// (spray_long_flows), or take DRILL's choice each. A flowlet whose
// next hop is withdrawn or stops being forwardable starts afresh, held again for its first
// packets on the new one, as after a gap: its path changed, and what follows is a new burst
// on it.
//
// Not thread-safe; give each forwarding thread its own chooser.
class NextHopChooser {
 public:
  // `salt` decorrelates the per-flow and flowlet hashes of different forwarders (so that a
  // flow's choice at one hop does not determine its choice at the next).
  // REQUIRES: config.Validate().ok().
  NextHopChooser(const ForwardingConfig& config, uint64_t salt);

  const ForwardingConfig& config() const { return config_; }
  // Replaces the configuration and forgets every flowlet and DRILL's memory.
  // REQUIRES: config.Validate().ok().
  void set_config(const ForwardingConfig& config);

  // The link a packet of `flow` toward `destination` leaves on, among `hops` (a routing
  // table's next hops at this node); kNoLink if none of them is forwardable. `now` is the
  // packet's time (only the flowlet modes read it; it must not go backwards). Draws from
  // `rng` only in per-flowlet (at a flowlet's start), per-packet, power-of-two, DRILL and
  // DRILL-per-flowlet (every packet; on even rows at a flowlet's start) modes, and only when
  // there is more than one next hop.
  // `traffic_class` (0 latency, 1 bulk) is read only by drill_flowlet.
  // The first choice of a flowlet mode allocates the flowlet table, the first of a DRILL mode
  // DRILL's memory; no other call allocates.
  template <LocalPortState Ports>
  LinkId Choose(absl::Span<const NextHop> hops, uint64_t flow, NodeId destination, Time now,
                Random& rng, const Ports& ports, int traffic_class = 0);

 private:
  struct FlowletEntry {
    uint64_t key = 0;  // hash of (flow, destination): one direction of a flow
    Time last_seen{-1};
    LinkId link = kNoLink;
    int32_t packets = 0;  // of this flowlet so far (drill_flowlet), saturating
    bool pinned = false;  // drill_flowlet: where nothing can be bought (BalancingPays), kept
  };

  // A next hop drawn by weight among the forwardable ones (u uniform in [0, 1)); with
  // `by_queue`, weights are corrected by local queue depth. kNoLink if no weight is positive.
  template <LocalPortState Ports>
  LinkId PickByWeight(absl::Span<const NextHop> hops, double u, bool by_queue,
                      const Ports& ports) const;
  template <LocalPortState Ports>
  double Weight(const NextHop& h, bool by_queue, const Ports& ports) const;
  template <LocalPortState Ports>
  LinkId ChooseFlowlet(absl::Span<const NextHop> hops, uint64_t flow, NodeId destination, Time now,
                       Random& rng, const Ports& ports);

  template <LocalPortState Ports>
  LinkId ChooseDrill(absl::Span<const NextHop> hops, NodeId destination, Random& rng,
                     const Ports& ports);
  // Whether DRILL's choices or spraying over `hops` can buy anything (see line_rate).
  template <LocalPortState Ports>
  bool BalancingPays(absl::Span<const NextHop> hops, const Ports& ports) const;
  template <LocalPortState Ports>
  LinkId ChooseDrillFlowlet(absl::Span<const NextHop> hops, uint64_t flow, NodeId destination,
                            Time now, Random& rng, const Ports& ports, int sticky_packets);
  // The flowlet table entry of one direction of `flow`, allocating the table on first use;
  // `fresh` tells whether the entry is this flow's, seen within flowlet_gap, and its next hop
  // is still offered and forwardable.
  template <LocalPortState Ports>
  FlowletEntry& FindFlowlet(absl::Span<const NextHop> hops, uint64_t flow, NodeId destination,
                            Time now, const Ports& ports, bool& fresh);

  static constexpr size_t kDrillMemorySize = 1024;
  // drill_flowlet: a flowlet's row is read again (BalancingPays) every this many of its packets,
  // so that a long flowlet follows a change of capacity or weights within about 100 KB.
  static constexpr int32_t kRowRecheckPackets = 64;
  // Next hops' weights within this share of the largest count as even (BalancingPays): far finer
  // than any asymmetry worth spraying for, far coarser than rounding.
  static constexpr double kEvenWeights = 0.01;

  ForwardingConfig config_;
  uint64_t salt_;
  std::vector<FlowletEntry> flowlets_;  // empty until the first per-flowlet choice
  std::vector<LinkId> drill_memory_;    // by destination hash; empty until the first DRILL choice
};

// Implementation -----------------------------------------------------------------------------

template <LocalPortState Ports>
double NextHopChooser::Weight(const NextHop& h, bool by_queue, const Ports& ports) const {
  if (!ports.forwardable(h.link)) return 0;
  if (!by_queue || config_.queue_bias_bytes <= 0) return h.weight;
  return h.weight / (1.0 + static_cast<double>(ports.queued_bytes(h.link)) /
                               static_cast<double>(config_.queue_bias_bytes));
}

template <LocalPortState Ports>
LinkId NextHopChooser::PickByWeight(absl::Span<const NextHop> hops, double u, bool by_queue,
                                    const Ports& ports) const {
  double total = 0;
  for (const NextHop& h : hops) total += Weight(h, by_queue, ports);
  if (total <= 0) return kNoLink;
  double x = u * total;
  LinkId last = kNoLink;
  for (const NextHop& h : hops) {
    const double w = Weight(h, by_queue, ports);
    if (w <= 0) continue;
    last = h.link;
    x -= w;
    if (x < 0) return h.link;
  }
  return last;  // rounding left x just above zero: the last positive weight
}

template <LocalPortState Ports>
NextHopChooser::FlowletEntry& NextHopChooser::FindFlowlet(absl::Span<const NextHop> hops,
                                                          uint64_t flow, NodeId destination,
                                                          Time now, const Ports& ports,
                                                          bool& fresh) {
  if (flowlets_.empty()) flowlets_.resize(config_.flowlet_table_size);
  // A flowlet is one direction of a flow: a flow's data and its ACKs are separate.
  const uint64_t key = Random::Hash(flow ^ (static_cast<uint64_t>(destination) << 40));
  FlowletEntry& e = flowlets_[(key ^ salt_) % flowlets_.size()];
  fresh = false;
  if (e.key == key && e.last_seen.count() >= 0 && now - e.last_seen <= config_.flowlet_gap &&
      e.link != kNoLink && ports.forwardable(e.link)) {
    for (const NextHop& nh : hops) fresh |= nh.link == e.link;
  }
  e.key = key;
  e.last_seen = now;
  return e;
}

template <LocalPortState Ports>
LinkId NextHopChooser::ChooseFlowlet(absl::Span<const NextHop> hops, uint64_t flow,
                                     NodeId destination, Time now, Random& rng,
                                     const Ports& ports) {
  bool fresh = false;
  FlowletEntry& e = FindFlowlet(hops, flow, destination, now, ports, fresh);
  if (!fresh) e.link = PickByWeight(hops, rng.Uniform(), /*by_queue=*/true, ports);
  return e.link;
}

template <LocalPortState Ports>
bool NextHopChooser::BalancingPays(absl::Span<const NextHop> hops, const Ports& ports) const {
  if (config_.line_rate.is_zero()) return true;
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0;
  for (const NextHop& h : hops) {
    const DataRate c = ports.capacity(h.link);
    if (c.is_zero() || c <= config_.line_rate) return true;
    const double w = ports.forwardable(h.link) ? h.weight : 0;
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  return hi - lo > kEvenWeights * hi;
}

template <LocalPortState Ports>
LinkId NextHopChooser::ChooseDrillFlowlet(absl::Span<const NextHop> hops, uint64_t flow,
                                          NodeId destination, Time now, Random& rng,
                                          const Ports& ports, int sticky_packets) {
  bool fresh = false;
  FlowletEntry& e = FindFlowlet(hops, flow, destination, now, ports, fresh);
  if (!fresh) {
    e.packets = 0;
    e.pinned = !BalancingPays(hops, ports);
    if (e.pinned) e.link = PickByWeight(hops, rng.Uniform(), /*by_queue=*/true, ports);
  }
  if (e.packets < std::numeric_limits<int32_t>::max()) ++e.packets;
  if (fresh && e.packets % kRowRecheckPackets == 0) {
    // The row may have changed under a long flowlet (a next hop's capacity cut below the line
    // rate, weights made uneven, or even again): from here the flowlet follows what it is now.
    e.pinned = !BalancingPays(hops, ports);
  }
  if (e.pinned) return e.link;
  const bool held = e.packets <= sticky_packets;
  if (config_.spray_long_flows && fresh && !held) {
    e.link = PickByWeight(hops, rng.Uniform(), /*by_queue=*/false, ports);
    return e.link;
  }
  const LinkId drill = ChooseDrill(hops, destination, rng, ports);
  if (!fresh || !held ||
      (drill != kNoLink &&
       ports.queued_bytes(e.link) - ports.queued_bytes(drill) > config_.reroute_threshold_bytes)) {
    e.link = drill;
  }
  return e.link;
}

template <LocalPortState Ports>
LinkId NextHopChooser::ChooseDrill(absl::Span<const NextHop> hops, NodeId destination, Random& rng,
                                   const Ports& ports) {
  LinkId best = kNoLink;
  LinkId* memory = nullptr;
  if (config_.drill_memory > 0) {
    if (drill_memory_.empty()) drill_memory_.assign(kDrillMemorySize, kNoLink);
    memory =
        &drill_memory_[Random::Hash(static_cast<uint64_t>(destination) ^ salt_) % kDrillMemorySize];
    if (*memory != kNoLink && ports.forwardable(*memory)) {
      for (const NextHop& h : hops) {
        if (h.link == *memory && h.weight > 0) best = *memory;
      }
    }
  }
  for (int i = 0; i < config_.drill_samples; ++i) {
    const LinkId c = PickByWeight(hops, rng.Uniform(), /*by_queue=*/false, ports);
    if (c == kNoLink) break;  // nothing forwardable
    if (best == kNoLink || ports.queued_bytes(c) < ports.queued_bytes(best)) best = c;
  }
  if (memory != nullptr && best != kNoLink) *memory = best;
  return best;
}

template <LocalPortState Ports>
LinkId NextHopChooser::Choose(absl::Span<const NextHop> hops, uint64_t flow, NodeId destination,
                              Time now, Random& rng, const Ports& ports, int traffic_class) {
  if (hops.empty()) return kNoLink;
  if (hops.size() == 1) return ports.forwardable(hops[0].link) ? hops[0].link : kNoLink;
  switch (config_.mode) {
    case ForwardingMode::kPerFlow: {
      const uint64_t h = Random::Hash(flow ^ salt_);
      return PickByWeight(hops, Random::ToUnit(h), /*by_queue=*/false, ports);
    }
    case ForwardingMode::kPerFlowlet:
      return ChooseFlowlet(hops, flow, destination, now, rng, ports);
    case ForwardingMode::kPerPacket:
      return PickByWeight(hops, rng.Uniform(), /*by_queue=*/true, ports);
    case ForwardingMode::kPerPacketP2C: {
      const LinkId a = PickByWeight(hops, rng.Uniform(), /*by_queue=*/false, ports);
      const LinkId b = PickByWeight(hops, rng.Uniform(), /*by_queue=*/false, ports);
      if (a == kNoLink || b == kNoLink) return a == kNoLink ? b : a;
      return ports.queued_bytes(b) < ports.queued_bytes(a) ? b : a;
    }
    case ForwardingMode::kDrill:
      return ChooseDrill(hops, destination, rng, ports);
    case ForwardingMode::kDrillFlowlet:
      return ChooseDrillFlowlet(
          hops, flow, destination, now, rng, ports,
          traffic_class == kBulkClass ? config_.bulk_sticky_packets : config_.sticky_packets);
  }
  return kNoLink;
}

}  // namespace dar

#endif  // DAR_CORE_NEXT_HOP_CHOOSER_H_
