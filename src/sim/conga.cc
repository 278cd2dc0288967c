#include "sim/conga.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/status_macros.h"
#include "core/routing.h"

namespace dar::sim {

absl::StatusOr<CongaConfig> ReadCongaConfig(YamlReader& r) {
  CongaConfig c;
  ASSIGN_OR_RETURN(c.dre_period,
                   r.OptionalDuration("dre_period", c.dre_period, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.dre_alpha,
                   r.Optional<double>("dre_alpha", c.dre_alpha, Bounds{0.0, false, 1.0, false}));
  ASSIGN_OR_RETURN(c.quantization_bits, r.Optional<int>("quantization_bits", c.quantization_bits,
                                                        Bounds::InRange(1, 8)));
  ASSIGN_OR_RETURN(c.flowlet_gap,
                   r.OptionalDuration("flowlet_gap", c.flowlet_gap, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.aging, r.OptionalDuration("aging", c.aging, Bounds::Positive()));
  return c;
}

CongaBalancer::CongaBalancer(const Network& net, const CongaConfig& config, uint64_t seed)
    : net_(net),
      config_(config),
      rng_(seed),
      decay_per_ns_(config.dre_alpha / static_cast<double>(config.dre_period.count())),
      max_metric_(static_cast<uint8_t>((1 << config.quantization_bits) - 1)) {
  const Topology& topo = net.topology();
  leaf_of_.resize(topo.num_nodes());
  leaf_index_.assign(topo.num_nodes(), -1);
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    leaf_of_[n] = topo.RouteTarget(n);
    if (leaf_of_[n] != n && leaf_index_[leaf_of_[n]] < 0) {
      leaf_index_[leaf_of_[n]] = static_cast<int>(num_leaves_++);
    }
  }
  uplink_index_.assign(topo.num_links(), -1);
  std::vector<size_t> uplinks(topo.num_nodes(), 0);
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    for (LinkId l : topo.node(n).out_links) {
      if (topo.node(topo.link(l).dst).kind == NodeKind::kHost) continue;
      uplink_index_[l] = static_cast<int>(uplinks[n]++);
    }
    if (leaf_index_[n] >= 0 && uplinks[n] > 256) {
      std::fprintf(stderr, "conga: leaf %s has %zu uplinks; LBTag holds 256\n",
                   topo.node(n).name.c_str(), uplinks[n]);
      std::abort();
    }
  }
  dre_.resize(topo.num_links());
  flowlets_table_.resize(num_leaves_);
  pairs_.resize(num_leaves_ * num_leaves_);
  for (NodeId a = 0; a < topo.num_nodes(); ++a) {
    if (leaf_index_[a] < 0) continue;
    for (NodeId b = 0; b < topo.num_nodes(); ++b) {
      if (leaf_index_[b] < 0) continue;
      Pair& pair = PairOf(a, b);
      pair.to_leaf.resize(uplinks[a]);
      pair.from_leaf.resize(uplinks[b]);
    }
  }
}

void CongaBalancer::Decay(LinkId link, Time now) {
  Dre& d = dre_[link];
  if (now > d.at) {
    d.bytes *= std::exp(-decay_per_ns_ * static_cast<double>((now - d.at).count()));
    d.at = now;
  }
}

uint8_t CongaBalancer::LinkMetric(LinkId link, Time now) {
  Decay(link, now);
  const double capacity_bytes_per_ns =
      static_cast<double>(net_.current().link(link).params.capacity.bps()) / 8e9;
  if (capacity_bytes_per_ns <= 0) return max_metric_;
  const double tau_ns = 1 / decay_per_ns_;
  const double load = dre_[link].bytes / (capacity_bytes_per_ns * tau_ns);
  const double q = std::floor(load * (max_metric_ + 1));
  return static_cast<uint8_t>(std::clamp(q, 0.0, static_cast<double>(max_metric_)));
}

LinkId CongaBalancer::Choose(NodeId node, Packet& p, absl::Span<const NextHop> hops, Time now) {
  const NodeId src_leaf = leaf_of_[p.src];
  const NodeId dst_leaf = leaf_of_[p.dst];
  if (node != src_leaf || node == p.src || src_leaf == dst_leaf) return kNoLink;
  if (p.kind != PacketKind::kData && p.kind != PacketKind::kAck) return kNoLink;

  std::vector<Flowlet>& table = flowlets_table_[leaf_index_[node]];
  if (table.empty()) table.resize(config_.flowlet_table_size);
  const uint64_t key = Random::Hash(p.flow_id ^ (static_cast<uint64_t>(p.dst) << 40));
  Flowlet& f = table[key % table.size()];
  bool keep = f.key == key && f.last_seen.count() >= 0 &&
              now - f.last_seen <= config_.flowlet_gap && f.link != kNoLink &&
              net_.Forwardable(f.link);
  if (keep)
    keep = std::any_of(hops.begin(), hops.end(),
                       [&](const NextHop& h) { return h.link == f.link && h.weight > 0; });
  Pair& pair = PairOf(node, dst_leaf);
  if (!keep) {
    // The least congested path; ties at random (reservoir sampling over the ties).
    LinkId best = kNoLink;
    int best_metric = 1 << 30;
    int ties = 0;
    for (const NextHop& h : hops) {
      if (h.weight <= 0 || !net_.Forwardable(h.link) || uplink_index_[h.link] < 0) continue;
      const Remote& remote = pair.to_leaf[uplink_index_[h.link]];
      const bool fresh = remote.at.count() >= 0 && now - remote.at <= config_.aging;
      const int metric = std::max<int>(LinkMetric(h.link, now), fresh ? remote.metric : 0);
      if (metric < best_metric) {
        best = h.link, best_metric = metric, ties = 1;
      } else if (metric == best_metric && rng_.Uniform() * ++ties < 1) {
        best = h.link;
      }
    }
    if (best == kNoLink) return kNoLink;
    f.key = key;
    f.link = best;
    ++flowlets_;
  }
  f.last_seen = now;
  p.lb.valid = true;
  p.lb.path = static_cast<uint8_t>(uplink_index_[f.link]);
  p.lb.ce = 0;
  AddFeedback(pair, p);
  return f.link;
}

void CongaBalancer::AddFeedback(Pair& pair, Packet& p) {
  const size_t n = pair.from_leaf.size();
  size_t pick = n;
  for (size_t i = 0; i < n && pick == n; ++i) {
    const size_t j = (pair.next_feedback + i) % n;
    if (pair.from_leaf[j].changed) pick = j;
  }
  if (pick == n) {  // nothing changed: round robin over the entries ever set
    for (size_t i = 0; i < n && pick == n; ++i) {
      const size_t j = (pair.next_feedback + i) % n;
      if (pair.from_leaf[j].at.count() >= 0) pick = j;
    }
  }
  p.lb.feedback_valid = pick != n;
  if (pick == n) return;
  Remote& r = pair.from_leaf[pick];
  p.lb.feedback_path = static_cast<uint8_t>(pick);
  p.lb.feedback_metric = r.metric;
  r.changed = false;
  pair.next_feedback = (pick + 1) % n;
}

void CongaBalancer::OnTransmit(LinkId link, Packet& p, Time now) {
  Decay(link, now);
  dre_[link].bytes += p.size_bytes;
  if (p.lb.valid) p.lb.ce = std::max(p.lb.ce, LinkMetric(link, now));
}

void CongaBalancer::OnLastSwitch(NodeId node, Packet& p, Time now) {
  if (!p.lb.valid) return;
  const NodeId src_leaf = leaf_of_[p.src];
  Pair& pair = PairOf(node, src_leaf);
  assert(p.lb.path < pair.from_leaf.size());
  Remote& from = pair.from_leaf[p.lb.path];
  from.changed = from.changed || from.metric != p.lb.ce || from.at.count() < 0;
  from.metric = p.lb.ce;
  from.at = now;
  if (p.lb.feedback_valid) {
    assert(p.lb.feedback_path < pair.to_leaf.size());
    Remote& to = pair.to_leaf[p.lb.feedback_path];
    to.metric = p.lb.feedback_metric;
    to.at = now;
    ++feedback_;
  }
  p.lb = BalancerHeader();
}

CongaRouting::CongaRouting(const CongaConfig& config, const LinkStateConfig& link_state)
    : config_(config), routing_(ComputeEcmpTables, link_state) {}

void CongaRouting::Start(ControlContext& ctx) {
  auto balancer = std::make_unique<CongaBalancer>(ctx.network, config_, ctx.rng.Next());
  balancer_ = balancer.get();
  ctx.network.set_balancer(std::move(balancer));
  routing_.Start(ctx);
}

void CongaRouting::Report(nlohmann::json& metrics) const {
  routing_.Report(metrics);
  metrics["conga_flowlets"] = balancer_ != nullptr ? balancer_->flowlets() : 0;
  metrics["conga_feedback"] = balancer_ != nullptr ? balancer_->feedback_received() : 0;
}

namespace {

REGISTER_CONTROL_PLANE("conga",
                       [](YamlReader& policy,
                          const ConfigContext&) -> absl::StatusOr<ControlPlanePtr> {
                         ASSIGN_OR_RETURN(CongaConfig config, ReadCongaConfig(policy));
                         ASSIGN_OR_RETURN(LinkStateConfig link_state, ReadLinkStateConfig(policy));
                         return std::make_unique<CongaRouting>(config, link_state);
                       });

}  // namespace
}  // namespace dar::sim
