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

void PolicyFeatureBuilder::LinkTerms(const PolicyInputs& in) {
  const int links = in.topology->num_links();
  const double ref_delay = ToSeconds(in.scales.reference_delay);
  links_.resize(links);
  for (LinkId l = 0; l < links; ++l) {
    const LinkState& s = in.states[l];
    LinkTerm& t = links_[l];
    t.delay_s = LinkDelaySeconds(s);
    t.delivered = 1 - std::clamp(s.loss, 0.0, 1.0);
    t.queue_s = ToSeconds(s.queueing);
    t.capacity = s.capacity.bps();
    t.to = in.topology->link(l).dst;
    t.features[0] = static_cast<float>(std::log1p(t.delay_s / ref_delay));
    t.features[1] = static_cast<float>(std::min(t.queue_s / ref_delay, kFeatureCap));
    t.features[2] =
        static_cast<float>(std::min(std::max(s.loss, 0.0) / in.scales.reference_loss, kFeatureCap));
    t.features[3] = static_cast<float>(std::clamp(s.utilisation, 0.0, 1.0));
    t.features[4] = static_cast<float>(std::clamp(in.present_utilisation[l], 0.0, 1.0));
  }
}

void PolicyFeatureBuilder::Onward(const PolicyInputs& in, const DestinationTable& table,
                                  const DiffusionEngine& engine, NodeId d, NodeId node) {
  // Depth first: a node is done once every next hop of it is (each next hop has a lower
  // potential, so there is no cycle to follow). A node that is the destination, has no next
  // hop or cannot reach d keeps 0 and 0.
  stack_.push_back(node);
  while (!stack_.empty()) {
    const NodeId v = stack_.back();
    if (state_[v] == kDone) {
      stack_.pop_back();
      continue;
    }
    const absl::Span<const NextHop> row = table.At(v);
    if (state_[v] == kNew) {
      if (v == d || row.empty() || !std::isfinite(engine.Potential(d, v))) {
        state_[v] = kDone;
        stack_.pop_back();
        continue;
      }
      state_[v] = kOpen;
      for (const NextHop& h : row) {
        const NodeId u = links_[h.link].to;
        if (state_[u] == kNew) stack_.push_back(u);
      }
      continue;
    }
    double delay = 0, delivered = 0;
    for (const NextHop& h : row) {
      const LinkTerm& t = links_[h.link];
      delay += h.weight * (t.delay_s + delay_[t.to]);
      delivered += h.weight * t.delivered * (1 - loss_[t.to]);
    }
    delay_[v] = delay;
    loss_[v] = std::clamp(1 - delivered, 0.0, 1.0);
    state_[v] = kDone;
    stack_.pop_back();
  }
}

void PolicyFeatureBuilder::Build(const PolicyInputs& in, PolicyBatch& batch) {
  batch.decisions.clear();
  batch.candidates.clear();
  const Topology& topo = *in.topology;
  const int nodes = topo.num_nodes();
  const double floor = std::log(std::max(in.min_weight, kSmallestLogitWeight));
  LinkTerms(in);
  for (size_t cls = 0; cls < in.tables.size(); ++cls) {
    const RoutingTables& tables = *in.tables[cls];
    const RoutingTables* previous = in.previous[cls];
    for (NodeId d : tables.destinations()) {
      const DestinationTable* table = tables.Table(d);
      if (table == nullptr) continue;
      bool any = false;
      for (NodeId v = 0; v < nodes && !any; ++v) any = table->At(v).size() >= 2;
      if (!any) continue;
      delay_.assign(nodes, 0);
      loss_.assign(nodes, 0);
      state_.assign(nodes, kNew);
      double load = 0;
      const std::vector<LinkId>& into = topo.node(d).in_links;
      for (LinkId l : into) load += in.present_utilisation[l];
      load = into.empty() ? 0 : std::clamp(load / static_cast<double>(into.size()), 0.0, 1.0);
      const bool had_d = previous != nullptr && previous->IsDestination(d);
      for (NodeId v = 0; v < nodes; ++v) {
        absl::Span<const NextHop> row = table->At(v);
        if (row.size() < 2) continue;
        for (const NextHop& h : row) {
          const NodeId u = links_[h.link].to;
          if (state_[u] != kDone) Onward(in, *table, *in.engines[cls], d, u);
        }
        absl::Span<const NextHop> before =
            had_d ? previous->Lookup(v, d) : absl::Span<const NextHop>();
        PolicyDecision& decision = batch.decisions.emplace_back();
        decision.node = v;
        decision.destination = d;
        decision.cls = static_cast<int>(cls);
        decision.first = static_cast<uint32_t>(batch.candidates.size());
        decision.count = static_cast<uint32_t>(row.size());
        double best_delay = std::numeric_limits<double>::infinity();
        int64_t widest = 0;
        for (const NextHop& h : row) {
          const LinkTerm& t = links_[h.link];
          PolicyCandidate& c = batch.candidates.emplace_back();
          c.link = h.link;
          c.analytic_weight = h.weight;
          c.path_delay_s = t.delay_s + delay_[t.to];
          c.path_loss = std::clamp(1 - t.delivered * (1 - loss_[t.to]), 0.0, 1.0);
          c.queue_s = t.queue_s;
          best_delay = std::min(best_delay, c.path_delay_s);
          widest = std::max(widest, t.capacity);
          auto& f = c.features;
          f[kFeatAnalyticLogit] = static_cast<float>(std::max(std::log(h.weight), floor));
          f[kFeatLinkDelay] = t.features[0];
          f[kFeatLinkQueue] = t.features[1];
          f[kFeatLinkLoss] = t.features[2];
          f[kFeatLinkUtilisation] = t.features[3];
          f[kFeatLinkUtilisationNow] = t.features[4];
          f[kFeatDestinationLoad] = static_cast<float>(load);
          double prev = 0;
          for (const NextHop& p : before) {
            if (p.link == h.link) prev = p.weight;
          }
          f[kFeatPreviousWeight] = static_cast<float>(std::clamp(prev, 0.0, 1.0));
          f[kFeatInverseCount] = 1.0f / static_cast<float>(row.size());
        }
        for (uint32_t i = decision.first; i < decision.first + decision.count; ++i) {
          PolicyCandidate& c = batch.candidates[i];
          // A zero delay (no propagation, no queue, the destination next door) compares as
          // equal to another zero delay.
          c.features[kFeatPathDelayRatio] =
              best_delay > 0 ? static_cast<float>(std::log(c.path_delay_s / best_delay)) : 0.0f;
          c.features[kFeatCapacityShare] =
              widest > 0 ? static_cast<float>(static_cast<double>(links_[c.link].capacity) /
                                              static_cast<double>(widest))
                         : 1.0f;
        }
      }
    }
  }
}

}  // namespace dar
