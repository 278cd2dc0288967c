#include "sim/link_state_routing.h"

#include "base/status_macros.h"
#include "core/validator.h"
#include "spdlog/spdlog.h"

namespace dar::sim {

absl::StatusOr<LinkStateConfig> ReadLinkStateConfig(YamlReader& policy) {
  LinkStateConfig config;
  ASSIGN_OR_RETURN(config.reconvergence_delay,
                   policy.OptionalDuration("reconvergence", config.reconvergence_delay));
  return config;
}

LinkStateRouting::LinkStateRouting(TablePolicy compute, const LinkStateConfig& config)
    : compute_(std::move(compute)), config_(config) {}

void LinkStateRouting::Start(ControlContext& ctx) {
  ctx_ = &ctx;
  reconverge_ = std::make_unique<Timer>(ctx.loop, [this] { Recompute(); });
  Recompute();
}

void LinkStateRouting::OnLinkChange(LinkId link) {
  if (!reconverge_->pending()) reconverge_->ScheduleIn(config_.reconvergence_delay);
}

void LinkStateRouting::Recompute() {
  const Topology& now = ctx_->network.current();
  absl::StatusOr<RoutingTables> tables = compute_(now);
  if (!tables.ok()) {
    ++refused_;
    spdlog::warn("routing: table computation failed: {}", tables.status().ToString());
    return;
  }
  const ValidationReport report = ValidateTables(now, *tables);
  loops_ += report.loops;
  // A table with a black hole is still installed: the protocol forwards what it can reach
  // (a partitioned network has holes by necessity). Loops and dead next hops are refused.
  if (report.loops > 0 || report.dead_links > 0 || report.bad_weights > 0) {
    ++refused_;
    spdlog::warn("routing: refusing tables: {}", report.ToStatus().ToString());
    return;
  }
  tables->set_version(++version_);
  ctx_->network.InstallTables(std::make_shared<const RoutingTables>(*std::move(tables)));
  ++installs_;
}

void LinkStateRouting::Report(nlohmann::json& metrics) const {
  metrics["tables_installed"] = installs_;
  metrics["tables_refused"] = refused_;
  metrics["routing_loops"] = metrics.value("routing_loops", int64_t{0}) + loops_;
}

}  // namespace dar::sim
