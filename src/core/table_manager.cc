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
    : config_(config), view_(std::move(topology)) {
  assert(config_.stale_after > Duration::zero());
  RecomputeStatic();
}

absl::Status TableManager::Offer(std::shared_ptr<const RoutingTables> tables, Time now) {
  assert(tables != nullptr);
  Observe(now);
  ++counters_.offered;
  if (highest_version_.has_value() && tables->version() <= *highest_version_) {
    ++counters_.refused_version;
    return Refuse(fmt::format(
        "refused routing tables version {}: older or repeated version (highest accepted {})",
        tables->version(), *highest_version_));
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
      last_offer_invalid_ = true;
      absl::Status refusal =
          Refuse(fmt::format("refused routing tables version {}: {}", tables->version(),
                             std::string(report.ToStatus().message())));
      Observe(now);
      return refusal;
    }
  }
  ++counters_.accepted;
  highest_version_ = tables->version();
  current_ = std::move(tables);
  installed_at_ = now;
  last_offer_invalid_ = false;
  Observe(now);
  return absl::OkStatus();
}

absl::Status TableManager::SetLinkUp(LinkId link, bool up, Time now) {
  if (link < 0 || link >= view_.num_links()) {
    return absl::InvalidArgumentError(
        fmt::format("link {} is not in the topology ({} links)", link, view_.num_links()));
  }
  Observe(now);
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
  return Observe(now) == TableSource::kStatic ? static_ : current_;
}

TableSource TableManager::ActiveSource(Time now) { return Observe(now); }

TableSource TableManager::Observe(Time now) {
  const TableSource next = SourceAt(now);
  if (next == source_) return next;
  if (next == TableSource::kStatic) {
    ++counters_.fallbacks_to_static;
  } else if (source_ == TableSource::kStatic) {
    // Leaving static after a fallback is a recovery; leaving it for the first table is not.
    if (counters_.fallbacks_to_static > counters_.recoveries_from_static) {
      ++counters_.recoveries_from_static;
    }
  } else if (next == TableSource::kLastGood) {
    ++counters_.fallbacks_to_last_good;
  }
  source_ = next;
  return next;
}

TableSource TableManager::SourceAt(Time now) const {
  if (current_ == nullptr || now - installed_at_ > config_.stale_after) {
    return TableSource::kStatic;
  }
  return last_offer_invalid_ ? TableSource::kLastGood : TableSource::kCurrent;
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
