#include "core/diffusion.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

namespace dar {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Strictly above `phi` by a relative hair, so that "downhill" survives rounding.
double Above(double phi) { return phi + 1e-9 * std::max(1.0, std::abs(phi)); }

// exp(y) for y <= 0, two lanes at a time (SSE2 through GCC's vector extensions), within a few
// ulp, and 0 below -708 (where exp leaves the normal range). The weights are the engine's
// innermost work. y = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), exp(r) by its
// Taylor series to r^12 (truncation error below 2e-16), then 2^n by adding n to the exponent.
using V2d = double __attribute__((vector_size(16)));
using V2i = int64_t __attribute__((vector_size(16)));

inline V2d ExpNonPositive(V2d y) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShift = 0x1.8p52;  // adding it rounds to an integer held in the low bits
  const V2d floor = {-708.0, -708.0};
  const V2i in_range = y >= floor;  // all ones or all zeros per lane
  const V2d yc = y >= floor ? y : floor;
  const V2d shifted = yc * kLog2e + kShift;
  const V2i n = std::bit_cast<V2i>(shifted) - std::bit_cast<int64_t>(kShift);
  const V2d nd = shifted - kShift;
  const V2d r = (yc - nd * kLn2Hi) - nd * kLn2Lo;
  V2d p = r * (1.0 / 479001600) + 1.0 / 39916800;  // 1/12!, 1/11!
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const V2i e = (std::bit_cast<V2i>(p) + (n << 52)) & in_range;
  return std::bit_cast<V2d>(e);
}

// x[i] = exp((m - x[i]) * inv_t) for i < n, where every x[i] >= m.
void ExpWeights(double* x, uint32_t n, double m, double inv_t) {
  uint32_t i = 0;
  for (; i + 2 <= n; i += 2) {
    V2d y;
    std::memcpy(&y, x + i, sizeof(y));
    y = ExpNonPositive((m - y) * inv_t);
    std::memcpy(x + i, &y, sizeof(y));
  }
  if (i < n) {
    const V2d y = ExpNonPositive(V2d{(m - x[i]) * inv_t, 0.0});
    x[i] = y[0];
  }
}

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
    : topo_(topo), config_(config) {
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
  for (NodeId d : topo.Destinations()) {
    assert(core_of_[d] >= 0);
    dest_index_[d] = static_cast<int32_t>(dests_.size());
    DestState s;
    s.node = d;
    s.core = core_of_[d];
    s.rank.assign(cores, -1);
    s.dist.assign(cores, kInf);
    s.phi.assign(cores, kInf);
    s.psi.assign(cores, kInf);
    dests_.push_back(std::move(s));
  }
  hops_.resize(out_.size());
  hop_node_.resize(out_.size());
  row_len_.assign(cores, 0);
  changed_.assign(cores, 0);
  x_.resize(max_degree);
  twin_checks_.resize(max_degree);
  queued_.assign(cores, 0);
  heap_ = std::make_unique<MinHeap>(cores);
}

