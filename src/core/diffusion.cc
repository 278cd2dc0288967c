// One concept at about 900 lines: the diffusion engine's per-destination computation (settle,
// relax, incremental update, table building). Its parts share the engine's private state and
// the hot loop's memory layout (prefetching, row blocks); split, they would need that state
// exposed to each other.
#include "core/diffusion.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/units.h"
#include "core/vector_exp.h"

namespace dar {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Strictly above `phi` by a relative hair, so that "downhill" survives rounding.
double Above(double phi) { return phi + 1e-9 * std::max(1.0, std::abs(phi)); }

// Prefetches for reading d's previous table in settling order (Commit), which jumps between
// blocks: a block's offsets a few nodes ahead, then the row itself once its place is known.
void PrefetchBlock(const DestinationTable& table, uint32_t row) {
  const char* b =
      reinterpret_cast<const char*>(table.blocks()[row / DestinationTable::kRowsPerBlock].get());
  __builtin_prefetch(b);
  __builtin_prefetch(b + sizeof(DestinationTable::Block) - 1);
}

void PrefetchRow(const DestinationTable& table, uint32_t row) {
  const absl::Span<const NextHop> r = table.Row(row);
  // Each cache line (64 bytes) the row touches, from the one it starts in. Addresses as
  // integers: a pointer before the row's start would be undefined.
  const uintptr_t end = reinterpret_cast<uintptr_t>(r.data() + r.size());
  for (uintptr_t p = reinterpret_cast<uintptr_t>(r.data()) & ~uintptr_t{63}; p < end; p += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(p));  // NOLINT(performance-no-int-to-ptr)
  }
}

// Below a finite cheapest-path cost by the same hair: a node reached for less than this through
// a node settled after it breaks the settling order.
double Floor(double dist) { return dist - 1e-9 * std::max(1.0, dist); }

}  // namespace

// A binary min-heap of core indices keyed by distance, with decrease-key: each node enters
// at most once per pass. Ties go to the lower index, so passes are deterministic.
class DiffusionEngine::MinHeap {
 public:
  explicit MinHeap(size_t n) : pos_(n, -1) {}
  bool empty() const { return items_.empty(); }
  // Inserts v, or lowers its key if it is queued with a larger one.
  void Push(int32_t v, double key) {
    if (pos_[v] < 0) {
      pos_[v] = static_cast<int32_t>(items_.size());
      items_.push_back(Item{key, v});
      Up(pos_[v]);
    } else if (key < items_[pos_[v]].key) {
      items_[pos_[v]].key = key;
      Up(pos_[v]);
    }
  }
  int32_t Pop() {
    const int32_t top = items_[0].v;
    pos_[top] = -1;
    const Item last = items_.back();
    items_.pop_back();
    if (!items_.empty()) {
      Place(0, last);
      Down(0);
    }
    return top;
  }

 private:
  struct Item {
    double key;
    int32_t v;
  };
  static bool Less(const Item& a, const Item& b) {
    return a.key < b.key || (a.key == b.key && a.v < b.v);
  }
  void Place(size_t i, const Item& it) {
    items_[i] = it;
    pos_[it.v] = static_cast<int32_t>(i);
  }
  void Up(size_t i) {
    const Item it = items_[i];
    while (i > 0 && Less(it, items_[(i - 1) / 2])) {
      Place(i, items_[(i - 1) / 2]);
      i = (i - 1) / 2;
    }
    Place(i, it);
  }
  void Down(size_t i) {
    const Item it = items_[i];
    const size_t n = items_.size();
    while (2 * i + 1 < n) {
      size_t c = 2 * i + 1;
      if (c + 1 < n && Less(items_[c + 1], items_[c])) ++c;
      if (!Less(items_[c], it)) break;
      Place(i, items_[c]);
      i = c;
    }
    Place(i, it);
  }

  std::vector<int32_t> pos_;  // by node: index in items_, or -1
  std::vector<Item> items_;
};

DiffusionEngine::~DiffusionEngine() = default;

DiffusionEngine::DiffusionEngine(const Topology& topo, const DiffusionConfig& config)
    : DiffusionEngine(topo, config, topo.Destinations()) {}

