// DAR's decision loop: link observations in, versioned routing tables out. The simulator
// (sim/dar_routing.h) and the controller (control/controller_core.h) run this same code.
//
// Per directed link it keeps the newest sample from the link's tail (core/telemetry.h), a
// forecast of its utilisation (Holt, one observation per sample), and two flags the owner
// sets: known down (carrier loss, or the controller's liveness verdict) and drained (taken out
// of service by an operator). A cycle turns that into a predicted LinkState per link
// (forecast `horizon_periods` samples ahead, never below the load there is now; queueing from
// the reported queue), per traffic class a cost (core/link_cost.h; kUnusable for a down or
// drained link), and runs that class's diffusion engine: whole every `full_every` cycles or
// when asked, otherwise incrementally over the links whose cost moved by more than
// `min_cost_change` (relative). Every cycle yields a new table set per class; versions only
// grow.
//
// Class 0 is the latency class, class 1 the bulk class.
// Pure computation: no clock, no threads, no I/O. Not thread-safe.
#ifndef DAR_CORE_ROUTE_COMPUTER_H_
#define DAR_CORE_ROUTE_COMPUTER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/diffusion.h"
#include "core/forecast.h"
#include "core/link_cost.h"
#include "core/routing_table.h"
#include "core/telemetry.h"
#include "core/topology.h"

namespace dar {

inline constexpr int kTrafficClasses = 2;  // 0 latency, 1 bulk

struct RouteComputerConfig {
  // Forecast horizon in sample periods: 30 s at 100 ms.
  int horizon_periods = 300;
  // Per-sample smoothing of the utilisation forecast (bounds are forced to [0, 1]).
  HoltConfig forecast;
  // Relative cost move that counts as a change for an incremental cycle.
  double min_cost_change = 0.05;
  // Cycles between full recomputes.
  int full_every = 50;
  // A class is recomputed whole instead of incrementally when more than this fraction of the
  // links changed cost in a cycle: an incremental update over most links costs more than a
  // full one. Above 1 (the default): never.
  double full_above_changed_fraction = 2;
  DiffusionConfig diffusion{.temperature = 0.5, .min_weight = 0.001, .hysteresis = 0.3};
  CostScales scales;
  // Light utilisation weights: short-term utilisation is noisy, and chasing it moves flows
  // (reordering) for little gain; capacity and loss are steadier signals.
  ClassWeights latency{.hop = 1, .latency = 0.3, .loss = 1, .utilisation = 0.3, .capacity = 0};
  ClassWeights bulk{.hop = 1, .latency = 0, .loss = 1, .utilisation = 0.5, .capacity = 1};
  // Whether a link's own samples can rule it down: a sample that says down, from a link whose
  // probes have been answered before, makes it unusable. The controller turns this off and
  // decides liveness from both ends itself (SetKnownDown).
  bool down_from_samples = true;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// What one Cycle produced.
struct RouteCycle {
  bool full = false;  // the engines recomputed every destination
  // The tables of this cycle, by class; class c has version first_version + c.
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> tables;
  // Links whose cost changed (and that the engines re-relaxed), by class.
  std::array<int, kTrafficClasses> changed_links{};
  // Classes recomputed whole (every class when `full`).
  int classes_recomputed = 0;
  // (node, destination) rows whose next hops or weights changed, over both classes.
  int64_t route_changes = 0;
};

// Counts since construction.
struct RouteComputerStats {
  int64_t cycles = 0;
  int64_t full_cycles = 0;
  int64_t route_changes = 0;
};

class RouteComputer {
 public:
  // `topology` fixes the graph and, from its link parameters, each link's initial capacity and
  // propagation delay; its links' `up` fields are the initial known-down flags. No link is
  // drained. REQUIRES: config.Validate().ok().
  RouteComputer(Topology topology, const RouteComputerConfig& config);
  ~RouteComputer();
  RouteComputer(const RouteComputer&) = delete;
  RouteComputer& operator=(const RouteComputer&) = delete;

  // A sample of `link` from its tail: becomes the link's latest and feeds its forecast.
  // REQUIRES: 0 <= link < num_links().
  void Observe(LinkId link, const LinkSample& sample);
  // Capacity and one-way base delay of `link` (a port speed change, a measured delay).
  void SetLinkParams(LinkId link, DataRate capacity, Duration propagation);
  void SetKnownDown(LinkId link, bool down);
  void SetDrained(LinkId link, bool drained);

  // Replaces the policy. A change of the diffusion settings rebuilds the engines, and a change
  // of the forecast settings restarts the forecasts; any change makes the next cycle full.
  // REQUIRES: config.Validate().ok().
  void SetConfig(const RouteComputerConfig& config);

  // Computes the tables of the next cycle. The first cycle is always full.
  RouteCycle Cycle(bool force_full);

  // The state the next cycle will see for `link`.
  LinkState StateOf(LinkId link) const;
  // The utilisation forecast of `link`, horizon_periods ahead.
  Forecast ForecastOf(LinkId link) const;
  // The cost class `cls` saw for `link` in the last cycle (kUnusable before the first).
  double Cost(int cls, LinkId link) const { return costs_[cls][link]; }
  const LinkSample& last_sample(LinkId link) const { return last_[link]; }
  bool known_down(LinkId link) const { return known_down_[link]; }
  bool drained(LinkId link) const { return drained_[link]; }
  // The engine of class `cls`, for potentials (DiffusionEngine::Potential).
  const DiffusionEngine& engine(int cls) const { return *engines_[cls]; }

  const Topology& topology() const { return topology_; }
  const RouteComputerConfig& config() const { return config_; }
  const RouteComputerStats& stats() const { return stats_; }
  // The version of the newest table handed out; 0 before the first cycle.
  uint64_t version() const { return version_; }

 private:
  void ResetForecasts();
  void ResetEngines();

  Topology topology_;
  RouteComputerConfig config_;
  std::vector<HoltForecaster> forecasts_;                  // utilisation, by link
  std::vector<LinkSample> last_;                           // latest sample, by link
  std::vector<DataRate> capacity_;                         // by link
  std::vector<Duration> propagation_;                      // by link
  std::vector<bool> known_down_;                           // by link
  std::vector<bool> drained_;                              // by link
  std::vector<std::unique_ptr<DiffusionEngine>> engines_;  // by class
  std::vector<std::vector<double>> costs_;  // by class, by link: what the engine last saw
  bool force_full_ = true;
  uint64_t version_ = 0;
  int cycles_since_full_ = 0;
  RouteComputerStats stats_;
};

}  // namespace dar

#endif  // DAR_CORE_ROUTE_COMPUTER_H_