DiffusionEngine::RelaxResult DiffusionEngine::Relax(const DestState& d, int32_t v,
                                                    absl::Span<const double> costs,
                                                    bool check_twins, double& phi, double& dist) {
  NextHop* row = &hops_[out_begin_[v]];
  double* x = x_.data();
  uint32_t n = 0, checks = 0;
  double m = kInf;
  dist = kInf;
  const int32_t rv = d.rank[v];
  check_twins = check_twins && forwards_[v];  // nobody reaches d through a host
  for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) {
    const Arc& a = out_[i];
    const int32_t u = a.node;
    const int32_t ru = d.rank[u];
    if (ru < 0 || ru >= rv || (!forwards_[u] && u != d.core)) continue;
    if (check_twins && a.twin != kNoLink) twin_checks_[checks++] = i;
    const double c = costs[a.link];
    if (!(c < kInf)) continue;
    const double xu = c + d.psi[u];
    m = std::min(m, xu);
    dist = std::min(dist, c + d.dist[u]);
    row[n] = NextHop{a.link, 0};
    hop_node_[out_begin_[v] + n] = u;
    x[n++] = xu;
  }
  row_len_[v] = 0;
  if (n == 0) return RelaxResult::kNoNextHop;
  // The order holds at v's downhill neighbours u if none of them now reaches d more cheaply
  // through v (over the twin u -> v) than the way it was settled.
  for (uint32_t k = 0; k < checks; ++k) {
    const Arc& a = out_[twin_checks_[k]];
    const double du = d.dist[a.node];
    if (costs[a.twin] + dist < du - 1e-9 * std::max(1.0, du)) return RelaxResult::kReordered;
  }

  const double t = config_.temperature;
  uint32_t kept = 0;
  double total = 0;
  int32_t* nodes = &hop_node_[out_begin_[v]];
  if (t <= 0) {
    const double tie = 1e-9 * std::max(1.0, std::abs(m));
    for (uint32_t i = 0; i < n; ++i) {
      if (x[i] <= m + tie) {
        nodes[kept] = nodes[i];
        row[kept++] = NextHop{row[i].link, 1.0};
        total += 1;
      }
    }
    phi = m;
  } else {
    const double inv_t = 1 / t;
    ExpWeights(x, n, m, inv_t);  // the best is exactly 1
    double z = 0;
    for (uint32_t i = 0; i < n; ++i) {
      row[i].weight = x[i];
      z += x[i];
    }
    phi = m - t * std::log(z);
    // Every downhill neighbour (settled earlier) stays a next hop, so traffic pinned to one (a
    // flow, a flowlet) never has to move while the settling order holds; one far costlier
    // than the best is floored at min_weight before the final normalisation. The potential
    // is then lifted above any next hop it would fall below (ClampAboveNextHops). With
    // min_weight 0, a share that underflows to 0 is dropped.
    const double inv_z = 1 / z;
    for (uint32_t i = 0; i < n; ++i) {
      const double w = std::max(row[i].weight * inv_z, config_.min_weight);
      if (w <= 0) continue;
      total += w;
      nodes[kept] = nodes[i];
      row[kept++] = NextHop{row[i].link, w};
    }
  }
  const double inv_total = 1 / total;
  for (uint32_t i = 0; i < kept; ++i) row[i].weight *= inv_total;
  row_len_[v] = kept;
  return RelaxResult::kOk;
}

