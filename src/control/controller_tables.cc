#include "control/controller_tables.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/units.h"

namespace dar::control {
namespace {

void AddRoute(const RouteSnapshot& s, int cls, NodeId d, NodeId v, absl::Span<const NextHop> hops,
              v1::RouteTable& out) {
  const Overlay& o = *s.overlay;
  v1::Route* r = out.add_routes();
  r->set_destination_id(o.wire_id[d]);
  r->set_traffic_class(cls);
  // No next hops: v cannot reach d (every node that can has one). Said explicitly with an
  // infinite potential, so the agent — which sees only its own links and may think d
  // reachable — knows the hole is meant (a node or link further away failed).
  r->set_potential(hops.empty() ? std::numeric_limits<double>::infinity() : s.Potential(cls, d, v));
  for (const NextHop& h : hops) {
    const NodeId u = o.topology.link(h.link).dst;
    v1::NextHop* n = r->add_next_hops();
    n->set_neighbor_id(o.wire_id[u]);
    n->set_weight(h.weight);
    n->set_potential(s.Potential(cls, d, u));
  }
}

// Whether two rows read the same: the same next hops with the same weights. Potentials are
// left out: they move with every cost, and the old ones still prove the old row downhill.
bool SameRow(absl::Span<const NextHop> a, absl::Span<const NextHop> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].link != b[i].link || a[i].weight != b[i].weight) return false;
  }
  return true;
}

// Whether v's rows from sources `a` and `b` (RouteSnapshot::SourceOfRow) read the same; by
// their sources alone where it can: the same link, the same table, or the same block of rows.
bool SameRowAt(const RouteSnapshot::RowSource& a, const RouteSnapshot::RowSource& b, NodeId v) {
  if (a.link != kNoLink || b.link != kNoLink) return a.link == b.link;
  if (a.table == b.table) return true;
  const absl::Span<const NextHop> none;
  if (a.table == nullptr || b.table == nullptr) {
    return (a.table == nullptr ? none : a.table->At(v)).empty() &&
           (b.table == nullptr ? none : b.table->At(v)).empty();
  }
  if (a.table->SameLayoutAs(*b.table)) {
    const DestinationTable::RowMap* map = a.table->row_map().get();
    const int32_t row = map == nullptr ? v : (*map)[v];
    if (row < 0) return true;  // neither table has a row for v
    const auto block = static_cast<size_t>(row) / DestinationTable::kRowsPerBlock;
    if (a.table->blocks()[block] == b.table->blocks()[block]) return true;
  }
  return SameRow(a.table->At(v), b.table->At(v));
}

// What a step over each link adds to a potential, by class: `cost(cls, l)`, or +infinity where
// the link carries nothing. Only the links of stubs are read (RouteSnapshot::hop_cost).
template <typename Cost>
void SetHopCosts(const Topology& topo, RouteSnapshot& s, const Cost& cost) {
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    s.hop_cost[cls].assign(static_cast<size_t>(topo.num_links()), kInfinity);
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      const LinkId up = topo.StubUplink(v);
      if (up == kNoLink) continue;
      s.hop_cost[cls][up] = cost(cls, up);
      if (const LinkId down = topo.link(up).reverse; down != kNoLink) {
        s.hop_cost[cls][down] = cost(cls, down);
      }
    }
  }
}

// RouteSnapshot::stub_rows, from the snapshot's potentials and hop costs. A stub under switch
// w whose uplink is its default route keeps a row toward d where BuildRouteTable's rule keeps
// one (LeftOut): w cannot reach d, and d is not a stub under another switch that w cannot
// reach either (the row toward that switch says so). A stub under a switch w reaches is cut
// off from w only where the link down to it carries nothing.
void SetStubRows(const Topology& topo, RouteSnapshot& s) {
  const int n = topo.num_nodes();
  std::vector<NodeId> switches;  // those with stubs
  std::vector<bool> listed(static_cast<size_t>(n), false);
  for (NodeId v = 0; v < n; ++v) {
    const LinkId up = topo.StubUplink(v);
    if (up == kNoLink) continue;
    const NodeId w = topo.link(up).dst;
    if (!listed[w]) switches.push_back(w);
    listed[w] = true;
  }
  if (switches.empty()) return;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    std::vector<std::vector<NodeId>>& rows = s.stub_rows[cls];
    rows.assign(static_cast<size_t>(n), {});
    for (NodeId d = 0; d < n; ++d) {
      const LinkId up = topo.StubUplink(d);
      if (up == kNoLink) {
        const std::vector<double>& potential = *s.potentials[cls][d];
        for (const NodeId w : switches) {
          if (w != d && std::isinf(potential[w])) rows[w].push_back(d);
        }
        continue;
      }
      const LinkId down = topo.link(up).reverse;
      if (down != kNoLink && !std::isinf(s.hop_cost[cls][down])) continue;
      const NodeId t = topo.link(up).dst;
      const std::vector<double>& toward_switch = *s.potentials[cls][t];
      for (const NodeId w : switches) {
        if (w == t || !std::isinf(toward_switch[w])) rows[w].push_back(d);
      }
    }
  }
}