DiffusionEngine::DiffusionEngine(const Topology& topo, const DiffusionConfig& config,
                                 absl::Span<const NodeId> destinations)
    : topo_(topo), config_(config), kernels_(ChosenKernels()) {
  const int n = topo.num_nodes();
  core_of_.assign(n, -1);
  for (NodeId v = 0; v < n; ++v) {
    if (topo.StubUplink(v) != kNoLink) continue;
    core_of_[v] = static_cast<int32_t>(node_of_.size());
    node_of_.push_back(v);
    forwards_.push_back(topo.node(v).kind != NodeKind::kHost);
  }
  row_of_node_ = std::make_shared<const DestinationTable::RowMap>(core_of_);
  const int32_t cores = static_cast<int32_t>(node_of_.size());
  link_dst_core_.resize(topo.num_links());
  for (LinkId l = 0; l < topo.num_links(); ++l) link_dst_core_[l] = core_of_[topo.link(l).dst];
  // Twins: the k-th link u -> v pairs with the k-th link v -> u (parallel links pair in id
  // order). A link left unpaired is checked on its own (irregular_).
  std::vector<LinkId> twin(topo.num_links(), kNoLink);
  {
    std::vector<std::pair<std::pair<NodeId, NodeId>, LinkId>> ends;
    ends.reserve(static_cast<size_t>(topo.num_links()));
    for (LinkId l = 0; l < topo.num_links(); ++l)
      ends.push_back({{topo.link(l).src, topo.link(l).dst}, l});
    std::sort(ends.begin(), ends.end());
    std::vector<size_t> taken(ends.size(), 0);
    for (size_t i = 0; i < ends.size(); ++i) {
      if (twin[ends[i].second] != kNoLink) continue;
      const std::pair<NodeId, NodeId> back = {ends[i].first.second, ends[i].first.first};
      auto it = std::lower_bound(ends.begin(), ends.end(), std::make_pair(back, LinkId{-1}));
      while (it != ends.end() && it->first == back && twin[it->second] != kNoLink) ++it;
      if (it == ends.end() || it->first != back || it->second == ends[i].second) continue;
      twin[ends[i].second] = it->second;
      twin[it->second] = ends[i].second;
    }
  }
  out_begin_.assign(cores + 1, 0);
  in_begin_.assign(cores + 1, 0);
  size_t max_degree = 0;
  for (int32_t c = 0; c < cores; ++c) {
    const Node& node = topo.node(node_of_[c]);
    for (LinkId l : node.out_links) {
      const int32_t u = core_of_[topo.link(l).dst];
      if (u < 0) continue;
      out_.push_back(Arc{l, u, twin[l]});
      if (twin[l] == kNoLink || !forwards_[c]) irregular_.push_back({c, out_.back()});
    }
    out_begin_[c + 1] = static_cast<uint32_t>(out_.size());
    max_degree = std::max<size_t>(max_degree, out_begin_[c + 1] - out_begin_[c]);
    for (LinkId l : node.in_links) {
      const int32_t w = core_of_[topo.link(l).src];
      if (w >= 0) in_.push_back(Arc{l, w, twin[l]});
    }
    in_begin_[c + 1] = static_cast<uint32_t>(in_.size());
  }
  dest_index_.assign(n, -1);
  for (NodeId d : destinations) {
    assert(d >= 0 && d < n && core_of_[d] >= 0 && dest_index_[d] < 0);
    dest_index_[d] = static_cast<int32_t>(dests_.size());
    DestState s;
    s.node = d;
    s.core = core_of_[d];
    s.rank.assign(cores, -1);
    s.dist.assign(cores, kInfinity);
    s.dist_floor.assign(cores, kInfinity);
    s.phi.assign(cores, kInfinity);
    s.psi.assign(cores, kInfinity);
    s.boltz.assign(cores, kNaN);
    s.downhill.assign((out_.size() + 63) / 64, 0);
    s.mirrored.assign(cores, 0);
    s.installed.assign(out_.size(), 0);
    dests_.push_back(std::move(s));
  }
  hops_.resize(out_.size());
  row_len_.assign(cores, 0);
  changed_.assign(cores, 0);
  slot_of_link_.assign(topo.num_links(), -1);
  for (const Arc& a : out_) {
    slot_of_link_[a.link] = static_cast<int32_t>(arc_node_.size());
    arc_node_.push_back(a.node);
    arc_link_.push_back(a.link);
  }
  arc_run_.assign(out_.size(), 1);
  for (int32_t c = 0; c < cores; ++c) {
    for (uint32_t i = out_begin_[c + 1]; i-- > out_begin_[c];) {
      if (i + 1 < out_begin_[c + 1] && arc_node_[i + 1] == arc_node_[i] + 1) {
        arc_run_[i] = static_cast<uint8_t>(std::min(255, arc_run_[i + 1] + 1));
      }
    }
  }
  arc_cost_.assign(out_.size(), kInfinity);
  arc_twin_cost_.assign(out_.size(), kInfinity);
  has_unusable_.assign(cores, 1);
  usable_.assign(out_.size(), 0);
  hop_link_.resize(max_degree);
  hop_x_.resize(max_degree);
  hop_weight_.resize(max_degree);
  hop_share_.resize(max_degree);
  factored_ = config.temperature > 0 && config.min_weight >= kShareMinWeightFloor;
  arc_boltz_.assign(out_.size(), 0);
  queued_.assign(cores, 0);
  heap_ = std::make_unique<MinHeap>(cores);
}

void DiffusionEngine::LoadArc(uint32_t slot, absl::Span<const double> costs) {
  const Arc& a = out_[slot];
  arc_cost_[slot] = costs[a.link];
  arc_twin_cost_[slot] = a.twin == kNoLink ? kInfinity : costs[a.twin];
  const bool usable = arc_cost_[slot] < kInfinity;
  if (usable != usable_[slot]) {  // the tail's usable downhill arcs may differ from its mirror
    usable_[slot] = usable;
    const int32_t v = core_of_[topo_.link(a.link).src];
    for (DestState& d : dests_) d.mirrored[v] = 0;
  }
}

