// One concept at about 900 lines: the minimisation of DAR's objective for a demand (the
// marginal router: per-destination DAGs, the loads they carry, the descent that moves flow
// between paths). Its steps share one private state and are read as one algorithm.
#include "core/marginal_routing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "core/routing.h"
#include "core/units.h"

namespace dar {
namespace {

// Next-hop weights of every destination: weights[t][l] is the share of node src(l)'s traffic
// toward targets[t] that leaves on link l.
using Weights = std::vector<std::vector<double>>;

// An out-link of a node, with the node it leads to.
struct Out {
  LinkId link;
  NodeId head;
};

// A destination's next-hop graph: the nodes that forward, each before its next hops, and each
// one's weighted out-links (in topo's order). Made when the weighted links change; shared,
// unchanged, by the weights that only reweight them.
struct Dag {
  std::vector<NodeId> order;
  std::vector<int> begin;  // by position in `order`, into `links`; one past the last too
  std::vector<Out> links;

  absl::Span<const Out> LinksAt(size_t i) const {
    return absl::MakeConstSpan(links.data() + begin[i], links.data() + begin[i + 1]);
  }
};
using DagPtr = std::shared_ptr<const Dag>;
// Weights of a graph's links, in the order of Dag::links: a table's, or a destination's held
// from one cycle to the next. Read in order, they cost a route less than weights by LinkId.
using AlignedPtr = std::shared_ptr<const std::vector<double>>;

// What one destination's weights do to its traffic: its next-hop graph, the traffic through
// every node that sends some on (in the graph's order), and the load on every link that
// carries some.
struct DestinationFlow {
  DagPtr dag;
  AlignedPtr aligned;  // the weights routed, where they were aligned with the graph
  std::vector<std::pair<NodeId, double>> through;  // in `order`'s order
  std::vector<std::pair<LinkId, double>> links;    // in no particular order
};

// A set of links, drained in the order of their ids: a bit a link.
class LinkSet {
 public:
  explicit LinkSet(int links) : words_((links + 63) / 64, 0) {}
  void Mark(LinkId l) { words_[l >> 6] |= uint64_t{1} << (l & 63); }
  // Calls f(l) for every marked link, in increasing order, and empties the set.
  template <typename F>
  void Drain(F f) {
    for (size_t i = 0; i < words_.size(); ++i) {
      for (uint64_t word = words_[i]; word != 0; word &= word - 1) {
        f(static_cast<LinkId>(i * 64 + std::countr_zero(word)));
      }
      words_[i] = 0;
    }
  }

 private:
  std::vector<uint64_t> words_;
};

// What the last minimisation left for the next (MarginalRouter): per destination the table it
// returned, its weights (by LinkId) and an order of its nodes; the links usable then.
struct Held {
  std::vector<DestinationTablePtr> tables;
  std::vector<std::vector<double>> weights;
  std::vector<DagPtr> dags;
  std::vector<AlignedPtr> aligned;
  std::vector<bool> open;
};

std::vector<double> Scaled(std::vector<double> loads, double unit_bps) {
  for (double& x : loads) x *= unit_bps;
  return loads;
}

class Problem {
 public:
  Problem(const Topology& topo, TargetDemand demand, double unit_bps)
      : topo_(topo), unit_bps_(unit_bps), targets_(topo.Destinations()) {
    const int n = topo.num_nodes();
    out_begin_.reserve(n + 1);
    forwards_.resize(n);
    for (NodeId v = 0; v < n; ++v) forwards_[v] = topo.StubUplink(v) == kNoLink;
    // A link into a stub host carries nothing toward any destination (a stub host is none:
    // its switch is its route target), and is left out.
    for (NodeId v = 0; v < n; ++v) {
      out_begin_.push_back(static_cast<int>(out_.size()));
      for (LinkId l : topo.node(v).out_links) {
        if (forwards_[topo.link(l).dst]) out_.push_back({l, topo.link(l).dst});
      }
    }
    out_begin_.push_back(static_cast<int>(out_.size()));
    open_.resize(topo.num_links());
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      const Link& link = topo.link(l);
      open_[l] = link.up && link.params.capacity.bps() > 0;
      into_host_.push_back(topo.node(link.dst).kind == NodeKind::kHost);
    }
    host_loads_ = std::move(demand.host_loads);
    injected_.resize(targets_.size());
    for (size_t t = 0; t < targets_.size(); ++t) {
      auto it = demand.injected.find(targets_[t]);
      if (it != demand.injected.end()) injected_[t] = std::move(it->second);
    }
  }

  const Topology& topo() const { return topo_; }
  double unit_bps() const { return unit_bps_; }
  const std::vector<NodeId>& targets() const { return targets_; }
  // The nodes whose traffic enters toward targets[t], and how much, in NodeId order.
  const std::vector<std::pair<NodeId, double>>& injected(size_t t) const { return injected_[t]; }
  const std::vector<double>& host_loads() const { return host_loads_; }
  void AddToHostLoads(const std::vector<double>& loads) {
    for (LinkId l = 0; l < topo_.num_links(); ++l) host_loads_[l] += loads[l];
  }

