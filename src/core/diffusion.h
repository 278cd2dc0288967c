// The diffusion engine: for every destination, a potential field over the nodes and, at every
// node, weighted next hops that only go downhill.
//
// Potentials. For destination d, nodes are settled in order of their cheapest-path cost to d
// (a Dijkstra pass over the link costs), and each node relaxes to a soft minimum over the
// neighbours settled before it:
//     psi(d) = 0,   psi(v) = -T ln sum_u exp(-(c(v,u) + psi(u)) / T)
// so psi(v) sits a little below the cheapest (c + psi) when several near-equal ways lead on,
// and equals it when one way is clearly best. T = 0 is the shortest-path special case.
// (The soft minimum is the free energy of entropy-regularised routing: Akamatsu 1996;
// Saerens et al., "Randomized shortest-path problems", Neural Computation 2009.)
//
// Next hops. A node's next hops toward d are the neighbours settled before it, weighted
// w(u) ~ exp(-(c(v,u) + psi(u) - psi(v)) / T): traffic spreads over near-equal paths and
// avoids costly ones. Every share is floored at `min_weight` before normalising, so the set of
// next hops changes only when the settling order does and pinned flows rarely have to move.
// The potential reported and checked, phi, is psi lifted (in settling order) just above the
// phi of every next hop. Settling order is a strict total order and every next hop was settled
// earlier, so phi strictly decreases along every forwarding path: tables are loop-free by
// construction, and every node that can reach d has a next hop.
//
// Incremental updates. A cost change on a link re-relaxes, per destination, only the nodes
// upstream of that link whose potential moves; a destination is recomputed whole when the
// change could reorder it (a new shortcut, a relaxed node now cheaper through a neighbour
// settled after it, or a node left without a downhill neighbour).
// Hysteresis keeps a node's previous next hops while the new weights differ little, so noise
// in the costs does not make routes flap.
//
// Speed (a full cycle touches every downhill arc of every destination): each destination keeps
// its downhill arcs as a bitmap over the out-arcs, so uphill ones are never looked at; the
// weights come from vector kernels (core/vector_exp.h); and hysteresis compares against a
// compact float copy of the installed weights, reading the table itself (far larger than the
// caches) only when that copy cannot decide exactly. Where a node's downhill arcs are a run of
// out-arcs toward consecutive nodes (a fat-tree numbers its switches so: every up-link set is
// one), one kernel call gathers them, weighs them and takes the hysteresis sum four arcs at a
// time, with the results of the arc-by-arc way to the bit. Each destination's per-node arrays
// are read in settling order, which the hardware cannot foresee, so the pass over one
// destination prefetches the next one's.
// The exps are factored: exp(-(c(v,u) + psi(u)) / T) = exp(-c(v,u) / T) * exp(-psi(u) / T),
// the first once per arc and cycle, the second once per node and destination — and that one
// is the node's soft-minimum sum itself, so it needs no exp either. A cycle then takes one exp
// per arc, not per arc and destination. Where the product leaves the range in which it is
// exact to rounding (psi / T in the hundreds: long or costly paths), or min_weight is below
// kShareMinWeightFloor, a node takes the direct way (one exp per downhill arc) instead; the
// two agree to rounding.
//
// Stub hosts (Topology::StubUplink) are never relaxed and get no rows; hosts never forward.
// Not thread-safe. Pure computation: no clock, no I/O.
#ifndef DAR_CORE_DIFFUSION_H_
#define DAR_CORE_DIFFUSION_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

struct VectorKernels;

struct DiffusionConfig {
  // Soft-minimum temperature, in cost units (a hop costs about 1). Larger spreads traffic over
  // paths that are further from the cheapest; 0 splits only over exactly equal paths.
  double temperature = 0.5;
  // The smallest share a next hop gets. Every downhill neighbour stays a next hop — so traffic
  // pinned to one (a flow, a flowlet) is not moved while the order holds — but one far
  // costlier than the best carries only about this share of new traffic.
  double min_weight = 0.001;
  // A node keeps its previous next hops and weights while they are all still downhill and the
  // new weights differ from them by less than this (sum of absolute differences).
  double hysteresis = 0.1;
};

