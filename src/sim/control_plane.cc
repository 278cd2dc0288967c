#include "sim/control_plane.h"

#include "core/routing.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "sim/link_state_routing.h"

namespace dar::sim {
namespace {

absl::StatusOr<Duration> ReconvergenceDelay(const YAML::Node& policy, const ConfigContext& ctx) {
  LinkStateConfig defaults;
  if (!policy.IsMap() || !policy["reconvergence_ms"]) return defaults.reconvergence_delay;
  try {
    const double ms = policy["reconvergence_ms"].as<double>();
    if (ms >= 0) return SecondsF(ms / 1000);
  } catch (const YAML::Exception&) {
  }
  return absl::InvalidArgumentError(fmt::format(
      "{}.reconvergence_ms: must be a number >= 0, got '{}'", ctx.where,
      policy["reconvergence_ms"].Scalar()));
}

}  // namespace

absl::StatusOr<ControlPlanePtr> CreateControlPlane(const std::string& routing,
                                                   const YAML::Node& policy,
                                                   const ConfigContext& ctx) {
  if (const ControlPlaneFactory* f = Registry<ControlPlaneFactory>::Find(routing)) {
    return (*f)(policy, ctx);
  }
  // Any table policy of core (static, ecmp, ...) runs under the link-state protocol.
  if (const TablePolicy* tables = Registry<TablePolicy>::Find(routing)) {
    ASSIGN_OR_RETURN(Duration delay, ReconvergenceDelay(policy, ctx));
    return std::make_unique<LinkStateRouting>(*tables, LinkStateConfig{delay});
  }
  std::vector<std::string> names = Registry<ControlPlaneFactory>::Names();
  for (const std::string& n : Registry<TablePolicy>::Names()) names.push_back(n);
  return absl::InvalidArgumentError(fmt::format("{}: unknown routing '{}' (one of: {})",
                                                ctx.where, routing, fmt::join(names, ", ")));
}

}  // namespace dar::sim