  // Whether traffic toward targets[t] may take link l: up, of some capacity, and not into a
  // host other than the target (hosts forward nothing).
  bool Usable(size_t t, LinkId l) const {
    const Link& link = topo_.link(l);
    return open_[l] && link.src != targets_[t] && (link.dst == targets_[t] || !into_host_[l]);
  }

  // By LinkId: up and of some capacity.
  const std::vector<bool>& open() const { return open_; }

  // The weights of `table`, one of the minimisation's own (over usable links), into `w`
  // (by LinkId, sized). Whether a link weighted in `w` before is not in the table.
  bool WeightsOf(const DestinationTable& table, std::vector<double>& w) const {
    bool dropped = false;
    std::vector<LinkId> before;  // v's links weighted before
    for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
      if (!forwards_[v]) continue;  // a stub host's weights steer nothing
      before.clear();
      for (const auto [l, head] : OutOf(v)) {
        if (w[l] > 0) before.push_back(l);
        w[l] = 0;
      }
      for (const NextHop& hop : table.At(v)) w[hop.link] = hop.weight;
      for (LinkId l : before) dropped = dropped || !(w[l] > 0);
    }
    return dropped;
  }

  // Node v's out-links but those into stub hosts, in the order of topo's.
  absl::Span<const Out> OutOf(NodeId v) const {
    return absl::MakeConstSpan(out_.data() + out_begin_[v], out_.data() + out_begin_[v + 1]);
  }
  // Whether node v may carry traffic toward a destination other than itself: a host on a
  // single uplink (a stub) does not, as nothing reaches it but its own traffic.
  bool Forwards(NodeId v) const { return forwards_[v]; }

