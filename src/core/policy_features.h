// The learned policy's inputs (core/weight_policy.h), built from what the route computer sees
// in one cycle: the predicted state of every link, the engines' new tables and potentials,
// and the tables the previous cycle handed out.
//
// One row per (class, destination, node) whose engine row has two or more next hops (and
// that PolicyInputs::weigh asks for), in that order (classes ascending, destinations in the
// tables' order, nodes ascending); a row's candidates are its next hops in the engine's
// order. Besides the features, if asked, every candidate gets what a decision's reward is
// made of (PolicyRewardTerms): the expected delay and loss from the row's node to the
// destination via the candidate, its link first, then onward as the engine's tables split
// traffic. Those come from a depth-first walk per (class, destination) from the candidates'
// next hops: every next hop has a lower potential than its node, so the next hops form no
// cycle, and a node is done once all its next hops are. Each link's own terms (its features,
// delay, loss) are computed once per Build, not per row. The expected delay is needed anyway
// (kFeatPathDelayRatio); the loss only for the rewards.
//
// Not thread-safe (scratch is reused between calls, so that a steady cycle allocates
// nothing). Pure computation.
#ifndef DAR_CORE_POLICY_FEATURES_H_
#define DAR_CORE_POLICY_FEATURES_H_

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "base/executor.h"
#include "core/diffusion.h"
#include "core/link_cost.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "core/weight_policy.h"

namespace dar {

// Which rows toward a destination PolicyFeatureBuilder builds (PolicyInputs::weigh).
enum class WeighRows : char {
  kNone,     // none (their weights from last cycle stand)
  kChanged,  // those whose next hops are not PolicyInputs::previous's, which has a table
             // toward the destination laid out as this cycle's (row map, blocks)
  kAll,      // every row with a choice
};

// The view of one cycle. Every span is by class (the same number of classes in each).
struct PolicyInputs {
  const Topology* topology = nullptr;
  absl::Span<const LinkState> states;  // by link, as the cycle predicted them
  // Present (measured) utilisation by link, [0, 1]: LinkState's present_utilisation is only
  // set for measured links, so the caller gives it from the links' last samples.
  absl::Span<const double> present_utilisation;
  absl::Span<const RoutingTables* const> tables;  // the engines' tables of this cycle
  // Their potentials: by class, its engines, each computing some of the destinations
  // (DiffusionEngine::Computes), together every destination of its tables.
  absl::Span<const std::vector<const DiffusionEngine*>> engines;
  absl::Span<const RoutingTables* const> previous;  // last cycle's output; null: none
  // The engines' tables of last cycle, or empty (or null): a block of a table in `tables` that
  // is the same object here has the same rows (WeighRows::kChanged skips it).
  absl::Span<const RoutingTables* const> previous_engine;
  CostScales scales;
  double min_weight = 0.001;  // DiffusionConfig::min_weight: floors kFeatAnalyticLogit
  // By class, by destination in its tables' order: which of its rows with a choice to build.
  // Empty: every row (RouteComputerConfig::policy_refresh_cycles).
  absl::Span<const std::vector<WeighRows>> weigh;
  // Whether to fill PolicyBatch::rewards (WeightPolicy::wants_reward_terms); without them the
  // expected loss onward is not computed either.
  bool reward_terms = true;
};

class PolicyFeatureBuilder {
 public:
  // Replaces `batch`'s decisions, candidates, rewards (empty unless inputs.reward_terms) and
  // link features with this cycle's (batch.cycle is left as it is). On an executor of
  // concurrency >= 2, each class's destinations are cut into that many shares of about equal
  // candidates, built side by side, each into its own range of the batch, the same bit for bit.
  // REQUIRES: every table and engine is over inputs.topology.
  void Build(const PolicyInputs& in, PolicyBatch& batch,
             Executor& executor = InlineExecutorInstance());

