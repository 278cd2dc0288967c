// Workloads: the traffic a scenario puts on the network, and the metrics it reports.
//
// A workload is built from its YAML block by a factory registered under its `type` name
// (REGISTER_WORKLOAD below, through core/registry.h), so adding one touches no central list. The
// runner calls Start() once, then runs the event loop; a workload generates messages through the
// Transport and records what its users would measure.
#ifndef DAR_SIM_WORKLOAD_H_
#define DAR_SIM_WORKLOAD_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "core/random.h"
#include "core/registry.h"
#include "core/topology.h"
#include "core/units.h"
#include "core/weight_policy.h"
#include "nlohmann/json.hpp"
#include "sim/event_loop.h"
#include "sim/records.h"
#include "sim/transport.h"
#include "yaml-cpp/yaml.h"

namespace dar::sim {

// What a workload may ask for, so that a typo ends in an error that names the key instead of a
// run that never ends or runs out of memory: a message (request, response, transfer) of at
// most 4 GiB, at most a million arrivals a second from one source, at most a million rounds,
// iterations or repeats, a slowdown of at most 1,000.
inline constexpr int64_t kMaxMessageBytes = int64_t{4} << 30;
inline constexpr double kMaxArrivalsPerSecond = 1e6;
inline constexpr int kMaxRepeats = 1000000;
inline constexpr double kMaxSlowdown = 1000;

// What a workload may use while it runs. All references outlive the workload.
struct WorkloadContext {
  EventLoop& loop;
  Transport& transport;
  const Topology& topology;
  Random& rng;    // this workload's own stream
  Time end_time;  // open-ended workloads stop starting new work here
  // Where the workload appends a WorkRecord for every piece of work it measures, as it
  // completes (sim/records.h). Null (the default): it keeps none.
  WorkRecords* records = nullptr;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Schedules the workload's first events.
  virtual void Start(WorkloadContext& ctx) = 0;
  // True once every piece of work the workload started or must start has finished. The
  // runner stops when all workloads are done (or at its drain limit).
  virtual bool Done() const = 0;
  // Adds this workload's metrics (keys as in scenarios/README.md; seconds as floats) to `metrics`.
  virtual void Report(nlohmann::json& metrics) const = 0;
};
using WorkloadPtr = std::unique_ptr<Workload>;

// Where a YAML block came from, for error messages: "scenario.yaml: workloads[0]".
struct ConfigContext {
  // A constructor rather than an aggregate: most callers give no weight policy.
  ConfigContext(std::string where = "", std::string base_dir = "",
                const Topology* topology = nullptr,
                std::shared_ptr<WeightPolicy> weight_policy = nullptr,
                WeightPolicyLoader policy_loader = nullptr)
      : where(std::move(where)),
        base_dir(std::move(base_dir)),
        topology(topology),
        weight_policy(std::move(weight_policy)),
        policy_loader(std::move(policy_loader)) {}

  std::string where;
  std::string base_dir;  // directory of the scenario file, for relative paths
  const Topology* topology = nullptr;
  // A weight policy the run was given (RunOptions::weight_policy): the DAR control planes use
  // it instead of their own (dar-learned's `model`). Null: none.
  std::shared_ptr<WeightPolicy> weight_policy;
  // Loads dar-learned's `model` (RunOptions::policy_loader). Null: dar-learned refuses it.
  WeightPolicyLoader policy_loader;
};

using WorkloadFactory =
    std::function<absl::StatusOr<WorkloadPtr>(const YAML::Node&, const ConfigContext&)>;

// Builds a workload from a block with a `type` key naming a registered WorkloadFactory;
// errors name ctx.where and the key.
absl::StatusOr<WorkloadPtr> CreateWorkload(const YAML::Node& node, const ConfigContext& ctx);

}  // namespace dar::sim

// Registers a workload factory under `type`, at namespace scope in a .cc file.
#define REGISTER_WORKLOAD(type, factory)                                     \
  static const ::dar::Registration<::dar::sim::WorkloadFactory> DAR_CONCAT_( \
      dar_workload_reg_, __LINE__)(type, factory)

#endif  // DAR_SIM_WORKLOAD_H_
