// DAR's routing objective, and tables that minimise it for a demand matrix.
//
// The objective. For link loads F (traffic units; a unit is `unit_bps` bits per second) with
// utilisations u_l = F_l * unit_bps / capacity_l, DAR minimises
//
//   J(F) = sum_l  kappa_l * U * (u_l / U)^p / p  +  beta * sum_l F_l * length_l
//
// where kappa_l is link l's capacity in traffic units, so that
//   dJ/dF_l = (u_l / U)^(p-1) + beta * length_l,
// length_l = 1 + delay_l / reference_delay (a hop, plus the link's propagation delay), and U is
// the reference utilisation: the maximum utilisation of the routing being improved (below).
// The first term is the capacity-weighted p-norm of the utilisations, raised to p: for large p
// it approaches the maximum utilisation — what traffic engineering minimises — but unlike the
// maximum it is smooth and strictly convex, and every link counts, so the second and third
// busiest links are relieved too. The second term keeps paths short where balance gains
// little: a hop costs beta of the marginal cost of a link at the reference utilisation. With U
// the maximum, the objective does not depend on the scale of the demand: a matrix and the same
// matrix doubled get the same tables. J is convex in F, so every local minimum is global, and
// any routing's J is bounded below by the Frank-Wolfe bound J(F) - gap(F).
//
// U starts at the starting routing's maximum utilisation; after J is minimised for it, U becomes
// the maximum of the result and J is minimised again from there (at most `reference_rounds` times,
// until U moves by less than 1%), so that beta means the same at the optimum as at the start.
//
// The minimisation is Gallager's minimum-delay routing (Gallager, "A Minimum Delay Routing
// Algorithm Using Distributed Computation", IEEE Trans. Commun. 1977) with the second-derivative
// step of Bertsekas, Gafni and Gallager (IEEE Trans. Commun. 1984). Per destination, every
// node splits its traffic over next hops by weights phi. The marginal distance of a node,
//   delta_i = sum_k phi_ik * (J'_ik + delta_k),    delta_destination = 0,
// is the potential of DAR's field under this objective: what one more unit sent from i costs.
// Each iteration moves, at every node, a share of traffic from every next hop k to the one of
// least marginal cost k* (a_k = J'_ik + delta_k), in proportion to (a_k - a_k*) over the
// curvature of both paths — a Newton step on the difference. A node never starts sending to a
// neighbour that is not strictly downhill in delta or that has an uphill link downstream
// (Gallager's blocking), so the next hops of every destination stay a DAG: loop-free by
// construction, every iteration. The step is halved until J falls (Armijo backtracking), so J
// decreases monotonically and the iteration settles; it stops when the relative gap between J
// and the lower bound is below tolerance. The optimum is what it converges to: with the
// first-order condition of a convex problem, every used next hop has the least marginal cost.
//
// Pure computation: no clock, no threads, no I/O.
#ifndef DAR_CORE_MARGINAL_ROUTING_H_
#define DAR_CORE_MARGINAL_ROUTING_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/fluid.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

struct RoutingObjective {
  // p of the utilisation term. REQUIRES: >= 2.
  double power = 32;
  // beta: the weight of path length. REQUIRES: >= 0.
  double length_weight = 1e-4;
  // U. REQUIRES: > 0.
  double reference_utilization = 1;
  // A link's length is 1 + delay / reference_delay. REQUIRES: > 0.
  Duration reference_delay = Milliseconds(1);

  friend bool operator==(const RoutingObjective&, const RoutingObjective&) = default;
};

// J of link loads `loads` (traffic units, by LinkId; host links included), its first and
// second derivatives with respect to one link's load, and each link's term of J.
struct ObjectiveTerms {
  double value = 0;
  std::vector<double> first, second, values;  // by LinkId
};
// Links of zero capacity carry nothing and contribute nothing. REQUIRES: unit_bps > 0,
// loads.size() == topo.num_links().
ObjectiveTerms EvaluateObjective(const Topology& topo, const std::vector<double>& loads,
                                 double unit_bps, const RoutingObjective& objective);

struct MarginalRoutingConfig {
  RoutingObjective objective;
  // Iterations of each minimisation, and minimisations (each for a new reference).
  int max_iterations = 2000;
  int reference_rounds = 30;
  // A minimisation stops once (J - lower bound) / J is at most gap_tolerance, or once J has
  // fallen by less than stall_tolerance (relative) over the last stall_iterations: the
  // method's own precision, reached near the optimum of an ill-conditioned J (large p).
  double gap_tolerance = 1e-3;
  double stall_tolerance = 1e-5;
  int stall_iterations = 50;
  // A node moves traffic between next hops only where their marginal costs differ by more
  // than this, relative: ties that rounding breaks are left alone, so a symmetric network
  // keeps its equal split.
  double tie_tolerance = 1e-9;
  // Next hops weighted below this in the result are dropped (their traffic goes to the
  // others in proportion). A destination still at the start's weights keeps the start's
  // table as it is.
  double min_weight = 1e-6;
  // A bound on the work of one call, in link scans: a destination's step counts as a scan of
  // every link of the topology, so an iteration scans (destinations with traffic) x (links),
  // more where steps are halved. The minimisation stops after the destination's step that
  // reaches it, within an iteration if need be; at least one destination steps. What a
  // decision cycle may spend whatever the network's size: a small network settles within a
  // cycle, a large one moves some destinations toward the optimum each cycle, and the next
  // call of a MarginalRouter resumes with the destination after them.
  // 0: no bound. REQUIRES: >= 0.
  int64_t max_link_scans = 0;

