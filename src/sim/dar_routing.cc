#include "sim/dar_routing.h"

#include <filesystem>

#include "base/status_macros.h"
#include "core/config_reader.h"
#include "fmt/format.h"
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

}  // namespace

DarRouting::DarRouting(const DarConfig& config) : config_(config) {}
DarRouting::~DarRouting() = default;

void DarRouting::Start(ControlContext& ctx) {
  ctx_ = &ctx;
  const Topology& current = ctx.network.current();
  computer_ = std::make_unique<RouteComputer>(ctx.network.topology(), config_.routes);
  computer_->set_weight_policy(config_.weight_policy);
  carrier_down_.assign(current.num_links(), false);
  cables_up_.assign(current.num_links(), true);
  for (LinkId l = 0; l < current.num_links(); ++l) SyncLink(l);
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    managers_.push_back(std::make_unique<TableManager>(current, config_.tables));
  }
  link_change_ = std::make_unique<Timer>(ctx.loop, [this] {
    for (LinkId l = 0; l < ctx_->network.current().num_links(); ++l) {
      carrier_down_[l] = !ctx_->network.current().link(l).up;
    }
    ApplyKnownDown();
    Cycle(/*force_full=*/false, config_.push_delay);
  });
  pushes_line_ =
      std::make_unique<DelayLine<Push>>(ctx.loop, [this](Push&& p) { Receive(p.tables, p.cls); });
  if (config_.decision == DarConfig::Decision::kMarginal) {
    MarginalDecisionConfig m = config_.marginal;
    m.period = config_.agents.period;
    marginal_ = std::make_unique<MarginalDecision>(ctx.network.topology(), m);
    ctx.network.set_send_observer(
        [this](NodeId, const Packet& p) { marginal_->CountSent(p.src, p.dst, p.size_bytes); });
  }

  // The controller starts from its configuration: the links' capacities and delays, no load.
  Cycle(/*force_full=*/true, /*push_delay=*/Duration(0));
  agents_ = std::make_unique<SimAgents>(ctx.loop, ctx.network, config_.agents,
                                        [this](const std::vector<LinkSample>& s) { OnSamples(s); });
  agents_->set_liveness_handler([this](LinkId l, bool alive) { OnLiveness(l, alive); });
  agents_->Start();
}

void DarRouting::SyncLink(LinkId l) {
  const Link& link = ctx_->network.current().link(l);
  computer_->SetLinkParams(l, link.params.capacity, link.params.delay);
  carrier_down_[l] = !link.up;
  computer_->SetKnownDown(l, carrier_down_[l] || !cables_up_[l]);
}

void DarRouting::ApplyKnownDown() {
  for (LinkId l = 0; l < static_cast<LinkId>(carrier_down_.size()); ++l) {
    computer_->SetKnownDown(l, carrier_down_[l] || !cables_up_[l]);
  }
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
  // The controller knows the port speeds at once (capacity is configuration, not a sample).
  const Link& l = ctx_->network.current().link(link);
  computer_->SetLinkParams(link, l.params.capacity, l.params.delay);
  if (!link_change_->pending()) link_change_->ScheduleIn(config_.agents.report_delay);
}

void DarRouting::OnSamples(const std::vector<LinkSample>& samples) {
  cables_up_ = CablesUp(ctx_->network.topology(), samples);
  ApplyKnownDown();
  for (size_t l = 0; l < samples.size(); ++l) {
    computer_->Observe(static_cast<LinkId>(l), samples[l]);
  }
  if (marginal_ != nullptr) {
    for (size_t l = 0; l < samples.size(); ++l) {
      marginal_->ObserveThroughput(static_cast<LinkId>(l), samples[l].throughput);
    }
  }
  Cycle(/*force_full=*/false, config_.push_delay);
}

void DarRouting::Cycle(bool force_full, Duration push_delay) {
  if (marginal_ != nullptr) {
    MarginalCycle(push_delay);
    return;
  }
  RouteCycle cycle = computer_->Cycle(force_full);
  if (!cycle.policy_error.empty() && policy_errors_logged_.insert(cycle.policy_error).second) {
    spdlog::warn("dar: weight policy failed (logged once): {}", cycle.policy_error);
  }
  // Push every cycle: a fresh version is also the forwarders' sign that the controller is
  // alive (a table nobody renews goes stale and the static one takes over).
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    SendTables(std::move(cycle.tables[cls]), cls, push_delay);
  }
}

