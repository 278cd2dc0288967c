// DAR's decision loop: link observations in, versioned routing tables out. The simulator
// (sim/dar_routing.h) and the controller (control/controller_core.h) run this same code.
//
// Per directed link it keeps the newest sample from the link's tail (core/telemetry.h), a
// forecast of its utilisation (Holt, one observation per sample), its base RTT (the minimum
// over the last `base_rtt_periods` samples), and two flags the owner sets: known down (carrier
// loss, or the controller's liveness verdict) and drained (taken out of service by an
// operator). A cycle turns that into a predicted LinkState per link (forecast
// `horizon_periods` samples ahead, never below the load there is now; queueing measured, see
// StateOf), per traffic class a cost (core/link_cost.h; kUnusable for a down or drained link),
// and runs that class's diffusion engine: whole every `full_every` cycles or when asked,
// otherwise incrementally over the links whose cost moved by more than `min_cost_change`
// (relative). Every cycle yields a new table set per class; versions only grow.
//
// Stability. Costs depend on the load the tables put on the links, so a cost that follows
// the traffic it moves makes routes flap: the traffic leaves a link, the link looks free, the
// traffic comes back. Two rules keep the loop damped. Utilisation counts as congestion only
// as far as queueing or loss confirm it (LinkState::measured_congestion), so a link busy with
// the traffic moved onto it, but without a queue, is not judged congested. And a link's cost
// rises at once but falls only with the time constant `cost_decay_periods` (bad news fast,
// good news slowly, as route flap damping does): load that comes and goes keeps the link
// costly until it has stayed away, and only then does traffic come back (a partial response
// each cycle, not a swing of everything at once). Both need measured_links (the controller).
//
// Links slower than configured. A shaper the controller is not told about makes a link
// deliver a fraction of its configured capacity; moved off it, the traffic leaves it idle and
// it looks free again. So the computer estimates what a link delivers from its throughput
// while a queue stands on it (DeliveryCapacity), and a link found slow (below slow_fraction)
// is suppressed, as route flap damping suppresses a flapping route: charged as full, its
// cost multiplied by how much slower it is, and held (no decay) until the estimate has
// returned toward the configured capacity (tens of seconds) or new evidence raises it.
//
// Class 0 is the latency class, class 1 the bulk class.
// Where a cycle's parts run is the owner's (base/executor.h): on an executor of concurrency
// n >= 2, the parts side by side, shared out as threads come free: each class's destinations
// are split into n shares, an engine for each share (a class recomputed whole costs several
// times one updated in part, so the classes alone would leave a thread idle); each class's
// rows of the policy's features in n shares of its candidates; each class's refined tables;
// the policy's Weigh is one call over all. No part's work depends on another's, so the
// cycle's output is the same bit for bit on any executor.
// Pure computation: no clock, no I/O, no thread of its own. Not thread-safe.
//
// The code: configuration and the cycle in route_computer.cc; what it knows of each link
// (samples, marks, forecasts, LinkState) in route_computer_links.cc; the learned policy's
// part of a cycle in route_computer_policy.cc.
#ifndef DAR_CORE_ROUTE_COMPUTER_H_
#define DAR_CORE_ROUTE_COMPUTER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/executor.h"
#include "core/diffusion.h"
#include "core/forecast.h"
#include "core/link_cost.h"
#include "core/policy_features.h"
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
  // A link's cost rises at once and falls toward a lower value by 1 / cost_decay_periods of
  // the gap per cycle (an exponential with that time constant, in cycles); 1 (the default):
  // at once. A link coming back up starts from its new cost at once. The controller uses 4
  // (DefaultControllerRoutes): the runtime's elastic flows and noisy probes need the damping;
  // in the simulated use cases it only costs agility (replication-wan: 1.7x completion time).
  int cost_decay_periods = 1;
  // The base RTT of a link (what propagation and serialisation take, without queues) is the
  // smallest RTT of its last base_rtt_periods samples (5 min at 100 ms): longer than any
  // congestion it must see through, short enough to follow a longer underlay path.
  int base_rtt_periods = 3000;
  // Whether measurement overrides the links' configured parameters (the controller: its links
  // run over an underlay it does not control, e.g. a shaper it is not told about). False (the
  // default; the simulator, whose links are what their parameters say): a link's state is its
  // sample, forecast and parameters as they are. True: StateOf measures queueing from the RTT
  // too and bounds the present load's cost by measured congestion; a link's delivery capacity
  // is estimated (DeliveryCapacity) and a link found slow keeps its cost (Cycle); and the
  // utilisation forecast restarts at a step instead of reading it as a trend.
  bool measured_links = false;
  // measured_links only. A link is queue-limited while its measured queueing is at least
  // queue_limited_delay; after queue_limited_periods such samples in a row its throughput is
  // what it can deliver (as BBR takes the delivery rate of a queue-limited bottleneck).
  // Samples count while the queue stands (a smoothed RTT still high after the queue drained
  // does not); the estimate is the largest throughput of the last queue_limited_window such
  // samples.
  Duration queue_limited_delay = Milliseconds(5);
  int queue_limited_periods = 2;
  int queue_limited_window = 10;
  // The delivery estimate returns to the configured capacity with this time constant, in
  // samples (60 s at 100 ms), unless new evidence refreshes it: long enough to keep traffic
  // off a link found slow for as long as a transfer it would crush, short enough to retry.
  // The agents report what a shaper below them lets through while it queues or drops
  // (agent/qdisc_stats.h), so a 10 Mb/s shaper loaded with 20 measures 10: from 10 of 100
  // Mb/s a link stays slow (below half) for 35 s after the last evidence.
  int capacity_recovery_periods = 600;
  // A link whose delivery estimate is below this fraction of its configured capacity is
  // slow: its cost is multiplied by configured / estimated capacity and does not decay while
  // it is (Cycle). In (0, 1].
  double slow_fraction = 0.5;
  // A sample this far (in utilisation) from the forecast's next step restarts the forecast at
  // the sample: a step (a flow arriving or leaving) is a new level, not a trend to extrapolate
  // over the horizon. Ramps move far less per sample. Above 1: never.
  double forecast_restart_step = 0.2;
  // With a weight policy: at most how many cycles apart it weighs a row. Each cycle it weighs
  // every row of a turn of the destinations (those whose index in the tables' order is the
  // cycle's count modulo this) and, toward the others, every row whose next hops are not
  // last cycle's (a link lost, a neighbour newly downhill). The other rows keep last cycle's
  // weights, the policy's of at most this many cycles ago, on the same next hops. The first
  // cycle with a policy, and the first after it failed, weigh every row. 1 (the default, and
  // the trainer's): every row every cycle. The controller and the simulator's dar-learned
  // default to kDeployedPolicyRefreshCycles.
  int policy_refresh_cycles = 1;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// RouteComputerConfig::policy_refresh_cycles where a learned policy is deployed (the