// The compact form's default route of v: its uplink, if v is a stub and the link carries
// traffic in every class.
LinkId DefaultLink(const RouteSnapshot& s, NodeId v) {
  const LinkId up = s.overlay->topology.StubUplink(v);
  if (up == kNoLink) return kNoLink;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    if (std::isinf(s.hop_cost[cls][up])) return kNoLink;
  }
  return up;
}

// Whether the compact form leaves out v's row toward d, which comes from `source`: a row the
// default route `default_link` stands for, or a row toward a stub that is v's row toward the
// stub's switch (not at that switch, whose row is the link down).
bool LeftOut(const RouteSnapshot& s, LinkId default_link, int cls, NodeId v, NodeId d,
             const RouteSnapshot::RowSource& source) {
  if (default_link != kNoLink && source.link == default_link) return true;
  const NodeId t = s.overlay->topology.RouteTarget(d);
  if (t == d || t == v) return false;
  const RouteSnapshot::RowSource via = s.SourceOfRow(cls, v, t);
  return source.link == via.link && source.table == via.table;
}

// The rows of a stub's compact table whose default route, `up`, is also `base`'s (if given):
// the snapshot's stub_rows of its switch, or against `base` those that came and (in
// `removed`) those that went. Every such row is empty: the switch cannot reach its
// destination. In the order of the general rule: by destination, then class.
void AddStubRows(const RouteSnapshot& s, NodeId node, LinkId up, const RouteSnapshot* base,
                 v1::RouteTable& out) {
  const NodeId w = s.overlay->topology.link(up).dst;
  struct Change {
    NodeId d;
    int cls;
    bool came;
  };
  std::vector<Change> changes;
  const std::vector<NodeId> none;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    const std::vector<NodeId>& now = s.stub_rows[cls][w];
    const std::vector<NodeId>& was = base == nullptr ? none : base->stub_rows[cls][w];
    size_t i = 0, j = 0;
    while (i < now.size() || j < was.size()) {
      if (j == was.size() || (i < now.size() && now[i] < was[j])) {
        changes.push_back({now[i++], cls, true});
      } else if (i == now.size() || was[j] < now[i]) {
        changes.push_back({was[j++], cls, false});
      } else {
        ++i, ++j;  // the same empty row in both
      }
    }
  }
  std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return std::pair(a.d, a.cls) < std::pair(b.d, b.cls);
  });
  for (const Change& c : changes) {
    if (c.d == node) continue;
    if (c.came) {
      AddRoute(s, c.cls, c.d, node, {}, out);
    } else {
      v1::RouteKey* k = out.add_removed();
      k->set_destination_id(s.overlay->wire_id[c.d]);
      k->set_traffic_class(c.cls);
    }
  }
}

}  // namespace

RouteSnapshot::RowSource RouteSnapshot::SourceOfRow(int cls, NodeId v, NodeId d) const {
  if (v == d) return {};
  const Topology& topo = overlay->topology;
  if (const LinkId up = topo.StubUplink(v); up != kNoLink) {
    // A stub sends everything up, where its switch has a way on.
    if (std::isinf(hop_cost[cls][up]) || std::isinf(Potential(cls, d, topo.link(up).dst)))
      return {};
    return {.link = up};
  }
  if (const LinkId up = topo.StubUplink(d); up != kNoLink) {
    const LinkId down = topo.link(up).reverse;
    if (down == kNoLink || std::isinf(hop_cost[cls][down])) return {};
    const NodeId t = topo.link(down).src;
    if (v == t) return {.link = down};
    d = t;
  }
  const RoutingTables& t = *tables[cls];
  return {.table = t.IsDestination(d) ? t.Table(d) : nullptr};
}

