#include "core/routing_table.h"

#include <cassert>

namespace dar {

DestinationTable::DestinationTable(NodeId destination,
                                   const std::vector<std::vector<NextHop>>& per_node)
    : destination_(destination) {
  offsets_.reserve(per_node.size() + 1);
  offsets_.push_back(0);
  for (const auto& hops : per_node) {
    hops_.insert(hops_.end(), hops.begin(), hops.end());
    offsets_.push_back(static_cast<uint32_t>(hops_.size()));
  }
}

RoutingTables::RoutingTables(int num_nodes, const std::vector<NodeId>& destinations)
    : dest_index_(num_nodes, -1), destinations_(destinations), tables_(destinations.size()) {
  for (size_t i = 0; i < destinations.size(); ++i) dest_index_[destinations[i]] = i;
}

void RoutingTables::Set(DestinationTablePtr table) {
  assert(IsDestination(table->destination()));
  tables_[dest_index_[table->destination()]] = std::move(table);
}

}  // namespace dar