// controller, the simulator's dar-learned): every row weighed at least every 4 cycles (400 ms
// at the 100 ms cycle), a row whose next hops change at once. It cuts a cycle's policy work
// to about a quarter where few next hops change (docs/learned-policy.md).
inline constexpr int kDeployedPolicyRefreshCycles = 4;

// What one Cycle produced.
struct RouteCycle {
  bool full = false;  // the engines recomputed every destination
  // The tables of this cycle, by class; class c has version first_version + c.
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> tables;
  // Links whose cost changed (and that the engines re-relaxed), by class.
  std::array<int, kTrafficClasses> changed_links{};
  // Classes recomputed whole (every class when `full`).
  int classes_recomputed = 0;
  // (node, destination) rows whose next hops or weights changed in the engines, over both
  // classes (a weight policy's changes are not counted here).
  int64_t route_changes = 0;
  // Why the weight policy's weights were not used this cycle (its error, or what was wrong
  // with its weights); empty if there is no policy or it was used. For the owner to log:
  // core does not log.
  std::string policy_error;
};

// Counts since construction.
struct RouteComputerStats {
  int64_t cycles = 0;
  int64_t full_cycles = 0;
  int64_t route_changes = 0;
  // With a weight policy (set_weight_policy): cycles that asked it, cycles whose tables kept
  // the engines' weights because it failed, and rows it weighed in the cycles it did not.
  int64_t policy_cycles = 0;
  int64_t policy_failures = 0;
  int64_t policy_decisions = 0;
  // Rows with a choice that it did not weigh and that kept last cycle's weights
  // (RouteComputerConfig::policy_refresh_cycles), in the cycles it did not fail.
  int64_t policy_rows_held = 0;
};