  // The starting weights: those of `start` where it has a table for the destination that
  // uses only usable links, reaches the destination from every node ECMP does and has no
  // loop; WCMP's elsewhere (ECMP's next hops weighted by the capacity each leads to: equal on
  // a symmetric fabric, and a prior that already keeps new traffic off a degraded link).
  // `orders[t]` is the order of w[t] where `start`'s table was taken; empty otherwise.
  // A destination whose table in `start` is the one `held` holds for it, over the same
  // usable links, takes the held weights and order as they are (moved out of `held`).
  Weights Start(const RoutingTables* start, Held& held, std::vector<DagPtr>& dags,
                std::vector<AlignedPtr>& aligned) const {
    Weights w(targets_.size());
    dags.assign(targets_.size(), nullptr);
    aligned.assign(targets_.size(), nullptr);
    const bool reuse = start != nullptr && held.tables.size() == targets_.size() &&
                       held.open == open_ && start->num_nodes() == topo_.num_nodes();
    std::optional<RoutingTables> wcmp;  // computed only if a destination needs it
    for (size_t t = 0; t < targets_.size(); ++t) {
      if (reuse && held.tables[t] != nullptr && start->IsDestination(targets_[t]) &&
          start->SharedTable(targets_[t]) == held.tables[t]) {
        w[t] = std::move(held.weights[t]);
        dags[t] = std::move(held.dags[t]);
        aligned[t] = std::move(held.aligned[t]);
        continue;
      }
      w[t].assign(topo_.num_links(), 0.0);
      if (start != nullptr && StartFrom(*start, t, w[t], dags[t])) continue;
      if (!wcmp) {
        // Over the usable links: a link of no capacity is no path.
        Topology usable = topo_;
        for (LinkId l = 0; l < usable.num_links(); ++l) {
          if (usable.link(l).params.capacity.bps() <= 0) usable.mutable_link(l).up = false;
        }
        wcmp = ComputeWcmpTables(usable);
      }
      std::fill(w[t].begin(), w[t].end(), 0.0);
      for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
        for (const NextHop& hop : wcmp->Lookup(v, targets_[t])) w[t][hop.link] = hop.weight;
      }
    }
    return w;
  }

  // The flow of weights `w` toward targets[t], into `f` (whose vectors are reused). `order`,
  // if given, is an order of weights with the same next hops (the same links weighted above
  // zero), reused. `through`: by NodeId, all zero, and left so.
  // `aligned`, if given, are those weights in the order of the graph's links.
  absl::Status Route(size_t t, const std::vector<double>& w, const DagPtr* dag,
                     const AlignedPtr& aligned, DestinationFlow& f,
                     std::vector<double>& through) const {
    if (dag != nullptr) {
      f.dag = *dag;
    } else {
      ASSIGN_OR_RETURN(f.dag, Order(w));
    }
    f.aligned = aligned;
    f.through.clear();
    f.links.clear();
    // A destination nobody sends to carries nothing: no walk over its graph.
    if (!HasTraffic(t)) return absl::OkStatus();
    const double* by_position = aligned != nullptr ? aligned->data() : nullptr;
    for (const auto& [v, amount] : injected_[t]) through[v] = amount;
    absl::Status status;
    const Dag& g = *f.dag;
    for (size_t i = 0; i < g.order.size(); ++i) {
      const NodeId v = g.order[i];
      const double x = through[v];
      if (v == targets_[t] || x == 0) continue;
      f.through.push_back({v, x});
      bool sent = false;
      for (int j = g.begin[i]; j < g.begin[i + 1]; ++j) {
        const auto [l, head] = g.links[j];
        const double weight = by_position != nullptr ? by_position[j] : w[l];
        if (weight <= 0) continue;
        const double share = x * weight;
        f.links.push_back({l, share});  // every link leaves one node, visited once
        through[head] += share;
        sent = true;
      }
      if (!sent) {
        status = absl::FailedPreconditionError(absl::StrCat(
            "'", topo_.node(v).name, "' cannot reach '", topo_.node(targets_[t]).name, "'"));
        break;
      }
    }
    // Traffic reached only nodes of the graph (every next hop is one) and its sources.
    for (const auto& [v, amount] : injected_[t]) through[v] = 0;
    for (NodeId v : g.order) through[v] = 0;
    return status;
  }

  // Every link's load: the host links' and every destination's.
  std::vector<double> Loads(const std::vector<DestinationFlow>& flows) const {
    std::vector<double> loads = host_loads_;
    for (const DestinationFlow& f : flows) {
      for (const auto& [l, x] : f.links) loads[l] += x;
    }
    return loads;
  }

  // The next-hop graph of weights `w`. The weights are loop-free by construction; a loop is
  // a bug.
  absl::StatusOr<DagPtr> Order(const std::vector<double>& w) const {
    DagPtr dag = MakeDag([&](NodeId v, const auto& f) {
      for (const Out& out : OutOf(v)) {
        if (w[out.link] > 0) f(out);
      }
    });
    if (dag == nullptr) {
      return absl::InternalError("marginal routing: the next hops of a destination form a loop");
    }
    return dag;
  }

  // The next-hop graph of `table` toward targets[t], weights included. FailedPrecondition if
  // a next hop is not a link out of its node that traffic toward targets[t] may take, or the
  // next hops form a loop.
  absl::StatusOr<std::pair<DagPtr, AlignedPtr>> DagOfTable(size_t t,
                                                           const DestinationTable& table) const {
    for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
      for (const NextHop& hop : table.At(v)) {
        if (!Takes(t, v, hop)) return BadHop(t, v, hop);
      }
    }
    DagPtr dag = MakeDag([&](NodeId v, const auto& f) {
      for (const NextHop& hop : table.At(v)) f(Out{hop.link, topo_.link(hop.link).dst});
    });
    if (dag == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("forwarding loop toward '", topo_.node(targets_[t]).name, "'"));
    }
    auto weights = std::make_shared<std::vector<double>>();
    weights->reserve(dag->links.size());
    for (NodeId v : dag->order) {
      for (const NextHop& hop : table.At(v)) weights->push_back(hop.weight);
    }
    return std::pair<DagPtr, AlignedPtr>(std::move(dag), std::move(weights));
  }

  bool HasTraffic(size_t t) const {
    return std::any_of(injected_[t].begin(), injected_[t].end(),
                       [](const auto& e) { return e.second > 0; });
  }

 private:
  bool StartFrom(const RoutingTables& start, size_t t, std::vector<double>& w, DagPtr& dag) const {
    const NodeId target = targets_[t];
    if (start.num_nodes() != topo_.num_nodes() || !start.IsDestination(target) ||
        start.Table(target) == nullptr) {
      return false;
    }
    for (NodeId v = 0; v < topo_.num_nodes(); ++v) {
      if (v == target) continue;
      const absl::Span<const NextHop> hops = start.Lookup(v, target);
      // A switch that could forward toward the target must have a next hop.
      if (hops.empty() && topo_.node(v).kind == NodeKind::kSwitch &&
          std::any_of(topo_.node(v).out_links.begin(), topo_.node(v).out_links.end(),
                      [&](LinkId l) { return Usable(t, l); })) {
        return false;
      }
      for (const NextHop& hop : hops) {
        if (!Takes(t, v, hop) || !(hop.weight > 0)) return false;
        w[hop.link] = hop.weight;
      }
    }
    absl::StatusOr<DagPtr> ordered = Order(w);
    if (!ordered.ok()) return false;
    dag = *std::move(ordered);
    return true;
  }

  // The next-hop graph whose next hops at v are those `next_hops(v, f)` passes to f, one
  // Out each: its nodes in an order where every node comes before its next hops (Kahn),
  // stub hosts, which forward nothing, left out. Null if the next hops form a loop.
  template <typename NextHops>
  DagPtr MakeDag(const NextHops& next_hops) const {
    const int n = topo_.num_nodes();
    std::vector<int> in(n, 0);
    for (NodeId v = 0; v < n; ++v) next_hops(v, [&](const Out& out) { ++in[out.head]; });
    std::vector<NodeId> order;
    order.reserve(n);
    for (NodeId v = 0; v < n; ++v) {
      if (in[v] == 0) order.push_back(v);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      next_hops(order[i], [&](const Out& out) {
        if (--in[out.head] == 0) order.push_back(out.head);
      });
    }
    if (static_cast<int>(order.size()) != n) return nullptr;
    auto dag = std::make_shared<Dag>();
    dag->begin.push_back(0);
    for (NodeId v : order) {
      if (!forwards_[v]) continue;
      dag->order.push_back(v);
      next_hops(v, [&](const Out& out) { dag->links.push_back(out); });
      dag->begin.push_back(static_cast<int>(dag->links.size()));
    }
    return dag;
  }

  // Whether `hop`, at node v, is a link out of v that traffic toward targets[t] may take.
  bool Takes(size_t t, NodeId v, const NextHop& hop) const {
    return hop.link >= 0 && hop.link < topo_.num_links() && topo_.link(hop.link).src == v &&
           Usable(t, hop.link);
  }
  absl::Status BadHop(size_t t, NodeId v, const NextHop& hop) const {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", topo_.node(v).name, "' forwards over a bad or unusable link ",
                     hop.link, " toward '", topo_.node(targets_[t]).name, "'"));
  }

  const Topology& topo_;
  double unit_bps_;
  std::vector<NodeId> targets_;
  std::vector<int> out_begin_;  // by NodeId, into out_; one past the last node too
  std::vector<Out> out_;
  std::vector<bool> forwards_;          // by NodeId
  std::vector<bool> open_, into_host_;  // by LinkId: up and of some capacity; into a host
  std::vector<std::vector<std::pair<NodeId, double>>> injected_;  // [t]
  std::vector<double> host_loads_;
};

