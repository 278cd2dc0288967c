// CONGA (Alizadeh et al., "CONGA: Distributed Congestion-Aware Load Balancing for
// Datacenters", SIGCOMM 2014) as a baseline: leaf-to-leaf congestion feedback carried in
// packets, and new flowlets placed on the least congested path. Model and simplifications:
// docs/baselines.md.
//
// - Every link measures its load with a discounting rate estimator (DRE): a register X that
//   grows by every byte sent and decays as X·exp(-α·t/T_dre), so X ≈ rate·τ with
//   τ = T_dre/α; its congestion metric is X / (capacity·τ), quantised to Q bits.
// - A leaf is the switch a host hangs off. The source leaf picks, at a flowlet's start (a
//   packet more than `flowlet_gap` after its flow's previous one), the next hop whose path
//   metric max(local DRE of the uplink, remote metric for (destination leaf, uplink)) is
//   least, ties at random; the packet carries the uplink's index (LBTag) and CE = 0, and every
//   link it crosses raises CE to its own metric.
// - The destination leaf stores CE per (source leaf, LBTag) in its congestion-from-leaf table
//   and piggybacks one entry of it (a changed one first, else round robin) on each packet it
//   sends toward that leaf; the source leaf stores it in its congestion-to-leaf table.
//   Entries not refreshed for `aging` count as 0.
// - A leaf's uplinks are its links to switches, numbered from 0 (at most 256: LBTag is a byte).
// - Only the source leaf's choice is CONGA's; the other switches forward as the routing
//   table and their forwarding mode say (ECMP per-flow hashing under the `conga` policy).
#ifndef DAR_SIM_CONGA_H_
#define DAR_SIM_CONGA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/config_reader.h"
#include "core/random.h"
#include "sim/control_plane.h"
#include "sim/link_state_routing.h"
#include "sim/network.h"

namespace dar::sim {

struct CongaConfig {
  // The paper's parameters: τ = T_dre/α = 160 µs, Q = 3 bits, flowlet gap 500 µs.
  Duration dre_period = Microseconds(16);  // T_dre
  double dre_alpha = 0.1;
  int quantization_bits = 3;
  Duration flowlet_gap = Microseconds(500);
  Duration aging = Milliseconds(10);  // a remote metric not refreshed this long counts as 0
  int flowlet_table_size = 4096;      // per leaf, indexed by a hash of (flow, destination)
};

// Reads the keys dre_period, dre_alpha, quantization_bits, flowlet_gap, aging from `r`.
absl::StatusOr<CongaConfig> ReadCongaConfig(YamlReader& r);

// The switches' CONGA logic for one network. Not thread-safe.
class CongaBalancer : public FabricBalancer {
 public:
  CongaBalancer(const Network& net, const CongaConfig& config, uint64_t seed);

  LinkId Choose(NodeId node, Packet& p, absl::Span<const NextHop> hops, Time now) override;
  void OnTransmit(LinkId link, Packet& p, Time now) override;
  void OnLastSwitch(NodeId node, Packet& p, Time now) override;

  // The quantised congestion metric of `link` at `now` (0 .. 2^Q - 1).
  uint8_t LinkMetric(LinkId link, Time now);

  int64_t flowlets() const { return flowlets_; }
  int64_t feedback_received() const { return feedback_; }

 private:
  struct Dre {
    double bytes = 0;  // X
    Time at{0};        // when X was last brought up to date
  };
  struct Remote {
    uint8_t metric = 0;
    bool changed = false;
    Time at{-1};  // when it was last set
  };
  struct Pair {                     // one (leaf, other leaf)
    std::vector<Remote> to_leaf;    // by this leaf's uplink: its paths toward the other
    std::vector<Remote> from_leaf;  // by the other's uplink: its paths toward this leaf
    size_t next_feedback = 0;
  };
  struct Flowlet {
    uint64_t key = 0;
    Time last_seen{-1};
    LinkId link = kNoLink;
  };

  Pair& PairOf(NodeId leaf, NodeId other) {
    return pairs_[static_cast<size_t>(leaf_index_[leaf]) * num_leaves_ + leaf_index_[other]];
  }
  void Decay(LinkId link, Time now);
  void AddFeedback(Pair& pair, Packet& p);

  const Network& net_;
  CongaConfig config_;
  Random rng_;
  double decay_per_ns_;  // α / T_dre
  uint8_t max_metric_;
  std::vector<NodeId> leaf_of_;  // by node: the switch a host hangs off
  std::vector<int> leaf_index_;  // by node: its index among the leaves, or -1
  size_t num_leaves_ = 0;
  std::vector<int> uplink_index_;  // by link: its index among its tail's links to switches
  std::vector<Dre> dre_;           // by link
  std::vector<std::vector<Flowlet>> flowlets_table_;  // by leaf index; empty until used
  std::vector<Pair> pairs_;                           // by (leaf index, other leaf index)
  int64_t flowlets_ = 0;
  int64_t feedback_ = 0;
};

// The `conga` policy: ECMP tables from the link-state protocol, CONGA in the switches.
class CongaRouting : public ControlPlane {
 public:
  CongaRouting(const CongaConfig& config, const LinkStateConfig& link_state);

  void Start(ControlContext& ctx) override;
  void OnLinkChange(LinkId link) override { routing_.OnLinkChange(link); }
  void Report(nlohmann::json& metrics) const override;

 private:
  CongaConfig config_;
  LinkStateRouting routing_;
  const CongaBalancer* balancer_ = nullptr;  // owned by the network
};

}  // namespace dar::sim

#endif  // DAR_SIM_CONGA_H_
