#include "core/route_computer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "base/status_macros.h"
#include "core/routing_table.h"
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

void RouteComputer::ResetForecasts() {
  forecasts_.assign(topology_.num_links(), HoltForecaster(UtilisationForecast(config_.forecast)));
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

void RouteComputer::WindowedMin::Update(int64_t t, Duration v, int64_t window) {
  const Entry e{t, v};
  // A new minimum, the first sample, or all three choices out of the window: start over.
  if (s_[0].v == Duration(0) || v <= s_[0].v || t - s_[2].t > window) {
    s_.fill(e);
    return;
  }
  if (v <= s_[1].v) {
    s_[2] = s_[1] = e;
  } else if (v <= s_[2].v) {
    s_[2] = e;
  }
  const int64_t dt = t - s_[0].t;
  if (dt > window) {
    // The best choice left the window: the second takes over (and the third, if the second
    // is out too; the third is in the window, checked above).
    s_[0] = s_[1];
    s_[1] = s_[2];
    s_[2] = e;
    if (t - s_[0].t > window) {
      s_[0] = s_[1];
      s_[1] = s_[2];
      s_[2] = e;
    }
  } else if (s_[1].t == s_[0].t && dt > window / 4) {
    // A quarter of the window without a better sample: take a second choice from now on.
    s_[2] = s_[1] = e;
  } else if (s_[2].t == s_[1].t && dt > window / 2) {
    s_[2] = e;
  }
}

void RouteComputer::Observe(LinkId link, const LinkSample& sample) {
  const LinkSample previous = last_[link];
  last_[link] = sample;
  ++samples_[link];
  HoltForecaster& f = forecasts_[link];
  if (config_.measured_links && f.observations() > 0 &&
      std::abs(sample.utilisation - f.Predict(1).mean) > config_.forecast_restart_step) {
    f = HoltForecaster(UtilisationForecast(config_.forecast));
  }
  f.Observe(sample.utilisation);
  Duration rtt = sample.rtt_smoothed;
  if (sample.rtt_min > Duration(0) && (rtt <= Duration(0) || sample.rtt_min < rtt)) {
    rtt = sample.rtt_min;
  }
  if (rtt > Duration(0)) {
    base_rtt_[link].Update(rtt_samples_[link]++, rtt, config_.base_rtt_periods);
  }
  if (config_.measured_links) ObserveDelivery(link, previous);
}

void RouteComputer::ObserveDelivery(LinkId l, const LinkSample& previous) {
  const LinkSample& last = last_[l];
  Delivery& d = delivery_[l];
  const DataRate configured = capacity_[l];
  if (configured.is_zero()) return;
  const Duration threshold = config_.queue_limited_delay;
  const bool queued = MeasuredQueueing(l, configured) >= threshold;
  d.clear = queued ? 0 : d.clear + 1;
  // The queue is this direction's and stands now: reported by the agent, or seen in the
  // RTT while this direction carries traffic, more than the reverse (a round trip crosses
  // both; the lighter direction, e.g. a transfer's ACKs, is not the one that queues) and the
  // smoothed RTT is not falling (its memory of a queue that drained when the traffic left).
  // A queue seen in the RTT alone must also be one this direction's traffic could hold: at
  // its throughput, the extra delay is at least two full-size packets (Little's law). A probe
  // answered late by a busy CPU inflates the RTT too, and on a link carrying a trickle that
  // is no queue of its own (it would make the trickle the link's capacity).
  const LinkId r = topology_.link(l).reverse;
  const DataRate reverse = r == kNoLink ? DataRate() : last_[r].throughput;
  constexpr int64_t kLeastInferredQueueBytes = 3000;
  const bool standing =
      queued &&
      (configured.TransmitTime(last.queue_bytes) >= threshold ||
       (last.throughput.bps() > 0 && last.throughput >= reverse &&
        last.rtt_smoothed >= previous.rtt_smoothed &&
        last.throughput.BytesIn(MeasuredQueueing(l, configured)) >= kLeastInferredQueueBytes));
  d.queue_limited = standing ? d.queue_limited + 1 : 0;
  const DataRate tput = std::min(last.throughput, configured);
  const int64_t now = samples_[l];
  if (d.queue_limited > 0) {
    // Queue-limited: the link delivers what it carries. The largest such rate of the last
    // queue_limited_window samples (a sender's pause lowers one interval's rate), as BBR
    // keeps a windowed max of the delivery rate. A simple window: the best is replaced when
    // it expires, not by the next best; a new stretch starts afresh, from its first sample:
    // the samples that confirm a stretch count too, or traffic leaving a full link (its
    // smoothed RTT still rising for a sample) would leave its last trickle as the estimate.
    if (d.queue_limited == 1 || tput >= d.best || now - d.best_at > config_.queue_limited_window) {
      d.best = tput;
      d.best_at = now;
    }
    if (d.queue_limited >= config_.queue_limited_periods) {
      d.estimate = d.best;
      d.at = now;
    }
  } else if (d.clear >= 2 && tput > DeliveryCapacity(l)) {
    // More than we thought got through, and no queue built (twice: an overload shows within
    // a sample or two; the agent counts what it sends, not what the link delivers).
    d.estimate = d.best = tput;
    d.at = d.best_at = now;
  }
}

DataRate RouteComputer::DeliveryCapacity(LinkId l) const {
  const Delivery& d = delivery_[l];
  const DataRate configured = capacity_[l];
  if (!config_.measured_links || d.estimate.is_zero() || d.estimate >= configured) {
    return configured;
  }
  const double age = static_cast<double>(samples_[l] - d.at);
  const double gap = static_cast<double>(configured.bps() - d.estimate.bps()) *
                     std::exp(-age / config_.capacity_recovery_periods);
  return DataRate::BitsPerSecond(configured.bps() - static_cast<int64_t>(gap));
}

bool RouteComputer::Slow(LinkId l) const {
  return static_cast<double>(DeliveryCapacity(l).bps()) <
         config_.slow_fraction * static_cast<double>(capacity_[l].bps());
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

Forecast RouteComputer::ForecastOf(LinkId link) const {
  return forecasts_[link].Predict(config_.horizon_periods);
}

Duration RouteComputer::MeasuredQueueing(LinkId l, DataRate capacity) const {
  const LinkSample& last = last_[l];
  Duration queueing{0};
  if (!capacity.is_zero()) queueing = capacity.TransmitTime(last.queue_bytes);
  if (!config_.measured_links) return queueing;
  // What the round trip took beyond its base, less what the reverse direction's reported
  // queue explains, waited in this direction.
  const Duration base = base_rtt_[l].Get();
  if (base > Duration(0) && last.rtt_smoothed > base) {
    Duration reverse_queue{0};
    const LinkId r = topology_.link(l).reverse;
    if (r != kNoLink && !capacity_[r].is_zero()) {
      reverse_queue = capacity_[r].TransmitTime(last_[r].queue_bytes);
    }
    queueing = std::max(queueing, last.rtt_smoothed - base - reverse_queue);
  }
  return queueing;
}

LinkState RouteComputer::StateOf(LinkId l) const {
  LinkState s;
  s.capacity = DeliveryCapacity(l);
  s.propagation = propagation_[l];
  const LinkSample& last = last_[l];
  // Liveness is its owner's verdict (CableUp, core/link_liveness.h), not one sample's.
  s.up = !known_down_[l];
  s.loss = last.loss;
  const Forecaster& f = forecasts_[l];
  // Samples give utilisation against the configured capacity; a link found slower is that
  // much fuller.
  const double scale =
      s.capacity.is_zero() || capacity_[l].is_zero()
          ? 1.0
          : static_cast<double>(capacity_[l].bps()) / static_cast<double>(s.capacity.bps());
  const double present = last.utilisation * scale;
  const double predicted =
      (f.observations() > 0 ? f.Predict(config_.horizon_periods).mean : last.utilisation) * scale;
  // Plan for the load that is coming, but never for less than the load that is there.
  s.utilisation = std::max(present, predicted);
  s.queueing = MeasuredQueueing(l, s.capacity);
  if (!config_.measured_links) return s;
  const double queued = ToSeconds(s.queueing) / ToSeconds(config_.scales.reference_delay);
  s.measured_congestion = queued + std::clamp(s.loss, 0.0, 1.0) / config_.scales.reference_loss;
  // A standing queue means the link is full, whatever its configured capacity says (a shaper
  // below the agent). And measured, a link is at most full: overload shows as queueing and
  // loss, charged on their own, not as utilisation past max_utilisation.
  const double full = config_.scales.max_utilisation;
  const double floor = std::min(queued, 1.0) * full;
  s.present_utilisation = std::min(std::max(present, floor), full);
  s.utilisation = std::min(std::max(s.utilisation, floor), full);
  if (Slow(l)) {
    // Found slow, a link is full: it has no room for the load it was planned to carry, even
    // once that load has left it. Known, not a guess from utilisation: charged in full.
    s.present_utilisation = s.utilisation = full;
    s.measured_congestion = std::numeric_limits<double>::infinity();
  }
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

void RouteComputer::LinkStates(std::vector<LinkState>& states, std::vector<char>& slow) const {
  const int links = topology_.num_links();
  states.resize(links);
  slow.resize(links);
  for (LinkId l = 0; l < links; ++l) {
    states[l] = StateOf(l);
    slow[l] = Slow(l);
  }
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

namespace {

// Whether two blocks have the same next hops in every row, in the same order, whatever their
// weights.
bool SameNextHops(const DestinationTable::Block& a, const DestinationTable::Block& b) {
  return a.offsets == b.offsets && SameLinks(a.hops, b.hops);
}

// The rows of a block: its offsets past the last row are 0.
uint32_t RowsOf(const DestinationTable::Block& block) {
  uint32_t r = 0;
  while (r < DestinationTable::kRowsPerBlock && block.offsets[r + 1] >= block.offsets[r]) ++r;
  return r;
}

// The rows of a block with two or more next hops.
int64_t RowsWithChoice(const DestinationTable::Block& block) {
  int64_t n = 0;
  for (uint32_t r = 0, rows = RowsOf(block); r < rows; ++r) {
    n += block.offsets[r + 1] - block.offsets[r] >= 2;
  }
  return n;
}

// Whether two blocks hold the same rows, bit for bit.
bool SameBlock(const DestinationTable::Block& a, const DestinationTable::Block& b) {
  if (a.offsets != b.offsets || a.hops.size() != b.hops.size()) return false;
  for (size_t i = 0; i < a.hops.size(); ++i) {
    if (a.hops[i].link != b.hops[i].link ||
        std::bit_cast<uint64_t>(a.hops[i].weight) != std::bit_cast<uint64_t>(b.hops[i].weight)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status RouteComputer::ApplyPolicy(absl::Span<const LinkState> states, RouteCycle& out) {
  ++stats_.policy_cycles;
  const int links = topology_.num_links();
  std::vector<double> present(links);
  for (LinkId l = 0; l < links; ++l) {
    // Unmeasured links (the simulator) leave present_utilisation unset: the last sample's.
    present[l] = std::clamp(
        config_.measured_links ? states[l].present_utilisation : last_[l].utilisation, 0.0, 1.0);
  }
  std::array<const RoutingTables*, kTrafficClasses> tables{}, previous{};
  std::array<std::vector<const DiffusionEngine*>, kTrafficClasses> engines;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    tables[cls] = out.tables[cls].get();
    previous[cls] = previous_[cls].get();
    for (const std::unique_ptr<DiffusionEngine>& e : engines_[cls]) engines[cls].push_back(e.get());
  }
  // The destinations to weigh: all of them unless last cycle's tables are the policy's.
  const int every = policy_held_ ? config_.policy_refresh_cycles : 1;
  const int turn = static_cast<int>(stats_.policy_cycles % every);
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> engine_before;
  std::array<const RoutingTables*, kTrafficClasses> engine_previous{};
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    engine_before[cls] = std::exchange(previous_engine_[cls], out.tables[cls]);
    engine_previous[cls] = engine_before[cls].get();
    ChooseWeighed(cls, *tables[cls], engine_previous[cls], every, turn);
  }
  PolicyInputs in;
  in.topology = &topology_;
  in.weigh = weigh_;
  in.states = states;
  in.present_utilisation = present;
  in.tables = tables;
  in.engines = engines;
  in.previous = previous;
  in.previous_engine = engine_previous;
  in.scales = config_.scales;
  in.min_weight = config_.diffusion.min_weight;
  in.reward_terms = policy_->wants_reward_terms();
  batch_.cycle = stats_.cycles;
  features_.Build(in, batch_, *executor_);
  policy_weights_.assign(batch_.candidates.size(), std::numeric_limits<double>::quiet_NaN());
  if (!batch_.decisions.empty()) {
    RETURN_IF_ERROR(policy_->Weigh(batch_, absl::MakeSpan(policy_weights_), *executor_));
  }
  // Each class's weights checked, then its tables refined, the classes side by side; any
  // class's bad weight leaves every class the engine's tables.
  std::array<absl::Status, kTrafficClasses> checked;
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> refined;
  std::array<int64_t, kTrafficClasses> held{};
  executor_->RunEach(kTrafficClasses, [&](int cls) {
    checked[cls] = CheckPolicyWeights(cls);
    if (checked[cls].ok()) {
      refined[cls] = RefinedTables(cls, *out.tables[cls], engine_previous[cls], held[cls]);
    }
  });
  for (const absl::Status& s : checked) RETURN_IF_ERROR(s);
  out.tables = refined;
  stats_.policy_decisions += static_cast<int64_t>(batch_.decisions.size());
  for (int64_t h : held) stats_.policy_rows_held += h;
  return absl::OkStatus();
}

void RouteComputer::ChooseWeighed(int cls, const RoutingTables& engine,
                                  const RoutingTables* engine_before, int every, int turn) {
  const std::vector<NodeId>& destinations = engine.destinations();
  std::vector<WeighRows>& weigh = weigh_[cls];
  weigh.assign(destinations.size(), WeighRows::kAll);
  const RoutingTables* previous = previous_[cls].get();
  if (every == 1 || previous == nullptr) return;
  for (size_t i = 0; i < destinations.size(); ++i) {
    const NodeId d = destinations[i];
    const DestinationTable* now = engine.Table(d);
    const DestinationTable* before = previous->IsDestination(d) ? previous->Table(d) : nullptr;
    if (static_cast<int>(i % static_cast<size_t>(every)) == turn || now == nullptr ||
        before == nullptr || !now->SameLayoutAs(*before)) {
      continue;  // in turn, or laid out anew: every row
    }
    // Out of turn, and laid out as last cycle (its rows found where they were): the rows
    // whose next hops changed, none if the engine changed no row.
    const bool same_engine_table = engine_before != nullptr && engine_before->IsDestination(d) &&
                                   engine_before->Table(d) == now;
    weigh[i] = same_engine_table ? WeighRows::kNone : WeighRows::kChanged;
  }
}

absl::Status RouteComputer::CheckPolicyWeights(int cls) const {
  // The forwarders' validator refuses a table with a weight <= 0, so that is checked here too.
  for (const PolicyDecision& d : batch_.decisions) {
    if (d.cls != cls) continue;
    RowWeights weights;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) weights.Add(policy_weights_[i]);
    if (weights.first_bad() >= 0) {
      return absl::InvalidArgumentError("a weight is not finite or not > 0");
    }
    if (!weights.sums_to_one()) {
      return absl::InvalidArgumentError("a row's weights do not sum to 1 (within 1e-6)");
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const RoutingTables> RouteComputer::RefinedTables(
    int cls, const RoutingTables& engine, const RoutingTables* engine_before, int64_t& held) {
  constexpr uint32_t kRows = DestinationTable::kRowsPerBlock;
  const int nodes = topology_.num_nodes();
  auto refined = std::make_shared<RoutingTables>(nodes, engine.destinations());
  refined->set_version(engine.version());
  const RoutingTables* previous = previous_[cls].get();
  const std::vector<PolicyDecision>& decisions = batch_.decisions;
  const std::vector<WeighRows>& weigh = weigh_[cls];
  // Decisions are by class, then destination in the tables' order, then node.
  size_t i = 0;
  while (i < decisions.size() && decisions[i].cls != cls) ++i;
  const auto toward = [&](NodeId d) {
    return i < decisions.size() && decisions[i].cls == cls && decisions[i].destination == d;
  };
  DestinationTable::Block scratch;  // the block being refined
  for (size_t index = 0; index < engine.destinations().size(); ++index) {
    const NodeId d = engine.destinations()[index];
    if (weigh[index] == WeighRows::kNone) {
      // The engine changed no row toward d: last cycle's table, weights and all.
      DestinationTablePtr kept = previous->SharedTable(d);
      for (const DestinationTable::BlockPtr& block : kept->blocks()) held += RowsWithChoice(*block);
      refined->Set(std::move(kept));
      continue;
    }
    DestinationTablePtr table = engine.SharedTable(d);
    if (weigh[index] == WeighRows::kAll && !toward(d)) {
      refined->Set(std::move(table));  // no choice anywhere toward d
      continue;
    }
    // Out of turn (ChooseWeighed): last cycle's table is laid out as this one, and its rows
    // with the same next hops were not weighed: they keep last cycle's weights.
    const bool in_part = weigh[index] == WeighRows::kChanged;
    const DestinationTable* before =
        previous != nullptr && previous->IsDestination(d) ? previous->Table(d) : nullptr;
    // The engine's layout (row map, blocks) stands: a refined row has the engine row's next
    // hops, in its order, with other weights. Blocks without a decision are the engine's (or,
    // out of turn, last cycle's where their next hops are); the others are copied and their
    // decisions' weights written over, and where that gives last cycle's block (its rows
    // kept), last cycle's block is shared instead of a new one.
    const std::shared_ptr<const DestinationTable::RowMap>& row_of = table->row_map();
    std::vector<DestinationTable::BlockPtr> blocks = table->blocks();
    const bool same_layout = before != nullptr && before->SameLayoutAs(*table);
    const auto block_of = [&](NodeId v) {
      return static_cast<uint32_t>(row_of == nullptr ? v : (*row_of)[v]) / kRows;
    };
    // Out of turn, the engine's table of last cycle where laid out as this one: a block that
    // is the same object there has the same next hops.
    const DestinationTable* engine_was =
        in_part && engine_before != nullptr && engine_before->IsDestination(d)
            ? engine_before->Table(d)
            : nullptr;
    if (engine_was != nullptr && !engine_was->SameLayoutAs(*table)) engine_was = nullptr;
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      const bool decided = toward(d) && block_of(decisions[i].node) == b;
      if (!decided && !in_part) continue;
      const DestinationTable::BlockPtr* last = same_layout ? &before->blocks()[b] : nullptr;
      if (!decided && last != nullptr &&
          ((engine_was != nullptr && engine_was->blocks()[b] == blocks[b]) ||
           SameNextHops(*blocks[b], **last))) {
        // No row of it weighed, and last cycle's next hops: last cycle's block.
        held += RowsWithChoice(**last);
        blocks[b] = *last;
        continue;
      }
      scratch.offsets = blocks[b]->offsets;
      scratch.hops.assign(blocks[b]->hops.begin(), blocks[b]->hops.end());
      if (in_part && last != nullptr) {
        const DestinationTable::Block& old = **last;
        for (uint32_t r = 0, rows = std::min(RowsOf(scratch), RowsOf(old)); r < rows; ++r) {
          const uint32_t n = scratch.offsets[r + 1] - scratch.offsets[r];
          NextHop* row = scratch.hops.data() + scratch.offsets[r];
          const absl::Span<const NextHop> kept(old.hops.data() + old.offsets[r],
                                               old.offsets[r + 1] - old.offsets[r]);
          if (n >= 2 && SameLinks(absl::Span<const NextHop>(row, n), kept)) {
            std::copy(kept.begin(), kept.end(), row);
            ++held;
          }
        }
      }
      for (; toward(d) && block_of(decisions[i].node) == b; ++i) {
        const PolicyDecision& decision = decisions[i];
        const NodeId v = decision.node;
        const uint32_t r = static_cast<uint32_t>(row_of == nullptr ? v : (*row_of)[v]) % kRows;
        NextHop* row = scratch.hops.data() + scratch.offsets[r];
        const double* weights = policy_weights_.data() + decision.first;
        // Hysteresis: last cycle's row stands while it has the same next hops and the new
        // weights differ from it by less than the engine's threshold.
        const absl::Span<const NextHop> old =
            before != nullptr ? before->At(v) : absl::Span<const NextHop>();
        bool keep = old.size() == decision.count;
        double diff = 0;
        for (uint32_t c = 0; c < decision.count && keep; ++c) {
          // A row's links are distinct, and last cycle's row mostly has them in this order.
          const NextHop* it = old[c].link == row[c].link
                                  ? &old[c]
                                  : std::find_if(old.begin(), old.end(), [&](const NextHop& o) {
                                      return o.link == row[c].link;
                                    });
          if (it == old.end()) {
            keep = false;
          } else {
            diff += std::abs(weights[c] - it->weight);
          }
        }
        keep = keep && diff < config_.diffusion.hysteresis;
        if (keep) {
          std::copy(old.begin(), old.end(), row);
        } else {
          for (uint32_t c = 0; c < decision.count; ++c) row[c].weight = weights[c];
        }
      }
      if (last != nullptr && SameBlock(**last, scratch)) {
        blocks[b] = *last;
      } else {
        // Moved, not copied: the next block refined starts from a copy of its own anyway.
        blocks[b] = std::make_shared<const DestinationTable::Block>(std::move(scratch));
        scratch = DestinationTable::Block();
      }
    }
    // Every block last cycle's: so is the table.
    if (same_layout && blocks == before->blocks()) {
      refined->Set(previous->SharedTable(d));
    } else {
      refined->Set(std::make_shared<const DestinationTable>(d, nodes, row_of, std::move(blocks)));
    }
  }
  return refined;
}

}  // namespace dar
