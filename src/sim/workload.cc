#include "sim/workload.h"

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace dar::sim {

absl::StatusOr<WorkloadPtr> CreateWorkload(const YAML::Node& node, const ConfigContext& ctx) {
  const std::vector<std::string> types = Registry<WorkloadFactory>::Names();
  if (!node.IsMap() || !node["type"] || !node["type"].IsScalar()) {
    return absl::InvalidArgumentError(fmt::format("{}: a workload needs a 'type' (one of: {})",
                                                  ctx.where, fmt::join(types, ", ")));
  }
  const std::string type = node["type"].as<std::string>();
  const WorkloadFactory* factory = Registry<WorkloadFactory>::Find(type);
  if (factory == nullptr) {
    return absl::InvalidArgumentError(fmt::format("{}.type: unknown workload '{}' (one of: {})",
                                                  ctx.where, type, fmt::join(types, ", ")));
  }
  return (*factory)(node, ctx);
}

}  // namespace dar::sim
