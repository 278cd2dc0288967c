// A scenario: a topology, the workloads on it, timed events, and the routing policies to
// compare on the same workload and seed. Loaded from YAML (see scenarios/README.md for the
// schema) and validated in one place; every error names the file and the key.
#ifndef DAR_SIM_SCENARIO_H_
#define DAR_SIM_SCENARIO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/topology.h"
#include "core/units.h"
#include "sim/control_plane.h"
#include "sim/network.h"
#include "sim/transport.h"
#include "yaml-cpp/yaml.h"

namespace dar::sim {

// A change to the network at a point in simulated time. Link events apply to both directions
// of the cable between `a` and `b`.
struct TimedEvent {
  // kSilentFailure / kSilentRecovery: a gray failure that keeps carrier (no control plane is
  // told; only probes can notice).
  enum class Kind { kLinkDown, kLinkUp, kCapacity, kLoadRamp, kSilentFailure, kSilentRecovery };
  Kind kind = Kind::kLinkDown;
  Time at{0};
  NodeId a = kNoNode;
  NodeId b = kNoNode;
  double capacity_fraction = 1.0;  // kCapacity: of the link's configured capacity
  // kLoadRamp: background load on the cable, as a fraction of its capacity, going linearly
  // from `load_from` at `at` to `load_to` at `until`, then staying at `load_to` until `hold`.
  Time until{0};
  Time hold{0};
  double load_from = 0;
  double load_to = 0;
  bool both_directions = true;
};

// One routing policy to compare: a control plane (`routing`) and a forwarding mode.
struct PolicySpec {
  std::string name;     // as reported in results.json
  std::string routing;  // a registered control plane
  ForwardingConfig forwarding;
  YAML::Node block;  // the policy's YAML (a map, or null), for the control plane's settings
};

// The longest a scenario may run, and drain after (a simulated hour each).
inline constexpr Duration kMaxScenarioDuration = Seconds(3600);

struct Scenario {
  std::string name;
  std::string path;      // the file it came from
  std::string base_dir;  // its directory
  std::string description;
  uint64_t seed = 1;
  // Open-ended workloads start no new work after this time.
  Duration duration = Seconds(1);
  // The run stops at duration + drain_limit even if work is unfinished (reported as such).
  Duration drain_limit = Seconds(10);
  Topology topology;
  NetworkConfig network;
  TransportConfig transport;
  YAML::Node workloads;  // a sequence; built afresh for every policy
  std::vector<TimedEvent> events;
  std::vector<PolicySpec> policies;
};

// Reads a policy (a bare name, or a map with name, routing, forwarding, flowlet_gap_us and
// the control plane's own keys) and builds its control plane from it.
absl::StatusOr<ControlPlanePtr> CreatePolicyControlPlane(const PolicySpec& policy,
                                                         const ConfigContext& ctx);

// Loads and validates a scenario file.
absl::StatusOr<Scenario> LoadScenario(const std::string& path);
// Same, from YAML text; `path` is used for messages and relative file names.
absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text, const std::string& path);

}  // namespace dar::sim

#endif  // DAR_SIM_SCENARIO_H_
