// Traffic matrices for fluid analysis (`dar-sim loads --demand`): the gravity model and
// matrices read from JSON files. UniformDemand is in core/fluid.h.
//
// Every function here returns demands between endpoints (Topology::Endpoints) only, never
// from a node to itself, ordered by source then destination id, each with a positive amount.
// Thread-compatible: no shared state.
#ifndef DAR_CORE_DEMAND_H_
#define DAR_CORE_DEMAND_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/fluid.h"
#include "core/topology.h"

namespace dar {

// The weight of every node (indexed by NodeId) in the gravity model: Node::weight (the
// node-link file's "weight") if every endpoint has one, otherwise the node's degree (the
// number of distinct neighbours over its links in either direction; for an undirected simple
// graph, its degree).
std::vector<double> GravityWeights(const Topology& topo);

// The gravity matrix: demand(s, d) proportional to w(s) * w(d) for every ordered pair of
// distinct endpoints, w = GravityWeights(topo), scaled so that the total equals that of
// UniformDemand (N * (N - 1) units for N endpoints), so the two models load a network
// equally in total. Pairs of zero weight product are left out.
// Errors: InvalidArgument if fewer than two endpoints have a positive weight.
absl::StatusOr<std::vector<Demand>> GravityDemand(const Topology& topo);

// A demand matrix from the text of a JSON file; `name` stands for the file in errors. Node
// ids are those of the topology file (Node::name), as strings or integers. Accepted shapes:
//
//   (a) a nested object, source id -> destination id -> demand:
//         {"15": {"11": 3003.0, "12": 10}, "11": {"15": 2.5}}
//       at the top level, or as "graph": {"demands": {...}} inside a topohub node-link
//       topology file (any top-level object with "graph"."demands" is read that way; a
//       top-level object with "nodes" but no "graph"."demands" is refused);
//   (b) a list of entries: [{"src": "15", "dst": "11", "demand": 3003.0}, ...].
//
// Amounts are in demand units (see `dar-sim loads --unit-gbps`). Zero amounts are dropped.
// Errors: InvalidArgument naming the file, the line (and column for syntax errors), the JSON
// path of the offending value and the problem, e.g.
//   "m.json:3: /15/42: destination '42' is not a node of the topology"
// for text that is not JSON, a shape other than the above, an id that is not an endpoint of
// `topo`, an amount that is not a finite non-negative number, a positive demand from a node
// to itself, a pair given twice (a repeated key, or a repeated list entry), or a matrix
// without any positive demand.
absl::StatusOr<std::vector<Demand>> ParseDemandMatrix(std::string_view text,
                                                      const std::string& name,
                                                      const Topology& topo);

// As ParseDemandMatrix, from the file at `path`. Errors as there, and InvalidArgument for a
// file that cannot be read.
absl::StatusOr<std::vector<Demand>> LoadDemandMatrix(const std::string& path, const Topology& topo);

// The sum of the amounts.
double TotalDemand(const std::vector<Demand>& demands);

}  // namespace dar

#endif  // DAR_CORE_DEMAND_H_