Topology DarRouting::KnownTopology() const {
  Topology view = ctx_->network.current();
  for (LinkId l = 0; l < view.num_links(); ++l) {
    if (computer_->known_down(l)) view.mutable_link(l).up = false;
  }
  return view;
}

void DarRouting::MarginalCycle(Duration push_delay) {
  const int64_t failures = marginal_->stats().failures;
  std::shared_ptr<const RoutingTables> in_force =
      marginal_->Decide(ctx_->loop.now(), KnownTopology());
  if (marginal_->stats().failures > failures &&
      policy_errors_logged_.insert(marginal_->last_error()).second) {
    spdlog::warn("dar: marginal decision failed (logged once): {}", marginal_->last_error());
  }
  // Every cycle a new version: the forwarders' sign that the controller is alive.
  auto tables = std::make_shared<RoutingTables>(*in_force);
  tables->set_version(++version_);
  for (int cls = 0; cls < kTrafficClasses; ++cls) SendTables(tables, cls, push_delay);
}

void DarRouting::SendTables(std::shared_ptr<const RoutingTables> tables, int cls, Duration delay) {
  ++pushes_;
  pushes_line_->Send(Push{std::move(tables), cls}, delay);
}

void DarRouting::Receive(const std::shared_ptr<const RoutingTables>& tables, int cls) {
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
  const RouteComputerStats stats = computer_ != nullptr ? computer_->stats() : RouteComputerStats();
  const bool marginal = marginal_ != nullptr;
  const int64_t route_changes = marginal ? marginal_->stats().route_changes : stats.route_changes;
  metrics["control_cycles"] = marginal ? marginal_->stats().cycles : stats.cycles;
  metrics["control_period_s"] = ToSeconds(config_.agents.period);
  metrics["route_changes"] = route_changes;
  const double seconds = ToSeconds(ctx_->loop.now());
  metrics["route_changes_per_s"] = seconds > 0 ? static_cast<double>(route_changes) / seconds : 0.0;
  if (marginal) {
    const MarginalDecisionStats& m = marginal_->stats();
    metrics["marginal"] = {{"publishes", m.publishes},   {"holds", m.holds},
                           {"forced", m.forced},         {"failures", m.failures},
                           {"iterations", m.iterations}, {"out_of_scans", m.out_of_scans}};
  } else {
    metrics["full_recomputes"] = stats.full_cycles;
  }
  metrics["probes_sent"] = agents_ != nullptr ? agents_->probes_sent() : 0;
  metrics["local_liveness_changes"] = local_failovers_;
  if (config_.learned || config_.weight_policy != nullptr) {
    const bool refused = config_.weight_policy == nullptr;
    metrics["learned_policy"] =
        refused ? "refused: " + config_.learned_refusal : config_.weight_policy->Describe();
    // Cycles whose tables are the analytic engine's although a learned policy was asked for.
    metrics["policy_fallbacks"] = refused ? stats.cycles : stats.policy_failures;
    metrics["policy_cycles"] = stats.policy_cycles;
    metrics["policy_failures"] = stats.policy_failures;
    metrics["policy_decisions"] = stats.policy_decisions;
    metrics["policy_rows_held"] = stats.policy_rows_held;
  }
  if (config_.audit) metrics["int8_vs_float"] = config_.audit();
}