absl::Span<const NextHop> RouteSnapshot::Row(int cls, NodeId v, NodeId d) const {
  const RowSource s = SourceOfRow(cls, v, d);
  if (s.link != kNoLink) return absl::MakeConstSpan(&overlay->whole_link[s.link], 1);
  return s.table == nullptr ? absl::Span<const NextHop>() : s.table->At(v);
}

double RouteSnapshot::Potential(int cls, NodeId d, NodeId v) const {
  if (v == d) return 0;
  const Topology& topo = overlay->topology;
  if (const LinkId up = topo.StubUplink(v); up != kNoLink) {
    return hop_cost[cls][up] + Potential(cls, d, topo.link(up).dst);
  }
  if (const LinkId up = topo.StubUplink(d); up != kNoLink) {
    const LinkId down = topo.link(up).reverse;
    if (down == kNoLink) return kInfinity;
    return (*potentials[cls][topo.link(down).src])[v] + hop_cost[cls][down];
  }
  return (*potentials[cls][d])[v];
}

NodeId Overlay::FindByNameOrId(const std::string& text) const {
  if (absl::StatusOr<NodeId> n = topology.FindNode(text); n.ok()) return *n;
  uint32_t id = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || ptr != text.data() + text.size()) return kNoNode;
  return Find(id);
}

std::shared_ptr<const Overlay> MakeOverlay(const ControllerConfig& config) {
  auto o = std::make_shared<Overlay>();
  o->topology = BuildTopology(config);
  o->whole_link.reserve(static_cast<size_t>(o->topology.num_links()));
  for (LinkId l = 0; l < o->topology.num_links(); ++l) o->whole_link.push_back({l, 1.0});
  for (NodeId n = 0; n < static_cast<NodeId>(config.nodes.size()); ++n) {
    o->wire_id.push_back(config.nodes[n].id);
    o->overlay_address.push_back(config.nodes[n].overlay_address);
    o->by_wire[config.nodes[n].id] = n;
  }
  // stub_hosts marks the stubs by StubSwitches' rule (BuildTopology): without it, there are
  // none.
  o->stub_digest = config.stub_hosts ? StubDigest(StubSwitches(o->topology), o->wire_id) : 0;
  for (const ControllerLinkConfig& l : config.links) {
    // BuildTopology adds both directions of each link in order.
    o->delay_configured.push_back(l.delay.has_value());
    o->delay_configured.push_back(l.delay.has_value());
  }
  return o;
}

std::shared_ptr<const RouteSnapshot> MakeSnapshot(std::shared_ptr<const Overlay> overlay,
                                                  const RouteComputer& computer,
                                                  const RouteCycle& cycle, uint64_t version,
                                                  int64_t computed_unix_ns) {
  auto s = std::make_shared<RouteSnapshot>();
  s->version = version;
  s->computed_unix_ns = computed_unix_ns;
  s->tables = cycle.tables;
  const Topology& topo = overlay->topology;
  const int n = topo.num_nodes();
  SetHopCosts(topo, *s, [&](int cls, LinkId l) {
    return computer.known_down(l) || computer.drained(l) ? kInfinity : computer.Cost(cls, l);
  });
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    s->potentials[cls].resize(static_cast<size_t>(n));
    for (NodeId d = 0; d < n; ++d) {
      if (topo.StubUplink(d) != kNoLink) continue;  // derived from its switch's
      auto row = std::make_shared<std::vector<double>>(static_cast<size_t>(n));
      for (NodeId v = 0; v < n; ++v) (*row)[v] = computer.Potential(cls, d, v);
      s->potentials[cls][d] = std::move(row);
    }
  }
  SetStubRows(topo, *s);
  s->overlay = std::move(overlay);
  return s;
}