// x^n for a small non-negative integer n, by squaring: p is an integer in practice, and
// std::pow is most of the cost of evaluating J.
double IntPow(double x, int n) {
  double result = 1;
  for (; n > 0; n >>= 1, x *= x) {
    if (n & 1) result *= x;
  }
  return result;
}

// One link's term of J and its first and second derivatives by the link's load.
struct LinkTerm {
  double value = 0, first = 0, second = 0;
};
// What a link's term depends on besides its load: its capacity in traffic units, and beta
// times its length.
struct LinkScale {
  double capacity = 0, length = 0;
};
LinkScale ScaleOf(const Link& link, double unit_bps, const RoutingObjective& o) {
  return {.capacity = static_cast<double>(link.params.capacity.bps()) / unit_bps,
          .length = o.length_weight * (1 + static_cast<double>(link.params.delay.count()) /
                                               static_cast<double>(o.reference_delay.count()))};
}
std::vector<LinkScale> ScalesOf(const Topology& topo, double unit_bps, const RoutingObjective& o) {
  std::vector<LinkScale> scales;
  scales.reserve(topo.num_links());
  for (const Link& link : topo.links()) scales.push_back(ScaleOf(link, unit_bps, o));
  return scales;
}
LinkTerm TermOf(const LinkScale& s, double load, const RoutingObjective& o) {
  const double capacity = s.capacity;
  if (capacity <= 0) return {};
  const double p = o.power;
  // Loads updated in place may round a little below zero.
  const double x = std::max(0.0, load) / capacity / o.reference_utilization;
  const double x_p2 =
      p == std::floor(p) && p <= 64 ? IntPow(x, static_cast<int>(p) - 2) : std::pow(x, p - 2);
  return {.value = capacity * o.reference_utilization * x_p2 * x * x / p + s.length * load,
          .first = x_p2 * x + s.length,
          .second = (p - 1) * x_p2 / (capacity * o.reference_utilization)};
}

ObjectiveTerms Evaluate(const std::vector<LinkScale>& scales, const std::vector<double>& loads,
                        const RoutingObjective& objective) {
  ObjectiveTerms terms;
  terms.first.resize(scales.size());
  terms.second.resize(scales.size());
  terms.values.resize(scales.size());
  for (size_t l = 0; l < scales.size(); ++l) {
    const LinkTerm t = TermOf(scales[l], loads[l], objective);
    terms.value += t.value;
    terms.first[l] = t.first;
    terms.second[l] = t.second;
    terms.values[l] = t.value;
  }
  return terms;
}

// Per destination, the marginal distance of every node (delta), the curvature of its paths
// (H = sum_k phi_k^2 (J''_k + H_k): how fast delta rises with traffic added at the node), and
// whether an uphill link (delta not falling along it) lies downstream. Reused from one
// destination to the next.
struct Marginals {
  std::vector<double> delta, curvature;
  std::vector<char> tainted;
};

void ComputeMarginals(const Problem& p, size_t t, const std::vector<double>& w, const Dag& dag,
                      const ObjectiveTerms& terms, Marginals& m) {
  const int n = p.topo().num_nodes();
  m.delta.assign(n, kInfinity);
  m.curvature.assign(n, 0.0);
  m.tainted.assign(n, false);
  const NodeId target = p.targets()[t];
  m.delta[target] = 0;
  for (size_t i = dag.order.size(); i-- > 0;) {
    const NodeId v = dag.order[i];
    const absl::Span<const Out> out = dag.LinksAt(i);
    if (v == target || out.empty()) continue;
    double delta = 0, curvature = 0;
    bool tainted = false;
    for (const auto [l, k] : out) {
      delta += w[l] * (terms.first[l] + m.delta[k]);
      curvature += w[l] * w[l] * (terms.second[l] + m.curvature[k]);
    }
    m.delta[v] = delta;
    m.curvature[v] = curvature;
    for (const auto [l, k] : out) tainted = tainted || m.tainted[k] || !(m.delta[k] < delta);
    m.tainted[v] = static_cast<char>(tainted);
  }
}

