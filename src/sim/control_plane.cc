#include "sim/control_plane.h"

#include "core/routing.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "sim/link_state_routing.h"

namespace dar::sim {

absl::StatusOr<ControlPlanePtr> CreateControlPlane(const std::string& routing, YamlReader& policy,
                                                   const ConfigContext& ctx) {
  if (const ControlPlaneFactory* f = Registry<ControlPlaneFactory>::Find(routing)) {
    return (*f)(policy, ctx);
  }
  // Any table policy of core (static, ecmp, ...) runs under the link-state protocol.
  if (const TablePolicy* tables = Registry<TablePolicy>::Find(routing)) {
    ASSIGN_OR_RETURN(LinkStateConfig config, ReadLinkStateConfig(policy));
    return std::make_unique<LinkStateRouting>(*tables, config);
  }
  std::vector<std::string> names = Registry<ControlPlaneFactory>::Names();
  for (const std::string& n : Registry<TablePolicy>::Names()) names.push_back(n);
  return absl::InvalidArgumentError(fmt::format("{}: unknown routing '{}' (one of: {})", ctx.where,
                                                routing, fmt::join(names, ", ")));
}

}  // namespace dar::sim
