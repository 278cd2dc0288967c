#include "core/routing_table.h"

#include <algorithm>
#include <cassert>

namespace dar {

DestinationTable::DestinationTable(NodeId destination,
                                   const std::vector<std::vector<NextHop>>& per_node)
    : destination_(destination), num_nodes_(static_cast<int>(per_node.size())) {
  for (size_t first = 0; first < per_node.size(); first += kRowsPerBlock) {
    auto block = std::make_shared<Block>();
    const size_t last = std::min(per_node.size(), first + kRowsPerBlock);
    size_t hops = 0;
    for (size_t v = first; v < last; ++v) hops += per_node[v].size();
    block->hops.reserve(hops);
    for (size_t v = first; v < last; ++v) {
      block->hops.insert(block->hops.end(), per_node[v].begin(), per_node[v].end());
      block->offsets[v - first + 1] = static_cast<uint32_t>(block->hops.size());
    }
    blocks_.push_back(std::move(block));
  }
}

RoutingTables::RoutingTables(int num_nodes, const std::vector<NodeId>& destinations)
    : dest_index_(num_nodes, -1), destinations_(destinations), tables_(destinations.size()) {
  for (size_t i = 0; i < destinations.size(); ++i) {
    dest_index_[destinations[i]] = static_cast<int32_t>(i);
  }
}

void RoutingTables::Set(DestinationTablePtr table) {
  assert(IsDestination(table->destination()));
  tables_[dest_index_[table->destination()]] = std::move(table);
}

}  // namespace dar
