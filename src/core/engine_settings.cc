#include "core/engine_settings.h"

#include <string>

#include "base/status_macros.h"

namespace dar {
namespace {

absl::Status ReadWeights(YamlReader& block, const std::string& key, ClassWeights& w) {
  ASSIGN_OR_RETURN(YamlReader r, block.OptionalMap(key));
  ASSIGN_OR_RETURN(w.hop, r.Optional<double>("hop", w.hop, Bounds::Positive()));
  ASSIGN_OR_RETURN(w.latency, r.Optional<double>("latency", w.latency, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.loss, r.Optional<double>("loss", w.loss, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.utilisation,
                   r.Optional<double>("utilisation", w.utilisation, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.capacity, r.Optional<double>("capacity", w.capacity, Bounds::NonNegative()));
  return r.CheckNoUnknownKeys();
}

}  // namespace

EngineSettings DeployedEngineSettings() {
  EngineSettings s;
  s.routes.policy_refresh_cycles = kDeployedPolicyRefreshCycles;
  return s;
}

absl::Status ReadEngineSettings(YamlReader& r, EngineSettings& s) {
  // Not ASSIGN_OR_RETURN into a string: g++ 12 then warns, wrongly, that the string may be
  // read uninitialised (-Wmaybe-uninitialized, which -Werror makes fatal).
  const absl::StatusOr<std::string> decision = r.OptionalChoice(
      "decision", s.marginal ? "marginal" : "diffusion", {"diffusion", "marginal"});
  if (!decision.ok()) return decision.status();
  s.marginal = *decision == "marginal";
  MarginalDecisionConfig& m = s.marginal_config;
  RoutingObjective& o = m.routing.objective;
  ASSIGN_OR_RETURN(o.power, r.Optional<double>("objective_power", o.power, Bounds::InRange(2, 64)));
  ASSIGN_OR_RETURN(o.length_weight, r.Optional<double>("objective_length_weight", o.length_weight,
                                                       Bounds::NonNegative()));
  ASSIGN_OR_RETURN(m.demand_periods,
                   r.Optional<double>("demand_periods", m.demand_periods, Bounds::Positive()));
  ASSIGN_OR_RETURN(m.publish_gain,
                   r.Optional<double>("publish_gain", m.publish_gain, Bounds::InRange(0, 0.99)));
  ASSIGN_OR_RETURN(
      m.routing.max_link_scans,
      r.Optional<int64_t>("max_link_scans", m.routing.max_link_scans, Bounds::InRange(0, 1e12)));
  ASSIGN_OR_RETURN(m.other_load_horizon_periods,
                   r.Optional<int>("other_load_horizon_periods", m.other_load_horizon_periods,
                                   Bounds::InRange(0, 1000000)));

  RouteComputerConfig& c = s.routes;
  ASSIGN_OR_RETURN(
      c.diffusion.temperature,
      r.Optional<double>("temperature", c.diffusion.temperature, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(c.diffusion.hysteresis,
                   r.Optional<double>("hysteresis", c.diffusion.hysteresis, Bounds::InRange(0, 2)));
  ASSIGN_OR_RETURN(c.diffusion.min_weight,
                   r.Optional<double>("min_weight", c.diffusion.min_weight, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(c.min_cost_change,
                   r.Optional<double>("min_cost_change", c.min_cost_change, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(c.full_every,
                   r.Optional<int>("full_every", c.full_every, Bounds::InRange(1, 1000000)));
  ASSIGN_OR_RETURN(
      c.scales.reference_delay,
      r.OptionalDuration("reference_delay", c.scales.reference_delay, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.forecast.alpha, r.Optional<double>("forecast_alpha", c.forecast.alpha,
                                                        Bounds::InRange(1e-6, 1)));
  ASSIGN_OR_RETURN(c.forecast.beta,
                   r.Optional<double>("forecast_beta", c.forecast.beta, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(c.forecast.phi,
                   r.Optional<double>("forecast_phi", c.forecast.phi, Bounds::InRange(1e-6, 1)));
  ASSIGN_OR_RETURN(c.cost_decay_periods, r.Optional<int>("cost_decay_periods", c.cost_decay_periods,
                                                         Bounds::InRange(1, 1000000)));
  ASSIGN_OR_RETURN(
      c.policy_refresh_cycles,
      r.Optional<int>("policy_refresh_cycles", c.policy_refresh_cycles, Bounds::InRange(1, 1000)));
  ASSIGN_OR_RETURN(s.cycle_threads, r.Optional<int>("cycle_threads", s.cycle_threads,
                                                    Bounds::InRange(1, kMaxCycleThreads)));
  RETURN_IF_ERROR(ReadWeights(r, "latency_weights", c.latency));
  RETURN_IF_ERROR(ReadWeights(r, "bulk_weights", c.bulk));
  return absl::OkStatus();
}

}  // namespace dar
