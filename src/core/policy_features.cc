#include "core/policy_features.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dar {
namespace {

// kFeatAnalyticLogit's floor when min_weight is 0 (ln 0 is no feature).
constexpr double kSmallestLogitWeight = 1e-6;
constexpr double kFeatureCap = 10;  // kFeatLinkQueue and kFeatLinkLoss

double LinkDelaySeconds(const LinkState& s) { return ToSeconds(s.propagation + s.queueing); }

}  // namespace

const std::array<const char*, kPolicyFeatures>& PolicyFeatureNames() {
  static const std::array<const char*, kPolicyFeatures> kNames = {
      "analytic_logit",   "path_delay_ratio", "link_delay",           "link_queue",
      "link_loss",        "link_utilisation", "link_utilisation_now", "capacity_share",
      "destination_load", "previous_weight",  "inverse_count"};
  return kNames;
}

void PolicyFeatureBuilder::Onward(const PolicyInputs& in, const DestinationTable& table,
                                  const DiffusionEngine& engine, NodeId d) {
  const Topology& topo = *in.topology;
  const int nodes = topo.num_nodes();
  delay_.assign(nodes, 0);
  loss_.assign(nodes, 0);
  order_.clear();
  for (NodeId v = 0; v < nodes; ++v) {
    if (v == d || table.At(v).empty()) continue;
    const double phi = engine.Potential(d, v);
    if (std::isfinite(phi)) order_.emplace_back(phi, v);
  }
  std::sort(order_.begin(), order_.end());
  for (const auto& [phi, v] : order_) {
    double delay = 0, delivered = 0;
    for (const NextHop& h : table.At(v)) {
      const LinkState& s = in.states[h.link];
      const NodeId u = topo.link(h.link).dst;
      delay += h.weight * (LinkDelaySeconds(s) + delay_[u]);
      delivered += h.weight * (1 - std::clamp(s.loss, 0.0, 1.0)) * (1 - loss_[u]);
    }
    delay_[v] = delay;
    loss_[v] = std::clamp(1 - delivered, 0.0, 1.0);
  }
}

void PolicyFeatureBuilder::Build(const PolicyInputs& in, PolicyBatch& batch) {
  batch.decisions.clear();
  batch.candidates.clear();
  const Topology& topo = *in.topology;
  const double ref_delay = ToSeconds(in.scales.reference_delay);
  const double floor = std::log(std::max(in.min_weight, kSmallestLogitWeight));
  for (size_t cls = 0; cls < in.tables.size(); ++cls) {
    const RoutingTables& tables = *in.tables[cls];
    const RoutingTables* previous = in.previous[cls];
    for (NodeId d : tables.destinations()) {
      const DestinationTable* table = tables.Table(d);
      if (table == nullptr) continue;
      bool any = false;
      for (NodeId v = 0; v < topo.num_nodes() && !any; ++v) any = table->At(v).size() >= 2;
      if (!any) continue;
      Onward(in, *table, *in.engines[cls], d);
      double load = 0;
      const std::vector<LinkId>& into = topo.node(d).in_links;
      for (LinkId l : into) load += in.present_utilisation[l];
      load = into.empty() ? 0 : std::clamp(load / static_cast<double>(into.size()), 0.0, 1.0);
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        absl::Span<const NextHop> row = table->At(v);
        if (row.size() < 2) continue;
        absl::Span<const NextHop> before = previous != nullptr && previous->IsDestination(d)
                                               ? previous->Lookup(v, d)
                                               : absl::Span<const NextHop>();
        PolicyDecision decision;
        decision.node = v;
        decision.destination = d;
        decision.cls = static_cast<int>(cls);
        decision.first = static_cast<uint32_t>(batch.candidates.size());
        decision.count = static_cast<uint32_t>(row.size());
        double best_delay = std::numeric_limits<double>::infinity();
        int64_t widest = 0;
        for (const NextHop& h : row) {
          const LinkState& s = in.states[h.link];
          PolicyCandidate c;
          c.link = h.link;
          c.analytic_weight = h.weight;
          c.path_delay_s = LinkDelaySeconds(s) + delay_[topo.link(h.link).dst];
          c.path_loss = std::clamp(
              1 - (1 - std::clamp(s.loss, 0.0, 1.0)) * (1 - loss_[topo.link(h.link).dst]), 0.0,
              1.0);
          c.queue_s = ToSeconds(s.queueing);
          best_delay = std::min(best_delay, c.path_delay_s);
          widest = std::max(widest, s.capacity.bps());
          auto& f = c.features;
          f[kFeatAnalyticLogit] = static_cast<float>(std::max(std::log(h.weight), floor));
          f[kFeatLinkDelay] = static_cast<float>(std::log1p(LinkDelaySeconds(s) / ref_delay));
          f[kFeatLinkQueue] =
              static_cast<float>(std::min(ToSeconds(s.queueing) / ref_delay, kFeatureCap));
          f[kFeatLinkLoss] = static_cast<float>(
              std::min(std::max(s.loss, 0.0) / in.scales.reference_loss, kFeatureCap));
          f[kFeatLinkUtilisation] = static_cast<float>(std::clamp(s.utilisation, 0.0, 1.0));
          f[kFeatLinkUtilisationNow] =
              static_cast<float>(std::clamp(in.present_utilisation[h.link], 0.0, 1.0));
          f[kFeatDestinationLoad] = static_cast<float>(load);
          double prev = 0;
          for (const NextHop& p : before) {
            if (p.link == h.link) prev = p.weight;
          }
          f[kFeatPreviousWeight] = static_cast<float>(std::clamp(prev, 0.0, 1.0));
          f[kFeatInverseCount] = 1.0f / static_cast<float>(row.size());
          batch.candidates.push_back(c);
        }
        for (uint32_t i = decision.first; i < decision.first + decision.count; ++i) {
          PolicyCandidate& c = batch.candidates[i];
          const LinkState& s = in.states[c.link];
          // A zero delay (no propagation, no queue, the destination next door) compares as
          // equal to another zero delay.
          c.features[kFeatPathDelayRatio] =
              best_delay > 0 ? static_cast<float>(std::log(c.path_delay_s / best_delay)) : 0.0f;
          c.features[kFeatCapacityShare] =
              widest > 0 ? static_cast<float>(static_cast<double>(s.capacity.bps()) /
                                              static_cast<double>(widest))
                         : 1.0f;
        }
        batch.decisions.push_back(decision);
      }
    }
  }
}

}  // namespace dar