// What the last ComputeAll or Update did.
struct DiffusionStats {
  int destinations_full = 0;         // destinations recomputed whole, order included
  int destinations_warm = 0;         // recomputed whole in their previous order
  int destinations_incremental = 0;  // destinations re-relaxed in part
  int64_t nodes_relaxed = 0;
  // Relaxations that computed their weights the direct way (one exp per downhill arc) while
  // the factored way was on, because a share or the sum left its exact range.
  int64_t nodes_direct = 0;
  int64_t route_changes = 0;  // (node, destination) rows whose next hops or weights changed
};

class DiffusionEngine {
 public:
  // The topology fixes the graph (nodes, links, which links exist); link state comes in as
  // costs. `topo` must outlive the engine.
  DiffusionEngine(const Topology& topo, const DiffusionConfig& config);
  // An engine for some of topo's destinations only: `destinations`, each one of
  // topo.Destinations(). Its tables list just them, and its potential toward any other is
  // +infinity. Destinations are computed one by one, each from its own state, so engines over
  // the parts of a split, side by side, compute what one engine over all computes, bit for bit.
  DiffusionEngine(const Topology& topo, const DiffusionConfig& config,
                  absl::Span<const NodeId> destinations);
  ~DiffusionEngine();

  // Recomputes every destination. `costs` has one entry per link: finite and > 0 for a usable
  // link, kUnusable (infinity) for a link that must not carry traffic (down, drained).
  // Warm start: each destination is first relaxed in its previous settling order, which is
  // kept if no node would now reach the destination more cheaply through a node ordered after
  // it; otherwise (or with `reorder`) the order is recomputed by a Dijkstra pass.
  void ComputeAll(absl::Span<const double> costs, bool reorder = false);
  // Recomputes after the costs of `changed` links moved (others as in the last call: only the
  // costs of `changed` are read). REQUIRES: ComputeAll has run once.
  void Update(absl::Span<const double> costs, absl::Span<const LinkId> changed);

  // The current tables, for topo.Destinations(); destinations that did not change since the
  // last call share their table with the previous version.
  RoutingTables Tables(uint64_t version) const;
  // Potential of `node` toward `dest` (+infinity if it cannot reach it). A stub host reads
  // its switch's potential.
  double Potential(NodeId dest, NodeId node) const;
  // Whether this engine computes routes toward `dest`.
  bool Computes(NodeId dest) const {
    return dest >= 0 && static_cast<size_t>(dest) < dest_index_.size() && dest_index_[dest] >= 0;
  }

  const DiffusionStats& stats() const { return stats_; }
  const DiffusionConfig& config() const { return config_; }

 private:
  struct Arc {
    LinkId link;
    int32_t node;  // core index of the other end
    LinkId twin;   // a link from `node` back to this one, paired one to one; kNoLink if none
  };
  struct DestState {
    NodeId node = kNoNode;
    int32_t core = -1;
    std::vector<int32_t> order;      // core indices in settling order, d first
    std::vector<int32_t> rank;       // by core index: position in order; -1 = cannot reach
    std::vector<double> dist;        // cheapest-path cost
    std::vector<double> dist_floor;  // dist less a hair: reaching v for less reorders d
    std::vector<double> psi;         // soft minimum (free energy): what the weights come from
    std::vector<double> phi;         // potential: psi lifted just above every next hop's phi
    // exp(-psi / T) where it lies in [kShareZMin, kShareZMax] (factored_ only); NaN elsewhere,
    // which makes every node relaxed over it take the direct way.
    std::vector<double> boltz;
    // One bit per out-arc slot (out_): the arc leads to a node settled earlier that forwards
    // (or is d), so it may be a next hop if its link is usable. Follows the order (Settle).
    std::vector<uint64_t> downhill;
    // A compact copy of the table's rows for hysteresis, so a cycle need not read the table
    // (far larger than the caches). Where mirrored[v], v's row has exactly v's usable downhill
    // arcs as next hops, and installed[] holds its weights (as float) at v's out-arc slots.
    std::vector<uint8_t> mirrored;
    std::vector<float> installed;
    DestinationTablePtr table;
  };
  enum class RelaxResult { kOk, kNoNextHop, kReordered };
  class MinHeap;

