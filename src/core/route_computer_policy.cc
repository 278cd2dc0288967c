// RouteComputer (core/route_computer.h): the learned policy's part of a cycle. Which rows it
// weighs (those whose next hops or inputs changed), the check of its weights, and the tables
// refined with them, the engine's kept where the policy fails.
#include <algorithm>
#include <string>

#include "base/status_macros.h"
#include "core/route_computer.h"
#include "core/routing_table.h"

namespace dar {

namespace {

// Whether two blocks have the same next hops in every row, in the same order, whatever their
// weights.
bool SameNextHops(const DestinationTable::Block& a, const DestinationTable::Block& b) {
  return a.offsets == b.offsets && SameLinks(a.hops, b.hops);
}

// The rows of a block: its offsets past the last row are 0.
uint32_t RowsOf(const DestinationTable::Block& block) {
  uint32_t r = 0;
  while (r < DestinationTable::kRowsPerBlock && block.offsets[r + 1] >= block.offsets[r]) ++r;
  return r;
}

// The rows of a block with two or more next hops.
int64_t RowsWithChoice(const DestinationTable::Block& block) {
  int64_t n = 0;
  for (uint32_t r = 0, rows = RowsOf(block); r < rows; ++r) {
    n += block.offsets[r + 1] - block.offsets[r] >= 2;
  }
  return n;
}

// Whether two blocks hold the same rows, bit for bit.
bool SameBlock(const DestinationTable::Block& a, const DestinationTable::Block& b) {
  if (a.offsets != b.offsets || a.hops.size() != b.hops.size()) return false;
  for (size_t i = 0; i < a.hops.size(); ++i) {
    if (a.hops[i].link != b.hops[i].link ||
        std::bit_cast<uint64_t>(a.hops[i].weight) != std::bit_cast<uint64_t>(b.hops[i].weight)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status RouteComputer::ApplyPolicy(absl::Span<const LinkState> states, RouteCycle& out) {
  ++stats_.policy_cycles;
  const int links = topology_.num_links();
  std::vector<double> present(links);
  for (LinkId l = 0; l < links; ++l) {
    // Unmeasured links (the simulator) leave present_utilisation unset: the last sample's.
    present[l] = std::clamp(
        config_.measured_links ? states[l].present_utilisation : last_[l].utilisation, 0.0, 1.0);
  }
  std::array<const RoutingTables*, kTrafficClasses> tables{}, previous{};
  std::array<std::vector<const DiffusionEngine*>, kTrafficClasses> engines;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    tables[cls] = out.tables[cls].get();
    previous[cls] = previous_[cls].get();
    for (const std::unique_ptr<DiffusionEngine>& e : engines_[cls]) engines[cls].push_back(e.get());
  }
  // The destinations to weigh: all of them unless last cycle's tables are the policy's.
  const int every = policy_held_ ? config_.policy_refresh_cycles : 1;
  const int turn = static_cast<int>(stats_.policy_cycles % every);
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> engine_before;
  std::array<const RoutingTables*, kTrafficClasses> engine_previous{};
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    engine_before[cls] = std::exchange(previous_engine_[cls], out.tables[cls]);
    engine_previous[cls] = engine_before[cls].get();
    ChooseWeighed(cls, *tables[cls], engine_previous[cls], every, turn);
  }
  PolicyInputs in;
  in.topology = &topology_;
  in.weigh = weigh_;
  in.states = states;
  in.present_utilisation = present;
  in.tables = tables;
  in.engines = engines;
  in.previous = previous;
  in.previous_engine = engine_previous;
  in.scales = config_.scales;
  in.min_weight = config_.diffusion.min_weight;
  in.reward_terms = policy_->wants_reward_terms();
  batch_.cycle = stats_.cycles;
  features_.Build(in, batch_, *executor_);
  policy_weights_.assign(batch_.candidates.size(), std::numeric_limits<double>::quiet_NaN());
  if (!batch_.decisions.empty()) {
    RETURN_IF_ERROR(policy_->Weigh(batch_, absl::MakeSpan(policy_weights_), *executor_));
  }
  // Each class's weights checked, then its tables refined, the classes side by side; any
  // class's bad weight leaves every class the engine's tables.
  std::array<absl::Status, kTrafficClasses> checked;
  std::array<std::shared_ptr<const RoutingTables>, kTrafficClasses> refined;
  std::array<int64_t, kTrafficClasses> held{};
  executor_->RunEach(kTrafficClasses, [&](int cls) {
    checked[cls] = CheckPolicyWeights(cls);
    if (checked[cls].ok()) {
      refined[cls] = RefinedTables(cls, *out.tables[cls], engine_previous[cls], held[cls]);
    }
  });
  for (const absl::Status& s : checked) RETURN_IF_ERROR(s);
  out.tables = refined;
  stats_.policy_decisions += static_cast<int64_t>(batch_.decisions.size());
  for (int64_t h : held) stats_.policy_rows_held += h;
  return absl::OkStatus();
}

void RouteComputer::ChooseWeighed(int cls, const RoutingTables& engine,
                                  const RoutingTables* engine_before, int every, int turn) {
  const std::vector<NodeId>& destinations = engine.destinations();
  std::vector<WeighRows>& weigh = weigh_[cls];
  weigh.assign(destinations.size(), WeighRows::kAll);
  const RoutingTables* previous = previous_[cls].get();
  if (every == 1 || previous == nullptr) return;
  for (size_t i = 0; i < destinations.size(); ++i) {
    const NodeId d = destinations[i];
    const DestinationTable* now = engine.Table(d);
    const DestinationTable* before = previous->IsDestination(d) ? previous->Table(d) : nullptr;
    if (static_cast<int>(i % static_cast<size_t>(every)) == turn || now == nullptr ||
        before == nullptr || !now->SameLayoutAs(*before)) {
      continue;  // in turn, or laid out anew: every row
    }
    // Out of turn, and laid out as last cycle (its rows found where they were): the rows
    // whose next hops changed, none if the engine changed no row.
    const bool same_engine_table = engine_before != nullptr && engine_before->IsDestination(d) &&
                                   engine_before->Table(d) == now;
    weigh[i] = same_engine_table ? WeighRows::kNone : WeighRows::kChanged;
  }
}

absl::Status RouteComputer::CheckPolicyWeights(int cls) const {
  // The forwarders' validator refuses a table with a weight <= 0, so that is checked here too.
  for (const PolicyDecision& d : batch_.decisions) {
    if (d.cls != cls) continue;
    RowWeights weights;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) weights.Add(policy_weights_[i]);
    if (weights.first_bad() >= 0) {
      return absl::InvalidArgumentError("a weight is not finite or not > 0");
    }
    if (!weights.sums_to_one()) {
      return absl::InvalidArgumentError("a row's weights do not sum to 1 (within 1e-6)");
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const RoutingTables> RouteComputer::RefinedTables(
    int cls, const RoutingTables& engine, const RoutingTables* engine_before, int64_t& held) {
  constexpr uint32_t kRows = DestinationTable::kRowsPerBlock;
  const int nodes = topology_.num_nodes();
  auto refined = std::make_shared<RoutingTables>(nodes, engine.destinations());
  refined->set_version(engine.version());
  const RoutingTables* previous = previous_[cls].get();
  const std::vector<PolicyDecision>& decisions = batch_.decisions;
  const std::vector<WeighRows>& weigh = weigh_[cls];
  // Decisions are by class, then destination in the tables' order, then node.
  size_t i = 0;
  while (i < decisions.size() && decisions[i].cls != cls) ++i;
  const auto toward = [&](NodeId d) {
    return i < decisions.size() && decisions[i].cls == cls && decisions[i].destination == d;
  };
  DestinationTable::Block scratch;  // the block being refined
  for (size_t index = 0; index < engine.destinations().size(); ++index) {
    const NodeId d = engine.destinations()[index];
    if (weigh[index] == WeighRows::kNone) {
      // The engine changed no row toward d: last cycle's table, weights and all.
      DestinationTablePtr kept = previous->SharedTable(d);
      for (const DestinationTable::BlockPtr& block : kept->blocks()) held += RowsWithChoice(*block);
      refined->Set(std::move(kept));
      continue;
    }
    DestinationTablePtr table = engine.SharedTable(d);
    if (weigh[index] == WeighRows::kAll && !toward(d)) {
      refined->Set(std::move(table));  // no choice anywhere toward d
      continue;
    }
    // Out of turn (ChooseWeighed): last cycle's table is laid out as this one, and its rows
    // with the same next hops were not weighed: they keep last cycle's weights.
    const bool in_part = weigh[index] == WeighRows::kChanged;
    const DestinationTable* before =
        previous != nullptr && previous->IsDestination(d) ? previous->Table(d) : nullptr;
    // The engine's layout (row map, blocks) stands: a refined row has the engine row's next
    // hops, in its order, with other weights. Blocks without a decision are the engine's (or,
    // out of turn, last cycle's where their next hops are); the others are copied and their
    // decisions' weights written over, and where that gives last cycle's block (its rows
    // kept), last cycle's block is shared instead of a new one.
    const std::shared_ptr<const DestinationTable::RowMap>& row_of = table->row_map();
    std::vector<DestinationTable::BlockPtr> blocks = table->blocks();
    const bool same_layout = before != nullptr && before->SameLayoutAs(*table);
    const auto block_of = [&](NodeId v) {
      return static_cast<uint32_t>(row_of == nullptr ? v : (*row_of)[v]) / kRows;
    };
    // Out of turn, the engine's table of last cycle where laid out as this one: a block that
    // is the same object there has the same next hops.
    const DestinationTable* engine_was =
        in_part && engine_before != nullptr && engine_before->IsDestination(d)
            ? engine_before->Table(d)
            : nullptr;
    if (engine_was != nullptr && !engine_was->SameLayoutAs(*table)) engine_was = nullptr;
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      const bool decided = toward(d) && block_of(decisions[i].node) == b;
      if (!decided && !in_part) continue;
      const DestinationTable::BlockPtr* last = same_layout ? &before->blocks()[b] : nullptr;
      if (!decided && last != nullptr &&
          ((engine_was != nullptr && engine_was->blocks()[b] == blocks[b]) ||
           SameNextHops(*blocks[b], **last))) {
        // No row of it weighed, and last cycle's next hops: last cycle's block.
        held += RowsWithChoice(**last);
        blocks[b] = *last;
        continue;
      }
      scratch.offsets = blocks[b]->offsets;
      scratch.hops.assign(blocks[b]->hops.begin(), blocks[b]->hops.end());
      if (in_part && last != nullptr) {
        const DestinationTable::Block& old = **last;
        for (uint32_t r = 0, rows = std::min(RowsOf(scratch), RowsOf(old)); r < rows; ++r) {
          const uint32_t n = scratch.offsets[r + 1] - scratch.offsets[r];
          NextHop* row = scratch.hops.data() + scratch.offsets[r];
          const absl::Span<const NextHop> kept(old.hops.data() + old.offsets[r],
                                               old.offsets[r + 1] - old.offsets[r]);
          if (n >= 2 && SameLinks(absl::Span<const NextHop>(row, n), kept)) {
            std::copy(kept.begin(), kept.end(), row);
            ++held;
          }
        }
      }
      for (; toward(d) && block_of(decisions[i].node) == b; ++i) {
        const PolicyDecision& decision = decisions[i];
        const NodeId v = decision.node;
        const uint32_t r = static_cast<uint32_t>(row_of == nullptr ? v : (*row_of)[v]) % kRows;
        NextHop* row = scratch.hops.data() + scratch.offsets[r];
        const double* weights = policy_weights_.data() + decision.first;
        // Hysteresis: last cycle's row stands while it has the same next hops and the new
        // weights differ from it by less than the engine's threshold.
        const absl::Span<const NextHop> old =
            before != nullptr ? before->At(v) : absl::Span<const NextHop>();
        bool keep = old.size() == decision.count;
        double diff = 0;
        for (uint32_t c = 0; c < decision.count && keep; ++c) {
          // A row's links are distinct, and last cycle's row mostly has them in this order.
          const NextHop* it = old[c].link == row[c].link
                                  ? &old[c]
                                  : std::find_if(old.begin(), old.end(), [&](const NextHop& o) {
                                      return o.link == row[c].link;
                                    });
          if (it == old.end()) {
            keep = false;
          } else {
            diff += std::abs(weights[c] - it->weight);
          }
        }
        keep = keep && diff < config_.diffusion.hysteresis;
        if (keep) {
          std::copy(old.begin(), old.end(), row);
        } else {
          for (uint32_t c = 0; c < decision.count; ++c) row[c].weight = weights[c];
        }
      }
      if (last != nullptr && SameBlock(**last, scratch)) {
        blocks[b] = *last;
      } else {
        // Moved, not copied: the next block refined starts from a copy of its own anyway.
        blocks[b] = std::make_shared<const DestinationTable::Block>(std::move(scratch));
        scratch = DestinationTable::Block();
      }
    }
    // Every block last cycle's: so is the table.
    if (same_layout && blocks == before->blocks()) {
      refined->Set(previous->SharedTable(d));
    } else {
      refined->Set(std::make_shared<const DestinationTable>(d, nodes, row_of, std::move(blocks)));
    }
  }
  return refined;
}

}  // namespace dar
