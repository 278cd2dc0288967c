#include "core/policy_features.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

const std::vector<NodeId>& PolicyFeatureBuilder::NodesOfRows(const DestinationTable& table,
                                                             int nodes) {
  const std::shared_ptr<const DestinationTable::RowMap>& map = table.row_map();
  if (map == row_map_ && nodes_ == nodes) {
    return node_of_row_;
  }
  row_map_ = map;
  nodes_ = nodes;
  node_of_row_.clear();
  for (NodeId v = 0; v < nodes; ++v) {
    const int32_t row = map == nullptr ? v : (*map)[v];
    if (row < 0) continue;
    // DestinationTable's row maps place nodes in rows in node order (the diffusion engine's
    // do); the rows are walked in that order so that the batch's rows are in node order.
    if (static_cast<size_t>(row) != node_of_row_.size()) {
      std::fprintf(stderr, "PolicyFeatureBuilder: a row map out of node order\n");
      std::abort();
    }
    node_of_row_.push_back(v);
  }
  return node_of_row_;
}

void PolicyFeatureBuilder::NewDestination(int nodes) {
  if (mark_.size() != static_cast<size_t>(nodes) ||
      done_ >= std::numeric_limits<uint32_t>::max() - 2) {
    mark_.assign(nodes, 0);
    delay_.resize(nodes);
    loss_.resize(nodes);
    open_ = 1;
    done_ = 2;
    return;
  }
  open_ += 2;
  done_ += 2;
}

void PolicyFeatureBuilder::Onward(const DestinationTable& table, const DiffusionEngine& engine,
                                  NodeId d, NodeId node, bool loss) {
  // Depth first: a node is done once every next hop of it is (each next hop has a lower
  // potential, so there is no cycle to follow). A node that is the destination, has no next
  // hop or cannot reach d gets 0 and 0.
  stack_.push_back(node);
  while (!stack_.empty()) {
    const NodeId v = stack_.back();
    if (mark_[v] == done_) {
      stack_.pop_back();
      continue;
    }
    const absl::Span<const NextHop> row = table.At(v);
    if (mark_[v] != open_) {
      if (v == d || row.empty() || !std::isfinite(engine.Potential(d, v))) {
        delay_[v] = 0;
        loss_[v] = 0;
        mark_[v] = done_;
        stack_.pop_back();
        continue;
      }
      mark_[v] = open_;
      for (const NextHop& h : row) {
        const NodeId u = links_[h.link].to;
        if (mark_[u] != done_ && mark_[u] != open_) stack_.push_back(u);
      }
      continue;
    }
    double delay = 0;
    for (const NextHop& h : row) {
      const LinkTerm& t = links_[h.link];
      delay += h.weight * (t.delay_s + delay_[t.to]);
    }
    delay_[v] = delay;
    if (loss) {
      double delivered = 0;
      for (const NextHop& h : row) {
        const LinkTerm& t = links_[h.link];
        delivered += h.weight * t.delivered * (1 - loss_[t.to]);
      }
      loss_[v] = std::clamp(1 - delivered, 0.0, 1.0);
    }
    mark_[v] = done_;
    stack_.pop_back();
  }
}

