// The `loads` subcommand of dar-sim: fluid link loads of a WAN topology under a routing
// policy, without simulating packets, and what they mean for the demand.
//
//   dar-sim loads --topology FILE [--demand uniform|gravity|MATRIX] [--policy P]
//                 [--capacity-gbps X] [--unit-gbps U] [--lp-max-util-only] [--json]
//                 [--objective-power P] [--objective-length-weight B]
//
// FILE is networkx node-link JSON (core/topology_json.h); an edge's "capacity" (bits per
// second) is its capacity, X Gbps (default 10) that of every other edge. The policy is
// `lp` (the TE optimum, core/te_lp.h), `dar` (the tables that minimise DAR's objective for
// this demand, core/marginal_routing.h) or any name registered as a TablePolicy (core/routing.h:
// ecmp, static, ...). The demand (core/demand.h, docs/fluid.md) is uniform (one unit from
// every node to every other), gravity (w(s) w(d), w the node's "weight" or its degree, scaled
// to the uniform total) or a JSON matrix file. Loads are in demand units; each unit is U Gbps
// (default 1) when computing utilisation. For every policy the result gives the maximum
// utilisation, the path stretch and the max-min fair admitted throughput
// (core/te_metrics.h); for dar its objective, the bound on its optimum and whether the
// minimisation settled.
#ifndef DAR_CLI_LOADS_H_
#define DAR_CLI_LOADS_H_

#include <ostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "core/marginal_routing.h"

namespace dar::cli {

struct LoadsOptions {
  std::string topology;            // path of a node-link JSON file; required
  std::string demand = "uniform";  // uniform, gravity or the path of a matrix file
  std::string policy = "ecmp";
  double capacity_gbps = 10;   // of every link without a "capacity" in the file
  double unit_gbps = 1;        // rate of one demand unit
  bool lp_delay_stage = true;  // lp: least delay among max-utilisation optimal routings
  bool json = false;           // JSON instead of a table
  // dar: its objective (core/marginal_routing.h, RoutingObjective).
  double objective_power = RoutingObjective().power;
  double objective_length_weight = RoutingObjective().length_weight;
};

// Computes the loads and writes them to `out`: with options.json the object
//   {"policy": P, "demand": D, "demand_total": T, "unit_gbps": U,
//    "links": [{"src": S, "dst": D, "load": L, "utilisation": X}, ...], "max_link_load": M,
//    "max_utilisation": U, "stretch": S, "admitted_fraction": A, "min_pair_admitted": F,
//    "pairs": [{"src", "dst", "demand", "delay_ms", "shortest_delay_ms", "stretch",
//               "admitted"}, ...],
//    "dar": {"settled", "iterations", "objective", "lower_bound", "gap", "power",
//            "length_weight"}                                 (policy dar only)
//    "lp": {"lambda", "delay_stage", "simplex_iterations"}}   (policy lp only)
// listing every directed link in link-id order (S and D are node ids as in the file) and
// every pair with demand in the matrix's order (a pair's "stretch" is null when its shortest
// delay is 0), otherwise a table of links and a summary. Errors: InvalidArgument for an
// unknown policy or demand, a bad topology or matrix file; the policy's, the LP's or the
// fluid model's error otherwise.
absl::Status RunLoads(const LoadsOptions& options, std::ostream& out);

// Registers the `loads` subcommand on `app`. On failure the subcommand prints the error to
// stderr and throws CLI::RuntimeError(1), which CLI11_PARSE / App::exit turn into exit code 1.
void AddLoadsCommand(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_LOADS_H_
