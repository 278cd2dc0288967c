#include "core/topology.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "base/fnv.h"
#include "fmt/format.h"

namespace dar {

NodeId Topology::AddNode(std::string name, NodeKind kind) {
  Node n;
  n.name = std::move(name);
  n.kind = kind;
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

LinkId Topology::AddLink(NodeId src, NodeId dst, const LinkParams& params) {
  assert(src >= 0 && src < num_nodes() && dst >= 0 && dst < num_nodes() && src != dst);
  Link l;
  l.src = src;
  l.dst = dst;
  l.params = params;
  links_.push_back(l);
  const LinkId id = static_cast<LinkId>(links_.size() - 1);
  nodes_[src].out_links.push_back(id);
  nodes_[dst].in_links.push_back(id);
  return id;
}

std::pair<LinkId, LinkId> Topology::AddDuplexLink(NodeId a, NodeId b, const LinkParams& params) {
  const LinkId ab = AddLink(a, b, params);
  const LinkId ba = AddLink(b, a, params);
  links_[ab].reverse = ba;
  links_[ba].reverse = ab;
  return {ab, ba};
}

absl::StatusOr<NodeId> Topology::FindNode(std::string_view name) const {
  for (NodeId i = 0; i < num_nodes(); ++i) {
    if (nodes_[i].name == name) return i;
  }
  return absl::NotFoundError(fmt::format("no node named '{}'", name));
}

LinkId Topology::FindLink(NodeId src, NodeId dst) const {
  for (LinkId l : nodes_[src].out_links) {
    if (links_[l].dst == dst) return l;
  }
  return kNoLink;
}

std::vector<NodeId> Topology::Hosts() const {
  std::vector<NodeId> out;
  for (NodeId i = 0; i < num_nodes(); ++i) {
    if (nodes_[i].kind == NodeKind::kHost) out.push_back(i);
  }
  return out;
}

std::vector<NodeId> Topology::Endpoints() const {
  if (!every_node_an_endpoint_) {
    std::vector<NodeId> hosts = Hosts();
    if (!hosts.empty()) return hosts;
  }
  std::vector<NodeId> all(num_nodes());
  for (NodeId i = 0; i < num_nodes(); ++i) all[i] = i;
  return all;
}

LinkId Topology::StubUplink(NodeId n) const {
  const Node& node = nodes_[n];
  return node.kind == NodeKind::kHost && node.out_links.size() == 1 ? node.out_links[0] : kNoLink;
}

NodeId Topology::RouteTarget(NodeId n) const {
  const LinkId up = StubUplink(n);
  return up == kNoLink ? n : links_[up].dst;
}

std::vector<NodeId> Topology::Destinations() const {
  std::vector<NodeId> out;
  for (NodeId e : Endpoints()) out.push_back(RouteTarget(e));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<NodeId> StubSwitches(const Topology& topo) {
  std::vector<NodeId> out(static_cast<size_t>(topo.num_nodes()), kNoNode);
  for (NodeId v = 0; v < topo.num_nodes(); ++v) {
    const std::vector<LinkId>& links = topo.node(v).out_links;
    if (links.size() != 1) continue;
    const NodeId t = topo.link(links[0]).dst;
    if (topo.node(t).out_links.size() > 1) out[v] = t;
  }
  return out;
}

uint64_t StubDigest(const std::vector<NodeId>& stub_switch, absl::Span<const uint32_t> ids) {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (size_t v = 0; v < stub_switch.size(); ++v) {
    if (stub_switch[v] != kNoNode) pairs.emplace_back(ids[v], ids[stub_switch[v]]);
  }
  if (pairs.empty()) return 0;
  std::sort(pairs.begin(), pairs.end());
  Fnv1a64 h;
  for (const auto& [stub, sw] : pairs) {
    h.Int(stub);
    h.Int(sw);
  }
  return h.value() == 0 ? 1 : h.value();
}

std::string Topology::Summary() const {
  return fmt::format("{} nodes ({} hosts), {} links", num_nodes(), Hosts().size(), num_links());
}

}  // namespace dar
