// The network graph: nodes (hosts and switches/routers) joined by directed links.
//
// A physical cable is two directed links, one per direction, each with its own queue; they
// know each other through `reverse`. Node and link ids are dense indices, stable for the life
// of a Topology. A Topology is a plain value: copy it to change it without disturbing others.
// Not thread-safe for writing.
#ifndef DAR_CORE_TOPOLOGY_H_
#define DAR_CORE_TOPOLOGY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/units.h"

namespace dar {

using NodeId = int32_t;
using LinkId = int32_t;
inline constexpr NodeId kNoNode = -1;
inline constexpr LinkId kNoLink = -1;

enum class NodeKind : uint8_t {
  kHost,    // sends and receives traffic; forwards nothing
  kSwitch,  // forwards traffic; a router in a WAN. May also be an endpoint (see Endpoints()).
};

struct Node {
  std::string name;   // unique; the id used in files and on the command line
  std::string label;  // human-readable name, may be empty
  NodeKind kind = NodeKind::kSwitch;
  std::optional<std::pair<double, double>> position;  // (longitude, latitude), degrees
  std::optional<double> weight;  // relative size for the gravity traffic model, if known
  std::vector<LinkId> out_links;
  std::vector<LinkId> in_links;
};

// The slowest and fastest link anything builds (1 kb/s, 1 Pb/s): a rate of zero would divide by
// zero when a packet's transmit time is taken, a larger one overflow.
inline constexpr DataRate kMinLinkCapacity = DataRate::BitsPerSecond(1000);
inline constexpr DataRate kMaxLinkCapacity = DataRate::BitsPerSecond(1000000000000000);
// The same in Gb/s, as configuration files give a link's capacity.
inline constexpr double kMinLinkGbps = 1e-6;
inline constexpr double kMaxLinkGbps = 1e6;
// A link's output queue: at most 1 GiB (a packet's transmit time at 1 kb/s stays within a
// Duration).
inline constexpr int64_t kMaxQueueBytes = int64_t{1} << 30;

// Parameters of one direction of a link.
struct LinkParams {
  DataRate capacity = DataRate::Gbps(10);
  Duration delay = Microseconds(1);  // propagation delay
  int64_t queue_bytes = 1 << 20;     // output-queue capacity (drop-tail)
  double metric = 1.0;               // routing cost for static/ECMP shortest paths
};

struct Link {
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  LinkParams params;
  bool up = true;
  LinkId reverse = kNoLink;  // the opposite direction of the same cable, if any
};

class Topology {
 public:
  Topology() = default;

  // Adds a node. REQUIRES: `name` is not used yet.
  NodeId AddNode(std::string name, NodeKind kind);
  // Adds a directed link src -> dst. REQUIRES: both nodes exist, src != dst.
  LinkId AddLink(NodeId src, NodeId dst, const LinkParams& params);
  // Adds both directions with the same parameters; returns (src->dst, dst->src).
  std::pair<LinkId, LinkId> AddDuplexLink(NodeId a, NodeId b, const LinkParams& params);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_links() const { return static_cast<int>(links_.size()); }
  const Node& node(NodeId id) const { return nodes_[id]; }
  Node& mutable_node(NodeId id) { return nodes_[id]; }
  const Link& link(LinkId id) const { return links_[id]; }
  Link& mutable_link(LinkId id) { return links_[id]; }
  absl::Span<const Link> links() const { return links_; }

  // The node with this name, or an error that names it.
  absl::StatusOr<NodeId> FindNode(std::string_view name) const;
  // The link src -> dst, or kNoLink. With parallel links, the first one added.
  LinkId FindLink(NodeId src, NodeId dst) const;

  // Hosts, in id order.
  std::vector<NodeId> Hosts() const;
  // Nodes that send and receive traffic: the hosts, or every node if there are none (a WAN
  // file of routers) or if every node is one (set_every_node_an_endpoint).
  std::vector<NodeId> Endpoints() const;
  // Every node sends and receives, switches too: the controller's overlay, where every node
  // runs an agent with an overlay address. Destinations() is then every node but the stubs,
  // which are reached through their switch.
  void set_every_node_an_endpoint(bool on) { every_node_an_endpoint_ = on; }

  // A stub is a host with exactly one link: it sends everything on that link (its default
  // route), so routing tables hold no rows for it. Returns that link, or kNoLink for any
  // other node.
  LinkId StubUplink(NodeId n) const;

  // The node whose routing table entries lead to `n`. A host with a single link is reached
  // through the switch it hangs off, so tables only need a row per switch; any other node is
  // its own target.
  NodeId RouteTarget(NodeId n) const;
  // The distinct route targets of Endpoints(), ascending: the destinations tables cover.
  std::vector<NodeId> Destinations() const;

  // A short description for logs: "208 nodes (128 hosts), 768 links".
  std::string Summary() const;

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  bool every_node_an_endpoint_ = false;
};

// By NodeId: for a node on exactly one link whose neighbour has more (a host under its
// switch), that neighbour; kNoNode for any other node. The controller's stub_hosts marks hosts
// by this rule, and an agent fills in a compact route table's rows by it.
std::vector<NodeId> StubSwitches(const Topology& topo);

// What a compact route table names its stubs by (RouteTable.stub_digest): FNV-1a 64 over each
// stub's id and its switch's id (`ids` by NodeId), in ascending order of the stub's id; 0 if
// there is no stub (and never 0 otherwise).
uint64_t StubDigest(const std::vector<NodeId>& stub_switch, absl::Span<const uint32_t> ids);

}  // namespace dar

#endif  // DAR_CORE_TOPOLOGY_H_
