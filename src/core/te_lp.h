// The optimum of traffic engineering for a demand matrix: the least maximum link utilisation
// any routing can reach when traffic may be split arbitrarily over paths (splittable
// multicommodity flow), found by linear programming. The yardstick `dar-sim loads --policy lp`
// holds DAR and the baselines against.
//
// Formulation (source-aggregated: one commodity per source node, not per pair, so the LP has
// S * L flow variables for S sources and L links instead of S * N * L):
//
//   minimise   lambda
//   subject to sum_in f[s][l] - sum_out f[s][l] = d(s, v)   for every source s, node v != s
//              sum_s f[s][l] <= lambda * c[l]               for every link l
//              f[s][l] >= 0
//
// where c[l] is the link's capacity in demand units. Links that are down or of zero capacity
// carry nothing; a host forwards nothing (it only sends its own traffic); no flow re-enters its
// source. Optional second stage (TeLpOptions::minimise_delay): with lambda held at most
// (1 + epsilon) times the first stage's optimum, minimise sum_s sum_l f[s][l] * (delay[l] +
// 1 us), the total delay-weighted flow, so that among (nearly) optimal routings the one with
// the least propagation delay is returned, and the reported path stretch is the least possible
// at that utilisation. The 1 us per hop keeps zero-delay links from carrying circulations.
//
// Solved with GLPK's simplex (glp_simplex, presolver on for the first stage; the second stage
// starts from the first's optimal basis). Flow cycles left by the solver (of zero cost) are
// cancelled before the result is returned, so every source's flow is acyclic.
// Thread-compatible; GLPK keeps no state between calls here.
#ifndef DAR_CORE_TE_LP_H_
#define DAR_CORE_TE_LP_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/fluid.h"
#include "core/te_metrics.h"
#include "core/topology.h"

namespace dar {

struct TeLpOptions {
  // Run the second stage (least delay among routings within 1 + epsilon of the optimum).
  bool minimise_delay = true;
  double epsilon = 1e-4;
  // Simplex iterations allowed per stage; 0 means GLPK's default (no limit).
  int iteration_limit = 0;
};

struct TeLpResult {
  // The first stage's optimum: the least achievable maximum utilisation.
  double lambda = 0;
  // The maximum utilisation of `loads` (lambda up to solver tolerance; at most
  // lambda * (1 + epsilon) after the second stage).
  double max_utilization = 0;
  std::vector<double> loads;      // per LinkId, in demand units
  std::vector<SourceFlow> flows;  // one per source with traffic, ascending id, acyclic
  int iterations = 0;             // simplex iterations over both stages
};

// Solves the LP for `demands` (in units of `unit_bps` bits per second each).
// REQUIRES: unit_bps > 0.
// Errors: InvalidArgument for a bad demand (as ComputeLinkLoads); FailedPrecondition if no
// routing carries the demand (some destination cannot be reached from its source: the LP is
// infeasible; the message names such a pair); Internal if GLPK fails or stops without an
// optimum (iteration limit, numerical trouble), with GLPK's reason.
absl::StatusOr<TeLpResult> SolveMinMaxUtilization(const Topology& topo,
                                                  const std::vector<Demand>& demands,
                                                  double unit_bps,
                                                  const TeLpOptions& options = TeLpOptions());

}  // namespace dar

#endif  // DAR_CORE_TE_LP_H_