void DiffusionEngine::LoadBoltz(uint32_t first, uint32_t n) {
  if (!factored_) return;
  const double inv_t = 1 / config_.temperature;
  double* b = &arc_boltz_[first];
  for (uint32_t i = 0; i < n; ++i) b[i] = -arc_cost_[first + i] * inv_t;  // -inf if unusable
  kernels_.exp_non_positive(b, b, n);
}

double DiffusionEngine::Boltz(double psi) const {
  const double b = std::exp(-psi / config_.temperature);
  return b >= kShareZMin && b <= kShareZMax ? b : kNaN;
}

void DiffusionEngine::MarkUnusable(int32_t v) {
  has_unusable_[v] = 0;
  for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) has_unusable_[v] |= !usable_[i];
}

void DiffusionEngine::LoadCosts(absl::Span<const double> costs) {
  for (uint32_t i = 0; i < out_.size(); ++i) LoadArc(i, costs);
  LoadBoltz(0, static_cast<uint32_t>(out_.size()));
  for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) MarkUnusable(v);
}

void DiffusionEngine::LoadCosts(absl::Span<const double> costs, absl::Span<const LinkId> links) {
  for (LinkId l : links) {
    const int32_t s = slot_of_link_[l];
    if (s < 0) continue;
    LoadArc(s, costs);
    LoadBoltz(static_cast<uint32_t>(s), 1);
    if (out_[s].twin != kNoLink) {  // its twin cost
      const int32_t t = slot_of_link_[out_[s].twin];
      LoadArc(t, costs);
      LoadBoltz(static_cast<uint32_t>(t), 1);
    }
    MarkUnusable(core_of_[topo_.link(l).src]);
  }
}

struct DiffusionEngine::Gathered {
  uint32_t n = 0;             // downhill arcs, in hop_link_ (and hop_x_ or hop_share_)
  double m = kInfinity;       // the least cost + psi: the cheapest way on (direct gather only)
  double dist = kInfinity;    // cheapest-path cost through them
  double top = -kInfinity;    // the highest potential at their far ends
  double slack = -kInfinity;  // with twin checks: the order is broken if dist < slack
};

// The engine's innermost loop: once per downhill arc, destination and cycle.
template <bool kCheckTwins, bool kFactored>
void DiffusionEngine::Gather(const DestState& d, int32_t v, Gathered& g) {
  LinkId* link = hop_link_.data();
  double* x = hop_x_.data();
  double* share = hop_share_.data();
  const double *arc_boltz = arc_boltz_.data(), *boltz = d.boltz.data();
  const int32_t* node = arc_node_.data();
  const LinkId* arc_link = arc_link_.data();
  const double *cost = arc_cost_.data(), *twin_cost = arc_twin_cost_.data();
  const double *psi = d.psi.data(), *dist = d.dist.data(), *phi = d.phi.data();
  const double* dist_floor = d.dist_floor.data();
  uint32_t n = 0;
  // std::min(new, old) and std::max(new, old) are what minsd and maxsd compute in place.
  double m = kInfinity, best = kInfinity, top = -kInfinity, slack = -kInfinity;
  // The set bits of d.downhill over v's out-arc slots [begin, end).
  const size_t begin = out_begin_[v], end = out_begin_[v + 1];
  const size_t first = begin / 64, last = end == begin ? first : (end - 1) / 64;
  for (size_t w = first; w <= last && begin < end; ++w) {
    uint64_t bits = d.downhill[w];
    if (w == first) bits &= ~uint64_t{0} << (begin % 64);
    if (w == last) bits &= ~uint64_t{0} >> (63 - (end - 1) % 64);
    for (; bits != 0; bits &= bits - 1) {
      const size_t s = w * 64 + static_cast<size_t>(std::countr_zero(bits));
      const int32_t u = node[s];
      const double c = cost[s];
      best = std::min(c + dist[u], best);
      top = std::max(phi[u], top);
      // The twin u -> v breaks the order if twin_cost + dist(v) < dist_floor(u).
      if constexpr (kCheckTwins) slack = std::max(dist_floor[u] - twin_cost[s], slack);
      link[n] = arc_link[s];
      if constexpr (kFactored) {  // x is filled only where needed (Relax)
        share[n++] = arc_boltz[s] * boltz[u];
      } else {
        const double xu = c + psi[u];
        m = std::min(xu, m);
        x[n++] = xu;
      }
    }
  }
  g = Gathered{n, m, best, top, slack};
}

uint32_t DiffusionEngine::DownhillRun(const DestState& d, int32_t v, uint32_t& slot) const {
  const uint32_t begin = out_begin_[v], end = out_begin_[v + 1];
  if (begin == end || begin / 64 != (end - 1) / 64) return 0;
  uint64_t bits = d.downhill[begin / 64];
  bits &= (~uint64_t{0} << (begin % 64)) & (~uint64_t{0} >> (63 - (end - 1) % 64));
  if (bits == 0) return 0;
  const int skip = std::countr_zero(bits);
  const uint64_t run = bits >> skip;
  if ((run & (run + 1)) != 0) return 0;  // not one block of set bits
  const uint32_t r = static_cast<uint32_t>(std::countr_one(run));
  slot = begin / 64 * 64 + static_cast<uint32_t>(skip);
  return arc_run_[slot] >= r ? r : 0;
}

