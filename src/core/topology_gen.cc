#include "core/topology_gen.h"

#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "core/registry.h"
#include "core/topology_config.h"
#include "fmt/format.h"

namespace dar {

Topology FatTree(const FatTreeParams& params) {
  const int k = params.k;
  assert(k >= 2 && k % 2 == 0);
  const int half = k / 2;
  const int num_hosts = k * k * k / 4;
  const int num_edge = k * half;  // also the number of aggregation switches
  const int num_core = half * half;

  Topology topo;
  for (int i = 0; i < num_hosts; ++i) topo.AddNode(absl::StrCat("h", i), NodeKind::kHost);
  const NodeId first_edge = topo.num_nodes();
  for (int i = 0; i < num_edge; ++i) topo.AddNode(absl::StrCat("e", i), NodeKind::kSwitch);
  const NodeId first_agg = topo.num_nodes();
  for (int i = 0; i < num_edge; ++i) topo.AddNode(absl::StrCat("a", i), NodeKind::kSwitch);
  const NodeId first_core = topo.num_nodes();
  for (int i = 0; i < num_core; ++i) topo.AddNode(absl::StrCat("c", i), NodeKind::kSwitch);

  for (int h = 0; h < num_hosts; ++h) {
    topo.AddDuplexLink(h, first_edge + h / half, params.host_link);
  }
  for (int pod = 0; pod < k; ++pod) {
    for (int e = 0; e < half; ++e) {
      for (int a = 0; a < half; ++a) {
        topo.AddDuplexLink(first_edge + pod * half + e, first_agg + pod * half + a,
                           params.fabric_link);
      }
    }
  }
  for (int pod = 0; pod < k; ++pod) {
    for (int a = 0; a < half; ++a) {
      for (int c = 0; c < half; ++c) {
        topo.AddDuplexLink(first_agg + pod * half + a, first_core + a * half + c,
                           params.fabric_link);
      }
    }
  }
  return topo;
}

Topology LeafSpine(const LeafSpineParams& params) {
  assert(params.leaves >= 1 && params.spines >= 1 && params.hosts_per_leaf >= 0);
  const int num_hosts = params.leaves * params.hosts_per_leaf;
  Topology topo;
  for (int i = 0; i < num_hosts; ++i) topo.AddNode(absl::StrCat("h", i), NodeKind::kHost);
  const NodeId first_leaf = topo.num_nodes();
  for (int i = 0; i < params.leaves; ++i) {
    topo.AddNode(absl::StrCat("leaf", i), NodeKind::kSwitch);
  }
  const NodeId first_spine = topo.num_nodes();
  for (int i = 0; i < params.spines; ++i) {
    topo.AddNode(absl::StrCat("spine", i), NodeKind::kSwitch);
  }
  for (int h = 0; h < num_hosts; ++h) {
    topo.AddDuplexLink(h, first_leaf + h / params.hosts_per_leaf, params.host_link);
  }
  for (int l = 0; l < params.leaves; ++l) {
    for (int s = 0; s < params.spines; ++s) {
      topo.AddDuplexLink(first_leaf + l, first_spine + s, params.fabric_link);
    }
  }
  return topo;
}

double Oversubscription(const LeafSpineParams& params) {
  return static_cast<double>(params.hosts_per_leaf) *
         static_cast<double>(params.host_link.capacity.bps()) /
         (static_cast<double>(params.spines) *
          static_cast<double>(params.fabric_link.capacity.bps()));
}

void AttachHosts(Topology& topo, int hosts_per_node, const LinkParams& host_link) {
  const int num_nodes = topo.num_nodes();
  for (NodeId n = 0; n < num_nodes; ++n) {
    if (topo.node(n).kind != NodeKind::kSwitch) continue;
    for (int i = 0; i < hosts_per_node; ++i) {
      const NodeId h = topo.AddNode(absl::StrCat(topo.node(n).name, "-h", i), NodeKind::kHost);
      topo.AddDuplexLink(h, n, host_link);
    }
  }
}

absl::Status ApplyLinkOverrides(Topology& topo, const std::vector<LinkOverride>& overrides) {
  for (const LinkOverride& o : overrides) {
    const std::string cable = absl::StrCat("link ", o.a, " - ", o.b);
    absl::StatusOr<NodeId> a = topo.FindNode(o.a);
    if (!a.ok())
      return absl::InvalidArgumentError(absl::StrCat(cable, ": unknown node '", o.a, "'"));
    absl::StatusOr<NodeId> b = topo.FindNode(o.b);
    if (!b.ok())
      return absl::InvalidArgumentError(absl::StrCat(cable, ": unknown node '", o.b, "'"));
    if (o.capacity_fraction && !(std::isfinite(*o.capacity_fraction) && *o.capacity_fraction > 0 &&
                                 *o.capacity_fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(cable, ": capacity_fraction must be in (0, 1], got ", *o.capacity_fraction));
    }
    if (o.metric && !(std::isfinite(*o.metric) && *o.metric > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(cable, ": metric must be positive, got ", *o.metric));
    }
    int matched = 0;
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      Link& link = topo.mutable_link(l);
      const bool ab = link.src == *a && link.dst == *b;
      const bool ba = link.src == *b && link.dst == *a;
      if (!ab && !ba) continue;
      ++matched;
      if (o.capacity_fraction) {
        link.params.capacity = link.params.capacity.Scaled(*o.capacity_fraction);
        if (link.params.capacity < kMinLinkCapacity) {
          return absl::InvalidArgumentError(
              absl::StrCat(cable, ": capacity_fraction ", *o.capacity_fraction,
                           " leaves the link under ", kMinLinkCapacity.bps(), " b/s"));
        }
      }
      if (o.down) link.up = false;
      if (o.metric) link.params.metric = *o.metric;
    }
    if (matched == 0) {
      return absl::InvalidArgumentError(absl::StrCat(cable, ": no link between these nodes"));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<Topology> BuildFatTree(YamlReader& config, const std::string& /*base_dir*/) {
  FatTreeParams params;
  // k = 64: 65,536 hosts and 5,120 switches, 393,216 links (within kMaxGeneratedNodes/Links).
  ASSIGN_OR_RETURN(params.k, config.Required<int>("k", Bounds::InRange(2, 64)));
  if (params.k % 2 != 0) {
    return config.Error("k", fmt::format("must be even, got {}", params.k));
  }
  ASSIGN_OR_RETURN(params.host_link, ReadLinkParams(config, "host_link", LinkParams()));
  ASSIGN_OR_RETURN(params.fabric_link, ReadLinkParams(config, "fabric_link", LinkParams()));
  return FatTree(params);
}

absl::StatusOr<Topology> BuildLeafSpine(YamlReader& config, const std::string& /*base_dir*/) {
  LeafSpineParams params;
  // Each count within the node bound first, so that the products below cannot overflow.
  const double most = static_cast<double>(kMaxGeneratedNodes);
  ASSIGN_OR_RETURN(params.leaves, config.Required<int>("leaves", Bounds::InRange(1, most)));
  ASSIGN_OR_RETURN(params.spines, config.Required<int>("spines", Bounds::InRange(1, most)));
  ASSIGN_OR_RETURN(params.hosts_per_leaf,
                   config.Required<int>("hosts_per_leaf", Bounds::InRange(0, most)));
  const int64_t leaves = params.leaves;
  const int64_t hosts = leaves * params.hosts_per_leaf;
  const int64_t links = 2 * (hosts + leaves * params.spines);
  if (hosts + leaves + params.spines > kMaxGeneratedNodes || links > kMaxGeneratedLinks) {
    return config.Error("leaves", fmt::format("{} leaves, {} spines and {} hosts a leaf are too "
                                              "many: at most {} nodes and {} links",
                                              params.leaves, params.spines, params.hosts_per_leaf,
                                              kMaxGeneratedNodes, kMaxGeneratedLinks));
  }
  ASSIGN_OR_RETURN(params.host_link, ReadLinkParams(config, "host_link", LinkParams()));
  ASSIGN_OR_RETURN(params.fabric_link, ReadLinkParams(config, "fabric_link", LinkParams()));
  return LeafSpine(params);
}

const Registration<TopologyFactory> kFatTree("fat_tree", &BuildFatTree);
const Registration<TopologyFactory> kLeafSpine("leaf_spine", &BuildLeafSpine);

}  // namespace
}  // namespace dar
