#include "core/route_computer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/status_macros.h"
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

// How many engines share a class's destinations on `threads` threads: one per thread, so that
// the engines' parts can be shared out evenly (the executor's concurrency).
size_t EngineShares(int threads, size_t destinations) {
  return std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1,
                            std::max<size_t>(destinations, 1));
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
  if (cost_decay_periods < 1) {
    return absl::InvalidArgumentError(
        fmt::format("cost_decay_periods: must be >= 1, got {}", cost_decay_periods));
  }
  if (base_rtt_periods < 1) {
    return absl::InvalidArgumentError(
        fmt::format("base_rtt_periods: must be >= 1, got {}", base_rtt_periods));
  }
  if (queue_limited_delay < Duration(0) || queue_limited_periods < 1 || queue_limited_window < 1 ||
      capacity_recovery_periods < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "queue_limited_delay, queue_limited_periods, queue_limited_window, "
        "capacity_recovery_periods: must be >= 0, >= 1, >= 1 and >= 1, got {} us, {}, {}, {}",
        queue_limited_delay.count() / 1000, queue_limited_periods, queue_limited_window,
        capacity_recovery_periods));
  }
  if (!(slow_fraction > 0 && slow_fraction <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("slow_fraction: must be in (0, 1], got {}", slow_fraction));
  }
  RETURN_IF_ERROR(CheckNonNegative(forecast_restart_step, "forecast_restart_step"));
  if (policy_refresh_cycles < 1) {
    return absl::InvalidArgumentError(
        fmt::format("policy_refresh_cycles: must be >= 1, got {}", policy_refresh_cycles));
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
  if (!(scales.unconfirmed_utilisation >= 0 && scales.unconfirmed_utilisation <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("scales.unconfirmed_utilisation: must be in [0, 1], got {}",
                    scales.unconfirmed_utilisation));
  }
  RETURN_IF_ERROR(ValidateWeights(latency, "latency"));
  return ValidateWeights(bulk, "bulk");
}

RouteComputer::RouteComputer(Topology topology, const RouteComputerConfig& config,
                             Executor* executor)
    : topology_(std::move(topology)),
      executor_(executor != nullptr ? executor : &InlineExecutorInstance()),
      config_(config) {
  const int links = topology_.num_links();
  last_.assign(links, LinkSample());
  base_rtt_.assign(links, WindowedMin());
  rtt_samples_.assign(links, 0);
  samples_.assign(links, 0);
  delivery_.assign(links, Delivery());
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
  held_.assign(kTrafficClasses, std::vector<double>(links, kUnusable));
  changed_.assign(kTrafficClasses, {});
  destinations_ = topology_.Destinations();
  ResetForecasts();
  ResetEngines();
}

RouteComputer::~RouteComputer() = default;

void RouteComputer::ResetForecasts() { forecasts_.assign(topology_.num_links(), NewForecaster()); }

HoltForecaster RouteComputer::NewForecaster() const {
  return HoltForecaster(UtilisationForecast(config_.forecast));
}

void RouteComputer::ResetEngines() {
  const std::vector<NodeId>& destinations = destinations_;
  const size_t shares = EngineShares(executor_->concurrency(), destinations.size());
  engines_.clear();
  engines_.resize(kTrafficClasses);
  engine_of_destination_.assign(topology_.num_nodes(), 0);
  for (size_t e = 0; e < shares; ++e) {
    const size_t first = e * destinations.size() / shares;
    const size_t last = (e + 1) * destinations.size() / shares;
    const absl::Span<const NodeId> share =
        absl::MakeConstSpan(destinations).subspan(first, last - first);
    for (NodeId d : share) engine_of_destination_[d] = static_cast<int32_t>(e);
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      engines_[cls].push_back(
          std::make_unique<DiffusionEngine>(topology_, config_.diffusion, share));
    }
  }
  force_full_ = true;
}

const DiffusionEngine& RouteComputer::EngineFor(int cls, NodeId dest) const {
  const bool known = dest >= 0 && dest < topology_.num_nodes();
  return *engines_[cls][known ? engine_of_destination_[dest] : 0];
}

double RouteComputer::Potential(int cls, NodeId dest, NodeId node) const {
  return EngineFor(cls, dest).Potential(dest, node);
}

void RouteComputer::SetConfig(const RouteComputerConfig& config) {
  const bool engines = !SameDiffusion(config.diffusion, config_.diffusion);
  const bool forecasts = !SameHolt(config.forecast, config_.forecast);
  config_ = config;
  if (engines) ResetEngines();
  if (forecasts) ResetForecasts();
  // A new policy is an operator's decision, not news about the links: no damping.
  for (std::vector<double>& held : held_) std::fill(held.begin(), held.end(), kUnusable);
  force_full_ = true;
}

