// DAR's engine settings as one YAML mapping: the controller's `policy:` block and the
// simulator's `dar` and `dar-learned` policies read the same keys, with the same defaults and
// the same bounds, here, so that what the simulator runs is what a deployment runs.
//
//   decision: marginal | diffusion       the decision layer (default marginal: DAR's objective,
//                                        core/marginal_decision.h; diffusion: the potential
//                                        field of core/diffusion.h, which a learned policy refines)
//   objective_power, objective_length_weight, demand_periods, publish_gain,
//   other_load_horizon_periods, max_link_scans
//                                        the marginal layer (core/marginal_decision.h)
//   temperature, hysteresis, min_weight  the diffusion engine (core/diffusion.h)
//   min_cost_change, full_every, reference_delay_<unit>, forecast_alpha, forecast_beta,
//   forecast_phi, cost_decay_periods, policy_refresh_cycles,
//   latency_weights {hop, latency, loss, utilisation, capacity}, bulk_weights {...}
//                                        the route computer (core/route_computer.h)
//   cycle_threads                        the threads a cycle's parts run on
//                                        (EngineSettings::cycle_threads)
//
// What stays each world's own is set by its adapter on top of the deployed defaults, before
// the keys are read, and said there: the period (the controller's `cycle`, the simulator's
// `period`); whether links are judged by measurement over their configuration, where
// liveness comes from, and the diffusion engine's damping and delay scale (the controller:
// an overlay over an underlay it does not own; the simulator: links that are what their
// parameters say); and the forwarding mode's key. The marginal layer has no such
// differences: both worlds run it with exactly these settings.
#ifndef DAR_CORE_ENGINE_SETTINGS_H_
#define DAR_CORE_ENGINE_SETTINGS_H_

#include "absl/status/status.h"
#include "core/config_reader.h"
#include "core/marginal_decision.h"
#include "core/route_computer.h"

namespace dar {

// The most threads `cycle_threads` may ask for.
inline constexpr int kMaxCycleThreads = 64;

struct EngineSettings {
  bool marginal = true;                    // decision: marginal; false: diffusion
  MarginalDecisionConfig marginal_config;  // its period is the caller's cycle
  RouteComputerConfig routes;              // the diffusion engine's, and the forecast's
  // The threads of the executor (base/executor.h) that runs a cycle's parts: the controller's
  // pool has this many. The simulator runs each cycle on its run's own thread whatever this
  // says (its runs are side by side already); the tables are the same bit for bit on any
  // number. 1..kMaxCycleThreads.
  int cycle_threads = 1;
};

// The deployed engine: the marginal decision with its defaults; for decision: diffusion,
// the route computer's defaults, a learned policy refreshing each row at least every
// kDeployedPolicyRefreshCycles.
EngineSettings DeployedEngineSettings();

// Reads the keys above from `r` into `s` (keys not given keep their value in `s`). Errors
// are YamlReader's, "<where>.<key>: <problem>". Does not check for unknown keys: the caller
// reads its own keys from the same block, then does.
absl::Status ReadEngineSettings(YamlReader& r, EngineSettings& s);

}  // namespace dar

#endif  // DAR_CORE_ENGINE_SETTINGS_H_