DiffusionEngine::RelaxResult DiffusionEngine::RelaxRun(const DestState& d, int32_t v, bool twins,
                                                       uint32_t s, uint32_t r, double& psi,
                                                       double& dist) {
  const int32_t u = arc_node_[s];
  const RunInputs in{&arc_cost_[s], &arc_twin_cost_[s], &arc_boltz_[s], &arc_link_[s],
                     &d.dist[u],    &d.dist_floor[u],   &d.phi[u],      &d.boltz[u]};
  // With v's row mirrored, the weights pass also takes the hysteresis sum (MirrorSays).
  const float* installed = d.mirrored[v] ? &d.installed[out_begin_[v]] : nullptr;
  double* w = hop_weight_.data();
  const RunResult run =
      kernels_.run_weights(in, r, config_.min_weight, installed, w, hop_link_.data());
  if (!(run.best < kInfinity)) return RelaxResult::kNoNextHop;
  if (twins && run.best < run.slack) return RelaxResult::kReordered;
  dist = run.best;
  const double t = config_.temperature;
  if (run.z >= kShareZMin && run.z <= kShareZMax) {
    psi = -t * std::log(run.z);
    hop_boltz_ = run.z;
    hop_diff_ = installed != nullptr ? run.diff : kNaN;
  } else {  // the direct way, as Relax takes it
    double* x = hop_x_.data();
    double m = kInfinity;
    for (uint32_t i = 0; i < r; ++i) {
      x[i] = arc_cost_[s + i] + d.psi[u + i];
      m = std::min(x[i], m);
    }
    const double z = kernels_.soft_min_weights(x, w, r, m, 1 / t, config_.min_weight);
    psi = m - t * std::log(z);
    hop_boltz_ = Boltz(psi);
    hop_diff_ = kNaN;
    ++stats_.nodes_direct;
  }
  hop_count_ = r;  // min_weight > 0 (factored_): every arc keeps a share
  hop_all_ = true;
  hop_top_ = run.top;
  return RelaxResult::kOk;
}

DiffusionEngine::RelaxResult DiffusionEngine::Relax(const DestState& d, int32_t v, bool check_twins,
                                                    double& psi, double& dist) {
  hop_count_ = 0;
  Gathered g;
  // The order holds at v's downhill neighbours u if none of them now reaches d more cheaply
  // through v (over the twin u -> v) than the way it was settled. Nobody goes through a host.
  const bool twins = check_twins && forwards_[v];
  if (factored_ && !has_unusable_[v]) {
    uint32_t s = 0;
    const uint32_t r = DownhillRun(d, v, s);
    if (r >= 2) return RelaxRun(d, v, twins, s, r, psi, dist);
  }
  if (factored_) {
    twins ? Gather<true, true>(d, v, g) : Gather<false, true>(d, v, g);
  } else {
    twins ? Gather<true, false>(d, v, g) : Gather<false, false>(d, v, g);
  }
  if (!((factored_ ? g.dist : g.m) < kInfinity)) return RelaxResult::kNoNextHop;
  if (g.dist < g.slack) return RelaxResult::kReordered;
  dist = g.dist;
  LinkId* link = hop_link_.data();
  double* x = hop_x_.data();
  double* share = hop_share_.data();
  uint32_t n = g.n;
  if (has_unusable_[v]) {  // drop the unusable links
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (factored_ ? arc_cost_[slot_of_link_[link[i]]] < kInfinity : x[i] < kInfinity) {
        link[k] = link[i];
        share[k] = share[i];
        x[k++] = x[i];
      }
    }
    n = k;
  }
  hop_boltz_ = kNaN;
  hop_diff_ = kNaN;
  double m = g.m;
  // The factored gather leaves x alone: fills x and m, as the direct way has them.
  auto complete = [&] {
    if (!factored_) return;
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = arc_cost_[slot_of_link_[link[i]]] + d.psi[link_dst_core_[link[i]]];
      m = std::min(x[i], m);
    }
  };
  const double t = config_.temperature;
  double* w = hop_weight_.data();
  uint32_t kept = 0;
  if (t <= 0) {
    const double tie = 1e-9 * std::max(1.0, std::abs(m));
    for (uint32_t i = 0; i < n; ++i) {
      if (x[i] <= m + tie) link[kept++] = link[i];
    }
    for (uint32_t i = 0; i < kept; ++i) w[i] = 1.0 / kept;
    psi = m;
  } else if (n == 1) {  // what the general case gives: exp(0) = 1, ln 1 = 0
    complete();
    w[0] = 1;
    psi = m;
    kept = 1;
    if (factored_) {
      hop_boltz_ = share[0] >= kShareZMin && share[0] <= kShareZMax ? share[0] : Boltz(psi);
    }
  } else {
    // Every downhill neighbour (settled earlier) stays a next hop, so traffic pinned to one (a
    // flow, a flowlet) never has to move while the settling order holds; one far costlier
    // than the best is floored at min_weight before the final normalisation. The potential
    // is then lifted above any next hop it would fall below (Commit). With min_weight 0, a
    // share that underflows to 0 is dropped.
    // Factored: the shares are exp(-(c + psi(u)) / T), their sum is exp(-psi / T). Outside the
    // range where that is exact to rounding (or if a neighbour was), the direct way: shares
    // relative to the best, exp((m - x) / T).
    // With v's row mirrored, the weights pass also takes the hysteresis sum (MirrorSays).
    const float* installed = d.mirrored[v] ? &d.installed[out_begin_[v]] : nullptr;
    const double zf =
        factored_ ? kernels_.share_weights(share, w, n, config_.min_weight, installed, &hop_diff_)
                  : kNaN;
    if (zf >= kShareZMin && zf <= kShareZMax) {
      psi = -t * std::log(zf);
      hop_boltz_ = zf;
    } else {
      complete();
      hop_diff_ = kNaN;
      const double z = kernels_.soft_min_weights(x, w, n, m, 1 / t, config_.min_weight);
      psi = m - t * std::log(z);
      if (factored_) {
        hop_boltz_ = Boltz(psi);
        ++stats_.nodes_direct;
      }
    }
    if (config_.min_weight > 0) {
      kept = n;  // every share is at least min_weight
    } else {
      for (uint32_t i = 0; i < n; ++i) {
        if (w[i] <= 0) continue;
        link[kept] = link[i];
        w[kept++] = w[i];
      }
    }
  }
  hop_count_ = kept;
  hop_all_ = kept == n;
  hop_top_ = g.top;
  if (kept < g.n) {  // g.top was over every downhill arc: take it over the next hops only
    hop_top_ = -kInfinity;
    for (uint32_t i = 0; i < kept; ++i) {
      hop_top_ = std::max(hop_top_, d.phi[link_dst_core_[link[i]]]);
    }
  }
  return RelaxResult::kOk;
}