void RouteComputer::set_executor(Executor* executor) {
  Executor* next = executor != nullptr ? executor : &InlineExecutorInstance();
  const bool engines = EngineShares(next->concurrency(), destinations_.size()) !=
                       EngineShares(executor_->concurrency(), destinations_.size());
  executor_ = next;
  if (!engines) return;
  ResetEngines();
  force_full_ = true;
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
  std::vector<LinkState> states;
  std::vector<char> slow;
  LinkStates(states, slow);
  const uint64_t first_version = version_ + 1;
  version_ += kTrafficClasses;
  std::array<bool, kTrafficClasses> whole{}, run{};
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    whole[cls] = ClassCosts(cls, full, states, slow);
    run[cls] = whole[cls] || !changed_[cls].empty();
  }
  // Every engine of a class with something to do, those that recompute every destination
  // first (they take the longest), shared out among the threads.
  std::vector<std::pair<int, size_t>> parts;  // (class, engine)
  for (const bool longest : {true, false}) {
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      if (!run[cls] || whole[cls] != longest) continue;
      for (size_t e = 0; e < engines_[cls].size(); ++e) parts.push_back({cls, e});
    }
  }
  executor_->RunEach(static_cast<int>(parts.size()), [&](int p) {
    const auto [cls, e] = parts[static_cast<size_t>(p)];
    DiffusionEngine& engine = *engines_[cls][e];
    if (whole[cls]) {
      engine.ComputeAll(costs_[cls]);
    } else {
      engine.Update(costs_[cls], changed_[cls]);
    }
  });
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    const uint64_t version = first_version + static_cast<uint64_t>(cls);
    out.changed_links[cls] = static_cast<int>(changed_[cls].size());
    if (engines_[cls].size() == 1) {
      out.tables[cls] = std::make_shared<const RoutingTables>(engines_[cls][0]->Tables(version));
    } else {
      // The engines' tables in one, in the topology's order of destinations.
      auto tables = std::make_shared<RoutingTables>(topology_.num_nodes(), destinations_);
      for (const std::unique_ptr<DiffusionEngine>& engine : engines_[cls]) {
        const RoutingTables share = engine->Tables(version);
        for (NodeId d : share.destinations()) {
          if (share.Table(d) != nullptr) tables->Set(share.SharedTable(d));
        }
      }
      tables->set_version(version);
      out.tables[cls] = std::move(tables);
    }
    if (run[cls]) {
      for (const std::unique_ptr<DiffusionEngine>& engine : engines_[cls]) {
        out.route_changes += engine->stats().route_changes;
      }
    }
    if (whole[cls]) ++out.classes_recomputed;
  }
  stats_.route_changes += out.route_changes;
  if (policy_ != nullptr) {
    absl::Status s = ApplyPolicy(states, out);
    policy_held_ = s.ok();
    if (!s.ok()) {
      ++stats_.policy_failures;
      out.policy_error = fmt::format("{}: {}; the engine's weights stand", policy_->Describe(),
                                     std::string(s.message()));
    }
  }
  previous_ = out.tables;
  return out;
}

uint64_t RouteComputer::SkipCycle() {
  ++stats_.cycles;
  force_full_ = true;
  std::vector<LinkState> states;
  std::vector<char> slow;
  LinkStates(states, slow);
  for (int cls = 0; cls < kTrafficClasses; ++cls) ClassCosts(cls, /*full=*/true, states, slow);
  const uint64_t first_version = version_ + 1;
  version_ += kTrafficClasses;
  return first_version;
}

bool RouteComputer::ClassCosts(int cls, bool full, absl::Span<const LinkState> states,
                               const std::vector<char>& slow_links) {
  const int links = topology_.num_links();
  const ClassWeights& w = cls == 0 ? config_.latency : config_.bulk;
  std::vector<double>& costs = costs_[cls];
  std::vector<double>& held = held_[cls];
  std::vector<LinkId>& changed = changed_[cls];
  changed.clear();
  for (LinkId l = 0; l < links; ++l) {
    double c = drained_[l] ? kUnusable : LinkCost(states[l], w, config_.scales);
    // A slow link is suppressed (route flap damping's word): what it costs, times how much
    // slower than configured it is, held until it is no longer slow.
    const bool slow = slow_links[l] != 0;
    if (slow && std::isfinite(c)) {
      c *= static_cast<double>(capacity_[l].bps()) / static_cast<double>(states[l].capacity.bps());
    }
    // Up at once (and back from unusable at once), down by a share of the gap; not down
    // at all while the link is slow: the traffic that left it would find it as it left it.
    // `held` keeps the last finite value while the link is unusable: a slow link that
    // misses probes (a shaper drops them) comes back as slow as it went.
    double& h = held[l];
    const bool back = std::isinf(costs[l]) && !slow;
    if (std::isfinite(c)) {
      if (c >= h || std::isinf(h) || back) {
        h = c;
      } else if (!slow) {
        h += (c - h) / config_.cost_decay_periods;
      }
    }
    const double v = std::isinf(c) ? c : h;
    if (full || CostMoved(costs[l], v, config_.min_cost_change)) {
      costs[l] = v;
      changed.push_back(l);
    }
  }
  return full || static_cast<double>(changed.size()) >
                     config_.full_above_changed_fraction * static_cast<double>(links);
}

}  // namespace dar
