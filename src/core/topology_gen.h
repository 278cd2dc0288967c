// Generators of data-centre topologies, and link overrides that make any topology asymmetric.
//
// Every generator adds nodes in a fixed order (documented per function) and cables with
// Topology::AddDuplexLink, so ids are deterministic: the same parameters give the same ids.
#ifndef DAR_CORE_TOPOLOGY_GEN_H_
#define DAR_CORE_TOPOLOGY_GEN_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/topology.h"

namespace dar {

// The largest topology a generator builds: 2^17 nodes (a k=64 fat-tree has 70,656), 2^21
// directed links. Bigger ones are refused by name rather than left to run out of memory.
inline constexpr int64_t kMaxGeneratedNodes = int64_t{1} << 17;
inline constexpr int64_t kMaxGeneratedLinks = int64_t{1} << 21;

struct FatTreeParams {
  int k = 4;                    // switch radix; REQUIRES: even, >= 2
  LinkParams host_link = {};    // host <-> edge switch
  LinkParams fabric_link = {};  // edge <-> aggregation and aggregation <-> core
};

// A k-ary fat-tree: k pods of k/2 edge ("e0"..) and k/2 aggregation ("a0"..) switches,
// (k/2)^2 core switches ("c0"..) and k^3/4 hosts ("h0"..).
// Node ids: hosts first, then edge, aggregation and core switches, each by index (h0, h1, ..).
// Host i hangs off edge i/(k/2); edge and aggregation switches of a pod form a complete
// bipartite graph; aggregation switch j of a pod (0 <= j < k/2) connects to cores
// j*(k/2) .. j*(k/2)+k/2-1. Cables are added host links first, then edge-aggregation (pod by
// pod), then aggregation-core.
// REQUIRES: params.k is even and >= 2.
Topology FatTree(const FatTreeParams& params);

struct LeafSpineParams {
  int leaves = 4;               // REQUIRES: >= 1
  int spines = 2;               // REQUIRES: >= 1
  int hosts_per_leaf = 4;       // REQUIRES: >= 0
  LinkParams host_link = {};    // host <-> leaf
  LinkParams fabric_link = {};  // leaf <-> spine, every leaf to every spine
};

// A two-tier leaf-spine fabric: hosts "h0".., leaves "leaf0".., spines "spine0"..
// Node ids: hosts, then leaves, then spines. Host i hangs off leaf i / hosts_per_leaf.
// Cables: host links first, then leaf-spine, leaf by leaf.
// REQUIRES: the counts in `params` are in range.
Topology LeafSpine(const LeafSpineParams& params);

// Host capacity over fabric capacity at a leaf: hosts_per_leaf * host rate /
// (spines * fabric rate). 1 means non-blocking.
double Oversubscription(const LeafSpineParams& params);

// Attaches `hosts_per_node` hosts "<node name>-h<i>" to every switch of `topo` (a WAN of
// routers), each by one cable with `host_link`. Hosts are added after all existing nodes,
// switch by switch in id order. Does nothing when hosts_per_node is 0.
void AttachHosts(Topology& topo, int hosts_per_node, const LinkParams& host_link);

// A change to one cable, named by its two end nodes. It applies to every link between the two
// nodes, in both directions (so to both halves of a duplex cable).
struct LinkOverride {
  std::string a = "";  // node name
  std::string b = "";  // node name
  // Scales the capacity of the links. REQUIRES: finite, > 0.
  std::optional<double> capacity_fraction = std::nullopt;
  // Marks the links down.
  bool down = false;
  // Replaces the routing metric of the links. REQUIRES: finite, > 0.
  std::optional<double> metric = std::nullopt;
};

// Applies `overrides` in order. Returns InvalidArgument naming the unknown node, the missing
// link or the bad value; on error `topo` may be partly modified.
absl::Status ApplyLinkOverrides(Topology& topo, const std::vector<LinkOverride>& overrides);

}  // namespace dar

#endif  // DAR_CORE_TOPOLOGY_GEN_H_
