// Importer for networkx node-link JSON (the format of data/topologies/, e.g. the Internet
// Topology Zoo graphs published by topohub).
//
// Accepted shape: {"directed": bool (default false), "nodes": [{"id": string|number,
// "name": string (optional), "pos": [lon, lat] (optional), "weight": number >= 0 (optional,
// the node's size in the gravity traffic model, core/demand.h)}, ...], "edges" or "links":
// [{"source": id, "target": id, "dist": km (optional), "capacity": bps (optional)}, ...]}.
// An edge without "capacity" gets options.capacity. Other keys are ignored. Every node
// becomes a NodeKind::kSwitch (a router) whose name is its id as a string and whose label is
// its "name"; node ids follow the file's order. An undirected graph gives one duplex cable per
// edge, a directed graph one link per edge, in the file's order.
//
// Propagation delay of an edge: "dist" at 2/3 of the speed of light (200,000 km/s); without
// "dist", the great-circle distance between the endpoints' "pos"; without either,
// options.default_delay.
#ifndef DAR_CORE_TOPOLOGY_JSON_H_
#define DAR_CORE_TOPOLOGY_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

struct JsonImportOptions {
  DataRate capacity = DataRate::Gbps(10);    // of every link without a "capacity" field
  int64_t queue_bytes = 1 << 20;             // output queue of every link
  Duration default_delay = Milliseconds(1);  // for edges without "dist" or "pos"
};

// Signal speed in fibre used for "dist" and "pos": about 2/3 of c.
inline constexpr double kFibreKmPerSecond = 200000.0;

// Loads the file at `path`. Errors are InvalidArgument and name the file, the place and the
// problem: "abilene.json: edges[3]: target '42' is not a node".
absl::StatusOr<Topology> LoadNodeLinkJson(const std::string& path,
                                          const JsonImportOptions& options);

// As LoadNodeLinkJson, from the text of a file; `name` stands for the file in errors.
absl::StatusOr<Topology> ParseNodeLinkJson(std::string_view text, const std::string& name,
                                           const JsonImportOptions& options);

// Great-circle distance in km between two (longitude, latitude) points in degrees, on a
// sphere of radius 6371 km.
double GreatCircleKm(std::pair<double, double> a, std::pair<double, double> b);

}  // namespace dar

#endif  // DAR_CORE_TOPOLOGY_JSON_H_
