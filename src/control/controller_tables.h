// What the controller hands to agents: immutable snapshots of one cycle's tables, and the
// per-node RouteTable messages cut from them (full, or a delta against a snapshot the agent
// has acknowledged).
//
// Node ids: inside the controller a node is a dense NodeId of the overlay's Topology; on the
// wire it is the configured id (the one its certificate names). Overlay maps between them.
// Everything here is immutable once built and safe to share between threads.
#ifndef DAR_CONTROL_CONTROLLER_TABLES_H_
#define DAR_CONTROL_CONTROLLER_TABLES_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "control/controller_config.h"
#include "core/route_computer.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "dar/v1/agent.pb.h"

namespace dar::control {

// The configured overlay: its graph and the wire ids of its nodes.
struct Overlay {
  Topology topology;                         // node i is config.nodes[i]
  std::vector<uint32_t> wire_id;             // by NodeId
  std::vector<std::string> overlay_address;  // by NodeId
  absl::flat_hash_map<uint32_t, NodeId> by_wire;
  std::vector<bool> delay_configured;  // by LinkId: the link's delay is fixed, not measured
  std::vector<NextHop> whole_link;     // by LinkId: a row of that one link (a stub's rows)
  uint64_t stub_digest = 0;            // of the nodes with a StubUplink (StubDigest)

  // The node with wire id `id`, or kNoNode.
  NodeId Find(uint32_t id) const {
    auto it = by_wire.find(id);
    return it == by_wire.end() ? kNoNode : it->second;
  }
  // A node by name or by decimal wire id; kNoNode if neither matches.
  NodeId FindByNameOrId(const std::string& text) const;
  const std::string& name(NodeId n) const { return topology.node(n).name; }
};

std::shared_ptr<const Overlay> MakeOverlay(const ControllerConfig& config);

// One cycle's tables of every node, both classes, with the potentials they were cut from.
//
// The tables cover the topology's destinations: every node but the stubs (a host on a single
// link, with stub_hosts), which the engines leave out (core/topology.h). A stub's rows are its
// uplink, toward every destination its switch reaches; the rows toward a stub are those
// toward its switch, and at the switch the link down to it. Its potentials follow: its
// switch's plus the cost of the link between them. Row() and Potential() answer for every
// pair of nodes.
struct RouteSnapshot {
  uint64_t version = 0;
  int64_t computed_unix_ns = 0;
  std::shared_ptr<const Overlay> overlay;
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> tables;
  // By class and destination: (*potentials[cls][d])[v] = phi of v toward d, for every
  // destination d of the tables (null for a stub). A row is shared, with the previous snapshot
  // and between the classes, where its destination's table is the same (MakeRankedSnapshot):
  // a cycle that holds its tables copies nothing.
  using PotentialRow = std::shared_ptr<const std::vector<double>>;
  std::array<std::vector<PotentialRow>, kTrafficClasses> potentials;
  // By class and LinkId: what a step over the link adds to a potential; +infinity where the
  // link carries nothing (down or drained). Read on the links of stubs only.
  std::array<std::vector<double>, kTrafficClasses> hop_cost;
  // By class and node: for a switch with stubs, the destinations toward which its stubs'
  // compact tables hold a row, in ascending order (BuildRouteTable). Those rows say that the
  // switch cannot reach them. Empty for any other node, and on most switches: such a row
  // exists only where a switch is cut off from a destination (or from a stub whose own link
  // carries nothing, under a switch it does reach). Made once per snapshot, so a stub's
  // compact table costs what its rows do, not a pass over every destination. Derived from
  // potentials and hop_cost when the snapshot is made: whoever edits those after must make
  // it again.
  std::array<std::vector<std::vector<NodeId>>, kTrafficClasses> stub_rows;

  // Where v's row toward d comes from: one link (a stub's uplink, or the link from its switch
  // down to it), v's row of a destination table, or neither (no row: v == d, or v cannot
  // reach d). Two snapshots' rows are the same where their sources are: the same link, or
  // the same table (tables and their blocks of rows are shared from cycle to cycle where
  // nothing changed), which decides most of a delta without reading a row.
  struct RowSource {
    LinkId link = kNoLink;
    const DestinationTable* table = nullptr;
  };
  RowSource SourceOfRow(int cls, NodeId v, NodeId d) const;
  // The next hops at v toward d (v != d); empty where v cannot reach d.
  absl::Span<const NextHop> Row(int cls, NodeId v, NodeId d) const;
  // phi of v toward d; +infinity where v cannot reach d.
  double Potential(int cls, NodeId d, NodeId v) const;
};

// The snapshot of the route computer's newest tables (`cycle`).
// REQUIRES: the computer's topology is overlay->topology.
std::shared_ptr<const RouteSnapshot> MakeSnapshot(std::shared_ptr<const Overlay> overlay,
                                                  const RouteComputer& computer,
                                                  const RouteCycle& cycle, uint64_t version,
                                                  int64_t computed_unix_ns);

// The snapshot of tables no route computer cut (the marginal decision layer's), over the links
// `known` has up (the known state, drained links down), with each
// node's potential toward a destination its rank in that destination's next-hop graph: the
// most hops any of its paths takes, 0 at the destination, +infinity without next hops. Every
// next hop is then strictly downhill, as agents require. A destination table that
// `previous` (if given, of the same overlay) has too — the same object, for the same class —
// keeps its potentials from there: a cycle that holds its tables ranks nothing. REQUIRES: the
// tables are loop-free and of overlay->topology.
std::shared_ptr<const RouteSnapshot> MakeRankedSnapshot(
    std::shared_ptr<const Overlay> overlay, const Topology& known,
    const std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses>& tables,
    uint64_t version, int64_t computed_unix_ns, const RouteSnapshot* previous = nullptr);

// The rows of `node` in `snapshot`: every (destination, class) it has next hops for, the node
// itself excluded. With a `base` of the same overlay, a delta: rows whose next hops or weights
// differ from `base` (with this snapshot's potentials), and the keys of rows `base` had and
// `snapshot` has not. A row whose potentials alone moved is not resent: its old potentials
// still show it downhill, and noise moves every potential every cycle. Without a base (or
// with one of another overlay), a full table.
//
// `compact` (for an agent that offers Capabilities.compact_tables; `base` must then have been
// cut compact too): a stub's uplink is its default route and its rows are the exceptions, and
// a row toward a stub is left out where it is the row toward the stub's switch (RouteTable
// says how the agent fills them in). A row that comes to be left out is in `removed`. At
// k=16 this cuts a host's full table from 2,686 rows to none.
//
// Returns whether `out` tells the agent anything: false for a delta that changes no row and
// not the default route.
bool BuildRouteTable(const RouteSnapshot& snapshot, NodeId node, const RouteSnapshot* base,
                     v1::RouteTable& out, bool compact = false);

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_TABLES_H_
