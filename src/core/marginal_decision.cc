#include "core/marginal_decision.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/fluid.h"
#include "core/routing.h"
#include "core/validator.h"

namespace dar {
namespace {

// The demand and loads are in bytes per second: one unit is 8 bits per second.
constexpr double kUnit = 8;

// Rows (node, destination) whose next hops or weights differ between two table sets.
int64_t ChangedRows(const Topology& topo, const RoutingTables& a, const RoutingTables& b) {
  int64_t changed = 0;
  for (NodeId d : topo.Destinations()) {
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const absl::Span<const NextHop> x = a.Lookup(v, d), y = b.Lookup(v, d);
      bool same = SameLinks(x, y);
      for (size_t i = 0; same && i < x.size(); ++i) {
        same = std::abs(x[i].weight - y[i].weight) < 1e-9;
      }
      changed += !same;
    }
  }
  return changed;
}

// The pairs of `demand` whose destination `known`'s up links reach from their source.
std::vector<Demand> Reachable(const Topology& known, std::vector<Demand> demand) {
  std::unordered_map<NodeId, std::vector<bool>> reaches;  // by route target
  std::erase_if(demand, [&](const Demand& x) {
    if (x.src < 0 || x.src >= known.num_nodes() || x.dst < 0 || x.dst >= known.num_nodes()) {
      return true;
    }
    const NodeId target = known.RouteTarget(x.dst);
    if (target != x.dst) {
      const LinkId last = known.FindLink(target, x.dst);
      if (last == kNoLink || !known.link(last).up) return true;
    }
    auto it = reaches.find(target);
    if (it == reaches.end()) it = reaches.emplace(target, ReachesDestination(known, target)).first;
    return !it->second[x.src];
  });
  return demand;
}

}  // namespace

MarginalDecision::MarginalDecision(const Topology& topo, const MarginalDecisionConfig& config)
    : topo_(topo), config_(config), throughput_(topo.num_links(), 0.0) {
  if (config_.other_load_horizon_periods > 0) {
    other_forecast_.assign(topo.num_links(), HoltForecaster(config_.other_load_forecast));
  }
}

void MarginalDecision::ObserveThroughput(LinkId link, DataRate throughput) {
  const double a = 1 - std::exp(-1 / config_.demand_periods);
  throughput_[link] += a * (static_cast<double>(throughput.bps()) / 8 - throughput_[link]);
}

void MarginalDecision::UpdateDemand(Time now) {
  const double elapsed = ToSeconds(now - demand_at_);
  if (!(elapsed > 0)) return;
  demand_at_ = now;
  const double a = 1 - std::exp(-elapsed / (config_.demand_periods * ToSeconds(config_.period)));
  for (auto& [pair, rate] : demand_) rate *= 1 - a;
  for (const auto& [pair, bytes] : sent_) demand_[pair] += a * static_cast<double>(bytes) / elapsed;
  sent_.clear();
  // Below a millionth of the largest, a pair is forgotten.
  double largest = 0;
  for (const auto& [pair, rate] : demand_) largest = std::max(largest, rate);
  std::erase_if(demand_, [&](const auto& e) { return !(e.second > 1e-6 * largest); });
}

std::vector<Demand> MarginalDecision::DemandEstimate() const {
  std::vector<Demand> out;
  out.reserve(demand_.size());
  for (const auto& [pair, rate] : demand_) {
    out.push_back({static_cast<NodeId>(pair >> 32), static_cast<NodeId>(pair & 0xffffffff), rate});
  }
  return out;
}

