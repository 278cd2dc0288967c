#include "core/route_computer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/status_macros.h"
#include "fmt/format.h"

namespace dar {
namespace {

bool CostMoved(double before, double after, double threshold) {
  if (std::isinf(before) || std::isinf(after)) return std::isinf(before) != std::isinf(after);
  return std::abs(after - before) > threshold * before;
}

absl::Status CheckNonNegative(double v, const std::string& field) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(fmt::format("{}: must be finite and >= 0, got {}", field, v));
  }
  return absl::OkStatus();
}

absl::Status ValidateWeights(const ClassWeights& w, const std::string& field) {
  RETURN_IF_ERROR(CheckNonNegative(w.hop, field + ".hop"));
  RETURN_IF_ERROR(CheckNonNegative(w.latency, field + ".latency"));
  RETURN_IF_ERROR(CheckNonNegative(w.loss, field + ".loss"));
  RETURN_IF_ERROR(CheckNonNegative(w.utilisation, field + ".utilisation"));
  RETURN_IF_ERROR(CheckNonNegative(w.capacity, field + ".capacity"));
  if (w.hop <= 0) {
    // Without a hop term a link with no delay, loss or load would cost nothing.
    return absl::InvalidArgumentError(fmt::format("{}.hop: must be > 0, got {}", field, w.hop));
  }
  return absl::OkStatus();
}

HoltConfig UtilisationForecast(const HoltConfig& c) {
  HoltConfig holt = c;
  holt.bounds = ForecastBounds{0, 1};
  return holt;
}

bool SameDiffusion(const DiffusionConfig& a, const DiffusionConfig& b) {
  return a.temperature == b.temperature && a.min_weight == b.min_weight &&
         a.hysteresis == b.hysteresis;
}

bool SameHolt(const HoltConfig& a, const HoltConfig& b) {
  return a.alpha == b.alpha && a.beta == b.beta && a.phi == b.phi &&
         a.residual_gain == b.residual_gain;
}

}  // namespace

absl::Status RouteComputerConfig::Validate() const {
  if (horizon_periods < 1) {
    return absl::InvalidArgumentError(
        fmt::format("horizon_periods: must be >= 1, got {}", horizon_periods));
  }
  if (absl::Status s = UtilisationForecast(forecast).Validate(); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("forecast: {}", std::string(s.message())));
  }
  RETURN_IF_ERROR(CheckNonNegative(min_cost_change, "min_cost_change"));
  RETURN_IF_ERROR(CheckNonNegative(full_above_changed_fraction, "full_above_changed_fraction"));
  if (full_every < 1) {
    return absl::InvalidArgumentError(fmt::format("full_every: must be >= 1, got {}", full_every));
  }
  RETURN_IF_ERROR(CheckNonNegative(diffusion.temperature, "diffusion.temperature"));
  RETURN_IF_ERROR(CheckNonNegative(diffusion.hysteresis, "diffusion.hysteresis"));
  if (!(diffusion.min_weight >= 0 && diffusion.min_weight <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("diffusion.min_weight: must be in [0, 1], got {}", diffusion.min_weight));
  }
  if (scales.reference_delay <= Duration(0) || scales.reference_capacity.bps() <= 0 ||
      !(scales.reference_loss > 0) || !(scales.max_utilisation > 0 && scales.max_utilisation < 1)) {
    return absl::InvalidArgumentError(
        "scales: reference delay, loss and capacity must be > 0 and max_utilisation in (0, 1)");
  }
  RETURN_IF_ERROR(ValidateWeights(latency, "latency"));
  return ValidateWeights(bulk, "bulk");
}

RouteComputer::RouteComputer(Topology topology, const RouteComputerConfig& config)
    : topology_(std::move(topology)), config_(config) {
  const int links = topology_.num_links();
  last_.assign(links, LinkSample());
  capacity_.resize(links);
  propagation_.resize(links);
  known_down_.assign(links, false);
  drained_.assign(links, false);
  for (LinkId l = 0; l < links; ++l) {
    const Link& link = topology_.link(l);
    capacity_[l] = link.params.capacity;
    propagation_[l] = link.params.delay;
    known_down_[l] = !link.up;
  }
  costs_.assign(kTrafficClasses, std::vector<double>(links, kUnusable));
  ResetForecasts();
  ResetEngines();
}

