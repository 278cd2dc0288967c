// The checks every routing table passes before it is installed (ARCHITECTURE.md, "The core
// idea"): per destination, loop-free, no next hop over a missing or down link, no black hole,
// finite normalised weights, and a table for every destination.
#ifndef DAR_CORE_VALIDATOR_H_
#define DAR_CORE_VALIDATOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/routing_table.h"
#include "core/topology.h"

namespace dar {

// What ValidateTables found. Counts are per (node, destination) pair except `loops` (one per
// cycle found) and `missing` (one per destination).
struct ValidationReport {
  // At most this many messages are kept; the counts are complete.
  static constexpr int kMaxMessages = 10;

  int loops = 0;        // cycles in a destination's next-hop graph
  int dead_links = 0;   // next hops over a link that does not exist, is down or leaves
                        // another node
  int black_holes = 0;  // nodes that can reach the destination (or are sent traffic toward
                        // it) but have no next hop; hosts that are sent transit traffic
  int bad_weights = 0;  // a weight not finite or <= 0, or weights not summing to 1 (1e-6)
  int missing = 0;      // destinations without a table
  // The first problems, e.g. "black hole: node 'e3' has no next hop toward 'c0'".
  std::vector<std::string> messages;

  // True when no problem was found.
  bool ok() const { return loops + dead_links + black_holes + bad_weights + missing == 0; }
  // OK, or FailedPrecondition with the counts and the messages.
  absl::Status ToStatus() const;
};

// Checks `tables` against `topo` for every destination of topo.Destinations(). A node
// "can reach" a destination if a path of up links leads there without passing through a
// host. Next hops at the destination itself are ignored: traffic ends there.
ValidationReport ValidateTables(const Topology& topo, const RoutingTables& tables);

}  // namespace dar

#endif  // DAR_CORE_VALIDATOR_H_
