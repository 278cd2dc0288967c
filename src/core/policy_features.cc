#include "core/policy_features.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/vector_exp.h"

namespace dar {
namespace {

// kFeatAnalyticLogit's floor when min_weight is 0 (ln 0 is no feature).
constexpr double kSmallestLogitWeight = 1e-6;
constexpr double kFeatureCap = 10;  // kFeatLinkQueue and kFeatLinkLoss
// kFeatPathDelayRatio's argument at most (LogPositive takes finite arguments only).
constexpr double kLargestRatio = 1e300;

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

const std::vector<NodeId>& PolicyFeatureBuilder::ClassRows::NodesOfRows(
    const DestinationTable& table, int nodes) {
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

void PolicyFeatureBuilder::ClassRows::NewDestination(int nodes) {
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

void PolicyFeatureBuilder::ClassRows::Onward(const DestinationTable& table,
                                             const DiffusionEngine& engine,
                                             absl::Span<const LinkTerm> links, NodeId d,
                                             NodeId node, bool loss) {
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
        const NodeId u = links[h.link].to;
        if (mark_[u] != done_ && mark_[u] != open_) stack_.push_back(u);
      }
      continue;
    }
    double delay = 0;
    for (const NextHop& h : row) {
      const LinkTerm& t = links[h.link];
      delay += h.weight * (t.delay_s + delay_[t.to]);
    }
    delay_[v] = delay;
    if (loss) {
      double delivered = 0;
      for (const NextHop& h : row) {
        const LinkTerm& t = links[h.link];
        delivered += h.weight * t.delivered * (1 - loss_[t.to]);
      }
      loss_[v] = std::clamp(1 - delivered, 0.0, 1.0);
    }
    mark_[v] = done_;
    stack_.pop_back();
  }
}

void PolicyFeatureBuilder::Build(const PolicyInputs& in, PolicyBatch& batch, Executor& executor) {
  const int classes = static_cast<int>(in.tables.size());
  const size_t per_class = static_cast<size_t>(std::max(executor.concurrency(), 1));
  LinkTerms(in);
  rows_.resize(static_cast<size_t>(classes) * per_class);
  counts_.resize(classes);
  // Each share's rows and candidates first, so that each can fill its own range: a class's
  // destinations are cut where its candidates so far pass the next equal share of them.
  executor.RunEach(classes, [&](int cls) {
    rows_[static_cast<size_t>(cls) * per_class].Count(in, cls, counts_[cls]);
  });
  shares_.clear();
  std::pair<size_t, size_t> at = {0, 0};
  for (int cls = 0; cls < classes; ++cls) {
    std::vector<std::pair<size_t, size_t>>& counts = counts_[cls];
    size_t candidates = 0;
    for (const auto& c : counts) candidates += c.second;
    size_t d = 0, so_far = 0;
    for (size_t k = 1; k <= per_class; ++k) {
      Share share;
      share.cls = cls;
      share.first = d;
      share.begin = at;
      // Up to the k-th equal share of the class's candidates (all of them for the last).
      while (d < counts.size() && (k == per_class || so_far < candidates * k / per_class)) {
        at.first += counts[d].first;
        at.second += counts[d].second;
        so_far += counts[d].second;
        ++d;
      }
      share.last = d;
      share.end = at;
      shares_.push_back(share);
    }
  }
  // Fill writes every field of every element, so the vectors are only resized: a steady
  // cycle neither allocates nor clears.
  batch.decisions.resize(at.first);
  batch.candidates.resize(at.second);
  batch.rewards.resize(in.reward_terms ? at.second : 0);
  batch.link_features.resize(links_.size());
  for (size_t l = 0; l < links_.size(); ++l) batch.link_features[l] = links_[l].features;
  executor.RunEach(static_cast<int>(shares_.size()), [&](int i) {
    const Share& share = shares_[static_cast<size_t>(i)];
    rows_[static_cast<size_t>(i)].Fill(in, share.cls, share.first, share.last, counts_[share.cls],
                                       links_, share.begin, share.end, batch);
  });
}

template <typename Fn>
void PolicyFeatureBuilder::ClassRows::ForEachRowWithChoice(const DestinationTable& table, int nodes,
                                                           const DestinationTable* unless_as,
                                                           const DestinationTable* same_as,
                                                           Fn&& fn) {
  constexpr size_t kRows = DestinationTable::kRowsPerBlock;
  // Row by row through the table's blocks (rows are in node order), not node by node: most
  // nodes of a fabric are hosts, which have no row.
  const std::vector<NodeId>& node_of_row = NodesOfRows(table, nodes);
  const std::vector<DestinationTable::BlockPtr>& blocks = table.blocks();
  for (size_t b = 0; b * kRows < node_of_row.size(); ++b) {
    const DestinationTable::Block& block = *blocks[b];
    if (same_as != nullptr && same_as->blocks()[b].get() == &block) continue;
    const DestinationTable::Block* old =
        unless_as != nullptr ? unless_as->blocks()[b].get() : nullptr;
    if (old == &block) continue;
    const size_t rows = std::min(kRows, node_of_row.size() - b * kRows);
    for (size_t r = 0; r < rows; ++r) {
      const uint32_t hops = block.offsets[r + 1] - block.offsets[r];
      if (hops < 2) continue;
      const absl::Span<const NextHop> row(block.hops.data() + block.offsets[r], hops);
      if (old != nullptr &&
          SameLinks(row, absl::Span<const NextHop>(old->hops.data() + old->offsets[r],
                                                   old->offsets[r + 1] - old->offsets[r]))) {
        continue;
      }
      fn(node_of_row[b * kRows + r], row);
    }
  }
}

template <typename Fn>
void PolicyFeatureBuilder::ClassRows::ForEachRowWeighed(const PolicyInputs& in, int cls,
                                                        size_t index, Fn&& fn) {
  const RoutingTables& tables = *in.tables[cls];
  const NodeId d = tables.destinations()[index];
  const DestinationTable* table = tables.Table(d);
  if (table == nullptr) return;
  const WeighRows weigh = in.weigh.empty() ? WeighRows::kAll : in.weigh[cls][index];
  if (weigh == WeighRows::kNone) return;
  const DestinationTable* unless_as = nullptr;
  const DestinationTable* same_as = nullptr;
  if (weigh == WeighRows::kChanged) {
    unless_as = in.previous[cls]->Table(d);
    if (!unless_as->SameLayoutAs(*table)) {
      std::fprintf(stderr, "PolicyFeatureBuilder: rows asked by their change, laid out anew\n");
      std::abort();
    }
    const RoutingTables* engine = in.previous_engine.empty() ? nullptr : in.previous_engine[cls];
    same_as = engine != nullptr && engine->IsDestination(d) ? engine->Table(d) : nullptr;
    if (same_as != nullptr && !same_as->SameLayoutAs(*table)) same_as = nullptr;
  }
  ForEachRowWithChoice(*table, in.topology->num_nodes(), unless_as, same_as, fn);
}

void PolicyFeatureBuilder::ClassRows::Count(const PolicyInputs& in, int cls,
                                            std::vector<std::pair<size_t, size_t>>& counts) {
  counts.assign(in.tables[cls]->destinations().size(), {0, 0});
  for (size_t i = 0; i < counts.size(); ++i) {
    ForEachRowWeighed(in, cls, i, [&](NodeId, absl::Span<const NextHop> row) {
      ++counts[i].first;
      counts[i].second += row.size();
    });
  }
}

void PolicyFeatureBuilder::ClassRows::Fill(const PolicyInputs& in, int cls, size_t first,
                                           size_t last,
                                           absl::Span<const std::pair<size_t, size_t>> counts,
                                           absl::Span<const LinkTerm> links,
                                           std::pair<size_t, size_t> begin,
                                           std::pair<size_t, size_t> end, PolicyBatch& batch) {
  // Plain variables, not a structured binding: the lambda below captures them (clang 14,
  // which checks the locking, cannot capture a binding).
  size_t decision = begin.first, candidate = begin.second;
  const Topology& topo = *in.topology;
  const int nodes = topo.num_nodes();
  const double floor_weight = std::max(in.min_weight, kSmallestLogitWeight);
  const double floor = std::log(floor_weight);
  const RoutingTables& tables = *in.tables[cls];
  const RoutingTables* previous = in.previous[cls];
  const std::vector<const DiffusionEngine*>& engines = in.engines[cls];
  for (size_t index = first; index < last; ++index) {
    const NodeId d = tables.destinations()[index];
    const DestinationTable* table = tables.Table(d);
    if (table == nullptr || counts[index].first == 0) continue;
    const auto computes = std::find_if(engines.begin(), engines.end(),
                                       [d](const DiffusionEngine* e) { return e->Computes(d); });
    if (computes == engines.end()) {
      std::fprintf(stderr, "PolicyFeatureBuilder: no engine of class %d computes destination %d\n",
                   cls, d);
      std::abort();
    }
    const DiffusionEngine& engine = **computes;
    const DestinationTable* before =
        previous != nullptr && previous->IsDestination(d) ? previous->Table(d) : nullptr;
    bool started = false;  // the walks toward d (on its first row with a choice)
    float load = 0;
    // The logarithms' arguments of d's candidates (weight, delay ratio), taken in one vector
    // pass once d's rows are done: a scalar log per feature was a good share of a cycle.
    const size_t first_of_d = candidate;
    logs_.clear();
    ForEachRowWeighed(in, cls, index, [&](NodeId v, absl::Span<const NextHop> row) {
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
        const NodeId u = links[h.link].to;
        if (!IsDone(u)) Onward(*table, engine, links, d, u, in.reward_terms);
      }
      const absl::Span<const NextHop> old =
          before != nullptr ? before->At(v) : absl::Span<const NextHop>();
      PolicyDecision& dec = batch.decisions[decision++];
      dec.node = v;
      dec.destination = d;
      dec.cls = cls;
      dec.first = static_cast<uint32_t>(candidate);
      dec.count = static_cast<uint32_t>(row.size());
      double best_delay = std::numeric_limits<double>::infinity();
      int64_t widest = 0;
      for (const NextHop& h : row) {
        const LinkTerm& t = links[h.link];
        best_delay = std::min(best_delay, t.delay_s + delay_[t.to]);
        widest = std::max(widest, t.capacity);
      }
      const float inverse_count = 1.0f / static_cast<float>(row.size());
      for (const NextHop& h : row) {
        const LinkTerm& t = links[h.link];
        const double path_delay = t.delay_s + delay_[t.to];
        if (in.reward_terms) {
          batch.rewards[candidate] = PolicyRewardTerms{
              path_delay, std::clamp(1 - t.delivered * (1 - loss_[t.to]), 0.0, 1.0), t.queue_s};
        }
        // The batch is tens of MB: ask for the lines a few candidates ahead before writing.
        if (candidate + 8 < end.second) __builtin_prefetch(&batch.candidates[candidate + 8], 1);
        PolicyCandidate& c = batch.candidates[candidate++];
        c.link = h.link;
        c.analytic_weight = h.weight;
        // Last cycle's row mostly has the same next hops in the same order: look there first.
        const size_t k = static_cast<size_t>(&h - row.data());
        double prev = 0;
        if (k < old.size() && old[k].link == h.link) {
          prev = old[k].weight;
        } else {
          for (const NextHop& p : old) {
            if (p.link == h.link) prev = p.weight;
          }
        }
        auto& f = c.features;
        logs_.push_back(std::max(h.weight, floor_weight));
        // A zero delay (no propagation, no queue, the destination next door) compares as
        // equal to another zero delay (a ratio of 1: ln 1 is 0 exactly).
        logs_.push_back(best_delay > 0 && path_delay != best_delay
                            ? std::min(path_delay / best_delay, kLargestRatio)
                            : 1.0);
        f[kFeatLinkDelay] = t.features[0];
        f[kFeatLinkQueue] = t.features[1];
        f[kFeatLinkLoss] = t.features[2];
        f[kFeatLinkUtilisation] = t.features[3];
        f[kFeatLinkUtilisationNow] = t.features[4];
        // (No division where it is known to give 1.)
        f[kFeatCapacityShare] =
            widest > 0 && t.capacity != widest
                ? static_cast<float>(static_cast<double>(t.capacity) / static_cast<double>(widest))
                : 1.0f;
        f[kFeatDestinationLoad] = load;
        f[kFeatPreviousWeight] = static_cast<float>(std::clamp(prev, 0.0, 1.0));
        f[kFeatInverseCount] = inverse_count;
      }
    });
    LogPositive(logs_.data(), logs_.data(), static_cast<uint32_t>(logs_.size()));
    for (size_t k = first_of_d; k < candidate; ++k) {
      auto& f = batch.candidates[k].features;
      const double* ln = logs_.data() + 2 * (k - first_of_d);
      f[kFeatAnalyticLogit] = static_cast<float>(std::max(ln[0], floor));
      f[kFeatPathDelayRatio] = static_cast<float>(ln[1]);
    }
  }
  // Count and this walk must agree, or a class would write into another's range.
  if (decision != end.first || candidate != end.second) {
    std::fprintf(
        stderr,
        "PolicyFeatureBuilder: a share of class %d filled %zu rows, %zu candidates; %zu, %zu "
        "counted\n",
        cls, decision - begin.first, candidate - begin.second, end.first - begin.first,
        end.second - begin.second);
    std::abort();
  }
}

}  // namespace dar