  // Per-arc copies of `costs` for the relaxations (arc_cost_, arc_twin_cost_, usability): of
  // every arc, or of the arcs of `links` and of their twins.
  void LoadCosts(absl::Span<const double> costs);
  void LoadCosts(absl::Span<const double> costs, absl::Span<const LinkId> links);
  void LoadArc(uint32_t slot, absl::Span<const double> costs);
  void MarkUnusable(int32_t v);  // has_unusable_[v] from usable_
  // arc_boltz_ from arc_cost_ over out-arc slots [first, first + n).
  void LoadBoltz(uint32_t first, uint32_t n);
  // exp(-psi / T) as kept in DestState::boltz: NaN outside [kShareZMin, kShareZMax].
  double Boltz(double psi) const;
  // Settling order, ranks and cheapest-path costs of d (Dijkstra from d over in-links), and
  // the downhill arcs that follow from the order.
  void Settle(DestState& d, absl::Span<const double> costs);
  void MarkDownhill(DestState& d) const;
  // Relaxes every node of d in its current order: potentials, new rows, hysteresis. With
  // check_order, false as soon as the order is no longer right for `costs` (a node reaches d
  // more cheaply through a neighbour ordered after it, or a node outside the order can now
  // reach it). Also false if a node lost every downhill neighbour.
  bool SoftPass(DestState& d, absl::Span<const double> costs, bool check_order);
  void ComputeDestination(DestState& d, absl::Span<const double> costs, bool reorder);
  // Prefetches the `line`-th cache line of each of d's per-node arrays that SoftPass reads in
  // settling order (which the hardware cannot foresee): a pass over one destination warms the
  // next one, a line per node relaxed.
  void PrefetchDestLine(const DestState& d, size_t line) const;
  // Re-relaxes d upstream of `seeds`; false if d must be recomputed whole.
  bool RelaxRegion(DestState& d, absl::Span<const double> costs, std::vector<int32_t>& seeds);
  // Relaxes node v of d from its downhill neighbours (the costs of the last LoadCosts): its
  // soft minimum `psi` (and hop_boltz_), its cheapest-path cost `dist`, and its new row in the
  // hop_* scratch.
  // With check_twins, also reports kReordered if a node settled before v now reaches d more
  // cheaply through v (checked over the twins of v's downhill arcs).
  RelaxResult Relax(const DestState& d, int32_t v, bool check_twins, double& psi, double& dist);
  // The number of v's downhill arcs toward d if they are one run of slots to consecutive
  // nodes (arc_run_) within one bitmap word, from `slot` on; 0 if they are not.
  uint32_t DownhillRun(const DestState& d, int32_t v, uint32_t& slot) const;
  // Relax over such a run of r >= 2 arcs from slot s: four arcs at a time (RunWeights), with
  // the same results. REQUIRES: factored_, no unusable out-arc at v.
  RelaxResult RelaxRun(const DestState& d, int32_t v, bool twins, uint32_t s, uint32_t r,
                       double& psi, double& dist);
  struct Gathered;
  // v's downhill arcs into hop_link_ and hop_x_, and what Relax needs to know about them.
  template <bool kCheckTwins, bool kFactored>
  void Gather(const DestState& d, int32_t v, Gathered& g);
  // Whether d's order is broken by a link the twin checks do not cover (no twin, or from a
  // host), or by a node outside the order that can now reach a node in it.
  bool OrderBrokenOutsideTwins(const DestState& d, absl::Span<const double> costs) const;
  // Settles v's row after Relax: the new one, or its row in d's table where hysteresis says so.
  // Sets changed_[v], stores a row BuildTable will take in hops_ and row_len_, and keeps d's
  // mirror up to date. Returns v's potential: `psi` raised, if need be, strictly above the
  // potential of every next hop kept.
  double Commit(DestState& d, int32_t v, double psi, absl::Span<const double> costs);
  // Hysteresis from d's mirror alone, if it can tell: 1 keeps the table's row, 0 takes the new
  // one, -1 if the table must be read (no mirror, other next hops, or too close to call).
  int MirrorSays(const DestState& d, int32_t v) const;
  // Whether hysteresis keeps `prev`, v's row in d's table, over its new row; sets `changed`
  // if it does not and the rows differ, and `same_hops` if both rows have the same next hops.
  bool KeepsOldRow(const DestState& d, int32_t v, absl::Span<const NextHop> prev,
                   absl::Span<const double> costs, bool& changed, bool& same_hops) const;
  // Whether arc a out of v may be a next hop toward d: usable, toward a node settled before v
  // that forwards (or is d itself).
  bool Downhill(const DestState& d, int32_t v, const Arc& a, absl::Span<const double> costs) const {
    const int32_t u = a.node;
    return d.rank[u] >= 0 && d.rank[u] < d.rank[v] && (forwards_[u] || u == d.core) &&
           costs[a.link] < std::numeric_limits<double>::infinity();
  }
  // v's row as stored by Commit: a slice of hops_ at v's first out-arc.
  absl::Span<const NextHop> NewRow(int32_t v) const {
    return absl::Span<const NextHop>(&hops_[out_begin_[v]], row_len_[v]);
  }
  // d's next table: blocks with a changed row (changed_) are rebuilt, the others shared with
  // the current table. Counts route changes.
  DestinationTablePtr BuildTable(const DestState& d);

