// The `loads` subcommand of dar-sim: fluid link loads of a WAN topology under a baseline
// routing policy, without simulating packets.
//
//   dar-sim loads --topology FILE [--demand uniform] [--policy ecmp|static]
//                 [--capacity-gbps X] [--unit-gbps U] [--json]
//
// FILE is networkx node-link JSON (core/topology_json.h). The policy is any name registered as
// a TablePolicy (core/routing.h). Loads are in demand units (uniform: one unit from every node
// to every other); each unit is U Gbps (default 1) when computing utilisation against the link
// capacity X Gbps (default 10).
#ifndef DAR_CLI_LOADS_H_
#define DAR_CLI_LOADS_H_

#include <ostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace dar::cli {

struct LoadsOptions {
  std::string topology;  // path of a node-link JSON file; required
  std::string demand = "uniform";
  std::string policy = "ecmp";
  double capacity_gbps = 10;  // of every link
  double unit_gbps = 1;       // rate of one demand unit
  bool json = false;          // JSON instead of a table
};

// Computes the loads and writes them to `out`: with options.json the object
//   {"policy": P, "links": [{"src": S, "dst": D, "load": L}, ...], "max_link_load": M,
//    "max_utilization": U}
// listing every directed link in link-id order (S and D are node ids as in the file),
// otherwise a table. Errors: InvalidArgument for an unknown policy or demand or a bad file;
// the policy's or the fluid model's error otherwise.
absl::Status RunLoads(const LoadsOptions& options, std::ostream& out);

// Registers the `loads` subcommand on `app`. On failure the subcommand prints the error to
// stderr and throws CLI::RuntimeError(1), which CLI11_PARSE / App::exit turn into exit code 1.
void AddLoadsCommand(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_LOADS_H_