// One Gallager step toward targets[t] with step scale `step`, on `w` in place, under the
// marginals `m` of `w`: at every node, traffic moves from each next hop to the one of least
// marginal cost. Every weight it changes is appended to `undo` with its old value.
void StepToward(const Problem& p, size_t t, const DestinationFlow& flow, const Marginals& m,
                const ObjectiveTerms& terms, const MarginalRoutingConfig& config, double step,
                std::vector<double>& w, std::vector<std::pair<LinkId, double>>& undo) {
  const NodeId target = p.targets()[t];
  const auto set = [&](LinkId l, double weight) {
    if (weight != w[l]) undo.push_back({l, w[l]});
    w[l] = weight;
  };
  // A node without traffic keeps its weights: they steer only what may come, and moving them
  // would churn tables for nothing.
  for (const auto& [v, traffic] : flow.through) {
    if (v == target || m.delta[v] == kInfinity || !(traffic > 0)) continue;
    const absl::Span<const Out> out = p.OutOf(v);
    // The next hop of least marginal cost: a current one, or a neighbour v may start using.
    LinkId best = kNoLink;
    NodeId best_k = kNoNode;
    double best_cost = kInfinity;
    for (const auto [l, k] : out) {
      const bool allowed = w[l] > 0 || (p.Usable(t, l) && !m.tainted[k] && m.delta[k] < m.delta[v]);
      if (!allowed) continue;
      const double a = terms.first[l] + m.delta[k];
      if (a < best_cost) best_cost = a, best = l, best_k = k;
    }
    if (best == kNoLink) continue;
    const double best_curvature = terms.second[best] + m.curvature[best_k];
    const double tie = config.tie_tolerance * std::max(std::abs(best_cost), 1e-300);
    double moved = 0;
    for (const auto [l, k] : out) {
      if (l == best || w[l] <= 0) continue;
      const double excess = terms.first[l] + m.delta[k] - best_cost;
      if (!(excess > tie)) continue;
      const double curvature = traffic * (terms.second[l] + m.curvature[k] + best_curvature);
      const double share = curvature > 0 ? std::min(w[l], step * excess / curvature) : step * w[l];
      set(l, w[l] - share);
      moved += share;
    }
    set(best, w[best] + moved);
  }
}

// Frank-Wolfe's bound: J(F*) >= J(F) + min over routings F' of J'(F) . (F' - F), and the
// minimum puts every destination's traffic on its shortest paths under the link lengths J'.
// The host links' loads are the same under every routing and drop out.
double LowerBound(const Problem& p, const std::vector<DestinationFlow>& flows,
                  const ObjectiveTerms& terms) {
  const Topology& topo = p.topo();
  double now = 0, shortest = 0;
  for (const DestinationFlow& f : flows) {
    for (const auto& [l, x] : f.links) now += terms.first[l] * x;
  }
  for (size_t t = 0; t < p.targets().size(); ++t) {
    if (!p.HasTraffic(t)) continue;

    std::vector<double> lengths(topo.num_links(), kInfinity);
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      if (p.Usable(t, l)) lengths[l] = std::max(terms.first[l], 1e-300);
    }
    const std::vector<double> distance = ShortestDistances(topo, p.targets()[t], lengths);
    for (const auto& [v, amount] : p.injected(t)) {
      if (amount > 0) shortest += amount * distance[v];
    }
  }
  return terms.value - std::max(0.0, now - shortest);
}

// The tables of weights `w`: next hops below min_weight dropped, the rest renormalised.
// Destinations whose weights are their starting table's unchanged (`kept`) keep that table.
RoutingTables TablesOf(const Problem& p, const Weights& w, double min_weight,
                       const std::vector<DestinationTablePtr>& start,
                       const std::vector<bool>& kept) {
  const Topology& topo = p.topo();
  RoutingTables tables(topo.num_nodes(), p.targets());
  std::vector<std::vector<NextHop>> rows(topo.num_nodes());
  for (size_t t = 0; t < p.targets().size(); ++t) {
    if (kept[t]) {
      tables.Set(start[t]);
      continue;
    }
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      rows[v].clear();
      if (!p.Forwards(v)) continue;
      double sum = 0;
      for (const auto [l, head] : p.OutOf(v)) {
        if (w[t][l] >= min_weight) rows[v].push_back({l, w[t][l]}), sum += w[t][l];
      }
      for (NextHop& hop : rows[v]) hop.weight /= sum;
    }
    tables.Set(std::make_shared<const DestinationTable>(p.targets()[t], rows));
  }
  return tables;
}

}  // namespace

