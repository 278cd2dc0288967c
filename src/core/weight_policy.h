// A policy that refines the diffusion engine's weights (the "learned policy" of
// ARCHITECTURE.md): for every (node, destination, class) row of a table with two or more next
// hops, it turns the row's candidates into weights. The candidates are the row's next hops —
// the downhill neighbours the engine chose — and nothing else, so no policy output can add a
// next hop, create a loop or leave a node without a way on; the validator still checks every
// table. The route computer (core/route_computer.h) calls it once per cycle with every such
// row of the destinations it weighs that cycle (RouteComputerConfig::policy_refresh_cycles)
// and falls back to the engine's own weights when it fails (counted, logged).
//
// Features are local and size-independent (no node ids, no counts of nodes or links), so one
// trained policy applies to topologies of any size. They are computed here, in core, so the
// trainer (dar-train) and the engine (INT8 inference, src/learn) see exactly the same ones.
#ifndef DAR_CORE_WEIGHT_POLICY_H_
#define DAR_CORE_WEIGHT_POLICY_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/executor.h"
#include "core/topology.h"
#include "nlohmann/json.hpp"

namespace dar {

// One policy input per candidate. The order is part of the model file format
// (learn/policy_model.h): a model names the features it was trained on and is refused if they
// differ from these. Scales: reference_delay and reference_loss of the route computer's
// CostScales.
enum PolicyFeature : int {
  kFeatAnalyticLogit = 0,   // ln(the engine's weight), floored at ln(min_weight) (at
                            //    ln(1e-6) if min_weight is smaller)
  kFeatPathDelayRatio,      // ln(expected delay to the destination via this candidate /
                            //    the row's smallest such delay); >= 0
  kFeatLinkDelay,           // ln(1 + the link's predicted one-way delay / reference_delay)
  kFeatLinkQueue,           // predicted queueing / reference_delay, at most 10
  kFeatLinkLoss,            // loss / reference_loss, at most 10
  kFeatLinkUtilisation,     // predicted utilisation, [0, 1]
  kFeatLinkUtilisationNow,  // present (measured) utilisation, [0, 1]
  kFeatCapacityShare,       // capacity / the largest capacity among the row's candidates, (0, 1]
  kFeatDestinationLoad,     // mean present utilisation of the links into the destination, [0, 1]
  kFeatPreviousWeight,      // this candidate's weight in the class's previous table, [0, 1]
                            //    (0 if it was not a next hop then): the recent choices
  kFeatInverseCount,        // 1 / the number of candidates in the row
  kPolicyFeatures
};

// The features of a candidate's link alone: kFeatLinkDelay .. kFeatLinkUtilisationNow.
inline constexpr int kPolicyLinkFeatures = kFeatLinkUtilisationNow - kFeatLinkDelay + 1;
static_assert(kPolicyLinkFeatures == 5);

// The features' names, in PolicyFeature order, as a model file lists them.
const std::array<const char*, kPolicyFeatures>& PolicyFeatureNames();

struct PolicyCandidate {
  LinkId link = kNoLink;  // the next hop's link
  std::array<float, kPolicyFeatures> features{};
  double analytic_weight = 0;  // the engine's weight for this candidate
};

// What the reward of a decision is made of (dar-train), as the route computer sees it in the
// cycle of the batch, per candidate: expected one-way delay from the row's node to the
// destination via this candidate (its link, then the tables' weights onward), in seconds;
// expected loss over the same paths, [0, 1]; predicted queueing on the candidate's link, in
// seconds.
struct PolicyRewardTerms {
  double path_delay_s = 0;
  double path_loss = 0;
  double queue_s = 0;
};

// One row: candidates [first, first + count) of the batch.
struct PolicyDecision {
  NodeId node = kNoNode;
  NodeId destination = kNoNode;  // a route target (Topology::Destinations)
  int cls = 0;                   // traffic class: 0 latency, 1 bulk
  uint32_t first = 0;
  uint32_t count = 0;  // >= 2
};

// Every row of one cycle that has a choice, over all classes.
struct PolicyBatch {
  uint64_t cycle = 0;  // RouteComputerStats::cycles at the time
  std::vector<PolicyDecision> decisions;
  std::vector<PolicyCandidate> candidates;
  // By candidate if the policy wants them (WeightPolicy::wants_reward_terms), else empty.
  std::vector<PolicyRewardTerms> rewards;
  // By link, kFeatLinkDelay .. kFeatLinkUtilisationNow: what every candidate on the link has
  // for those features, bit for bit, so that what depends on them alone is computed once per
  // link (PolicyFeatureBuilder fills it). Empty: no such promise (a batch made by hand).
  std::vector<std::array<float, kPolicyLinkFeatures>> link_features;
};

class WeightPolicy {
 public:
  virtual ~WeightPolicy() = default;
  // Writes one weight per candidate of `batch` into `weights` (weights.size() ==
  // batch.candidates.size()): finite, > 0 (the forwarders' validator refuses a next hop with
  // weight 0), summing to 1 (within 1e-6) over each decision's candidates.
  // An error (or weights that break those rules, which the caller checks) makes the caller
  // keep the engine's weights for the whole cycle. Work it shares out runs on `executor` (the
  // route computer's: base/executor.h).
  virtual absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                             Executor& executor) = 0;
  // Whether Weigh reads PolicyBatch::rewards (a trainer does, inference does not: the batch is
  // leaner without them). Default true.
  virtual bool wants_reward_terms() const { return true; }
  // For logs and metrics: e.g. "int8 model dar-policy v1 (models/dar-policy.json)".
  virtual std::string Describe() const = 0;
};

// A weight policy from a model file: how the simulator's `dar-learned` gets one without
// depending on the code that reads models (src/learn). Whoever runs the simulator with learned
// policies supplies a loader (dar-sim gives learn/policy_loader.h's; dar-train hands its policy
// in directly, RunOptions::weight_policy); the simulator never sees the model format.
struct WeightPolicySpec {
  std::string path;    // the model file
  bool int8 = true;    // INT8 inference (false: FP32)
  bool audit = false;  // run the FP32 model beside the INT8 one and report their agreement
};

struct LoadedWeightPolicy {
  std::shared_ptr<WeightPolicy> policy;
  // With WeightPolicySpec::audit: the agreement so far, as a run's metrics show it; null
  // otherwise.
  std::function<nlohmann::json()> audit;
};

// Errors: the model refused, with the file and why.
using WeightPolicyLoader =
    std::function<absl::StatusOr<LoadedWeightPolicy>(const WeightPolicySpec& spec)>;

}  // namespace dar

#endif  // DAR_CORE_WEIGHT_POLICY_H_
