// What an agent's forwarder forwards with: this node's rows of the route tables, per traffic
// class and destination, as weighted next hops over its own links. Built by the agent's table
// store from the controller's RouteTable (after validation) or from the static fallback
// (hop-count shortest paths of the configured topology); read by the data plane on every
// packet. Immutable once built; the data plane swaps whole tables atomically.
#ifndef DAR_AGENT_AGENT_TABLES_H_
#define DAR_AGENT_AGENT_TABLES_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar::agent {

inline constexpr int kTrafficClasses = 2;  // 0 latency, 1 bulk (as on the wire)

struct AgentTables {
  uint64_t version = 0;    // the controller's table version; 0 for the static table
  bool is_static = false;  // the locally computed fallback
  // rows[cls][dest]: next hops (this node's out-links in the agent's Topology, weights summing
  // to 1) toward node `dest` (a NodeId of that Topology); empty = no route.
  std::array<std::vector<std::vector<NextHop>>, kTrafficClasses> rows;

  absl::Span<const NextHop> Lookup(int cls, NodeId dest) const {
    const auto& r = rows[static_cast<size_t>(cls)];
    if (dest < 0 || static_cast<size_t>(dest) >= r.size()) return {};
    return absl::Span<const NextHop>(r[static_cast<size_t>(dest)]);
  }
};

}  // namespace dar::agent

#endif  // DAR_AGENT_AGENT_TABLES_H_