std::shared_ptr<const RoutingTables> MarginalDecision::Decide(Time now, const Topology& known) {
  ++stats_.cycles;
  UpdateDemand(now);
  std::vector<Demand> demand = DemandEstimate();
  // Only with links down can pairs be cut off (a partition); their traffic has nowhere to go,
  // and they are left out so that the rest is still routed well.
  const absl::Span<const Link> links = known.links();
  if (std::any_of(links.begin(), links.end(), [](const Link& l) { return !l.up; })) {
    demand = Reachable(known, std::move(demand));
  }
  // A link up now that was down in the last cycle (none on the first).
  bool came_up = false, changed = false;
  const bool first = up_.empty();
  up_.resize(known.num_links());
  for (LinkId l = 0; l < known.num_links(); ++l) {
    came_up |= !first && known.link(l).up && !up_[l];
    changed |= known.link(l).up != up_[l];
    up_[l] = known.link(l).up;
  }
  // Tables valid in the last cycle stay valid while no link changes state.
  if (changed) validated_.clear();
  const auto is_valid = [&](const std::shared_ptr<const RoutingTables>& tables) {
    if (tables == nullptr) return false;
    if (std::find(validated_.begin(), validated_.end(), tables) != validated_.end()) return true;
    if (!ValidateTables(known, *tables).ok()) return false;
    validated_.push_back(tables);
    return true;
  };
  const bool valid = is_valid(in_force_);

  // The minimisation resumes where the last one stopped (its tables, published or not), so a
  // steady demand costs few iterations a cycle; the tables in force, or ECMP, where those
  // route over a link now down; WCMP when a link came up.
  if (came_up) candidate_.reset();  // made without the link: never resumed from
  const RoutingTables* start = valid && !came_up ? in_force_.get() : nullptr;
  if (is_valid(candidate_)) start = candidate_.get();
  const absl::Status started = router_.Start(known, demand, kUnit, start);

  // Load the demand does not explain under the tables in force.
  std::vector<double> other(known.num_links(), 0.0);
  absl::StatusOr<std::vector<double>> predicted = absl::FailedPreconditionError("no tables");
  if (valid) {
    predicted =
        started.ok() ? router_.LoadsUnder(*in_force_) : ComputeLinkLoads(known, *in_force_, demand);
  }
  if (predicted.ok()) {
    for (LinkId l = 0; l < known.num_links(); ++l) {
      const double slack = config_.other_load_slack *
                           static_cast<double>(known.link(l).params.capacity.bps()) / kUnit;
      other[l] = std::max(0.0, throughput_[l] - (*predicted)[l] - slack);
      if (!other_forecast_.empty()) {
        other_forecast_[l].Observe(other[l]);
        other[l] =
            std::max(other[l], other_forecast_[l].Predict(config_.other_load_horizon_periods).mean);
      }
    }
  }

  std::shared_ptr<const RoutingTables> next;
  std::vector<double> next_loads;  // under `next`, other load included
  absl::StatusOr<MarginalRoutingResult> result =
      started.ok() ? router_.Minimise(config_.routing, &other)
                   : absl::StatusOr<MarginalRoutingResult>(started);
  if (result.ok()) {
    stats_.iterations += result->iterations;
    stats_.out_of_scans += result->out_of_scans;
    next = std::make_shared<const RoutingTables>(std::move(result->tables));
    next_loads = std::move(result->loads);
    candidate_ = next;
    // Made over `known`'s usable links, loop-free by construction (marginal_routing.h).
    validated_.push_back(next);
  } else {
    // A demand the known links cannot carry (a partition): shortest paths over what is left.
    ++stats_.failures;
    last_error_ = std::string(result.status().message());
    next = std::make_shared<const RoutingTables>(ComputeEcmpTables(known));
  }

  const bool forced = !valid || came_up;
  bool publish = forced;
  if (!forced && result.ok() && predicted.ok()) {
    std::vector<double>& now_loads = *predicted;
    for (LinkId l = 0; l < known.num_links(); ++l) now_loads[l] += other[l];
    const double power = config_.routing.objective.power;
    publish = UtilizationNorm(known, next_loads, kUnit, power) <
              (1 - config_.publish_gain) * UtilizationNorm(known, now_loads, kUnit, power);
  }
  // Only what may be validated again is remembered.
  std::erase_if(validated_, [&](const auto& t) { return t != in_force_ && t != candidate_; });
  if (!publish) {
    ++stats_.holds;
    return in_force_;
  }
  if (in_force_ != nullptr) {
    stats_.forced += forced;
    stats_.route_changes += ChangedRows(known, *in_force_, *next);
  }
  ++stats_.publishes;
  in_force_ = std::move(next);
  return in_force_;
}

}  // namespace dar