bool DiffusionEngine::OrderBrokenOutsideTwins(const DestState& d,
                                              absl::Span<const double> costs) const {
  auto broken = [&](int32_t v, const Arc& a) {
    const int32_t u = a.node;
    if (v == d.core || d.rank[u] < 0 || (d.rank[v] >= 0 && d.rank[u] < d.rank[v])) return false;
    if (!forwards_[u] && u != d.core) return false;
    const double dv = d.rank[v] < 0 ? kInfinity : d.dist[v];
    return costs[a.link] + d.dist[u] < dv - 1e-9 * std::max(1.0, std::isfinite(dv) ? dv : 1.0);
  };
  for (const auto& [v, a] : irregular_) {
    if (broken(v, a)) return true;
  }
  if (d.order.size() == node_of_.size()) return false;
  for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) {
    if (d.rank[v] >= 0) continue;
    for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) {
      if (broken(v, out_[i])) return true;
    }
  }
  return false;
}

bool DiffusionEngine::KeepsOldRow(const DestState& d, int32_t v, absl::Span<const NextHop> prev,
                                  absl::Span<const double> costs, bool& changed,
                                  bool& same_hops) const {
  const uint32_t n = hop_count_;
  const LinkId* link = hop_link_.data();
  const double* w = hop_weight_.data();
  changed = false;
  same_hops = false;
  if (prev.empty()) {
    changed = n > 0;
    return false;
  }
  // The common case: the same next hops (so all still downhill), other weights.
  if (prev.size() == n) {
    double diff = 0;
    bool same = true;
    for (uint32_t i = 0; i < n; ++i) {
      same &= prev[i].link == link[i];
      diff += std::abs(prev[i].weight - w[i]);
    }
    if (same) {
      same_hops = true;
      changed = diff >= config_.hysteresis && diff > 0;
      return diff < config_.hysteresis;
    }
  }
  // Both rows are in link-id order (the order of the node's out-links): merge them.
  bool still_downhill = true;
  double diff = 0;
  size_t i = 0, j = 0;
  while (i < prev.size() || j < n) {
    const LinkId next = j < n ? link[j] : kNoLink;
    if (j == n || (i < prev.size() && prev[i].link < next)) {
      const int32_t u = link_dst_core_[prev[i].link];
      still_downhill =
          still_downhill && u >= 0 && Downhill(d, v, Arc{prev[i].link, u, kNoLink}, costs);
      diff += prev[i++].weight;
    } else if (i == prev.size() || next < prev[i].link) {
      diff += w[j++];
    } else {
      diff += std::abs(prev[i++].weight - w[j++]);
    }
  }
  if (still_downhill && diff < config_.hysteresis) return true;
  changed = diff > 0;
  return false;
}

int DiffusionEngine::MirrorSays(const DestState& d, int32_t v) const {
  // Both rows are v's usable downhill arcs, in slot order: only the weights can differ.
  if (!d.mirrored[v] || !hop_all_) return -1;
  const double diff = std::isnan(hop_diff_) ? kernels_.abs_diff_sum(&d.installed[out_begin_[v]],
                                                                    hop_weight_.data(), hop_count_)
                                            : hop_diff_;
  // Float weights are within 2^-24 of the table's and sum to about 1: `diff` is within 1e-7
  // of the exact sum (in any order), so a decision this far from the threshold is exact.
  constexpr double kMargin = 1e-6;
  if (diff < config_.hysteresis - kMargin) return 1;
  if (diff >= config_.hysteresis + kMargin) return 0;
  return -1;
}