  const Topology& topo_;
  DiffusionConfig config_;
  const VectorKernels& kernels_;  // chosen once for this CPU
  std::vector<int32_t> core_of_;  // node -> core index, -1 for stub hosts
  std::shared_ptr<const DestinationTable::RowMap> row_of_node_;  // core_of_, for the tables
  std::vector<NodeId> node_of_;                                  // core index -> node
  std::vector<int32_t> link_dst_core_;  // link -> core index of its head, -1
  std::vector<uint8_t> forwards_;       // by core index: may carry transit traffic
  std::vector<uint32_t> out_begin_, in_begin_;
  std::vector<Arc> out_, in_;  // CSR by core index
  // By out-arc slot, what relaxing over the arc reads, with the costs of the current call
  // (LoadCosts): the far end, the link, its cost (infinite if unusable) and the twin's cost
  // (infinite if none). Separate arrays, so the innermost loop indexes them by slot directly
  // and a run of arcs (arc_run_) is read four at a time.
  std::vector<int32_t> arc_node_;
  std::vector<LinkId> arc_link_;
  std::vector<double> arc_cost_, arc_twin_cost_;
  std::vector<double> arc_boltz_;  // exp(-cost / T); 0 if unusable (only if factored_)
  // By out-arc slot s: how many slots from s on, all out of one node, lead to consecutive
  // nodes (arc_node_[s + i] == arc_node_[s] + i), capped at 255 (a run Relax takes is at most
  // kMaxRun). Where a node's downhill arcs are such a run (a fat-tree's up-links, for one),
  // Relax takes them four at a time (RelaxRun).
  std::vector<uint8_t> arc_run_;
  // Weights from factored shares (ShareWeights): T > 0 and min_weight >= kShareMinWeightFloor.
  bool factored_ = false;
  std::vector<uint8_t> usable_;        // by out-arc slot
  std::vector<uint8_t> has_unusable_;  // by core index: an out-link is unusable
  std::vector<int32_t> slot_of_link_;  // link -> its out-arc slot; -1 if not between cores
  // Links between cores the twin checks do not cover: no twin, or leaving a host.
  std::vector<std::pair<int32_t, Arc>> irregular_;  // (tail core, arc)
  std::vector<DestState> dests_;
  const DestState* next_dest_ = nullptr;  // what ComputeAll computes next, for SoftPass to warm
  std::vector<int32_t> dest_index_;       // node -> index into dests_, -1
  DiffusionStats stats_;

  // Scratch, reused across destinations so steady-state cycles do not allocate.
  std::vector<NextHop> hops_;      // rows for BuildTable, by out-arc slot (a row fits its node)
  std::vector<uint32_t> row_len_;  // by core index
  std::vector<uint8_t> changed_;   // by core index: the new row differs from the table's
  // The node in hand (Relax): per downhill arc, its link and cost + psi (with factored_, only
  // filled where the direct way needs it); then per next hop of the new row (the first
  // hop_count_), link and weight, and the highest next hop potential.
  std::vector<LinkId> hop_link_;
  std::vector<double> hop_x_, hop_weight_;
  std::vector<double> hop_share_;  // per downhill arc: exp(-(cost + psi) / T), if factored_
  double hop_boltz_ = 0;           // the node's exp(-psi / T), as kept in DestState::boltz
  // The hysteresis sum against d's mirror (MirrorSays), if the weights pass computed it; NaN
  // if not.
  double hop_diff_ = 0;
  uint32_t hop_count_ = 0;
  double hop_top_ = 0;
  bool hop_all_ = false;          // the new row has every usable downhill arc of the node
  std::vector<int32_t> touched_;  // cores relaxed by RelaxRegion
  std::unique_ptr<MinHeap> heap_;
  std::vector<uint8_t> queued_;
};

}  // namespace dar

#endif  // DAR_CORE_DIFFUSION_H_