void PolicyFeatureBuilder::Build(const PolicyInputs& in, PolicyBatch& batch) {
  // clear() keeps the vectors' capacity: a steady cycle allocates nothing.
  batch.decisions.clear();
  batch.candidates.clear();
  batch.rewards.clear();
  const Topology& topo = *in.topology;
  const int nodes = topo.num_nodes();
  const double floor = std::log(std::max(in.min_weight, kSmallestLogitWeight));
  LinkTerms(in);
  double last_weight = std::numeric_limits<double>::quiet_NaN();  // and its feature:
  float last_logit = 0;
  for (size_t cls = 0; cls < in.tables.size(); ++cls) {
    const RoutingTables& tables = *in.tables[cls];
    const RoutingTables* previous = in.previous[cls];
    const DiffusionEngine& engine = *in.engines[cls];
    for (NodeId d : tables.destinations()) {
      const DestinationTable* table = tables.Table(d);
      if (table == nullptr) continue;
      const DestinationTable* before =
          previous != nullptr && previous->IsDestination(d) ? previous->Table(d) : nullptr;
      bool started = false;  // the walks toward d (on its first row with a choice)
      float load = 0;
      // Row by row through the table's blocks (rows are in node order), not node by node:
      // most nodes of a fabric are hosts, which have no row.
      const std::vector<NodeId>& node_of_row = NodesOfRows(*table, nodes);
      const std::vector<DestinationTable::BlockPtr>& blocks = table->blocks();
      for (size_t index = 0; index < node_of_row.size(); ++index) {
        const DestinationTable::Block& block = *blocks[index / DestinationTable::kRowsPerBlock];
        const size_t r = index % DestinationTable::kRowsPerBlock;
        const uint32_t hops = block.offsets[r + 1] - block.offsets[r];
        if (hops < 2) continue;
        const absl::Span<const NextHop> row(block.hops.data() + block.offsets[r], hops);
        const NodeId v = node_of_row[index];
        if (!started) {
          started = true;
          NewDestination(nodes);
          double sum = 0;
          const std::vector<LinkId>& into = topo.node(d).in_links;
          for (LinkId l : into) sum += in.present_utilisation[l];
          load = static_cast<float>(
              into.empty() ? 0 : std::clamp(sum / static_cast<double>(into.size()), 0.0, 1.0));
        }
        for (const NextHop& h : row) {
          const NodeId u = links_[h.link].to;
          if (!IsDone(u)) Onward(*table, engine, d, u, in.reward_terms);
        }
        const absl::Span<const NextHop> old =
            before != nullptr ? before->At(v) : absl::Span<const NextHop>();
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
          best_delay = std::min(best_delay, t.delay_s + delay_[t.to]);
          widest = std::max(widest, t.capacity);
        }
        const float inverse_count = 1.0f / static_cast<float>(row.size());
        for (const NextHop& h : row) {
          const LinkTerm& t = links_[h.link];
          const double path_delay = t.delay_s + delay_[t.to];
          PolicyCandidate& c = batch.candidates.emplace_back();
          c.link = h.link;
          c.analytic_weight = h.weight;
          double prev = 0;
          for (const NextHop& p : old) {
            if (p.link == h.link) prev = p.weight;
          }
          auto& f = c.features;
          // The logs are a good share of the cost: one is skipped where its value is known
          // (a weight equal to the one before, as in a row of equal weights; ln 1 is 0).
          if (h.weight != last_weight) {
            last_weight = h.weight;
            last_logit = static_cast<float>(std::max(std::log(h.weight), floor));
          }
          f[kFeatAnalyticLogit] = last_logit;
          // A zero delay (no propagation, no queue, the destination next door) compares as
          // equal to another zero delay.
          f[kFeatPathDelayRatio] = best_delay > 0 && path_delay != best_delay
                                       ? static_cast<float>(std::log(path_delay / best_delay))
                                       : 0.0f;
          f[kFeatLinkDelay] = t.features[0];
          f[kFeatLinkQueue] = t.features[1];
          f[kFeatLinkLoss] = t.features[2];
          f[kFeatLinkUtilisation] = t.features[3];
          f[kFeatLinkUtilisationNow] = t.features[4];
          f[kFeatCapacityShare] = widest > 0 ? static_cast<float>(static_cast<double>(t.capacity) /
                                                                  static_cast<double>(widest))
                                             : 1.0f;
          f[kFeatDestinationLoad] = load;
          f[kFeatPreviousWeight] = static_cast<float>(std::clamp(prev, 0.0, 1.0));
          f[kFeatInverseCount] = inverse_count;
          if (in.reward_terms) {
            batch.rewards.push_back(PolicyRewardTerms{
                path_delay, std::clamp(1 - t.delivered * (1 - loss_[t.to]), 0.0, 1.0), t.queue_s});
          }
        }
      }
    }
  }
}

}  // namespace dar