  friend bool operator==(const MarginalRoutingConfig&, const MarginalRoutingConfig&) = default;
};

struct MarginalRoutingResult {
  RoutingTables tables;
  int iterations = 0;
  // Whether the last minimisation stopped on the gap or the stall tolerance (false: it ran
  // out of iterations, or no step lowered J).
  bool settled = false;
  // Whether it stopped on max_link_scans, and the link scans it made.
  bool out_of_scans = false;
  int64_t link_scans = 0;
  // Whether the loop was seen to oscillate: J, recomputed from the loads after a sweep over
  // the destinations, rose above its value before the sweep (each step is accepted only if
  // the incremental J falls, so this checks that argument against a fresh sum rather than
  // trusts it), or the reference utilisation, refreshed after each minimisation, turned back
  // without becoming steady in `reference_rounds`.
  bool oscillated = false;
  double objective = 0;  // J under `tables`, for the last reference utilisation
  // Every link's load under `tables` (traffic units, by LinkId; other_loads included).
  std::vector<double> loads;
  double reference_utilization = 0;
  double lower_bound = 0;  // no routing of this demand has a smaller J
  // Per iteration: J and the maximum utilisation under that iteration's weights. J never
  // increases within a minimisation; a new reference utilisation starts a new J.
  std::vector<double> objective_trace, max_utilization;
  // The reference utilisation of each minimisation, in order.
  std::vector<double> reference_trace;
};

// Minimises J for `demand` (each unit `unit_bps` bits per second), starting from `start`
// where given — a live network's current tables, so that a new demand estimate moves them
// only as far as it must — and from WCMP (topo's shortest paths by metric, each next hop
// weighted by the capacity it leads to, core/routing.h; ECMP on a symmetric fabric) for every
// destination `start` lacks or routes over a down or unknown link, or leaves a node ECMP can
// route without a next hop. Every destination of topo.Destinations() gets a
// table; rows that carry none of the demand keep their starting weights. Errors:
// InvalidArgument for a bad demand, FailedPrecondition if a demand's destination cannot be
// reached from its source over up links. REQUIRES: unit_bps > 0.
// `other_loads` (by LinkId, traffic units), if given, is load on the links that no routing
// moves: traffic the demand does not account for.
absl::StatusOr<MarginalRoutingResult> MinimiseRoutingObjective(
    const Topology& topo, const std::vector<Demand>& demand, double unit_bps,
    const MarginalRoutingConfig& config = MarginalRoutingConfig(),
    const RoutingTables* start = nullptr, const std::vector<double>* other_loads = nullptr);

// The minimisation as a caller that runs it every cycle uses it (the decision layer): each
// cycle, Start with the cycle's demand, read the loads that demand puts on the tables in
// force (LoadsUnder), then Minimise. MinimiseRoutingObjective is one Start and one Minimise
// of a new router. The router keeps what one Minimise leaves for the next cycle:
//   - a destination started from the very table the last Minimise returned for it takes that
//     table's weights and order as they are, not rebuilt from the table nor checked again,
//     while the topology's usable links stay the same;
//   - a sweep that max_link_scans stopped goes on, in the next Minimise, with the destination
//     it stopped at.
// It holds about what a minimisation works on: a weight a link and destination. Not
// thread-safe.
class MarginalRouter {
 public:
  MarginalRouter();
  ~MarginalRouter();
  MarginalRouter(const MarginalRouter&) = delete;
  MarginalRouter& operator=(const MarginalRouter&) = delete;

  // The demand of this cycle over `topo`, which must outlive the Minimise that follows, from
  // `start` (as MinimiseRoutingObjective). Errors as MinimiseRoutingObjective's; after one,
  // LoadsUnder and Minimise fail until the next successful Start.
  absl::Status Start(const Topology& topo, const std::vector<Demand>& demand, double unit_bps,
                     const RoutingTables* start = nullptr);

  // The load of the started demand on every link (traffic units, by LinkId) under `tables`,
  // the host links' included, as ComputeLinkLoads gives it. A destination whose table is the
  // one it was started from costs nothing more; another's table is routed (its graph made once
  // for every table object). Errors:
  // InvalidArgument if `tables` lacks a destination with traffic, FailedPrecondition if a
  // table forwards over a link that is down, of no capacity or into a host, has a loop, or
  // leaves a node with traffic without a next hop; FailedPrecondition with no demand started.
  absl::StatusOr<std::vector<double>> LoadsUnder(const RoutingTables& tables);

  // Minimises J for the started demand, `other_loads` added (as MinimiseRoutingObjective's).
  // Spends the started demand: the next Minimise needs a new Start.
  absl::StatusOr<MarginalRoutingResult> Minimise(const MarginalRoutingConfig& config,
                                                 const std::vector<double>* other_loads = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The capacity-weighted p-norm of the utilisations, (sum_l kappa_l u_l^p)^(1/p): for large p
// about the maximum utilisation, but every link counts. 0 if nothing is loaded.
// REQUIRES: as EvaluateObjective, power >= 1.
double UtilizationNorm(const Topology& topo, const std::vector<double>& loads, double unit_bps,
                       double power);

}  // namespace dar

#endif  // DAR_CORE_MARGINAL_ROUTING_H_