RouteComputer::~RouteComputer() = default;

void RouteComputer::ResetForecasts() {
  forecasts_.assign(topology_.num_links(), HoltForecaster(UtilisationForecast(config_.forecast)));
}

void RouteComputer::ResetEngines() {
  engines_.clear();
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    engines_.push_back(std::make_unique<DiffusionEngine>(topology_, config_.diffusion));
  }
  force_full_ = true;
}

void RouteComputer::Observe(LinkId link, const LinkSample& sample) {
  last_[link] = sample;
  forecasts_[link].Observe(sample.utilisation);
}

void RouteComputer::SetLinkParams(LinkId link, DataRate capacity, Duration propagation) {
  capacity_[link] = capacity;
  propagation_[link] = propagation;
}

void RouteComputer::SetKnownDown(LinkId link, bool down) { known_down_[link] = down; }

void RouteComputer::SetDrained(LinkId link, bool drained) { drained_[link] = drained; }

void RouteComputer::SetConfig(const RouteComputerConfig& config) {
  const bool engines = !SameDiffusion(config.diffusion, config_.diffusion);
  const bool forecasts = !SameHolt(config.forecast, config_.forecast);
  config_ = config;
  if (engines) ResetEngines();
  if (forecasts) ResetForecasts();
  force_full_ = true;
}

Forecast RouteComputer::ForecastOf(LinkId link) const {
  return forecasts_[link].Predict(config_.horizon_periods);
}

LinkState RouteComputer::StateOf(LinkId l) const {
  LinkState s;
  s.capacity = capacity_[l];
  s.propagation = propagation_[l];
  const LinkSample& last = last_[l];
  // Probes rule a link out only once it has answered at all.
  const bool probes_say_down =
      config_.down_from_samples && !last.up && last.rtt_smoothed.count() > 0;
  s.up = !known_down_[l] && !probes_say_down;
  s.loss = last.loss;
  const Forecaster& f = forecasts_[l];
  const double predicted =
      f.observations() > 0 ? f.Predict(config_.horizon_periods).mean : last.utilisation;
  // Plan for the load that is coming, but never for less than the load that is there.
  s.utilisation = std::max(last.utilisation, predicted);
  if (!s.capacity.is_zero()) s.queueing = s.capacity.TransmitTime(last.queue_bytes);
  return s;
}

RouteCycle RouteComputer::Cycle(bool force_full) {
  RouteCycle out;
  ++stats_.cycles;
  const bool full = force_full || force_full_ || ++cycles_since_full_ >= config_.full_every;
  if (full) {
    cycles_since_full_ = 0;
    force_full_ = false;
    ++stats_.full_cycles;
  }
  out.full = full;
  const int links = topology_.num_links();
  std::vector<LinkState> states(links);
  for (LinkId l = 0; l < links; ++l) states[l] = StateOf(l);
  std::vector<LinkId> changed;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    const ClassWeights& w = cls == 0 ? config_.latency : config_.bulk;
    std::vector<double>& costs = costs_[cls];
    changed.clear();
    for (LinkId l = 0; l < links; ++l) {
      const double c = drained_[l] ? kUnusable : LinkCost(states[l], w, config_.scales);
      if (full || CostMoved(costs[l], c, config_.min_cost_change)) {
        costs[l] = c;
        changed.push_back(l);
      }
    }
    DiffusionEngine& engine = *engines_[cls];
    if (full || static_cast<double>(changed.size()) >
                    config_.full_above_changed_fraction * static_cast<double>(links)) {
      engine.ComputeAll(costs);
      ++out.classes_recomputed;
    } else if (!changed.empty()) {
      engine.Update(costs, changed);
    }
    if (full || !changed.empty()) out.route_changes += engine.stats().route_changes;
    out.changed_links[cls] = static_cast<int>(changed.size());
    out.tables[cls] = std::make_shared<const RoutingTables>(engine.Tables(++version_));
  }
  stats_.route_changes += out.route_changes;
  return out;
}

}  // namespace dar
