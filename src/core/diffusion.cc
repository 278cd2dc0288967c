#include "core/diffusion.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace dar {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Strictly above `phi` by a relative hair, so that "downhill" survives rounding.
double Above(double phi) { return phi + 1e-9 * std::max(1.0, std::abs(phi)); }

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
  const int32_t cores = static_cast<int32_t>(node_of_.size());
  link_dst_core_.resize(topo.num_links());
  for (LinkId l = 0; l < topo.num_links(); ++l) link_dst_core_[l] = core_of_[topo.link(l).dst];
  out_begin_.assign(cores + 1, 0);
  in_begin_.assign(cores + 1, 0);
  for (int32_t c = 0; c < cores; ++c) {
    const Node& node = topo.node(node_of_[c]);
    for (LinkId l : node.out_links) {
      const int32_t u = core_of_[topo.link(l).dst];
      if (u >= 0) out_.push_back(Arc{l, u});
    }
    out_begin_[c + 1] = static_cast<uint32_t>(out_.size());
    for (LinkId l : node.in_links) {
      const int32_t w = core_of_[topo.link(l).src];
      if (w >= 0) in_.push_back(Arc{l, w});
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
  rows_.resize(cores);
  queued_.assign(cores, 0);
  heap_ = std::make_unique<MinHeap>(cores);
}

bool DiffusionEngine::Relax(const DestState& d, int32_t v, absl::Span<const double> costs,
                            double& phi, double& dist) {
  row_.clear();
  x_.clear();
  double m = kInf;
  dist = kInf;
  for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) {
    const Arc& a = out_[i];
    if (!Downhill(d, v, a, costs)) continue;
    const double x = costs[a.link] + d.psi[a.node];
    m = std::min(m, x);
    dist = std::min(dist, costs[a.link] + d.dist[a.node]);
    row_.push_back(NextHop{a.link, 0});
    x_.push_back(x);
  }
  if (row_.empty()) return false;

  const double t = config_.temperature;
  size_t kept = 0;
  double total = 0;
  if (t <= 0) {
    const double tie = 1e-9 * std::max(1.0, std::abs(m));
    for (size_t i = 0; i < row_.size(); ++i) {
      if (x_[i] <= m + tie) {
        row_[kept] = NextHop{row_[i].link, 1.0};
        x_[kept++] = x_[i];
        total += 1;
      }
    }
    phi = m;
  } else {
    double z = 0;
    for (size_t i = 0; i < row_.size(); ++i) {
      row_[i].weight = std::exp(-(x_[i] - m) / t);  // the best is exactly 1
      z += row_[i].weight;
    }
    phi = m - t * std::log(z);
    // Every downhill neighbour (settled earlier) stays a next hop, so traffic pinned to one (a
    // flow, a flowlet) never has to move while the settling order holds; one far costlier
    // than the best is floored at min_weight before the final normalisation. The potential
    // is then lifted above any next hop it would fall below (ClampAboveNextHops). With
    // min_weight 0, a share that underflows to 0 is dropped.
    for (size_t i = 0; i < row_.size(); ++i) {
      const double w = std::max(row_[i].weight / z, config_.min_weight);
      if (w <= 0) continue;
      total += w;
      row_[kept++] = NextHop{row_[i].link, w};
    }
  }
  row_.resize(kept);
  for (NextHop& h : row_) h.weight /= total;
  return true;
}

double DiffusionEngine::ClampAboveNextHops(const DestState& d, double phi) const {
  for (const NextHop& h : row_) phi = std::max(phi, Above(d.phi[link_dst_core_[h.link]]));
  return phi;
}

bool DiffusionEngine::ApplyHysteresis(const DestState& d, int32_t v,
                                      absl::Span<const double> costs) {
  if (d.table == nullptr) return false;  // a first table changes no route
  const absl::Span<const NextHop> prev = d.table->At(node_of_[v]);
  if (prev.empty()) return !row_.empty();
  // Both rows are in link-id order (the order of the node's out-links): merge them.
  bool still_downhill = true;
  double diff = 0;
  size_t i = 0, j = 0;
  while (i < prev.size() || j < row_.size()) {
    if (j == row_.size() || (i < prev.size() && prev[i].link < row_[j].link)) {
      const int32_t u = link_dst_core_[prev[i].link];
      still_downhill = still_downhill && u >= 0 && Downhill(d, v, Arc{prev[i].link, u}, costs);
      diff += prev[i++].weight;
    } else if (i == prev.size() || row_[j].link < prev[i].link) {
      diff += row_[j++].weight;
    } else {
      diff += std::abs(prev[i++].weight - row_[j++].weight);
    }
  }
  if (still_downhill && diff < config_.hysteresis) {
    row_.assign(prev.begin(), prev.end());
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
    if (!Relax(d, v, costs, phi, dist)) return false;  // lost every downhill neighbour
    d.dist[v] = dist;
    d.psi[v] = phi;
    rows_[v] = row_;
  }
  if (!check_order) return true;
  // The order is still right if no node reaches d more cheaply through a neighbour ordered
  // after it, and no node outside the order can now reach a node in it.
  const int32_t cores = static_cast<int32_t>(node_of_.size());
  for (int32_t v = 0; v < cores; ++v) {
    if (v == d.core) continue;
    const double dv = d.rank[v] < 0 ? kInf : d.dist[v];
    const double slack = 1e-9 * std::max(1.0, std::isfinite(dv) ? dv : 1.0);
    for (uint32_t i = out_begin_[v]; i < out_begin_[v + 1]; ++i) {
      const Arc& a = out_[i];
      const int32_t u = a.node;
      if (d.rank[u] < 0 || (d.rank[v] >= 0 && d.rank[u] < d.rank[v])) continue;
      if (!forwards_[u] && u != d.core) continue;
      if (costs[a.link] + d.dist[u] < dv - slack) return false;
    }
  }
  return true;
}