 private:
  // What the features need of one link, computed once per Build.
  struct LinkTerm {
    double delay_s = 0;    // propagation + queueing
    double delivered = 1;  // 1 - loss
    double queue_s = 0;
    int64_t capacity = 0;  // bps
    NodeId to = kNoNode;
    std::array<float, kPolicyLinkFeatures> features{};  // kFeatLinkDelay .. kFeatLinkUtilisationNow
  };
  // The rows of a share of one class's destinations, and the scratch of their walks: one per
  // share, so that shares can be built side by side.
  class ClassRows {
   public:
    // The node of each row of `table` (a table with no row map: every node, row = node),
    // worked out once per row map.
    const std::vector<NodeId>& NodesOfRows(const DestinationTable& table, int nodes);
    // fn(node, row) for each row of `table` with two or more next hops, in node order; with
    // `unless_as` (same layout as `table`), only the rows whose next hops differ from its,
    // and none of a block that is the same object in `same_as` (null: none).
    template <typename Fn>
    void ForEachRowWithChoice(const DestinationTable& table, int nodes,
                              const DestinationTable* unless_as, const DestinationTable* same_as,
                              Fn&& fn);
    // ForEachRowWithChoice over the rows of class `cls`'s table toward the destination of
    // index `index` that in.weigh asks for.
    template <typename Fn>
    void ForEachRowWeighed(const PolicyInputs& in, int cls, size_t index, Fn&& fn);
    // Counts the rows with a choice of each destination of class `cls`'s tables, and their
    // candidates, that in.weigh asks for: (decisions, candidates) by destination, in the
    // tables' order, into `counts`.
    void Count(const PolicyInputs& in, int cls, std::vector<std::pair<size_t, size_t>>& counts);
    // Writes the rows toward destinations [first, last) of class `cls`'s tables (by index in
    // their order) into batch.decisions [begin.first, end.first) and batch.candidates (and
    // batch.rewards if in.reward_terms) [begin.second, end.second), as Count counted them
    // into `counts` (aborts, saying so, if they do not fill those ranges exactly).
    void Fill(const PolicyInputs& in, int cls, size_t first, size_t last,
              absl::Span<const std::pair<size_t, size_t>> counts, absl::Span<const LinkTerm> links,
              std::pair<size_t, size_t> begin, std::pair<size_t, size_t> end, PolicyBatch& batch);

   private:
    // Starts the walks toward a new destination: every node becomes new (no clearing: the
    // generation moves on).
    void NewDestination(int nodes);
    bool IsDone(NodeId v) const { return mark_[v] == done_; }
    // Expected delay (s) and, if `loss`, loss from `node` to destination `d` under `table`
    // (delay_, loss_), and from every node it reaches on the way that is not done yet.
    void Onward(const DestinationTable& table, const DiffusionEngine& engine,
                absl::Span<const LinkTerm> links, NodeId d, NodeId node, bool loss);

    std::shared_ptr<const DestinationTable::RowMap> row_map_;  // that node_of_row_ is for
    int nodes_ = -1;
    std::vector<NodeId> node_of_row_;
    // By node: open_ while its next hops are walked, done_ once delay_ (and loss_) hold its
    // values; anything else is new. Both move on by 2 per destination.
    std::vector<uint32_t> mark_;
    uint32_t open_ = 0, done_ = 1;
    std::vector<NodeId> stack_;
    std::vector<double> delay_, loss_;  // by node: onward to the destination
    std::vector<double> logs_;          // Fill's logarithms of one destination's candidates
  };
  void LinkTerms(const PolicyInputs& in);

  // A share of a class's destinations [first, last) (by index in its tables' order), and
  // where its rows and candidates start in the batch (and the next share's start).
  struct Share {
    int cls = 0;
    size_t first = 0, last = 0;
    std::pair<size_t, size_t> begin, end;  // (decision, candidate)
  };

  std::vector<LinkTerm> links_;  // by link
  std::vector<ClassRows> rows_;  // by share
  std::vector<Share> shares_;    // in the batch's order: classes ascending, destinations
  // By class, by destination (in its tables' order): (decisions, candidates), from Count.
  std::vector<std::vector<std::pair<size_t, size_t>>> counts_;
};

}  // namespace dar

#endif  // DAR_CORE_POLICY_FEATURES_H_