class RouteComputer {
 public:
  // `topology` fixes the graph and, from its link parameters, each link's initial capacity and
  // propagation delay; its links' `up` fields are the initial known-down flags. No link is
  // drained. A cycle's parts run on `executor` (null: the caller's thread alone).
  // REQUIRES: config.Validate().ok(); the executor outlives this.
  RouteComputer(Topology topology, const RouteComputerConfig& config, Executor* executor = nullptr);
  ~RouteComputer();
  RouteComputer(const RouteComputer&) = delete;
  RouteComputer& operator=(const RouteComputer&) = delete;

  // A sample of `link` from its tail: becomes the link's latest and feeds its forecast.
  // REQUIRES: 0 <= link < num_links().
  void Observe(LinkId link, const LinkSample& sample);
  // Capacity and one-way base delay of `link` (a port speed change, a measured delay).
  void SetLinkParams(LinkId link, DataRate capacity, Duration propagation);
  // Whether `link` is down as its owner judges it (CableUp, core/link_liveness.h); the
  // computer never judges liveness from one sample.
  void SetKnownDown(LinkId link, bool down);
  void SetDrained(LinkId link, bool drained);

  // Replaces the policy. A change of the diffusion settings rebuilds the engines, and a change
  // of the forecast settings restarts the forecasts; any change makes the next cycle full.
  // REQUIRES: config.Validate().ok().
  void SetConfig(const RouteComputerConfig& config);
  // Runs the cycles' parts on `executor` from now on (null: the caller's thread). An executor
  // of another concurrency rebuilds the engines and makes the next cycle full. REQUIRES: the
  // executor outlives this, or the next call.
  void set_executor(Executor* executor);

  // A policy that refines the engines' weights (core/weight_policy.h); null (the default):
  // the engines' tables as they are. With one, each cycle hands it every row with a choice,
  // and installs its weights where they are finite, > 0 and sum to 1 per row; a row keeps
  // last cycle's weights while the new ones differ from them by less than
  // config.diffusion.hysteresis (sum of absolute differences), as the engine does, so learned
  // weights do not flap. If the policy fails or its weights break those rules, the cycle's
  // tables are the engines' (counted in stats(), said in RouteCycle::policy_error).
  // Every `config.policy_refresh_cycles` cycles at most, each destination (see there).
  void set_weight_policy(std::shared_ptr<WeightPolicy> policy) {
    policy_ = std::move(policy);
    policy_held_ = false;
  }
  const std::shared_ptr<WeightPolicy>& weight_policy() const { return policy_; }

  // Computes the tables of the next cycle. The first cycle is always full.
  RouteCycle Cycle(bool force_full);
  // A cycle whose tables another layer computes (the marginal decision layer): the link
  // costs are brought up to date (Cost() shows them) and the versions Cycle would take are
  // taken, first_version + class; returns first_version. The engines do nothing, and the
  // next Cycle recomputes every destination.
  uint64_t SkipCycle();

