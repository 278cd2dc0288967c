#include "sim/adaptive_routing.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "base/status_macros.h"
#include "core/validator.h"
#include "spdlog/spdlog.h"

namespace dar::sim {
namespace {

constexpr double kUnusable = std::numeric_limits<double>::infinity();

// (node, destination) rows of `after` whose next hops differ from those of `before`.
int64_t CountRouteChanges(const RoutingTables& before, const RoutingTables& after) {
  int64_t changes = 0;
  for (NodeId d : after.destinations()) {
    if (!before.IsDestination(d)) continue;
    const DestinationTable* a = before.Table(d);
    const DestinationTable* b = after.Table(d);
    if (a == b || a == nullptr || b == nullptr) continue;
    for (NodeId v = 0; v < b->num_nodes(); ++v) {
      const absl::Span<const NextHop> x = a->At(v);
      const absl::Span<const NextHop> y = b->At(v);
      const bool same = std::equal(x.begin(), x.end(), y.begin(), y.end(),
                                   [](const NextHop& p, const NextHop& q) {
                                     return p.link == q.link && p.weight == q.weight;
                                   });
      if (!same) ++changes;
    }
  }
  return changes;
}

}  // namespace

absl::StatusOr<AdaptiveConfig> ReadAdaptiveConfig(YamlReader& policy) {
  AdaptiveConfig c;
  ASSIGN_OR_RETURN(c.agents.period,
                   policy.OptionalDuration("period", c.agents.period, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.agents.report_delay,
                   policy.OptionalDuration("report_delay", c.agents.report_delay));
  ASSIGN_OR_RETURN(c.push_delay, policy.OptionalDuration("push_delay", c.push_delay));
  ASSIGN_OR_RETURN(c.tables.tolerance,
                   policy.Optional<double>("tolerance", c.tables.tolerance, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(c.tables.cost_slack, policy.Optional<double>("cost_slack", c.tables.cost_slack,
                                                                Bounds::NonNegative()));
  if (policy.Has("max_stretch")) {
    ASSIGN_OR_RETURN(c.tables.max_stretch,
                     policy.Required<double>("max_stretch", Bounds::AtLeast(1)));
  }
  ASSIGN_OR_RETURN(std::string base,
                   policy.OptionalChoice("base_cost", "delay", {"delay", "hops", "metric"}));
  c.base_cost = base == "hops"     ? BaseCost::kHops
                : base == "metric" ? BaseCost::kMetric
                                   : BaseCost::kDelay;
  return c;
}

AdaptiveRouting::AdaptiveRouting(const AdaptiveConfig& config) : config_(config) {}

AdaptiveRouting::~AdaptiveRouting() = default;

void AdaptiveRouting::Start(ControlContext& ctx) {
  ctx_ = &ctx;
  believed_ = ctx.network.current();
  cost_.resize(believed_.num_links());
  utilisation_.resize(believed_.num_links());
  link_change_ = std::make_unique<Timer>(ctx.loop, [this] { Push(Compute()); });
  pushes_ = std::make_unique<DelayLine<std::shared_ptr<const RoutingTables>>>(
      ctx.loop, [this](std::shared_ptr<const RoutingTables>&& t) { Install(std::move(t)); });
  // The controller's configuration: every link idle, installed before any traffic.
  if (std::shared_ptr<const RoutingTables> t = Compute()) Install(std::move(t));
  agents_ = std::make_unique<SimAgents>(
      ctx.loop, ctx.network, config_.agents,
      [this](const std::vector<LinkSample>& samples) { OnSamples(samples); });
  agents_->Start();
}

void AdaptiveRouting::OnLinkChange(LinkId) {
  if (link_change_ == nullptr || link_change_->pending()) return;
  // Carrier loss reaches the controller like a report; the new tables then take push_delay.
  link_change_->ScheduleIn(config_.agents.report_delay);
}

void AdaptiveRouting::OnSamples(const std::vector<LinkSample>& samples) {
  latest_ = samples;
  Push(Compute());
}

void AdaptiveRouting::Push(std::shared_ptr<const RoutingTables> tables) {
  if (tables == nullptr) return;
  pushes_->Send(std::move(tables), config_.push_delay);
}

double AdaptiveRouting::LinkBaseCost(const Link& link) const {
  switch (config_.base_cost) {
    case BaseCost::kHops:
      return 1.0;
    case BaseCost::kMetric:
      return link.params.metric;
    case BaseCost::kDelay:
      break;
  }
  return static_cast<double>(link.params.delay.count()) * 1e-3 + AdaptiveConfig::kHopCostUs;
}

std::shared_ptr<const RoutingTables> AdaptiveRouting::Compute() {
  ++cycles_;
  const Topology& now = ctx_->network.current();
  // The controller's liveness rule over the last samples (none yet: all up).
  const std::vector<bool> probed_up =
      latest_.empty() ? std::vector<bool>(now.num_links(), true) : CablesUp(now, latest_);
  for (LinkId l = 0; l < now.num_links(); ++l) {
    const Link& link = now.link(l);
    const bool usable = link.up && probed_up[l];
    believed_.mutable_link(l).up = usable;
    cost_[l] = usable ? LinkBaseCost(link) : kUnusable;
    double u = 0;
    if (!latest_.empty()) {
      // The rate of the last interval over the capacity the link has now (a degraded link
      // is as loaded as its remaining capacity makes it).
      u = link.params.capacity.is_zero() ? latest_[l].utilisation
                                         : Utilisation(latest_[l].throughput, link.params.capacity);
    }
    utilisation_[l] = std::max(0.0, u);
  }
  RoutingTables tables = ComputeLeastLoadedTables(believed_, cost_, utilisation_, config_.tables);
  const ValidationReport report = ValidateTables(believed_, tables);
  if (!report.ok()) {
    ++refused_;
    if (report.loops > 0) ++loop_tables_;
    spdlog::warn("adaptive routing: refusing tables: {}", report.ToStatus().ToString());
    return nullptr;
  }
  tables.set_version(++version_);
  return std::make_shared<const RoutingTables>(std::move(tables));
}

void AdaptiveRouting::Install(std::shared_ptr<const RoutingTables> tables) {
  if (installed_ != nullptr) route_changes_ += CountRouteChanges(*installed_, *tables);
  installed_ = tables;
  ctx_->network.InstallTables(std::move(tables), Network::kAllClasses);
  ++installed_count_;
}

void AdaptiveRouting::Report(nlohmann::json& metrics) const {
  metrics["tables_installed"] = installed_count_;
  metrics["tables_refused"] = refused_;
  metrics["control_period_s"] = ToSeconds(config_.agents.period);
  metrics["routing_loops"] = metrics.value("routing_loops", int64_t{0}) + loop_tables_;
  metrics["route_changes"] = route_changes_;
  metrics["cycles"] = cycles_;
}

namespace {

REGISTER_CONTROL_PLANE("adaptive",
                       [](YamlReader& policy,
                          const ConfigContext&) -> absl::StatusOr<ControlPlanePtr> {
                         ASSIGN_OR_RETURN(AdaptiveConfig config, ReadAdaptiveConfig(policy));
                         return std::make_unique<AdaptiveRouting>(config);
                       });

}  // namespace
}  // namespace dar::sim
