#include "sim/dar_routing.h"

#include <algorithm>
#include <cmath>

#include "core/config_reader.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace dar::sim {
namespace {

// Network traffic classes served by engine class `cls`: 0 -> {0}, 1 -> {1, ..., 7}.
template <typename F>
void ForEachNetworkClass(int cls, F f) {
  if (cls == 0) {
    f(0);
  } else {
    for (int c = 1; c < Network::kClasses; ++c) f(c);
  }
}

bool CostMoved(double before, double after, double threshold) {
  if (std::isinf(before) || std::isinf(after)) return std::isinf(before) != std::isinf(after);
  return std::abs(after - before) > threshold * before;
}

}  // namespace

DarRouting::DarRouting(const DarConfig& config) : config_(config) {}
DarRouting::~DarRouting() = default;

void DarRouting::Start(ControlContext& ctx) {
  ctx_ = &ctx;
  const Topology& topo = ctx.network.topology();
  const int links = topo.num_links();
  HoltConfig holt = config_.forecast;
  holt.bounds = ForecastBounds{0, 1};
  forecasts_.assign(links, HoltForecaster(holt));
  last_.assign(links, LinkSample());
  known_down_.assign(links, false);
  for (LinkId l = 0; l < links; ++l) known_down_[l] = !ctx.network.current().link(l).up;
  costs_.assign(kClasses, std::vector<double>(links, kUnusable));
  for (int cls = 0; cls < kClasses; ++cls) {
    engines_.push_back(std::make_unique<DiffusionEngine>(topo, config_.diffusion));
    managers_.push_back(std::make_unique<TableManager>(ctx.network.current(), config_.tables));
  }
  link_change_ = std::make_unique<Timer>(ctx.loop, [this] {
    for (LinkId l = 0; l < static_cast<LinkId>(known_down_.size()); ++l) {
      known_down_[l] = !ctx_->network.current().link(l).up;
    }
    Cycle(/*force_full=*/false, config_.push_delay);
  });
  pushes_line_ = std::make_unique<DelayLine<Push>>(
      ctx.loop, [this](Push&& p) { Receive(std::move(p.tables), p.cls); });

  // The controller starts from its configuration: the links' capacities and delays, no load.
  Cycle(/*force_full=*/true, /*push_delay=*/Duration(0));
  agents_ = std::make_unique<SimAgents>(ctx.loop, ctx.network, config_.agents,
                                        [this](const std::vector<LinkSample>& s) { OnSamples(s); });
  agents_->set_liveness_handler([this](LinkId l, bool alive) { OnLiveness(l, alive); });
  agents_->Start();
}

void DarRouting::OnLiveness(LinkId link, bool alive) {
  // The forwarder at the link's tail acts on its own probes at once; the controller learns
  // from the samples and recomputes.
  ctx_->network.SetLinkUsable(link, alive);
  for (auto& m : managers_) m->SetLinkUp(link, alive, ctx_->loop.now()).IgnoreError();
  ++local_failovers_;
}

void DarRouting::OnLinkChange(LinkId link) {
  const Time now = ctx_->loop.now();
  const bool up = ctx_->network.current().link(link).up;
  // The forwarders at the link's ends see carrier loss at once; the controller hears of it
  // from the agent one report delay later.
  for (auto& m : managers_) m->SetLinkUp(link, up, now).IgnoreError();
  if (!link_change_->pending()) link_change_->ScheduleIn(config_.agents.report_delay);
}

void DarRouting::OnSamples(const std::vector<LinkSample>& samples) {
  last_ = samples;
  for (size_t l = 0; l < samples.size(); ++l) forecasts_[l].Observe(samples[l].utilisation);
  Cycle(/*force_full=*/false, config_.push_delay);
}

LinkState DarRouting::StateOf(LinkId l) const {
  const Link& link = ctx_->network.current().link(l);
  LinkState s;
  s.capacity = link.params.capacity;
  s.propagation = link.params.delay;
  // Probes rule a link out only once it has answered at all.
  const bool probes_say_down = !last_[l].up && last_[l].rtt_smoothed.count() > 0;
  // Carrier loss reaches the controller report_delay after it happens (known_down_).
  s.up = !known_down_[l] && !probes_say_down;
  s.loss = last_[l].loss;
  const Forecaster& f = forecasts_[l];
  const double predicted =
      f.observations() > 0 ? f.Predict(config_.horizon_periods).mean : last_[l].utilisation;
  // Plan for the load that is coming, but never for less than the load that is there.
  s.utilisation = std::max(last_[l].utilisation, predicted);
  if (!s.capacity.is_zero()) s.queueing = s.capacity.TransmitTime(last_[l].queue_bytes);
  return s;
}

void DarRouting::Cycle(bool force_full, Duration push_delay) {
  ++cycles_;
  const bool full = force_full || ++cycles_since_full_ >= config_.full_every;
  if (full) {
    cycles_since_full_ = 0;
    ++full_cycles_;
  }
  const int links = static_cast<int>(last_.size());
  std::vector<LinkState> states(links);
  for (LinkId l = 0; l < links; ++l) states[l] = StateOf(l);
  for (int cls = 0; cls < kClasses; ++cls) {
    const ClassWeights& w = cls == 0 ? config_.latency : config_.bulk;
    std::vector<double>& costs = costs_[cls];
    std::vector<LinkId> changed;
    for (LinkId l = 0; l < links; ++l) {
      const double c = LinkCost(states[l], w, config_.scales);
      if (full || CostMoved(costs[l], c, config_.min_cost_change)) {
        costs[l] = c;
        changed.push_back(l);
      }
    }
    DiffusionEngine& engine = *engines_[cls];
    if (full) {
      engine.ComputeAll(costs);
    } else if (!changed.empty()) {
      engine.Update(costs, changed);
    }
    if (full || !changed.empty()) route_changes_ += engine.stats().route_changes;
    // Push every cycle: a fresh version is also the forwarders' sign that the controller is
    // alive (a table nobody renews goes stale and the static one takes over).
    SendTables(std::make_shared<const RoutingTables>(engine.Tables(++version_)), cls, push_delay);
  }
}