bool DiffusionEngine::OrderBrokenOutsideTwins(const DestState& d,
                                              absl::Span<const double> costs) const {
  auto broken = [&](int32_t v, const Arc& a) {
    const int32_t u = a.node;
    if (v == d.core || d.rank[u] < 0 || (d.rank[v] >= 0 && d.rank[u] < d.rank[v])) return false;
    if (!forwards_[u] && u != d.core) return false;
    const double dv = d.rank[v] < 0 ? kInf : d.dist[v];
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

double DiffusionEngine::ClampAboveNextHops(const DestState& d, int32_t v, double phi) const {
  const int32_t* nodes = &hop_node_[out_begin_[v]];
  for (uint32_t i = 0; i < row_len_[v]; ++i) phi = std::max(phi, Above(d.phi[nodes[i]]));
  return phi;
}

bool DiffusionEngine::ApplyHysteresis(const DestState& d, int32_t v,
                                      absl::Span<const double> costs) {
  if (d.table == nullptr) return false;  // a first table changes no route
  const absl::Span<const NextHop> prev = d.table->Row(static_cast<uint32_t>(v));
  const absl::Span<NextHop> row = NewRow(v);
  if (prev.empty()) return !row.empty();
  // The common case: the same next hops (so all still downhill), other weights.
  if (prev.size() == row.size()) {
    double diff = 0;
    size_t i = 0;
    for (; i < prev.size() && prev[i].link == row[i].link; ++i) {
      diff += std::abs(prev[i].weight - row[i].weight);
    }
    if (i == prev.size()) {
      if (diff >= config_.hysteresis) return diff > 0;
      for (i = 0; i < prev.size(); ++i) row[i].weight = prev[i].weight;
      return false;
    }
  }
  // Both rows are in link-id order (the order of the node's out-links): merge them.
  bool still_downhill = true;
  double diff = 0;
  size_t i = 0, j = 0;
  while (i < prev.size() || j < row.size()) {
    if (j == row.size() || (i < prev.size() && prev[i].link < row[j].link)) {
      const int32_t u = link_dst_core_[prev[i].link];
      still_downhill =
          still_downhill && u >= 0 && Downhill(d, v, Arc{prev[i].link, u, kNoLink}, costs);
      diff += prev[i++].weight;
    } else if (i == prev.size() || row[j].link < prev[i].link) {
      diff += row[j++].weight;
    } else {
      diff += std::abs(prev[i++].weight - row[j++].weight);
    }
  }
  if (still_downhill && diff < config_.hysteresis) {
    int32_t* nodes = &hop_node_[out_begin_[v]];
    for (size_t k = 0; k < prev.size(); ++k) {
      hops_[out_begin_[v] + k] = prev[k];
      nodes[k] = link_dst_core_[prev[k].link];
    }
    row_len_[v] = static_cast<uint32_t>(prev.size());
    return false;
  }
  return diff > 0;
}

void DiffusionEngine::Settle(DestState& d, absl::Span<const double> costs) {
  std::fill(d.rank.begin(), d.rank.end(), -1);
  std::fill(d.dist.begin(), d.dist.end(), kInf);
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
}

bool DiffusionEngine::SoftPass(DestState& d, absl::Span<const double> costs, bool check_order) {
  std::fill(d.psi.begin(), d.psi.end(), kInf);
  std::fill(d.phi.begin(), d.phi.end(), kInf);
  d.psi[d.core] = 0;
  d.phi[d.core] = 0;
  for (size_t i = 1; i < d.order.size(); ++i) {
    const int32_t v = d.order[i];
    double phi, dist;
    if (Relax(d, v, costs, check_order, phi, dist) != RelaxResult::kOk) return false;
    d.dist[v] = dist;
    d.psi[v] = phi;
  }
  if (check_order && OrderBrokenOutsideTwins(d, costs)) return false;
  // Hysteresis in row order, so the previous table is read front to back (it is far larger
  // than the caches), then potentials above the next hops kept, in settling order.
  for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) {
    if (d.rank[v] > 0) changed_[v] = ApplyHysteresis(d, v, costs);
  }
  for (size_t i = 1; i < d.order.size(); ++i) {
    const int32_t v = d.order[i];
    d.phi[v] = ClampAboveNextHops(d, v, d.psi[v]);
  }
  return true;
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
    double phi, dist;
    // A node without a downhill neighbour, or a node settled earlier that is now cheaper
    // through v: the order must change.
    if (Relax(d, v, costs, /*check_twins=*/true, phi, dist) != RelaxResult::kOk) {
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
    changed_[v] = ApplyHysteresis(d, v, costs);
    d.dist[v] = dist;
    const double old_psi = d.psi[v], old_phi = d.phi[v];
    d.psi[v] = phi;
    d.phi[v] = ClampAboveNextHops(d, v, phi);
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
    for (uint32_t v = first; v < last; ++v) {
      if (changed_[v]) {
        rebuild = true;
        ++stats_.route_changes;
      }
    }
    if (!rebuild) {
      blocks.push_back(old->blocks()[first / per_block]);
      continue;
    }
    auto block = std::make_shared<DestinationTable::Block>();
    block->offsets.resize(last - first + 1);
    block->offsets[0] = 0;
    for (uint32_t v = first; v < last; ++v) {
      const uint32_t len = old == nullptr || changed_[v] ? row_len_[v] : old->Row(v).size();
      block->offsets[v - first + 1] = block->offsets[v - first] + len;
    }
    block->hops.resize(block->offsets.back());
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
  for (DestState& d : dests_) ComputeDestination(d, costs, reorder);
}

void DiffusionEngine::Update(absl::Span<const double> costs, absl::Span<const LinkId> changed) {
  assert(costs.size() == static_cast<size_t>(topo_.num_links()));
  stats_ = DiffusionStats();
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
  if (di < 0) return kInf;
  int32_t v = core_of_[node];
  if (v < 0) v = core_of_[topo_.link(topo_.StubUplink(node)).dst];
  return v < 0 ? kInf : dests_[di].phi[v];
}

}  // namespace dar