double UtilizationNorm(const Topology& topo, const std::vector<double>& loads, double unit_bps,
                       double power) {
  double sum = 0, max = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const double capacity = static_cast<double>(topo.link(l).params.capacity.bps()) / unit_bps;
    if (capacity > 0) max = std::max(max, loads[l] / capacity);
  }
  if (!(max > 0)) return 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const double capacity = static_cast<double>(topo.link(l).params.capacity.bps()) / unit_bps;
    if (capacity > 0) {
      const double x = loads[l] / capacity / max;
      sum +=
          capacity * (power == std::floor(power) && power <= 64 ? IntPow(x, static_cast<int>(power))
                                                                : std::pow(x, power));
    }
  }
  return max * std::pow(sum, 1 / power);
}

ObjectiveTerms EvaluateObjective(const Topology& topo, const std::vector<double>& loads,
                                 double unit_bps, const RoutingObjective& objective) {
  return Evaluate(ScalesOf(topo, unit_bps, objective), loads, objective);
}

struct MarginalRouter::Impl {
  // What Start sets for Minimise.
  const Topology* topo = nullptr;
  double unit_bps = 1;
  std::optional<Problem> problem;
  Weights w;
  std::vector<DestinationFlow> flows;
  std::vector<bool> kept;                         // still at the starting table's weights
  std::vector<DestinationTablePtr> start_tables;  // where kept: that table
  // What the last Minimise left for the next.
  Held held;
  // Per destination, the last table LoadsUnder routed other than the start's, and its graph;
  // all made over the usable links table_dags_open.
  std::vector<std::pair<DestinationTablePtr, std::pair<DagPtr, AlignedPtr>>> table_dags;
  std::vector<bool> table_dags_open;
  size_t next_destination = 0;
};

MarginalRouter::MarginalRouter() : impl_(std::make_unique<Impl>()) {}
MarginalRouter::~MarginalRouter() = default;