  // The state the next cycle will see for `link`. Queueing is the larger of the reported
  // queue (queue_bytes at the link's capacity) and the RTT's inflation above its base that the
  // reverse direction's reported queue does not explain (a probe's round trip crosses both
  // directions; a queue that is not reported, e.g. a shaper below the agent's socket, shows
  // only there). Measured congestion is queueing / reference_delay + loss / reference_loss.
  // Utilisation (predicted) and present utilisation (the last sample's) are at most
  // scales.max_utilisation, and at least that times min(1, queueing / reference_delay): a
  // queue says the link is full.
  LinkState StateOf(LinkId link) const;
  // What `link` can deliver, as measured (measured_links only; else, or without evidence, its
  // configured capacity). While the link is queue-limited (RouteComputerConfig), the
  // windowed max of its throughput; any throughput above the estimate raises it. Without new
  // evidence the estimate returns to the configured capacity (capacity_recovery_periods). At most
  // the configured capacity.
  DataRate DeliveryCapacity(LinkId link) const;
  // Whether `link`'s delivery capacity is below slow_fraction of its configured capacity.
  bool Slow(LinkId link) const;
  // The base RTT of `link`: the smallest of its recent samples' RTT (rtt_min where the sample
  // has one, else rtt_smoothed); zero before the first sample with an RTT.
  Duration BaseRtt(LinkId link) const { return base_rtt_[link].Get(); }
  // The utilisation forecast of `link`, horizon_periods ahead.
  Forecast ForecastOf(LinkId link) const;
  // The cost class `cls` saw for `link` in the last cycle (kUnusable before the first).
  double Cost(int cls, LinkId link) const { return costs_[cls][link]; }
  const LinkSample& last_sample(LinkId link) const { return last_[link]; }
  bool known_down(LinkId link) const { return known_down_[link]; }
  bool drained(LinkId link) const { return drained_[link]; }
  // The potential of `node` toward `dest` in class `cls`'s engine (DiffusionEngine::Potential).
  double Potential(int cls, NodeId dest, NodeId node) const;
  // The diffusion settings the engines run with.
  const DiffusionConfig& engine_config() const { return engines_[0].front()->config(); }

  const Topology& topology() const { return topology_; }
  const RouteComputerConfig& config() const { return config_; }
  const RouteComputerStats& stats() const { return stats_; }
  // The version of the newest table handed out; 0 before the first cycle.
  uint64_t version() const { return version_; }

 private:
  // The minimum of a series over a sliding window of samples, from three kept samples
  // (Kathleen Nichols' algorithm, as in Linux lib/win_minmax.c): O(1) time and memory; the
  // result is an exact window minimum or a sample from the window's last quarter or half.
  class WindowedMin {
   public:
    // Adds the sample of tick `t` (ticks increase by one per sample). REQUIRES: window >= 1.
    void Update(int64_t t, Duration v, int64_t window);
    Duration Get() const { return s_[0].v; }

   private:
    struct Entry {
      int64_t t = 0;
      Duration v{0};
    };
    std::array<Entry, 3> s_;  // best, second and third choice; zero: no sample yet
  };

  // The delivery-capacity evidence of one link (DeliveryCapacity).
  struct Delivery {
    DataRate estimate;      // zero: no evidence
    int64_t at = -1;        // the sample (by the link's sample count) that last set it
    DataRate best;          // the windowed max of queue-limited throughput
    int64_t best_at = 0;    // the sample that set it
    int queue_limited = 0;  // queue-limited samples in a row
    int clear = 0;          // samples without a queue in a row
  };

