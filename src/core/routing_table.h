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

#include <array>
#include <cmath>
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

// How far the weights of one (node, destination) may sum from 1 in a table that is accepted.
inline constexpr double kWeightSumTolerance = 1e-6;

// The one rule for a row's weights, as the route computer's output check, the validator
// (the simulator's forwarders) and the agent's table store all apply it: every weight finite
// and positive, and the weights summing to 1 within kWeightSumTolerance. Add the row's
// weights in order, then ask. An empty row has no weights to judge (ok() is false: whether a
// row may be empty is the caller's rule).
class RowWeights {
 public:
  void Add(double weight) {
    if (first_bad_ < 0 && !(std::isfinite(weight) && weight > 0)) first_bad_ = count_;
    sum_ += weight;
    ++count_;
  }
  // The index of the first weight that is not finite or not positive; -1 if none.
  int first_bad() const { return first_bad_; }
  double sum() const { return sum_; }
  bool sums_to_one() const { return std::abs(sum_ - 1) <= kWeightSumTolerance; }
  bool ok() const { return count_ > 0 && first_bad_ < 0 && sums_to_one(); }

 private:
  double sum_ = 0;
  int count_ = 0;
  int first_bad_ = -1;
};

// The bulk traffic class (collectives, replication; the overlay's TrafficClass::kBulk).
// Class 0 is the latency class.
inline constexpr int kBulkClass = 1;

// Next hops of every node toward one destination. Immutable once built.
//
// Rows are stored in blocks of kRowsPerBlock; a block is immutable and may be shared by several
// versions of a destination's table, so a new version that changes a few rows (an incremental
// update) copies only their blocks. A row map (shared by all tables of one engine) places
// nodes in rows; without one, node v is row v.
class DestinationTable {
 public:
  static constexpr uint32_t kRowsPerBlock = 16;
  // The offsets sit in the block itself, so finding a row costs one dependent load, not two
  // (the diffusion engine reads every row of the previous table each cycle).
  struct Block {
    // Row i of the block: hops[offsets[i] .. offsets[i+1]); entries past the last row are 0.
    std::array<uint32_t, kRowsPerBlock + 1> offsets{};
    std::vector<NextHop> hops;
  };
  using BlockPtr = std::shared_ptr<const Block>;
  using RowMap = std::vector<int32_t>;  // node -> row; -1 = the node has no row

  // Builds from per-node lists. REQUIRES: per_node.size() == number of nodes.
  DestinationTable(NodeId destination, const std::vector<std::vector<NextHop>>& per_node);
  // REQUIRES: row_of_node (if set) has num_nodes entries; blocks cover every row it names,
  // all full but the last.
  DestinationTable(NodeId destination, int num_nodes, std::shared_ptr<const RowMap> row_of_node,
                   std::vector<BlockPtr> blocks)
      : destination_(destination),
        num_nodes_(num_nodes),
        row_of_node_(std::move(row_of_node)),
        blocks_(std::move(blocks)) {}

  NodeId destination() const { return destination_; }
  int num_nodes() const { return num_nodes_; }
  absl::Span<const NextHop> At(NodeId node) const {
    const int32_t row = row_of_node_ == nullptr ? node : (*row_of_node_)[node];
    return row < 0 ? absl::Span<const NextHop>() : Row(static_cast<uint32_t>(row));
  }
  // Row `row` (see the row map). REQUIRES: row < number of rows.
  absl::Span<const NextHop> Row(uint32_t row) const {
    const Block& b = *blocks_[row / kRowsPerBlock];
    const uint32_t i = row % kRowsPerBlock;
    return absl::Span<const NextHop>(b.hops.data() + b.offsets[i], b.offsets[i + 1] - b.offsets[i]);
  }
  const std::vector<BlockPtr>& blocks() const { return blocks_; }
  // The row map; null: row = node id.
  const std::shared_ptr<const RowMap>& row_map() const { return row_of_node_; }
  // Whether `other` has the same row map (the same object) and as many blocks: a node's row
  // is at the same place, in the same block, in both.
  bool SameLayoutAs(const DestinationTable& other) const {
    return row_of_node_ == other.row_of_node_ && blocks_.size() == other.blocks_.size();
  }

 private:
  NodeId destination_;
  int num_nodes_;
  std::shared_ptr<const RowMap> row_of_node_;  // null: row = node id
  std::vector<BlockPtr> blocks_;
};

using DestinationTablePtr = std::shared_ptr<const DestinationTable>;

// Whether two rows have the same next hops in the same order, whatever their weights.
inline bool SameLinks(absl::Span<const NextHop> a, absl::Span<const NextHop> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].link != b[i].link) return false;
  }
  return true;
}

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
