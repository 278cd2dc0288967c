// Control planes: what computes and installs the routing tables a simulated network forwards
// with. A routing policy in a scenario names one (by `routing:`), built by a factory
// registered under that name (REGISTER_CONTROL_PLANE, through core/registry.h), so new
// policies touch no central list.
#ifndef DAR_SIM_CONTROL_PLANE_H_
#define DAR_SIM_CONTROL_PLANE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "core/random.h"
#include "core/registry.h"
#include "nlohmann/json.hpp"
#include "sim/event_loop.h"
#include "sim/network.h"
#include "sim/workload.h"
#include "yaml-cpp/yaml.h"

namespace dar::sim {

class Transport;

struct ControlContext {
  EventLoop& loop;
  Network& network;
  Random& rng;                     // the control plane's own stream
  Transport* transport = nullptr;  // the hosts' transport, for host-side policies (PLB)
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // Installs the first tables. Called once, at time 0, before any traffic.
  virtual void Start(ControlContext& ctx) = 0;
  // A link changed state or capacity (both directions of a cable are reported).
  virtual void OnLinkChange(LinkId link) = 0;
  // Adds the control plane's counters (tables installed, loops found, ...) to `metrics`.
  // Must add `routing_loops`: tables refused or installed with a forwarding loop.
  virtual void Report(nlohmann::json& metrics) const = 0;
};
using ControlPlanePtr = std::unique_ptr<ControlPlane>;

// Builds a control plane from its policy's settings. The factory reads its own keys from
// `policy` (a policy's name, routing and forwarding keys are read already); the caller
// rejects keys nobody read.
using ControlPlaneFactory =
    std::function<absl::StatusOr<ControlPlanePtr>(YamlReader& policy, const ConfigContext&)>;

// Builds the control plane registered as `routing` (or a core TablePolicy of that name under
// link-state routing), reading its settings from `policy`. Errors name ctx.where.
absl::StatusOr<ControlPlanePtr> CreateControlPlane(const std::string& routing, YamlReader& policy,
                                                   const ConfigContext& ctx);

// A baseline from the literature under its own name: the control plane (or core TablePolicy)
// it runs under and the forwarding it defaults to. A policy whose routing (by default its
// name) names a preset runs the preset's routing, its forwarding keys overriding the preset's
// defaults; so `spray`, `letflow` and `drill` are usable in any scenario as bare names.
// Registered with REGISTER_POLICY_PRESET.
struct PolicyPreset {
  std::string routing;
  ForwardingConfig forwarding;
};

}  // namespace dar::sim

// Registers a policy preset under `name`, at namespace scope in a .cc file.
#define REGISTER_POLICY_PRESET(name, preset)                                                     \
  static const ::dar::Registration<::dar::sim::PolicyPreset> DAR_CONCAT_(dar_policy_preset_reg_, \
                                                                         __LINE__)(name, preset)

// Registers a control plane factory under `name`, at namespace scope in a .cc file.
#define REGISTER_CONTROL_PLANE(name, factory)                                    \
  static const ::dar::Registration<::dar::sim::ControlPlaneFactory> DAR_CONCAT_( \
      dar_control_plane_reg_, __LINE__)(name, factory)

#endif  // DAR_SIM_CONTROL_PLANE_H_