void DiffusionEngine::ComputeDestination(DestState& d, absl::Span<const double> costs,
                                         bool reorder) {
  for (std::vector<NextHop>& r : rows_) r.clear();
  const bool warm = !reorder && !d.order.empty() && SoftPass(d, costs, /*check_order=*/true);
  if (!warm) {
    if (!reorder && !d.order.empty()) {
      for (std::vector<NextHop>& r : rows_) r.clear();  // the failed warm pass wrote some
    }
    Settle(d, costs);
    const bool ok = SoftPass(d, costs, /*check_order=*/false);
    assert(ok);  // every settled node was reached through a downhill neighbour
    (void)ok;
    ++stats_.destinations_full;
  } else {
    ++stats_.destinations_warm;
  }
  stats_.nodes_relaxed += static_cast<int64_t>(d.order.size());
  // Hysteresis, then potentials strictly above every next hop kept, in order.
  for (size_t i = 1; i < d.order.size(); ++i) {
    const int32_t v = d.order[i];
    row_.swap(rows_[v]);
    if (ApplyHysteresis(d, v, costs)) ++stats_.route_changes;
    d.phi[v] = ClampAboveNextHops(d, d.psi[v]);
    row_.swap(rows_[v]);
  }
  // Rows of nodes that can no longer reach d vanish; count them as changes too.
  if (d.table != nullptr) {
    for (int32_t v = 0; v < static_cast<int32_t>(node_of_.size()); ++v) {
      if (d.rank[v] < 0 && !d.table->At(node_of_[v]).empty()) ++stats_.route_changes;
    }
  }
  order_.clear();
  d.table = BuildTable(d, order_);  // empty list: every row from rows_
}

bool DiffusionEngine::RelaxRegion(DestState& d, absl::Span<const double> costs,
                                  std::vector<int32_t>& seeds) {
  std::vector<int32_t>& changed = order_;
  changed.clear();
  auto push = [&](int32_t v) {
    if (queued_[v] || v == d.core || d.rank[v] < 0) return;
    queued_[v] = 1;
    heap_->Push(v, d.rank[v]);
  };
  for (int32_t s : seeds) push(s);
  bool ok = true;
  while (!heap_->empty()) {
    const int32_t v = heap_->Pop();
    changed.push_back(v);
    double phi, dist;
    if (!Relax(d, v, costs, phi, dist)) {
      ok = false;  // no downhill neighbour left: the order must change
      break;
    }
    // A rise in v's cost to d may make a neighbour settled after v the cheaper way on: then
    // the order is wrong and d is recomputed whole.
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
    if (ApplyHysteresis(d, v, costs)) ++stats_.route_changes;
    rows_[v] = row_;
    d.dist[v] = dist;
    const double old_psi = d.psi[v], old_phi = d.phi[v];
    d.psi[v] = phi;
    d.phi[v] = ClampAboveNextHops(d, phi);
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
  for (int32_t v : changed) queued_[v] = 0;
  if (!ok) return false;
  if (changed.empty()) return true;
  ++stats_.destinations_incremental;
  d.table = BuildTable(d, changed);
  return true;
}

DestinationTablePtr DiffusionEngine::BuildTable(const DestState& d,
                                                const std::vector<int32_t>& changed_rows) {
  const bool all = changed_rows.empty() || d.table == nullptr;
  for (int32_t v : changed_rows) queued_[v] = 2;  // marks, cleared below
  const int n = topo_.num_nodes();
  std::vector<uint32_t> offsets;
  offsets.reserve(n + 1);
  std::vector<NextHop> hops;
  hops.reserve(d.table == nullptr ? out_.size() / 2 : d.table->num_hops() + 16);
  offsets.push_back(0);
  for (NodeId node = 0; node < n; ++node) {
    const int32_t v = core_of_[node];
    if (v >= 0 && v != d.core) {
      if (all || queued_[v] == 2) {
        hops.insert(hops.end(), rows_[v].begin(), rows_[v].end());
      } else {
        const absl::Span<const NextHop> old = d.table->At(node);
        hops.insert(hops.end(), old.begin(), old.end());
      }
    }
    offsets.push_back(static_cast<uint32_t>(hops.size()));
  }
  for (int32_t v : changed_rows) queued_[v] = 0;
  return std::make_shared<const DestinationTable>(d.node, std::move(offsets), std::move(hops));
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