void DarRouting::SendTables(std::shared_ptr<const RoutingTables> tables, int cls, Duration delay) {
  ++pushes_;
  pushes_line_->Send(Push{std::move(tables), cls}, delay);
}

void DarRouting::Receive(std::shared_ptr<const RoutingTables> tables, int cls) {
  const Time now = ctx_->loop.now();
  TableManager& m = *managers_[cls];
  if (!m.Offer(tables, now).ok()) {
    spdlog::debug("dar: forwarders refused tables v{}: {}", tables->version(), m.last_refusal());
  }
  std::shared_ptr<const RoutingTables> active = m.ActiveShared(now);
  ForEachNetworkClass(cls, [&](int c) {
    if (ctx_->network.tables(c) != active.get()) ctx_->network.InstallTables(active, c);
  });
}

void DarRouting::Report(nlohmann::json& metrics) const {
  int64_t accepted = 0, refused = 0, loops = 0, fallbacks = 0;
  for (const auto& m : managers_) {
    const TableManagerCounters& c = m->counters();
    accepted += c.accepted;
    refused += c.offered - c.accepted;
    loops += c.refused_loop;
    fallbacks += c.fallbacks_to_static;
  }
  metrics["tables_installed"] = accepted;
  metrics["tables_refused"] = refused;
  metrics["fallbacks_to_static"] = fallbacks;
  metrics["routing_loops"] = metrics.value("routing_loops", int64_t{0}) + loops;
  metrics["control_cycles"] = cycles_;
  metrics["full_recomputes"] = full_cycles_;
  metrics["route_changes"] = route_changes_;
  const double seconds = ToSeconds(ctx_->loop.now());
  metrics["route_changes_per_s"] = seconds > 0 ? route_changes_ / seconds : 0.0;
  metrics["probes_sent"] = agents_ != nullptr ? agents_->probes_sent() : 0;
  metrics["local_liveness_changes"] = local_failovers_;
}

namespace {

absl::Status ReadWeights(YamlReader& policy, const std::string& key, ClassWeights& w) {
  ASSIGN_OR_RETURN(YamlReader r, policy.OptionalMap(key));
  ASSIGN_OR_RETURN(w.hop, r.Optional<double>("hop", w.hop, Bounds::Positive()));
  ASSIGN_OR_RETURN(w.latency, r.Optional<double>("latency", w.latency, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.loss, r.Optional<double>("loss", w.loss, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.utilisation,
                   r.Optional<double>("utilisation", w.utilisation, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(w.capacity, r.Optional<double>("capacity", w.capacity, Bounds::NonNegative()));
  return r.CheckNoUnknownKeys();
}

absl::StatusOr<ControlPlanePtr> MakeDar(YamlReader& p, const ConfigContext& ctx) {
  DarConfig c;
  ASSIGN_OR_RETURN(c.agents.period,
                   p.OptionalDuration("period", c.agents.period, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.agents.report_delay,
                   p.OptionalDuration("report_delay", c.agents.report_delay));
  ASSIGN_OR_RETURN(c.push_delay, p.OptionalDuration("push_delay", c.push_delay));
  ASSIGN_OR_RETURN(c.horizon_periods,
                   p.Optional<int>("horizon_periods", c.horizon_periods, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(c.forecast.alpha, p.Optional<double>("forecast_alpha", c.forecast.alpha,
                                                        Bounds::InRange(1e-6, 1)));
  ASSIGN_OR_RETURN(c.forecast.beta,
                   p.Optional<double>("forecast_beta", c.forecast.beta, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(c.forecast.phi,
                   p.Optional<double>("forecast_phi", c.forecast.phi, Bounds::InRange(1e-6, 1)));
  ASSIGN_OR_RETURN(c.min_cost_change,
                   p.Optional<double>("min_cost_change", c.min_cost_change, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(c.full_every, p.Optional<int>("full_every", c.full_every, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(
      c.diffusion.temperature,
      p.Optional<double>("temperature", c.diffusion.temperature, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(c.diffusion.min_weight,
                   p.Optional<double>("min_weight", c.diffusion.min_weight, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(c.diffusion.hysteresis,
                   p.Optional<double>("hysteresis", c.diffusion.hysteresis, Bounds::InRange(0, 2)));
  ASSIGN_OR_RETURN(
      c.scales.reference_delay,
      p.OptionalDuration("reference_delay", c.scales.reference_delay, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.tables.stale_after,
                   p.OptionalDuration("stale_after", c.tables.stale_after, Bounds::Positive()));
  RETURN_IF_ERROR(ReadWeights(p, "latency_weights", c.latency));
  RETURN_IF_ERROR(ReadWeights(p, "bulk_weights", c.bulk));
  return std::make_unique<DarRouting>(c);
}

}  // namespace

REGISTER_CONTROL_PLANE("dar", MakeDar);

}  // namespace dar::sim
