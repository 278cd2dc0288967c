#include "core/table_manager.h"

#include <cassert>
#include <utility>

#include "core/routing.h"
#include "core/validator.h"
#include "fmt/format.h"

namespace dar {
namespace {

// True if `tables` has a next hop over `link` (which leaves node `src`) toward any destination.
bool HasNextHopOver(const RoutingTables& tables, LinkId link, NodeId src) {
  for (NodeId d : tables.destinations()) {
    const DestinationTable* table = tables.Table(d);
    if (table == nullptr || src >= table->num_nodes()) continue;
    for (const NextHop& hop : table->At(src)) {
      if (hop.link == link) return true;
    }
  }
  return false;
}

}  // namespace

TableManager::TableManager(Topology topology, const TableManagerConfig& config)
    : config_(config), view_(std::move(topology)), chain_(config.stale_after) {
  assert(config_.stale_after > Duration::zero());
  RecomputeStatic();
}

absl::Status TableManager::Offer(std::shared_ptr<const RoutingTables> tables, Time now) {
  assert(tables != nullptr);
  chain_.Observe(now);
  ++counters_.offered;
  if (absl::Status s = chain_.CheckVersion(tables->version()); !s.ok()) {
    ++counters_.refused_version;
    return Refuse(fmt::format("refused routing tables: {}", std::string(s.message())));
  }
  if (config_.validate) {
    const ValidationReport report = ValidateTables(view_, *tables);
    if (!report.ok()) {
      ++counters_.refused_invalid;
      if (report.loops > 0) ++counters_.refused_loop;
      if (report.dead_links > 0) ++counters_.refused_dead_link;
      if (report.black_holes > 0) ++counters_.refused_black_hole;
      if (report.bad_weights > 0) ++counters_.refused_bad_weights;
      if (report.missing > 0) ++counters_.refused_missing;
      chain_.RefuseInvalid();
      chain_.Observe(now);
      return Refuse(fmt::format("refused routing tables version {}: {}", tables->version(),
                                std::string(report.ToStatus().message())));
    }
  }
  ++counters_.accepted;
  chain_.Accept(tables->version(), now);
  chain_.Observe(now);
  current_ = std::move(tables);
  return absl::OkStatus();
}

absl::Status TableManager::SetLinkUp(LinkId link, bool up, Time now) {
  if (link < 0 || link >= view_.num_links()) {
    return absl::InvalidArgumentError(
        fmt::format("link {} is not in the topology ({} links)", link, view_.num_links()));
  }
  chain_.Observe(now);
  Link& state = view_.mutable_link(link);
  if (state.up == up) return absl::OkStatus();
  state.up = up;
  if (!up && current_ != nullptr && HasNextHopOver(*current_, link, state.src)) {
    ++counters_.link_down_under_current;
  }
  RecomputeStatic();
  return absl::OkStatus();
}

const RoutingTables* TableManager::Active(Time now) { return ActiveShared(now).get(); }

std::shared_ptr<const RoutingTables> TableManager::ActiveShared(Time now) {
  return chain_.Observe(now) == TableSource::kStatic ? static_ : current_;
}

TableSource TableManager::ActiveSource(Time now) { return chain_.Observe(now); }

TableManagerCounters TableManager::counters() const {
  TableManagerCounters c = counters_;
  static_cast<FallbackCounters&>(c) = chain_.counters();
  return c;
}

void TableManager::RecomputeStatic() {
  Topology hops = view_;
  for (LinkId l = 0; l < hops.num_links(); ++l) hops.mutable_link(l).params.metric = 1;
  static_ = std::make_shared<const RoutingTables>(ComputeEcmpTables(hops));
}

absl::Status TableManager::Refuse(std::string message) {
  last_refusal_ = std::move(message);
  return absl::FailedPreconditionError(last_refusal_);
}

}  // namespace dar