double DiffusionEngine::Commit(DestState& d, int32_t v, double psi,
                               absl::Span<const double> costs) {
  float* installed = &d.installed[out_begin_[v]];
  double top = hop_top_;  // the highest potential among the next hops
  bool keep = false, changed = false, same_hops = false;
  const int mirror = d.table == nullptr ? -1 : MirrorSays(d, v);
  if (mirror >= 0) {
    keep = mirror == 1;
    changed = !keep;                // the weights differ by at least the hysteresis
  } else if (d.table != nullptr) {  // a first table changes no route, but takes every row
    const absl::Span<const NextHop> prev = d.table->Row(static_cast<uint32_t>(v));
    keep = KeepsOldRow(d, v, prev, costs, changed, same_hops);
    if (keep && !same_hops) {
      top = -kInfinity;
      for (const NextHop& h : prev) top = std::max(top, d.phi[link_dst_core_[h.link]]);
    }
    d.mirrored[v] = keep && same_hops && hop_all_;
    if (d.mirrored[v]) {
      for (size_t i = 0; i < prev.size(); ++i) installed[i] = static_cast<float>(prev[i].weight);
    }
  }
  changed_[v] = changed;
  if (!keep) {
    if (d.table == nullptr || changed) {  // BuildTable takes this row
      NextHop* row = &hops_[out_begin_[v]];
      for (uint32_t i = 0; i < hop_count_; ++i) {
        row[i] = NextHop{hop_link_[i], hop_weight_[i]};
      }
    }
    row_len_[v] = hop_count_;
    d.mirrored[v] = hop_all_;
    for (uint32_t i = 0; i < hop_count_; ++i) installed[i] = static_cast<float>(hop_weight_[i]);
  }
  // Strictly above every next hop (Above is monotonic: lifting the highest is enough).
  return std::max(psi, Above(top));
}

void DiffusionEngine::Settle(DestState& d, absl::Span<const double> costs) {
  std::fill(d.mirrored.begin(), d.mirrored.end(), 0);  // the downhill arcs change
  std::fill(d.rank.begin(), d.rank.end(), -1);
  std::fill(d.dist.begin(), d.dist.end(), kInfinity);
  d.order.clear();
  d.dist[d.core] = 0;
  heap_->Push(d.core, 0);
  while (!heap_->empty()) {
    const int32_t u = heap_->Pop();
    d.rank[u] = static_cast<int32_t>(d.order.size());
    d.order.push_back(u);
    if (u != d.core && !forwards_[u]) continue;  // hosts end paths
    const double du = d.dist[u];
    for (uint32_t i = in_begin_[u]; i < in_begin_[u + 1]; ++i) {
      const Arc& a = in_[i];
      const double nd = du + costs[a.link];  // infinite for an unusable link
      if (nd < d.dist[a.node] && d.rank[a.node] < 0) {
        d.dist[a.node] = nd;
        heap_->Push(a.node, nd);
      }
    }
  }
  MarkDownhill(d);
}

void DiffusionEngine::MarkDownhill(DestState& d) const {
  std::fill(d.downhill.begin(), d.downhill.end(), 0);
  for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) {
    const int32_t rv = d.rank[v];
    if (rv <= 0) continue;
    for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) {
      const int32_t u = out_[i].node;
      if (d.rank[u] >= 0 && d.rank[u] < rv && (forwards_[u] || u == d.core)) {
        d.downhill[i / 64] |= uint64_t{1} << (i % 64);
      }
    }
  }
}

void DiffusionEngine::PrefetchDestLine(const DestState& d, size_t line) const {
  const size_t offset = line * 64;  // bytes
  if (offset < node_of_.size() * sizeof(double)) {
    for (const std::vector<double>* a : {&d.dist, &d.dist_floor, &d.psi, &d.phi, &d.boltz}) {
      __builtin_prefetch(reinterpret_cast<const char*>(a->data()) + offset);
    }
  }
  if (offset < d.order.size() * sizeof(int32_t)) {
    __builtin_prefetch(reinterpret_cast<const char*>(d.order.data()) + offset);
  }
  if (offset < d.downhill.size() * sizeof(uint64_t)) {
    __builtin_prefetch(reinterpret_cast<const char*>(d.downhill.data()) + offset);
  }
  if (offset < d.mirrored.size()) __builtin_prefetch(d.mirrored.data() + offset);
}

