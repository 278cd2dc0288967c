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
    dests_.push_back(std::move(s));
  }
  rows_.resize(cores);
  queued_.assign(cores, 0);
}

bool DiffusionEngine::Downhill(const DestState& d, int32_t v, const Arc& a,
                               absl::Span<const double> costs) const {
  const int32_t u = a.node;
  return std::isfinite(costs[a.link]) && d.rank[u] >= 0 && d.rank[u] < d.rank[v] &&
         (forwards_[u] || u == d.core);
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
    const double x = costs[a.link] + d.phi[a.node];
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
    for (size_t i = 0; i < row_.size(); ++i) {
      if (row_[i].weight >= config_.min_weight) {
        total += row_[i].weight;
        x_[kept] = x_[i];
        row_[kept++] = row_[i];
      }
    }
  }
  row_.resize(kept);
  for (NextHop& h : row_) h.weight /= total;
  return true;
}

double DiffusionEngine::ClampAboveNextHops(const DestState& d, double phi) const {
  for (const NextHop& h : row_) phi = std::max(phi, Above(d.phi[core_of_[topo_.link(h.link).dst]]));
  return phi;
}

bool DiffusionEngine::ApplyHysteresis(const DestState& d, int32_t v,
                                      absl::Span<const double> costs) {
  const absl::Span<const NextHop> prev =
      d.table == nullptr ? absl::Span<const NextHop>() : d.table->At(node_of_[v]);
  if (prev.empty()) return !row_.empty();
  bool still_downhill = true;
  double diff = 0;
  for (const NextHop& p : prev) {
    const int32_t u = core_of_[topo_.link(p.link).dst];
    still_downhill = still_downhill && u >= 0 && Downhill(d, v, Arc{p.link, u}, costs);
    double now = 0;
    for (const NextHop& h : row_) {
      if (h.link == p.link) now = h.weight;
    }
    diff += std::abs(now - p.weight);
  }
  for (const NextHop& h : row_) {
    bool found = false;
    for (const NextHop& p : prev) found |= p.link == h.link;
    if (!found) diff += h.weight;
  }
  if (still_downhill && diff < config_.hysteresis) {
    row_.assign(prev.begin(), prev.end());
    return false;
  }
  return diff > 0;
}

void DiffusionEngine::ComputeDestination(DestState& d, absl::Span<const double> costs) {
  std::fill(d.rank.begin(), d.rank.end(), -1);
  std::fill(d.dist.begin(), d.dist.end(), kInf);
  std::fill(d.phi.begin(), d.phi.end(), kInf);
  order_.clear();
  heap_.clear();
  auto later = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a > b;
  };
  d.dist[d.core] = 0;
  heap_.push_back({0.0, d.core});
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const auto [du, u] = heap_.back();
    heap_.pop_back();
    if (d.rank[u] >= 0 || du > d.dist[u]) continue;
    d.rank[u] = static_cast<int32_t>(order_.size());
    order_.push_back(u);
    if (u != d.core && !forwards_[u]) continue;  // hosts end paths
    for (uint32_t i = in_begin_[u]; i < in_begin_[u + 1]; ++i) {
      const Arc& a = in_[i];
      const double c = costs[a.link];
      if (!std::isfinite(c) || d.rank[a.node] >= 0) continue;
      if (du + c < d.dist[a.node]) {
        d.dist[a.node] = du + c;
        heap_.push_back({du + c, a.node});
        std::push_heap(heap_.begin(), heap_.end(), later);
      }
    }
  }

  d.phi[d.core] = 0;
  for (std::vector<NextHop>& r : rows_) r.clear();
  for (size_t i = 1; i < order_.size(); ++i) {
    const int32_t v = order_[i];
    double phi, dist;
    const bool ok = Relax(d, v, costs, phi, dist);
    assert(ok);  // v was settled through a downhill neighbour
    (void)ok;
    if (ApplyHysteresis(d, v, costs)) ++stats_.route_changes;
    d.phi[v] = ClampAboveNextHops(d, phi);
    rows_[v] = row_;
  }
  stats_.nodes_relaxed += static_cast<int64_t>(order_.size());
  ++stats_.destinations_full;
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
  heap_.clear();
  std::vector<int32_t>& changed = order_;
  changed.clear();
  auto later = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a > b;
  };
  auto push = [&](int32_t v) {
    if (queued_[v] || v == d.core || d.rank[v] < 0) return;
    queued_[v] = 1;
    heap_.push_back({static_cast<double>(d.rank[v]), v});
    std::push_heap(heap_.begin(), heap_.end(), later);
  };
  for (int32_t s : seeds) push(s);
  bool ok = true;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const int32_t v = heap_.back().second;
    heap_.pop_back();
    changed.push_back(v);
    double phi, dist;
    if (!Relax(d, v, costs, phi, dist)) {
      ok = false;  // no downhill neighbour left: the order must change
      break;
    }
    ++stats_.nodes_relaxed;
    if (ApplyHysteresis(d, v, costs)) ++stats_.route_changes;
    rows_[v] = row_;
    d.dist[v] = dist;
    const double old = d.phi[v];
    phi = ClampAboveNextHops(d, phi);
    d.phi[v] = phi;
    if (std::abs(phi - old) <= 1e-12 * std::max(1.0, std::abs(old))) continue;
    if (!forwards_[v]) continue;  // nobody goes through a host
    for (uint32_t i = in_begin_[v]; i < in_begin_[v + 1]; ++i) {
      if (d.rank[in_[i].node] > d.rank[v]) push(in_[i].node);
    }
  }
  for (const auto& [r, v] : heap_) queued_[v] = 0;
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

void DiffusionEngine::ComputeAll(absl::Span<const double> costs) {
  assert(costs.size() == static_cast<size_t>(topo_.num_links()));
  stats_ = DiffusionStats();
  for (DestState& d : dests_) ComputeDestination(d, costs);
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
    if (full || !RelaxRegion(d, costs, seeds)) ComputeDestination(d, costs);
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