namespace {

// The settings "dar" and "dar-learned" share: the engine's (core/engine_settings.h), read as
// the controller reads them, then the simulator's own.
absl::Status ReadDarConfig(YamlReader& p, DarConfig& c) {
  EngineSettings engine{.marginal = c.decision == DarConfig::Decision::kMarginal,
                        .marginal_config = c.marginal,
                        .routes = c.routes};
  RETURN_IF_ERROR(ReadEngineSettings(p, engine));
  c.decision = engine.marginal ? DarConfig::Decision::kMarginal : DarConfig::Decision::kDiffusion;
  c.marginal = engine.marginal_config;
  c.routes = engine.routes;
  ASSIGN_OR_RETURN(c.agents.period,
                   p.OptionalDuration("period", c.agents.period, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.agents.report_delay,
                   p.OptionalDuration("report_delay", c.agents.report_delay));
  ASSIGN_OR_RETURN(c.push_delay, p.OptionalDuration("push_delay", c.push_delay));
  ASSIGN_OR_RETURN(
      c.routes.horizon_periods,
      p.Optional<int>("horizon_periods", c.routes.horizon_periods, Bounds::InRange(1, 1000000)));
  ASSIGN_OR_RETURN(c.tables.stale_after,
                   p.OptionalDuration("stale_after", c.tables.stale_after, Bounds::Positive()));
  return absl::OkStatus();
}

absl::StatusOr<ControlPlanePtr> MakeDar(YamlReader& p, const ConfigContext& ctx) {
  DarConfig c;
  // A weight policy handed in (the trainer's) refines the diffusion engine's weights.
  if (ctx.weight_policy != nullptr) {
    c.decision = DarConfig::Decision::kDiffusion;
    c.routes.policy_refresh_cycles = 1;
  }
  RETURN_IF_ERROR(ReadDarConfig(p, c));
  if (ctx.weight_policy != nullptr && c.decision != DarConfig::Decision::kDiffusion) {
    return p.Error("decision",
                   "a weight policy refines the diffusion engine's weights: it "
                   "runs with decision: diffusion");
  }
  c.weight_policy = ctx.weight_policy;
  return std::make_unique<DarRouting>(c);
}

absl::StatusOr<ControlPlanePtr> MakeDarLearned(YamlReader& p, const ConfigContext& ctx) {
  DarConfig c;
  // The learned policy refines the diffusion engine's weights.
  c.decision = DarConfig::Decision::kDiffusion;
  // As the controller deploys the policy; a policy handed in (the trainer's) weighs every
  // row every cycle.
  if (ctx.weight_policy != nullptr) c.routes.policy_refresh_cycles = 1;
  RETURN_IF_ERROR(ReadDarConfig(p, c));
  if (c.decision != DarConfig::Decision::kDiffusion) {
    return p.Error("decision",
                   "the learned policy refines the diffusion engine's weights: "
                   "dar-learned runs decision: diffusion");
  }
  c.learned = true;
  ASSIGN_OR_RETURN(std::string model, p.Optional<std::string>("model", ""));
  ASSIGN_OR_RETURN(std::string precision, p.OptionalChoice("precision", "int8", {"int8", "float"}));
  ASSIGN_OR_RETURN(std::string audit, p.OptionalChoice("audit", "none", {"none", "float"}));
  // What a refused model does: fail the run (the default), or run the analytic engine and
  // say so in the metrics.
  ASSIGN_OR_RETURN(std::string fallback,
                   p.OptionalChoice("fallback", "none", {"none", "analytic"}));
  if (audit == "float" && precision != "int8") {
    return p.Error("audit", "audits the INT8 model against FP32: needs precision int8");
  }
  if (ctx.weight_policy != nullptr) {
    c.weight_policy = ctx.weight_policy;
    return std::make_unique<DarRouting>(c);
  }
  if (model.empty()) return p.Error("model", "required: the path of a dar-policy model file");
  std::filesystem::path path(model);
  if (path.is_relative() && !ctx.base_dir.empty())
    path = std::filesystem::path(ctx.base_dir) / path;
  if (!ctx.policy_loader) {
    // Nothing to load with: a scenario being checked, or a simulator built without learned
    // policies. The policy runs the analytic engine and its metrics say so.
    c.learned_refusal = "this simulator was given no loader for learned policies";
    return std::make_unique<DarRouting>(c);
  }
  absl::StatusOr<LoadedWeightPolicy> loaded = ctx.policy_loader(WeightPolicySpec{
      .path = path.string(), .int8 = precision == "int8", .audit = audit == "float"});
  if (loaded.ok()) {
    c.weight_policy = std::move(loaded->policy);
    c.audit = std::move(loaded->audit);
    return std::make_unique<DarRouting>(c);
  }
  if (fallback != "analytic") {
    return p.Error("model", fmt::format("refused: {} (with fallback: analytic the policy runs "
                                        "the analytic engine instead, and says so)",
                                        std::string(loaded.status().message())));
  }
  c.learned_refusal = std::string(loaded.status().message());
  spdlog::warn("{}: learned policy refused, running the analytic engine: {}", ctx.where,
               c.learned_refusal);
  return std::make_unique<DarRouting>(c);
}

}  // namespace

REGISTER_CONTROL_PLANE("dar", MakeDar);
REGISTER_CONTROL_PLANE("dar-learned", MakeDarLearned);

}  // namespace dar::sim
