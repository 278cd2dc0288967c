#include "core/fluid.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dar {
namespace {

// Orders the nodes that traffic toward `dest` reaches from `sources` so that every node comes
// before its next hops; fails on a loop, a black hole, a bad link or transit through a host.
absl::StatusOr<std::vector<NodeId>> ForwardingOrder(const Topology& topo,
                                                    const DestinationTable& table, NodeId dest,
                                                    const std::vector<NodeId>& sources) {
  enum : uint8_t { kWhite, kGrey, kBlack };
  const auto toward = [&] { return absl::StrCat(" toward '", topo.node(dest).name, "'"); };
  std::vector<uint8_t> color(topo.num_nodes(), kWhite);
  std::vector<NodeId> post_order;
  std::vector<std::pair<NodeId, size_t>> stack;  // node, index of its next hop to visit
  for (NodeId source : sources) {
    if (color[source] != kWhite) continue;
    color[source] = kGrey;
    stack.push_back({source, 0});
    while (!stack.empty()) {
      const auto [v, i] = stack.back();
      const absl::Span<const NextHop> hops = v == dest ? absl::Span<const NextHop>() : table.At(v);
      if (v != dest && hops.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "traffic reaches node '", topo.node(v).name, "' with no next hop", toward()));
      }
      if (i == hops.size()) {
        color[v] = kBlack;
        post_order.push_back(v);
        stack.pop_back();
        continue;
      }
      ++stack.back().second;
      const LinkId l = hops[i].link;
      if (l < 0 || l >= topo.num_links() || topo.link(l).src != v || !topo.link(l).up) {
        return absl::FailedPreconditionError(absl::StrCat(
            "node '", topo.node(v).name, "' forwards over a bad or down link ", l, toward()));
      }
      const NodeId u = topo.link(l).dst;
      if (u != dest && topo.node(u).kind == NodeKind::kHost) {
        return absl::FailedPreconditionError(
            absl::StrCat("traffic would pass through host '", topo.node(u).name, "'", toward()));
      }
      if (color[u] == kGrey) {
        return absl::FailedPreconditionError(
            absl::StrCat("forwarding loop through '", topo.node(u).name, "'", toward()));
      }
      if (color[u] == kWhite) {
        color[u] = kGrey;
        stack.push_back({u, 0});
      }
    }
  }
  std::reverse(post_order.begin(), post_order.end());
  return post_order;
}

// The table traffic toward `dest` follows; InvalidArgument if `tables` has none for `topo`.
absl::StatusOr<const DestinationTable*> TableToward(const Topology& topo,
                                                    const RoutingTables& tables, NodeId dest) {
  const DestinationTable* table = nullptr;
  if (tables.num_nodes() == topo.num_nodes() && tables.IsDestination(dest)) {
    table = tables.Table(dest);
  }
  if (table == nullptr || table->num_nodes() != topo.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no routing table toward '", topo.node(dest).name, "'"));
  }
  return table;
}

// How demand `d` (src != dst) crosses the host links at its ends: traffic enters the table
// toward `target` (the route target of d.dst) at `from`.
struct HostEdges {
  NodeId target = kNoNode;
  LinkId last = kNoLink;  // target -> d.dst when d.dst hangs off a switch; else kNoLink
  LinkId up = kNoLink;    // d.src's only link when d.src is a stub host; else kNoLink
  NodeId from = kNoNode;  // d.src, or the far end of `up`
};

// FailedPrecondition if a host end of `d` has its link down (or, for d.dst, missing).
absl::StatusOr<HostEdges> FindHostEdges(const Topology& topo, const Demand& d) {
  HostEdges e;
  e.target = topo.RouteTarget(d.dst);
  if (e.target != d.dst) {
    e.last = topo.FindLink(e.target, d.dst);
    if (e.last == kNoLink || !topo.link(e.last).up) {
      return absl::FailedPreconditionError(
          absl::StrCat("host '", topo.node(d.dst).name, "' has no up link from its switch"));
    }
  }
  e.from = d.src;
  e.up = topo.StubUplink(d.src);
  if (e.up != kNoLink) {
    if (!topo.link(e.up).up) {
      return absl::FailedPreconditionError(
          absl::StrCat("host '", topo.node(d.src).name, "' has its only link down"));
    }
    e.from = topo.link(e.up).dst;
  }
  return e;
}

}  // namespace

absl::Status CheckDemand(const Topology& topo, size_t i, const Demand& d) {
  const int n = topo.num_nodes();
  if (d.src < 0 || d.src >= n || d.dst < 0 || d.dst >= n || !std::isfinite(d.amount) ||
      d.amount < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("demand ", i, " (", d.src, " -> ", d.dst, ", ", d.amount, ") is invalid"));
  }
  return absl::OkStatus();
}

std::vector<Demand> UniformDemand(const Topology& topo) {
  const std::vector<NodeId> endpoints = topo.Endpoints();
  std::vector<Demand> out;
  for (NodeId src : endpoints) {
    for (NodeId dst : endpoints) {
      if (src != dst) out.push_back({src, dst, 1.0});
    }
  }
  return out;
}