  // Queueing of `l`'s last sample at `capacity` (see StateOf).
  Duration MeasuredQueueing(LinkId l, DataRate capacity) const;
  void ObserveDelivery(LinkId l, const LinkSample& previous);
  void ResetForecasts();
  // A link's utilisation forecaster as config_.forecast says, bounded to [0, 1].
  HoltForecaster NewForecaster() const;
  void ResetEngines();
  // Runs the weight policy over `out`'s tables and replaces them with its weights; leaves
  // them and returns why if it fails.
  absl::Status ApplyPolicy(absl::Span<const LinkState> states, RouteCycle& out);
  // Which rows of class `cls`'s destinations the policy weighs this cycle (weigh_[cls], by
  // index in `engine`'s order): every row of those in `turn` of `every` (and of those laid
  // out otherwise than in previous_[cls], or new); of the others, the rows whose next hops
  // changed, none where the engine's table is the one in `engine_before` (the engines' tables
  // of the last cycle that asked the policy; null: none).
  void ChooseWeighed(int cls, const RoutingTables& engine, const RoutingTables* engine_before,
                     int every, int turn);
  // OK if every weight the policy gave class `cls`'s rows (policy_weights_) is finite and
  // > 0 and each row's sum to 1 (within 1e-6); else what is wrong.
  absl::Status CheckPolicyWeights(int cls) const;
  // Class `cls`'s tables with the batch's weights (policy_weights_) in its rows, and last
  // cycle's in the rows with a choice it did not weigh (counted into `held`). A block of
  // `engine` that is the same object in `engine_before` (as ChooseWeighed) has last cycle's
  // next hops.
  std::shared_ptr<const RoutingTables> RefinedTables(int cls, const RoutingTables& engine,
                                                     const RoutingTables* engine_before,
                                                     int64_t& held);
  // Every link's state this cycle (StateOf) and whether it is slow (Slow).
  void LinkStates(std::vector<LinkState>& states, std::vector<char>& slow) const;
  // Class `cls`'s costs for this cycle into costs_[cls], the links whose cost moved into
  // changed_[cls]; whether its engines must recompute every destination (full, or too many
  // links moved).
  bool ClassCosts(int cls, bool full, absl::Span<const LinkState> states,
                  const std::vector<char>& slow);
  // The engine of class `cls` that computes toward `dest`.
  const DiffusionEngine& EngineFor(int cls, NodeId dest) const;

  Topology topology_;
  Executor* executor_;  // never null
  RouteComputerConfig config_;
  std::vector<HoltForecaster> forecasts_;  // utilisation, by link
  std::vector<LinkSample> last_;           // latest sample, by link
  std::vector<WindowedMin> base_rtt_;      // by link
  std::vector<int64_t> rtt_samples_;       // samples with an RTT, by link
  std::vector<int64_t> samples_;           // samples, by link
  std::vector<Delivery> delivery_;         // by link
  std::vector<DataRate> capacity_;         // by link
  std::vector<Duration> propagation_;      // by link
  std::vector<bool> known_down_;           // by link
  std::vector<bool> drained_;              // by link
  // By class: its engines, each computing a share of the destinations (one share, all of
  // them, on one thread; halves on two or more), in the topology's order of destinations.
  std::vector<std::vector<std::unique_ptr<DiffusionEngine>>> engines_;
  std::vector<int32_t> engine_of_destination_;  // by node: index into a class's engines
  std::vector<NodeId> destinations_;            // topology_.Destinations()
  std::vector<std::vector<double>> costs_;      // by class, by link: what the engine last saw
  std::vector<std::vector<double>> held_;       // by class, by link: cost after decay damping
  std::vector<std::vector<LinkId>> changed_;    // by class: scratch of CycleClass
  bool force_full_ = true;
  uint64_t version_ = 0;
  int cycles_since_full_ = 0;
  RouteComputerStats stats_;
  std::shared_ptr<WeightPolicy> policy_;
  // The tables the last cycle handed out, by class (with a policy only).
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> previous_;
  PolicyFeatureBuilder features_;
  PolicyBatch batch_;
  std::vector<double> policy_weights_;  // by candidate of batch_
  // By class, by destination in its tables' order: which of its rows the policy weighs this
  // cycle (PolicyInputs::weigh).
  std::array<std::vector<WeighRows>, kTrafficClasses> weigh_;
  // The engines' tables of the last cycle that asked the policy, by class: a table toward a
  // destination that is the same object this cycle has the same rows.
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> previous_engine_;
  // Whether previous_ holds the policy's tables (it weighed last cycle, and did not fail).
  bool policy_held_ = false;
};

}  // namespace dar

#endif  // DAR_CORE_ROUTE_COMPUTER_H_