// Flattened: the per-node calls (Relax, Gather, Commit) cost as much as their bodies otherwise.
__attribute__((flatten)) bool DiffusionEngine::SoftPass(DestState& d,
                                                        absl::Span<const double> costs,
                                                        bool check_order) {
  // Every node in the order is written below before anything reads it; only the others must
  // be reset (they cannot reach d).
  if (d.order.size() < node_of_.size()) {
    std::fill(d.psi.begin(), d.psi.end(), kInfinity);
    std::fill(d.phi.begin(), d.phi.end(), kInfinity);
    if (factored_) std::fill(d.boltz.begin(), d.boltz.end(), kNaN);
  }
  d.psi[d.core] = 0;
  d.boltz[d.core] = 1;
  d.phi[d.core] = 0;
  d.dist_floor[d.core] = Floor(0);
  // In settling order, so every next hop's potential is final when a node is committed.
  constexpr size_t kBlockAhead = 16, kRowAhead = 8;  // nodes
  const DestinationTable* prev = d.table.get();
  const size_t count = d.order.size();
  // Lines of the next destination's arrays: the longest is a double per node (or a bit per
  // out-arc).
  const size_t prefetch_lines =
      std::max(node_of_.size() * sizeof(double), d.downhill.size() * sizeof(uint64_t)) / 64 + 1;
  for (size_t i = 1; i < count; ++i) {
    if (prev != nullptr && i + kBlockAhead < count && !d.mirrored[d.order[i + kBlockAhead]]) {
      PrefetchBlock(*prev, static_cast<uint32_t>(d.order[i + kBlockAhead]));
    }
    if (prev != nullptr && i + kRowAhead < count) {
      const int32_t u = d.order[i + kRowAhead];
      if (d.mirrored[u]) {  // the row's weights: up to 16 floats, which may span two lines
        const float* row = &d.installed[out_begin_[u]];
        __builtin_prefetch(row);
        __builtin_prefetch(row + std::min<uint32_t>(15, out_begin_[u + 1] - out_begin_[u] - 1));
      } else {
        PrefetchRow(*prev, static_cast<uint32_t>(u));
      }
    }
    if (next_dest_ != nullptr && i <= prefetch_lines) PrefetchDestLine(*next_dest_, i - 1);
    const int32_t v = d.order[i];
    double psi, dist;
    if (Relax(d, v, check_order, psi, dist) != RelaxResult::kOk) return false;
    d.dist[v] = dist;
    d.dist_floor[v] = Floor(dist);
    d.psi[v] = psi;
    d.boltz[v] = hop_boltz_;
    d.phi[v] = Commit(d, v, psi, costs);
  }
  return !check_order || !OrderBrokenOutsideTwins(d, costs);
}

void DiffusionEngine::ComputeDestination(DestState& d, absl::Span<const double> costs,
                                         bool reorder) {
  const bool warm = !reorder && !d.order.empty() && SoftPass(d, costs, /*check_order=*/true);
  if (!warm) {
    Settle(d, costs);
    const bool ok = SoftPass(d, costs, /*check_order=*/false);
    assert(ok);  // every settled node was reached through a downhill neighbour
    (void)ok;
    ++stats_.destinations_full;
  } else {
    ++stats_.destinations_warm;
  }
  stats_.nodes_relaxed += static_cast<int64_t>(d.order.size());
  // Nodes outside the order lose their rows; a vanished row is a route change too.
  for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) {
    if (d.rank[v] > 0) continue;
    row_len_[v] = 0;
    d.mirrored[v] = 0;
    changed_[v] = d.table != nullptr && !d.table->Row(static_cast<uint32_t>(v)).empty();
  }
  d.table = BuildTable(d);
  std::fill(changed_.begin(), changed_.end(), 0);
}

bool DiffusionEngine::RelaxRegion(DestState& d, absl::Span<const double> costs,
                                  std::vector<int32_t>& seeds) {
  touched_.clear();
  auto push = [&](int32_t v) {
    if (queued_[v] || v == d.core || d.rank[v] < 0) return;
    queued_[v] = 1;
    heap_->Push(v, d.rank[v]);
  };
  for (int32_t s : seeds) push(s);
  bool ok = true;
  while (!heap_->empty()) {
    const int32_t v = heap_->Pop();
    touched_.push_back(v);
    double psi, dist;
    // A node without a downhill neighbour, or a node settled earlier that is now cheaper
    // through v: the order must change.
    if (Relax(d, v, /*check_twins=*/true, psi, dist) != RelaxResult::kOk) {
      ok = false;
      break;
    }
    // A rise in v's cost to d may make a neighbour settled after v the cheaper way on: then
    // the order is wrong too.
    bool reordered = false;
    for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1] && !reordered; ++i) {
      const Arc& a = out_[i];
      if (d.rank[a.node] <= d.rank[v] || (!forwards_[a.node] && a.node != d.core)) continue;
      reordered = costs[a.link] + d.dist[a.node] < dist - 1e-9 * std::max(1.0, dist);
    }
    if (reordered) {
      ok = false;
      break;
    }
    ++stats_.nodes_relaxed;
    d.dist[v] = dist;
    d.dist_floor[v] = Floor(dist);
    const double old_psi = d.psi[v], old_phi = d.phi[v];
    d.psi[v] = psi;
    d.boltz[v] = hop_boltz_;
    d.phi[v] = Commit(d, v, psi, costs);
    auto same = [](double a, double b) {
      return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b));
    };
    if (same(d.psi[v], old_psi) && same(d.phi[v], old_phi)) continue;
    if (!forwards_[v]) continue;  // nobody goes through a host
    for (uint32_t i = in_begin_[v]; i < in_begin_[v + 1]; ++i) {
      if (d.rank[in_[i].node] > d.rank[v]) push(in_[i].node);
    }
  }
  while (!heap_->empty()) queued_[heap_->Pop()] = 0;
  for (int32_t v : touched_) queued_[v] = 0;
  if (ok && !touched_.empty()) {
    ++stats_.destinations_incremental;
    d.table = BuildTable(d);
  }
  for (int32_t v : touched_) changed_[v] = 0;
  return ok;
}

