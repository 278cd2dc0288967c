// Runs a scenario: every policy on the same topology, workloads, events and seed, each in a
// fresh simulation of its own (so they may run side by side on several cores; the results do
// not depend on it). Produces the results.json document.
#ifndef DAR_SIM_RUNNER_H_
#define DAR_SIM_RUNNER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario.h"

namespace dar::sim {

struct RunProgress {
  const std::string& policy;
  Time now;
  Time duration;
  uint64_t events;
};

// A policy's records as CSV text (sim/records.h): flows-<policy>.csv and
// timeseries-<policy>.csv.
struct PolicyRecords {
  std::string flows_csv;
  std::string timeseries_csv;
};

struct RunOptions {
  // Called after every millisecond of simulated time; for a progress line. With jobs > 1 it is
  // called from several threads.
  std::function<void(const RunProgress&)> on_progress;
  // Policies simulated at once, each on its own thread.
  int jobs = 1;
  // A policy for the route computer of every `dar` and `dar-learned` policy of the run
  // (RouteComputer::set_weight_policy), overriding dar-learned's `model`: how dar-train puts
  // the policy it trains in the loop. Null (the default): each policy as its settings say.
  // With jobs > 1 it is called from several threads at once, so it must then be thread-safe.
  std::shared_ptr<WeightPolicy> weight_policy;
  // Loads the model of every dar-learned policy (learn::LearnedPolicyLoader in dar-sim). Null:
  // dar-learned refuses its model and runs the analytic engine, and says so.
  WeightPolicyLoader policy_loader;
  // Receives each policy's records when its run ends; with jobs > 1 from several threads at
  // once. Null (the default): the run keeps no records and samples nothing. Either way the
  // results are the same.
  std::function<void(const PolicySpec& policy, const PolicyRecords& records)> on_records;
};

// The result of one policy: {"name", "routing", "forwarding", "metrics": {...}}.
absl::StatusOr<nlohmann::json> RunPolicy(const Scenario& scenario, const PolicySpec& policy,
                                         const RunOptions& options);

// {"scenario", "seed", "topology", "policies": [RunPolicy(...) for each policy]}.
absl::StatusOr<nlohmann::json> RunScenario(const Scenario& scenario, const RunOptions& options);

// A comparison table (metrics as rows, policies as columns) for a terminal.
std::string FormatComparison(const nlohmann::json& results);

}  // namespace dar::sim

#endif  // DAR_SIM_RUNNER_H_
