// What a forwarder holds between the controller and forwarding: the tables the controller
// pushed, the forwarder's own view of which links are up, and a static fallback table it
// computes itself (ARCHITECTURE.md, "Fallback chain").
//
// Which table it serves is the fallback chain's (core/fallback_chain.h): current, last good
// (a newer offer was refused), static (nothing fresh). The refused table is never installed.
//
// A link reported down does not discard the current table: forwarders skip dead next hops
// locally. The event is counted; offers with a next hop over a link the view knows to be
// down are refused (until SetLinkUp reports it up again).
#ifndef DAR_CORE_TABLE_MANAGER_H_
#define DAR_CORE_TABLE_MANAGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/fallback_chain.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "core/units.h"

namespace dar {

struct TableManagerConfig {
  // The current table is stale once it is more than this old (by its install time) and no
  // newer one has been accepted since; the static table is then served.
  // REQUIRES: > 0.
  Duration stale_after = Seconds(3);
  // Validate offers (ValidateTables against the manager's link view) before accepting them.
  // Turn off only where the producer has validated against the same view already; versions
  // are checked either way.
  bool validate = true;
};

// Event counts since construction. Every count is of offers or of transitions (the chain's,
// inherited), never of calls.
struct TableManagerCounters : FallbackCounters {
  int64_t offered = 0;          // Offer calls
  int64_t accepted = 0;         // offers installed as current
  int64_t refused_version = 0;  // offers whose version was not above every accepted one
  // Offers refused by the validator; offered == accepted + refused_version + refused_invalid.
  int64_t refused_invalid = 0;
  // Offers refused by the validator, by reason. One offer counts once under each reason its
  // ValidationReport has a nonzero count for, so these may sum to more than refused_invalid.
  int64_t refused_loop = 0;
  int64_t refused_dead_link = 0;  // includes links that do not exist or leave another node
  int64_t refused_black_hole = 0;
  int64_t refused_bad_weights = 0;
  int64_t refused_missing = 0;  // a destination without a table
  // Link-down reports for a link that the current table had a next hop over.
  int64_t link_down_under_current = 0;
};

// Holds a forwarder's routing tables and chooses the one to forward with. Pure computation:
// time is given by the caller with every call, and must not go backwards from call to call.
// Not thread-safe.
class TableManager {
 public:
  // `topology` is the configured graph; its links' `up` fields are the initial link view.
  // Computes the static table from it (hop count: link metrics are ignored).
  // REQUIRES: config.stale_after > 0.
  TableManager(Topology topology, const TableManagerConfig& config);

  TableManager(const TableManager&) = delete;
  TableManager& operator=(const TableManager&) = delete;

  // Offers a table set from the controller. Accepted (it becomes current) when the chain takes
  // its version (FallbackChain::CheckVersion) and, with config.validate, ValidateTables finds
  // nothing wrong against the current link view. Errors (the offer is then dropped, counted,
  // and kept in last_refusal()): FailedPrecondition "... is not newer than the installed
  // version ...", or FailedPrecondition with the validator's counts and first messages. A
  // version refusal leaves the source as it was; an invalid table makes a fresh current table
  // kLastGood.
  // REQUIRES: tables != nullptr.
  absl::Status Offer(std::shared_ptr<const RoutingTables> tables, Time now);

  // The forwarder learned that one direction of a link is up or down (carrier, missed
  // probes). Updates the link view and, if the state changed, recomputes the static table.
  // The current table is kept even if it has next hops over the link (counted in
  // link_down_under_current). Errors: InvalidArgument for a link id not in the topology.
  absl::Status SetLinkUp(LinkId link, bool up, Time now);

  // The table to forward with at `now`; never null. The pointer stays valid until the next
  // Offer or SetLinkUp call.
  const RoutingTables* Active(Time now);
  // The same, shared: it stays valid however long the holder (a forwarder) keeps it.
  std::shared_ptr<const RoutingTables> ActiveShared(Time now);
  // Where Active(now) comes from.
  TableSource ActiveSource(Time now);

  TableManagerCounters counters() const;
  // Why the last refused offer was refused (the error Offer returned); empty before any.
  const std::string& last_refusal() const { return last_refusal_; }
  // The configured topology with the link states learned so far.
  const Topology& view() const { return view_; }
  // The highest version accepted so far; nullopt before the first.
  std::optional<uint64_t> highest_version() const { return chain_.version(); }

 private:
  void RecomputeStatic();
  absl::Status Refuse(std::string message);

  TableManagerConfig config_;
  Topology view_;
  std::shared_ptr<const RoutingTables> static_;
  std::shared_ptr<const RoutingTables> current_;
  FallbackChain chain_;
  TableManagerCounters counters_;  // the offers'; the transitions are chain_'s
  std::string last_refusal_;
};

}  // namespace dar

#endif  // DAR_CORE_TABLE_MANAGER_H_