std::shared_ptr<const RouteSnapshot> MakeRankedSnapshot(
    std::shared_ptr<const Overlay> overlay, const Topology& known,
    const std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses>& tables,
    uint64_t version, int64_t computed_unix_ns, const RouteSnapshot* previous) {
  if (previous != nullptr && previous->overlay != overlay) previous = nullptr;
  auto s = std::make_shared<RouteSnapshot>();
  s->version = version;
  s->computed_unix_ns = computed_unix_ns;
  s->tables = tables;
  const Topology& topo = overlay->topology;
  const int n = topo.num_nodes();
  // A rank counts hops: a stub is one above its switch.
  SetHopCosts(topo, *s, [&](int, LinkId l) { return known.link(l).up ? 1.0 : kInfinity; });
  constexpr double kUnranked = -1;
  std::vector<std::pair<NodeId, size_t>> stack;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    std::vector<RouteSnapshot::PotentialRow>& rows = s->potentials[cls];
    rows.resize(static_cast<size_t>(n));
    for (NodeId d = 0; d < n; ++d) {
      if (topo.StubUplink(d) != kNoLink) continue;  // derived from its switch's
      // A table the classes share (the marginal layer's) has the same ranks, and so has the
      // same table in the previous snapshot: the row is shared, not copied.
      const auto table_of = [d](const RoutingTables& t) {
        return t.IsDestination(d) ? t.Table(d) : nullptr;
      };
      const DestinationTable* table = table_of(*tables[cls]);
      if (cls > 0 && table != nullptr && table == table_of(*tables[0])) {
        rows[d] = s->potentials[0][d];
        continue;
      }
      if (previous != nullptr && table != nullptr && table == table_of(*previous->tables[cls])) {
        rows[d] = previous->potentials[cls][d];
        continue;
      }
      auto row = std::make_shared<std::vector<double>>(static_cast<size_t>(n), kUnranked);
      rows[d] = row;
      double* rank = row->data();
      rank[d] = 0;
      // Depth-first, next hops before the node; a node on the stack has rank -2 (a loop,
      // which the tables cannot have, would leave +infinity).
      for (NodeId start = 0; start < n; ++start) {
        if (rank[start] != kUnranked || topo.StubUplink(start) != kNoLink) continue;
        stack.assign(1, {start, 0});
        rank[start] = -2;
        while (!stack.empty()) {
          auto& [v, i] = stack.back();
          const absl::Span<const NextHop> hops = tables[cls]->Lookup(v, d);
          if (i < hops.size()) {
            const NodeId u = topo.link(hops[i++].link).dst;
            if (rank[u] == kUnranked) {
              rank[u] = -2;
              stack.push_back({u, 0});
            }
            continue;
          }
          double r = hops.empty() ? std::numeric_limits<double>::infinity() : 0;
          for (const NextHop& h : hops) {
            const double below = rank[topo.link(h.link).dst];
            r = below < 0 ? std::numeric_limits<double>::infinity() : std::max(r, below + 1);
          }
          rank[v] = r;
          stack.pop_back();
        }
      }
    }
  }
  SetStubRows(topo, *s);
  s->overlay = std::move(overlay);
  return s;
}

bool BuildRouteTable(const RouteSnapshot& snapshot, NodeId node, const RouteSnapshot* base,
                     v1::RouteTable& out, bool compact) {
  out.Clear();
  out.set_version(snapshot.version);
  out.set_computed_unix_ns(snapshot.computed_unix_ns);
  if (base != nullptr && base->overlay != snapshot.overlay) base = nullptr;
  if (base != nullptr) out.set_base_version(base->version);
  const Overlay& o = *snapshot.overlay;
  LinkId default_link = kNoLink;
  LinkId base_default = kNoLink;
  if (compact) {
    default_link = DefaultLink(snapshot, node);
    if (default_link != kNoLink) {
      out.mutable_default_route()->set_neighbor_id(o.wire_id[o.topology.link(default_link).dst]);
    }
    out.set_stub_digest(o.stub_digest);
    if (base != nullptr) base_default = DefaultLink(*base, node);
  }
  if (default_link != kNoLink && (base == nullptr || base_default == default_link)) {
    AddStubRows(snapshot, node, default_link, base, out);
    return base == nullptr || out.routes_size() > 0 || out.removed_size() > 0;
  }
  const int n = o.topology.num_nodes();
  for (NodeId d = 0; d < n; ++d) {
    if (d == node) continue;
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      const RouteSnapshot::RowSource source = snapshot.SourceOfRow(cls, node, d);
      const bool left_out = compact && LeftOut(snapshot, default_link, cls, node, d, source);
      if (base != nullptr) {
        const RouteSnapshot::RowSource was = base->SourceOfRow(cls, node, d);
        const bool was_left_out = compact && LeftOut(*base, base_default, cls, node, d, was);
        if (left_out) {
          if (!was_left_out) {
            v1::RouteKey* k = out.add_removed();
            k->set_destination_id(o.wire_id[d]);
            k->set_traffic_class(cls);
          }
          continue;
        }
        if (!was_left_out && SameRowAt(source, was, node)) continue;
      } else if (left_out) {
        continue;
      }
      AddRoute(snapshot, cls, d, node, snapshot.Row(cls, node, d), out);
    }
  }
  return base == nullptr || out.routes_size() > 0 || out.removed_size() > 0 ||
         default_link != base_default;
}

}  // namespace dar::control
