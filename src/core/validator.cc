#include "core/validator.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/routing.h"

namespace dar {
namespace {

class Checker {
 public:
  Checker(const Topology& topo, ValidationReport& report) : topo_(topo), report_(report) {}

  void CheckDestination(NodeId dest, const DestinationTable& table) {
    dest_ = dest;
    const int n = topo_.num_nodes();
    next_.assign(n, {});
    std::vector<bool> transit(n, false);
    for (NodeId v = 0; v < n; ++v) {
      if (v == dest) continue;
      if (topo_.StubUplink(v) != kNoLink) {
        if (!table.At(v).empty()) {
          ++report_.dead_links;
          Note(absl::StrCat("stub host '", Name(v), "' has next hops toward '", Name(dest),
                            "' (a stub sends on its only link)"));
        }
        continue;
      }
      CheckHops(v, table.At(v));
      for (NodeId u : next_[v]) transit[u] = true;
    }
    const std::vector<bool> reaches = ReachesDestination(topo_, dest);
    for (NodeId v = 0; v < n; ++v) {
      if (v == dest) continue;
      if (transit[v] && topo_.node(v).kind == NodeKind::kHost) {
        ++report_.black_holes;
        Note(absl::StrCat("black hole: host '", Name(v), "' is sent transit traffic toward '",
                          Name(dest), "'"));
      } else if ((transit[v] || reaches[v]) && table.At(v).empty() &&
                 topo_.StubUplink(v) == kNoLink) {
        ++report_.black_holes;
        Note(absl::StrCat("black hole: node '", Name(v), "' has no next hop toward '", Name(dest),
                          "'"));
      }
    }
    FindLoops();
  }

  void Note(std::string message) {
    if (static_cast<int>(report_.messages.size()) < ValidationReport::kMaxMessages) {
      report_.messages.push_back(std::move(message));
    }
  }

  const std::string& Name(NodeId n) const { return topo_.node(n).name; }

 private:
  // Checks the links and weights of `v`'s next hops and records the valid ones in next_.
  void CheckHops(NodeId v, absl::Span<const NextHop> hops) {
    RowWeights weights;
    for (const NextHop& hop : hops) {
      const bool exists = hop.link >= 0 && hop.link < topo_.num_links();
      if (!exists || topo_.link(hop.link).src != v || !topo_.link(hop.link).up) {
        ++report_.dead_links;
        Note(absl::StrCat("dead link: node '", Name(v), "' toward '", Name(dest_), "' uses link ",
                          hop.link,
                          !exists                         ? " which does not exist"
                          : topo_.link(hop.link).src != v ? " which leaves another node"
                                                          : " which is down"));
      } else {
        next_[v].push_back(topo_.link(hop.link).dst);
      }
      weights.Add(hop.weight);
    }
    if (!hops.empty() && !weights.ok()) {
      ++report_.bad_weights;
      Note(absl::StrCat("bad weights: node '", Name(v), "' toward '", Name(dest_),
                        "': weights sum to ", weights.sum(),
                        weights.first_bad() >= 0 ? " and include a bad weight" : ""));
    }
  }

  // Counts the cycles of next_ (one per back edge of a depth-first search).
  void FindLoops() {
    enum : uint8_t { kWhite, kGrey, kBlack };
    const int n = topo_.num_nodes();
    std::vector<uint8_t> color(n, kWhite);
    std::vector<std::pair<NodeId, size_t>> stack;  // node, index of its next edge
    for (NodeId root = 0; root < n; ++root) {
      if (color[root] != kWhite) continue;
      color[root] = kGrey;
      stack.push_back({root, 0});
      while (!stack.empty()) {
        auto& [v, i] = stack.back();
        if (i == next_[v].size()) {
          color[v] = kBlack;
          stack.pop_back();
          continue;
        }
        const NodeId u = next_[v][i++];
        if (color[u] == kWhite) {
          color[u] = kGrey;
          stack.push_back({u, 0});
        } else if (color[u] == kGrey) {
          ++report_.loops;
          std::vector<std::string> cycle;
          size_t start = stack.size() - 1;
          while (stack[start].first != u) --start;
          for (size_t j = start; j < stack.size(); ++j) cycle.push_back(Name(stack[j].first));
          cycle.push_back(Name(u));
          Note(absl::StrCat("loop toward '", Name(dest_), "': ", absl::StrJoin(cycle, " -> ")));
        }
      }
    }
  }

  const Topology& topo_;
  ValidationReport& report_;
  NodeId dest_ = kNoNode;
  std::vector<std::vector<NodeId>> next_;  // per node, heads of its valid next hops
};

}  // namespace

absl::Status ValidationReport::ToStatus() const {
  if (ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("invalid routing tables: ", loops, " loops, ", dead_links, " dead links, ",
                   black_holes, " black holes, ", bad_weights, " bad weights, ", missing,
                   " missing tables; ", absl::StrJoin(messages, "; ")));
}

ValidationReport ValidateTables(const Topology& topo, const RoutingTables& tables) {
  ValidationReport report;
  Checker checker(topo, report);
  for (NodeId dest : topo.Destinations()) {
    const DestinationTable* table = nullptr;
    if (tables.num_nodes() == topo.num_nodes() && tables.IsDestination(dest)) {
      table = tables.Table(dest);
    }
    if (table == nullptr || table->num_nodes() != topo.num_nodes()) {
      ++report.missing;
      checker.Note(absl::StrCat("missing: no table toward '", checker.Name(dest), "'"));
      continue;
    }
    checker.CheckDestination(dest, *table);
  }
  return report;
}

}  // namespace dar
