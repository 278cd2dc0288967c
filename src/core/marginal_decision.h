// DAR's marginal decision layer for a live network (ARCHITECTURE.md, "Two speeds": the slow
// one): the demand each node sends, measured, smoothed and turned every cycle into the tables
// that minimise DAR's objective (core/marginal_routing.h), changed only when that pays.
//
// In: the bytes every endpoint sent toward every other since the last cycle (what an agent
// counts of the traffic its node originates) and every link's measured throughput (a
// sample per period). Per cycle:
//   1. the demand estimate: each pair's rate, averaged exponentially with a time constant of
//      demand_periods periods; pairs that fell silent fade out;
//   2. other load: what a link carries beyond what the demand explains under the tables in
//      force (its smoothed throughput less the predicted load, less other_load_slack of its
//      capacity: below that it is the forwarders' uneven split, no one's traffic) — held fixed,
//      as traffic no routing moves, or at its forecast other_load_horizon_periods ahead where
//      that is higher;
//   3. the objective's minimum for that demand over the known topology, resumed from where
//      the last cycle's minimisation stopped (published or not);
//   4. the rule that keeps tables still: the new tables replace those in force only if the
//      utilisation norm they predict is at least publish_gain (relative) lower, or at once if
//      the tables in force route over a link now down (they fail ValidateTables).
// A link that comes (back) up restarts the minimisation from WCMP over the known links, and
// its result is put in force whatever it gains: the tables in force were made for a network
// without that link, and a destination that carries no traffic would otherwise never be
// routed over it again (its rows do not move without demand).
// The forwarders adapt within the tables in microseconds (flowlets, DRILL); this layer does
// not chase what they fix.
//
// Pure computation: no clock (the caller passes the time), no threads, no I/O. Not
// thread-safe.
#ifndef DAR_CORE_MARGINAL_DECISION_H_
#define DAR_CORE_MARGINAL_DECISION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/forecast.h"
#include "core/marginal_routing.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

// A cycle's work at most (MarginalRoutingConfig::max_link_scans): about 10 ms on one core
// of the development machine (docs/decision.md, Speed); 200 agents' overlay (200
// destinations, 1,200 links) takes about two iterations a cycle, a k=8 fat-tree twenty.
inline constexpr int64_t kCycleLinkScans = 500'000;

// The routing settings of one decision cycle: the defaults, bounded by kCycleLinkScans.
inline MarginalRoutingConfig CycleRoutingConfig() {
  MarginalRoutingConfig config;
  config.max_link_scans = kCycleLinkScans;
  return config;
}

struct MarginalDecisionConfig {
  MarginalRoutingConfig routing = CycleRoutingConfig();
  // The sample period, and the demand's and throughputs' time constant in periods.
  // REQUIRES: period > 0, demand_periods > 0.
  Duration period = Milliseconds(100);
  double demand_periods = 4;
  // REQUIRES: in [0, 1).
  double publish_gain = 0.02;
  // REQUIRES: >= 0.
  double other_load_slack = 0.1;
  // The other load is held at the larger of what it is now and its forecast this many
  // periods ahead (Holt's damped trend, `other_load_forecast`), so that load which ramps
  // (a backup window opening, a neighbour's traffic growing) is routed around before it
  // peaks. 0 (the default): the load as it is now. REQUIRES: >= 0.
  int other_load_horizon_periods = 0;
  HoltConfig other_load_forecast;

  friend bool operator==(const MarginalDecisionConfig&, const MarginalDecisionConfig&) = default;
};

struct MarginalDecisionStats {
  int64_t cycles = 0;
  int64_t publishes = 0;  // new tables put in force (the first included)
  int64_t holds = 0;      // cycles that kept the tables in force
  int64_t forced = 0;     // publishes because a link in use went down or one came up
  int64_t failures = 0;   // cycles whose minimisation failed (then: ECMP over the known links)
  int64_t iterations = 0;
  int64_t out_of_scans = 0;   // cycles whose minimisation stopped on routing.max_link_scans
  int64_t route_changes = 0;  // (node, destination) rows changed by publishes
};

class MarginalDecision {
 public:
  // `topo` fixes the nodes and links (not their state) and must outlive the decision.
  // REQUIRES: config as documented.
  MarginalDecision(const Topology& topo, const MarginalDecisionConfig& config);

  // `bytes` sent by endpoint `src` toward endpoint `dst` since the last cycle.
  void CountSent(NodeId src, NodeId dst, int64_t bytes) {
    sent_[static_cast<uint64_t>(src) << 32 | static_cast<uint32_t>(dst)] += bytes;
  }
  // A link's throughput sample, once per period.
  void ObserveThroughput(LinkId link, DataRate throughput);

  // The cycle at `now` over `known` (topo with the links known to be down or unusable marked
  // down, and their capacities as they are now): the tables to push, those in force after it.
  // The first cycle puts ECMP's tables (or the objective's, if there is demand) in force.
  // REQUIRES: known has topo's nodes and links.
  std::shared_ptr<const RoutingTables> Decide(Time now, const Topology& known);

  const MarginalDecisionStats& stats() const { return stats_; }
  // The last failure's message; empty if none.
  const std::string& last_error() const { return last_error_; }
  // The demand estimate, bytes per second per (src, dst) pair, in no particular order.
  std::vector<Demand> DemandEstimate() const;

 private:
  void UpdateDemand(Time now);

  const Topology& topo_;
  MarginalDecisionConfig config_;
  std::unordered_map<uint64_t, int64_t> sent_;   // (src << 32 | dst) -> bytes since the last cycle
  std::unordered_map<uint64_t, double> demand_;  // the same pairs, bytes per second
  std::vector<double> throughput_;               // by link, smoothed, bytes per second
  Time demand_at_{0};
  std::shared_ptr<const RoutingTables> in_force_;
  std::shared_ptr<const RoutingTables> candidate_;  // the last minimisation's tables
  std::vector<bool> up_;  // by link, whether it was up in the last cycle's known topology
  // Tables (in force or candidate) found valid over up_: no need to validate them again.
  std::vector<std::shared_ptr<const RoutingTables>> validated_;
  std::vector<HoltForecaster> other_forecast_;  // by link; empty without a horizon
  MarginalRouter router_;                       // what the last minimisation left for the next
  MarginalDecisionStats stats_;
  std::string last_error_;
};

}  // namespace dar

#endif  // DAR_CORE_MARGINAL_DECISION_H_