DestinationTablePtr DiffusionEngine::BuildTable(const DestState& d) {
  const DestinationTable* old = d.table.get();
  const uint32_t cores = static_cast<uint32_t>(node_of_.size());
  int64_t changes = 0;
  for (uint32_t v = 0; v < cores; ++v) changes += changed_[v];
  stats_.route_changes += changes;
  if (old != nullptr && changes == 0) return d.table;
  const uint32_t per_block = DestinationTable::kRowsPerBlock;
  std::vector<DestinationTable::BlockPtr> blocks;
  blocks.reserve((cores + per_block - 1) / per_block);
  constexpr uint32_t kAhead = 8;  // blocks: sharing one touches its reference count, often cold
  for (uint32_t first = 0; first < cores; first += per_block) {
    const uint32_t last = std::min(cores, first + per_block);
    if (old != nullptr && first / per_block + kAhead < old->blocks().size()) {
      // The count sits just before the block in make_shared's allocation.
      __builtin_prefetch(
          reinterpret_cast<const char*>(old->blocks()[first / per_block + kAhead].get()) - 16, 1);
    }
    bool rebuild = old == nullptr;
    for (uint32_t v = first; v < last; ++v) rebuild = rebuild || changed_[v];
    if (!rebuild) {
      blocks.push_back(old->blocks()[first / per_block]);
      continue;
    }
    auto block = std::make_shared<DestinationTable::Block>();
    for (uint32_t v = first; v < last; ++v) {
      const uint32_t len = old == nullptr || changed_[v] ? row_len_[v] : old->Row(v).size();
      block->offsets[v - first + 1] = block->offsets[v - first] + len;
    }
    block->hops.resize(block->offsets[last - first]);
    for (uint32_t v = first; v < last; ++v) {
      const absl::Span<const NextHop> row =
          old == nullptr || changed_[v] ? NewRow(static_cast<int32_t>(v)) : old->Row(v);
      if (!row.empty()) {
        std::memcpy(&block->hops[block->offsets[v - first]], row.data(),
                    row.size() * sizeof(NextHop));
      }
    }
    blocks.push_back(std::move(block));
  }
  return std::make_shared<const DestinationTable>(d.node, topo_.num_nodes(), row_of_node_,
                                                  std::move(blocks));
}

void DiffusionEngine::ComputeAll(absl::Span<const double> costs, bool reorder) {
  assert(costs.size() == static_cast<size_t>(topo_.num_links()));
  stats_ = DiffusionStats();
  LoadCosts(costs);
  for (size_t i = 0; i < dests_.size(); ++i) {
    next_dest_ = i + 1 < dests_.size() ? &dests_[i + 1] : nullptr;
    ComputeDestination(dests_[i], costs, reorder);
  }
  next_dest_ = nullptr;
}

void DiffusionEngine::Update(absl::Span<const double> costs, absl::Span<const LinkId> changed) {
  assert(costs.size() == static_cast<size_t>(topo_.num_links()));
  stats_ = DiffusionStats();
  LoadCosts(costs, changed);
  std::vector<int32_t> seeds;
  for (DestState& d : dests_) {
    seeds.clear();
    bool full = d.table == nullptr;
    for (LinkId l : changed) {
      const int32_t s = core_of_[topo_.link(l).src];
      const int32_t u = core_of_[topo_.link(l).dst];
      if (s < 0 || u < 0 || full) continue;
      const bool usable =
          std::isfinite(costs[l]) && d.rank[u] >= 0 && (forwards_[u] || u == d.core);
      if (d.rank[s] < 0) {
        full = full || usable;  // s can newly reach d
      } else if (usable && d.rank[u] > d.rank[s]) {
        // An uphill link that got cheap enough to be a shortcut reorders d.
        full = full || d.dist[u] + costs[l] < d.dist[s] - 1e-9 * std::max(1.0, d.dist[s]);
      } else if (d.rank[u] >= 0 && d.rank[u] < d.rank[s]) {
        seeds.push_back(s);  // a downhill link changed: re-relax upstream of it
      }
    }
    if (!full && seeds.empty()) continue;
    if (full || !RelaxRegion(d, costs, seeds)) ComputeDestination(d, costs, /*reorder=*/true);
  }
}

RoutingTables DiffusionEngine::Tables(uint64_t version) const {
  std::vector<NodeId> destinations;
  for (const DestState& d : dests_) destinations.push_back(d.node);
  RoutingTables t(topo_.num_nodes(), destinations);
  for (const DestState& d : dests_) {
    if (d.table != nullptr) t.Set(d.table);
  }
  t.set_version(version);
  return t;
}

double DiffusionEngine::Potential(NodeId dest, NodeId node) const {
  const int32_t di = dest_index_[dest];
  if (di < 0) return kInfinity;
  int32_t v = core_of_[node];
  if (v < 0) v = core_of_[topo_.link(topo_.StubUplink(node)).dst];
  return v < 0 ? kInfinity : dests_[di].phi[v];
}

}  // namespace dar