absl::Status MarginalRouter::Start(const Topology& topo, const std::vector<Demand>& demand,
                                   double unit_bps, const RoutingTables* start) {
  Impl& m = *impl_;
  m.problem.reset();
  ASSIGN_OR_RETURN(TargetDemand split, SplitDemand(topo, demand));
  Problem& problem = m.problem.emplace(topo, std::move(split), unit_bps);
  m.topo = &topo;
  m.unit_bps = unit_bps;
  const size_t targets = problem.targets().size();
  std::vector<DagPtr> dags;
  std::vector<AlignedPtr> aligned;
  m.w = problem.Start(start, m.held, dags, aligned);
  m.held = Held();          // refilled by Minimise
  m.flows.resize(targets);  // their vectors reused: Route clears them
  m.kept.assign(targets, false);
  m.start_tables.assign(targets, nullptr);
  std::vector<double> through(topo.num_nodes(), 0.0);
  for (size_t t = 0; t < targets; ++t) {
    m.kept[t] = dags[t] != nullptr;
    if (m.kept[t]) m.start_tables[t] = start->SharedTable(problem.targets()[t]);
    absl::Status routed =
        problem.Route(t, m.w[t], m.kept[t] ? &dags[t] : nullptr, aligned[t], m.flows[t], through);
    if (!routed.ok()) {
      m.problem.reset();
      return routed;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> MarginalRouter::LoadsUnder(const RoutingTables& tables) {
  Impl& m = *impl_;
  if (!m.problem) return absl::FailedPreconditionError("marginal routing: no demand started");
  const Problem& problem = *m.problem;
  const Topology& topo = *m.topo;
  std::vector<double> loads = problem.host_loads();
  std::vector<double> through(topo.num_nodes(), 0.0);
  DestinationFlow flow;
  if (m.table_dags_open != problem.open()) {  // graphs made over other links: none holds
    m.table_dags.assign(problem.targets().size(), {});
    m.table_dags_open = problem.open();
  }
  for (size_t t = 0; t < problem.targets().size(); ++t) {
    if (!problem.HasTraffic(t)) continue;
    const NodeId target = problem.targets()[t];
    const DestinationTable* table =
        tables.num_nodes() == topo.num_nodes() && tables.IsDestination(target)
            ? tables.Table(target)
            : nullptr;
    if (table == nullptr || table->num_nodes() != topo.num_nodes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no routing table toward '", topo.node(target).name, "'"));
    }
    const DestinationFlow* f = &m.flows[t];
    if (!m.kept[t] || table != m.start_tables[t].get()) {
      // The table's graph, made once for every table object while the usable links stay.
      auto& [of, graph] = m.table_dags[t];
      if (of.get() != table) {
        of = tables.SharedTable(target);
        ASSIGN_OR_RETURN(graph, problem.DagOfTable(t, *table));
      }
      RETURN_IF_ERROR(problem.Route(t, {}, &graph.first, graph.second, flow, through));
      f = &flow;
    }
    for (const auto& [l, x] : f->links) loads[l] += x;
  }
  return loads;
}

absl::StatusOr<MarginalRoutingResult> MarginalRouter::Minimise(
    const MarginalRoutingConfig& config, const std::vector<double>* other_loads) {
  Impl& m = *impl_;
  if (!m.problem) return absl::FailedPreconditionError("marginal routing: no demand started");
  // The started demand is spent whatever happens below; after an error nothing is held.
  std::optional<Problem> started = std::move(m.problem);
  m.problem.reset();
  Problem& problem = *started;
  const Topology& topo = *m.topo;
  const double unit_bps = m.unit_bps;
  if (other_loads != nullptr) problem.AddToHostLoads(*other_loads);
  const std::vector<LinkScale> scales = ScalesOf(topo, unit_bps, config.objective);
  const size_t targets = problem.targets().size();
  Weights& w = m.w;
  std::vector<DestinationFlow>& flows = m.flows;
  std::vector<bool>& kept = m.kept;
  const size_t first_destination = m.next_destination;
  std::vector<double> through(topo.num_nodes(), 0.0);  // Route's, by NodeId
  const auto max_utilization = [&](const std::vector<double>& loads) {
    return MaxUtilization(topo, Scaled(loads, unit_bps));
  };

  MarginalRoutingResult result;
  RoutingObjective objective = config.objective;
  // The loads under w: at the start of every round, those the last round ended with.
  std::vector<double> loads = problem.Loads(flows);
  objective.reference_utilization = max_utilization(loads);
  if (!(objective.reference_utilization > 0)) objective.reference_utilization = 1;
  bool steady = false;
  const int64_t links = topo.num_links();
  int64_t iteration_scans = 0;  // a step of every destination with traffic
  for (size_t t = 0; t < targets; ++t) iteration_scans += problem.HasTraffic(t) ? links : 0;
  const auto out_of_scans = [&] {
    return config.max_link_scans > 0 && result.link_scans >= config.max_link_scans;
  };
  // Where each sweep over the destinations starts: where the last call's stopped.
  size_t next = targets == 0 ? 0 : first_destination % targets;
  for (int round = 0; round < config.reference_rounds && !result.out_of_scans; ++round) {
    result.reference_trace.push_back(objective.reference_utilization);
    ObjectiveTerms terms = Evaluate(scales, loads, objective);
    result.lower_bound = 0;
    result.settled = false;
    // Each destination's step scale, by Armijo backtracking: halved until J falls, doubled
    // (up to 1) after each step taken. Destinations move one after the other (Gauss-Seidel),
    // each against the loads the others left, so one that needs a short step does not hold
    // the rest back.
    std::vector<double> step(targets, 1.0);
    std::vector<std::tuple<LinkId, double, LinkTerm>> changed;  // link, load change, term
    std::vector<std::pair<LinkId, double>> undo;
    Marginals marginals;
    DestinationFlow next_flow;
    LinkSet touched(topo.num_links());
    std::vector<double> was(topo.num_links(), 0.0), is(topo.num_links(), 0.0);  // by LinkId
    for (int i = 0; i < config.max_iterations; ++i) {
      if (out_of_scans()) {
        result.out_of_scans = true;
        break;
      }
      // The bound costs a shortest-path tree per destination: every tenth iteration. None
      // when fewer than ten iterations are left: a capped minimisation stops on its cap.
      const bool ten_left = config.max_iterations - i >= 10 &&
                            (config.max_link_scans == 0 ||
                             config.max_link_scans - result.link_scans >= 10 * iteration_scans);
      if (i % 10 == 0 && ten_left) {
        result.lower_bound = std::max(result.lower_bound, LowerBound(problem, flows, terms));
      }
      if (terms.value - result.lower_bound <= config.gap_tolerance * std::abs(terms.value)) {
        result.settled = true;
        break;
      }
      const double before = terms.value;
      bool partial = false;  // the sweep stopped on the bound before its last destination
      for (size_t j = 0; j < targets; ++j) {
        const size_t t = (next + j) % targets;
        if (!problem.HasTraffic(t)) continue;
        if (result.link_scans > 0 && out_of_scans()) {
          result.out_of_scans = partial = true;
          next = t;
          break;
        }
        bool have_marginals = false;  // of w[t] under terms: the same for every halving
        for (; step[t] > 1e-9; step[t] /= 2) {
          result.link_scans += links;
          if (!have_marginals) {
            ComputeMarginals(problem, t, w[t], *flows[t].dag, terms, marginals);
            have_marginals = true;
          }
          undo.clear();
          StepToward(problem, t, flows[t], marginals, terms, config, step[t], w[t], undo);
          if (undo.empty()) {
            // Nothing to move (every next hop within the tie tolerance of the best): what the
            // step below would do with a step of no change, without routing it.
            step[t] = std::min(1.0, step[t] * 2);
            break;
          }
          // A step that only reweights next hops keeps the order of the flow.
          const bool same_hops = std::all_of(undo.begin(), undo.end(), [&](const auto& u) {
            return (w[t][u.first] > 0) == (u.second > 0);
          });
          RETURN_IF_ERROR(problem.Route(t, w[t], same_hops ? &flows[t].dag : nullptr, nullptr,
                                        next_flow, through));
          // J after the step, from the terms of the links whose load it changes: those either
          // flow carries, in the order of their ids (so that the sum is the same however the
          // flows list them).
          for (const auto& [l, x] : flows[t].links) touched.Mark(l), was[l] = x;
          for (const auto& [l, x] : next_flow.links) touched.Mark(l), is[l] = x;
          changed.clear();
          double value = terms.value;
          touched.Drain([&](LinkId l) {
            const double delta = is[l] - was[l];
            is[l] = was[l] = 0;
            if (delta == 0) return;
            const LinkTerm after_l = TermOf(scales[l], loads[l] + delta, objective);
            value += after_l.value - terms.values[l];
            changed.push_back({l, delta, after_l});
          });
          if (value <= terms.value) {
            for (const auto& [l, delta, term] : changed) {
              loads[l] += delta;
              terms.first[l] = term.first;
              terms.second[l] = term.second;
              terms.values[l] = term.value;
            }
            terms.value = value;
            std::swap(flows[t], next_flow);
            kept[t] = false;
            step[t] = std::min(1.0, step[t] * 2);
            break;
          }
          for (auto it = undo.rbegin(); it != undo.rend(); ++it) w[t][it->first] = it->second;
        }
        step[t] = std::max(step[t], 1e-9);
      }
      if (partial) break;
      // Against rounding drift of the loads updated in place.
      loads = problem.Loads(flows);
      terms = Evaluate(scales, loads, objective);
      // Every step taken lowered J as the incremental sums saw it; recomputed from scratch,
      // J must not have risen over the sweep beyond rounding.
      if (terms.value > before + 1e-9 * std::abs(before)) result.oscillated = true;
      if (!(terms.value < before)) break;  // no step lowers J: as good as these weights get
      ++result.iterations;
      result.objective_trace.push_back(terms.value);
      result.max_utilization.push_back(max_utilization(loads));
      const size_t n = result.objective_trace.size();
      if (i >= config.stall_iterations &&
          result.objective_trace[n - 1 - config.stall_iterations] - terms.value <=
              config.stall_tolerance * std::abs(terms.value)) {
        result.settled = true;
        break;
      }
    }
    const double now = max_utilization(loads);
    steady =
        std::abs(now - objective.reference_utilization) <= 0.01 * objective.reference_utilization;
    if (steady || !(now > 0) || round + 1 == config.reference_rounds || out_of_scans()) {
      result.out_of_scans = result.out_of_scans || (!steady && out_of_scans());
      break;
    }
    objective.reference_utilization = now;
  }
  // The reference turned back (rose after falling, or fell after rising) and never steadied;
  // the last minimisation's maximum counts as the next reference would have.
  std::vector<double> u = result.reference_trace;
  if (!result.max_utilization.empty()) u.push_back(result.max_utilization.back());
  for (size_t i = 2; !steady && i < u.size(); ++i) {
    if ((u[i] - u[i - 1]) * (u[i - 1] - u[i - 2]) < 0) result.oscillated = true;
  }
  result.reference_utilization = objective.reference_utilization;
  result.tables = TablesOf(problem, w, config.min_weight, m.start_tables, kept);
  // The weights and flows of what the tables say (next hops below min_weight dropped, the
  // rest renormalised); a kept destination's are its table's already.
  for (size_t t = 0; t < targets; ++t) {
    if (kept[t]) continue;
    if (problem.WeightsOf(*result.tables.SharedTable(problem.targets()[t]), w[t])) {
      ASSIGN_OR_RETURN(flows[t].dag, problem.Order(w[t]));
    }
    const DagPtr dag = flows[t].dag;
    RETURN_IF_ERROR(problem.Route(t, w[t], &dag, nullptr, flows[t], through));
  }
  result.loads = problem.Loads(flows);  // other_loads included
  result.objective = EvaluateObjective(topo, result.loads, unit_bps, objective).value;
  m.held.tables.resize(targets);
  m.held.dags.resize(targets);
  m.held.aligned.resize(targets);
  for (size_t t = 0; t < targets; ++t) {
    m.held.tables[t] = result.tables.SharedTable(problem.targets()[t]);
    m.held.dags[t] = flows[t].dag;
    // A kept destination routed by aligned weights still has them; the others get them.
    m.held.aligned[t] = flows[t].aligned;
    if (m.held.aligned[t] == nullptr && flows[t].dag != nullptr) {
      auto weights = std::make_shared<std::vector<double>>();
      weights->reserve(flows[t].dag->links.size());
      for (const Out& out : flows[t].dag->links) weights->push_back(w[t][out.link]);
      m.held.aligned[t] = std::move(weights);
    }
  }
  m.held.weights = std::move(w);
  m.held.open = problem.open();
  m.next_destination = next;
  return result;
}

absl::StatusOr<MarginalRoutingResult> MinimiseRoutingObjective(
    const Topology& topo, const std::vector<Demand>& demand, double unit_bps,
    const MarginalRoutingConfig& config, const RoutingTables* start,
    const std::vector<double>* other_loads) {
  MarginalRouter router;
  RETURN_IF_ERROR(router.Start(topo, demand, unit_bps, start));
  return router.Minimise(config, other_loads);
}

}  // namespace dar
