// Routing tables: for every node and destination, the weighted next hops toward it.
//
// Tables are stored per destination (a DestinationTable holds every node's next hops toward one
// destination), because that is the unit in which they are computed, validated and — in the
// DAR engine — recomputed incrementally. Destination tables are immutable once built and
// shared between versions of a RoutingTables, so a new version that changes one destination
// copies nothing else.
//
// Destinations are route targets (Topology::RouteTarget): a single-homed host is reached
// through its switch, so a fat-tree needs a table per edge switch, not per host. Such a host
// (a stub, Topology::StubUplink) has no rows either: it sends everything on its only link.
#ifndef DAR_CORE_ROUTING_TABLE_H_
#define DAR_CORE_ROUTING_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "core/topology.h"

namespace dar {

struct NextHop {
  LinkId link = kNoLink;  // the outgoing link to take
  double weight = 0;      // share of traffic; the weights at one (node, destination) sum to 1
};

// Next hops of every node toward one destination. Immutable once built.
class DestinationTable {
 public:
  // Builds from per-node lists. REQUIRES: per_node.size() == number of nodes.
  explicit DestinationTable(NodeId destination, const std::vector<std::vector<NextHop>>& per_node);
  // Builds from flat arrays: node v's next hops are hops[offsets[v] .. offsets[v+1]).
  // REQUIRES: offsets has one entry per node plus one, non-decreasing, ending at hops.size().
  DestinationTable(NodeId destination, std::vector<uint32_t> offsets, std::vector<NextHop> hops)
      : destination_(destination), offsets_(std::move(offsets)), hops_(std::move(hops)) {}

  NodeId destination() const { return destination_; }
  int num_nodes() const { return static_cast<int>(offsets_.size()) - 1; }
  size_t num_hops() const { return hops_.size(); }
  absl::Span<const NextHop> At(NodeId node) const {
    return absl::Span<const NextHop>(hops_.data() + offsets_[node],
                                     offsets_[node + 1] - offsets_[node]);
  }

 private:
  NodeId destination_;
  std::vector<uint32_t> offsets_;  // num_nodes + 1
  std::vector<NextHop> hops_;
};

using DestinationTablePtr = std::shared_ptr<const DestinationTable>;

// A versioned set of destination tables covering Topology::Destinations().
// Thread-compatible: const methods may be called concurrently.
class RoutingTables {
 public:
  RoutingTables() = default;
  RoutingTables(int num_nodes, const std::vector<NodeId>& destinations);

  // Installs (or replaces) the table of table->destination().
  // REQUIRES: that node is one of the destinations given at construction.
  void Set(DestinationTablePtr table);

  int num_nodes() const { return static_cast<int>(dest_index_.size()); }
  const std::vector<NodeId>& destinations() const { return destinations_; }
  bool IsDestination(NodeId d) const { return d >= 0 && d < num_nodes() && dest_index_[d] >= 0; }
  // The table toward `d`, or null if none has been set. REQUIRES: IsDestination(d).
  const DestinationTable* Table(NodeId d) const { return tables_[dest_index_[d]].get(); }
  DestinationTablePtr SharedTable(NodeId d) const { return tables_[dest_index_[d]]; }

  // Next hops at `node` toward route target `d`; empty if none.
  absl::Span<const NextHop> Lookup(NodeId node, NodeId d) const {
    const DestinationTable* t = Table(d);
    return t == nullptr ? absl::Span<const NextHop>() : t->At(node);
  }

  // Versions only grow; a forwarder never installs an older one.
  uint64_t version() const { return version_; }
  void set_version(uint64_t v) { version_ = v; }

 private:
  std::vector<int32_t> dest_index_;  // node -> index into destinations_, or -1
  std::vector<NodeId> destinations_;
  std::vector<DestinationTablePtr> tables_;
  uint64_t version_ = 0;
};

}  // namespace dar

#endif  // DAR_CORE_ROUTING_TABLE_H_