absl::StatusOr<TargetDemand> SplitDemand(const Topology& topo, const std::vector<Demand>& demands) {
  TargetDemand out;
  out.host_loads.assign(topo.num_links(), 0.0);
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    RETURN_IF_ERROR(CheckDemand(topo, i, d));
    if (d.src == d.dst) continue;
    ASSIGN_OR_RETURN(const HostEdges e, FindHostEdges(topo, d));
    if (e.last != kNoLink) out.host_loads[e.last] += d.amount;
    if (e.up != kNoLink) out.host_loads[e.up] += d.amount;
    if (e.from == d.dst) continue;
    out.injected[e.target].push_back({e.from, d.amount});
  }
  // One entry a node, in NodeId order, each node's amounts summed in the demands' order.
  for (auto& [target, entries] : out.injected) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t kept = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (kept > 0 && entries[kept - 1].first == entries[i].first) {
        entries[kept - 1].second += entries[i].second;
      } else {
        entries[kept++] = entries[i];
      }
    }
    entries.resize(kept);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ComputeLinkLoads(const Topology& topo,
                                                     const RoutingTables& tables,
                                                     const std::vector<Demand>& demands) {
  ASSIGN_OR_RETURN(TargetDemand split, SplitDemand(topo, demands));
  std::vector<double>& loads = split.host_loads;
  std::vector<double> inflow(topo.num_nodes(), 0.0);  // toward one target; zero between
  std::vector<NodeId> sources;
  for (const auto& [dest, entries] : split.injected) {
    ASSIGN_OR_RETURN(const DestinationTable* const table, TableToward(topo, tables, dest));
    sources.clear();
    for (const auto& [v, amount] : entries) {
      inflow[v] = amount;
      if (amount > 0) sources.push_back(v);
    }
    ASSIGN_OR_RETURN(const std::vector<NodeId> order, ForwardingOrder(topo, *table, dest, sources));
    for (NodeId v : order) {
      if (v == dest || inflow[v] == 0) continue;
      for (const NextHop& hop : table->At(v)) {
        const double share = inflow[v] * hop.weight;
        loads[hop.link] += share;
        inflow[topo.link(hop.link).dst] += share;
      }
    }
    for (NodeId v : order) inflow[v] = 0;
    for (const auto& [v, amount] : entries) inflow[v] = 0;
  }
  return std::move(loads);
}

absl::StatusOr<std::vector<PairRoute>> ComputePairRoutes(const Topology& topo,
                                                         const RoutingTables& tables,
                                                         const std::vector<Demand>& demands) {
  const int n = topo.num_nodes();
  std::vector<PairRoute> routes;
  // Per route target, the routes still to follow through its table and where each enters.
  std::map<NodeId, std::vector<std::pair<size_t, NodeId>>> pending;
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    RETURN_IF_ERROR(CheckDemand(topo, i, d));
    if (d.src == d.dst) continue;
    ASSIGN_OR_RETURN(const HostEdges e, FindHostEdges(topo, d));
    PairRoute route{.src = d.src, .dst = d.dst, .demand = d.amount, .links = {}};
    if (e.last != kNoLink) route.links.push_back({e.last, 1.0});
    if (e.up != kNoLink) route.links.push_back({e.up, 1.0});
    routes.push_back(std::move(route));
    if (e.from != d.dst) pending[e.target].push_back({routes.size() - 1, e.from});
  }

  std::vector<double> node_share(n, 0.0), link_share(topo.num_links(), 0.0);
  std::vector<LinkId> touched;
  for (const auto& [dest, entries] : pending) {
    ASSIGN_OR_RETURN(const DestinationTable* const table, TableToward(topo, tables, dest));
    std::vector<NodeId> sources;
    for (const auto& [route, from] : entries) sources.push_back(from);
    std::sort(sources.begin(), sources.end());
    sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
    ASSIGN_OR_RETURN(const std::vector<NodeId> order, ForwardingOrder(topo, *table, dest, sources));
    for (const auto& [index, from] : entries) {
      node_share[from] = 1.0;
      for (NodeId v : order) {
        if (v == dest || node_share[v] == 0) continue;
        for (const NextHop& hop : table->At(v)) {
          const double share = node_share[v] * hop.weight;
          if (link_share[hop.link] == 0) touched.push_back(hop.link);
          link_share[hop.link] += share;
          node_share[topo.link(hop.link).dst] += share;
        }
        node_share[v] = 0;
      }
      node_share[dest] = 0;
      PairRoute& route = routes[index];
      for (LinkId l : touched) {
        if (link_share[l] > 0) route.links.push_back({l, link_share[l]});
        link_share[l] = 0;
      }
      touched.clear();
      std::sort(route.links.begin(), route.links.end());
    }
  }
  return routes;
}

double MaxUtilization(const Topology& topo, const std::vector<double>& loads) {
  double max = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    if (loads[l] <= 0) continue;
    const double capacity = static_cast<double>(topo.link(l).params.capacity.bps());
    max =
        std::max(max, capacity > 0 ? loads[l] / capacity : std::numeric_limits<double>::infinity());
  }
  return max;
}

}  // namespace dar
