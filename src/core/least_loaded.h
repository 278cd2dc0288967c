// Least-loaded routing tables: the "reactive adaptive" baseline (ARCHITECTURE.md, "Baselines").
// Traffic takes the path that is least loaded by the latest measurement; no forecast, no
// potentials.
//
// Paths. For destination d, a base cost per link (propagation delay, hop count...) gives every
// node its cheapest-path distance dist(v) to d. A node's candidate next hops are its usable
// links to a neighbour u that is strictly closer to d (dist(u) < dist(v)) and that may carry
// traffic on (a switch, or d itself: hosts never transit). Distances strictly decrease along
// every candidate, so any choice among candidates is loop-free, and the candidates include
// longer-than-shortest paths: on a WAN there is path diversity to adapt with.
//
// Load. A path's load is its bottleneck utilisation. Nodes are settled in increasing dist;
// load(d) = 0 and, for a candidate link l = v->u, score(l) = max(utilisation(l), load(u)).
// The next hops of v are the candidates whose score is within `tolerance` of the best one
// (so near-equal paths share and new flowlets do not all herd onto one path), narrowed to
// those whose cost to go (base_cost(l) + dist(u)) is within `cost_slack` of the cheapest among
// them (among equally loaded paths the shorter ones win), with equal weights. load(v) is the
// lowest score among the chosen next hops.
//
// Stub hosts (Topology::StubUplink) get no rows; they send on their only link.
// Pure computation: no clock, no randomness, no I/O. Thread-compatible.
#ifndef DAR_CORE_LEAST_LOADED_H_
#define DAR_CORE_LEAST_LOADED_H_

#include <limits>
#include <optional>

#include "absl/types/span.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

struct LeastLoadedConfig {
  // Candidates whose path load (a utilisation, 0..1) exceeds the best by at most this much
  // share the traffic. 0 keeps only the least loaded (and exact ties).
  double tolerance = 0.05;
  // If set, a candidate v->u must also satisfy base_cost(v->u) + dist(u) <= max_stretch *
  // dist(v): no detour longer than this factor of the cheapest path. REQUIRES: >= 1.
  std::optional<double> max_stretch;
  // Among the candidates within `tolerance`, those whose cost to go exceeds the cheapest of
  // them by more than this fraction are dropped, so an idle network uses its shortest paths
  // and a detour is taken only when it is less loaded. Infinity keeps every candidate within
  // `tolerance` whatever its length. REQUIRES: >= 0.
  double cost_slack = 0.1;
};

// Tables for every destination in topo.Destinations().
// `base_cost` and `utilisation` have one entry per link. A link is usable if it is up in
// `topo` and its base cost is finite; +infinity marks a link that must not carry traffic.
// Utilisations are measured loads (usually 0..1; above 1 is allowed and means overload).
// REQUIRES: base_cost.size() == utilisation.size() == topo.num_links(); every finite base
// cost > 0; every utilisation finite and >= 0; config as documented above.
// The result passes ValidateTables(topo', tables) where topo' is `topo` with the links of
// infinite base cost marked down.
RoutingTables ComputeLeastLoadedTables(const Topology& topo, absl::Span<const double> base_cost,
                                       absl::Span<const double> utilisation,
                                       const LeastLoadedConfig& config);

}  // namespace dar

#endif  // DAR_CORE_LEAST_LOADED_H_
