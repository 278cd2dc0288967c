#include "agent/table_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/cord.h"
#include "agent/dataplane.h"
#include "base/files.h"
#include "base/fnv.h"
#include "base/status_macros.h"
#include "core/routing.h"
#include "core/routing_table.h"
#include "fmt/format.h"
#include "security/certs.h"

namespace dar::agent {
namespace {

// The largest table file read back: far above any overlay's table.
constexpr size_t kMaxTableFileBytes = 64 << 20;
constexpr char kFileMagic[] = "dar-agent-table";
// 1: whole tables; 2: a compact one (RouteTable.default_route, stub_digest), which an agent
// that knows only 1 must not read as a table with rows missing.
constexpr int kFileFormat = 1;
constexpr int kCompactFileFormat = 2;

std::string RowName(const v1::Route& r) {
  return fmt::format("destination {} class {}", r.destination_id(), r.traffic_class());
}

absl::Status Refusal(const std::string& message) { return absl::FailedPreconditionError(message); }

constexpr char kCompactFormPayload[] = "dar.v1/compact-form-refused";

// A refusal of the compact form itself (IsCompactFormRefusal).
absl::Status FormRefusal(const std::string& message) {
  absl::Status s = Refusal(message);
  s.SetPayload(kCompactFormPayload, absl::Cord("1"));
  return s;
}

absl::Status NonZeroVersion(uint64_t version) {
  return version == 0 ? Refusal("version 0 is not a table version") : absl::OkStatus();
}

}  // namespace

bool IsCompactFormRefusal(const absl::Status& status) {
  return status.GetPayload(kCompactFormPayload).has_value();
}

TableStore::TableStore(const AgentConfig& config, const Topology& topology, Duration stale_after,
                       JsonLog* log)
    : config_(config),
      topology_(topology),
      log_(log),
      chain_(stale_after),
      link_up_(static_cast<size_t>(topology.num_links()), true) {
  for (auto& rows : rows_.rows) rows.resize(static_cast<size_t>(topology.num_nodes()));
  stub_switch_ = StubSwitches(topology);
  std::vector<uint32_t> ids;
  for (const AgentNodeConfig& n : config.nodes) {
    node_of_.emplace(n.id, static_cast<NodeId>(ids.size()));
    ids.push_back(n.id);
  }
  stub_digest_ = StubDigest(stub_switch_, ids);
  RecomputeStatic();
}

const v1::Route* TableStore::SentRow(const Rows& held, int cls, NodeId dest) const {
  const auto& rows = held.rows[static_cast<size_t>(cls)];
  if (rows[dest].has_value()) return &*rows[dest];
  const NodeId t = stub_switch_[dest];
  if (held.stub_digest == 0 || t == kNoNode || t == config_.self || !rows[t].has_value()) {
    return nullptr;
  }
  return &*rows[t];
}

void TableStore::Log(LogLevel level, std::string_view msg, const nlohmann::json& fields) const {
  if (log_ != nullptr) log_->Write(level, msg, fields);
}

std::string TableStore::file_path() const {
  return (std::filesystem::path(config_.state_dir) / kTableFileName).string();
}

void TableStore::RecomputeStatic() {
  Topology view = topology_;
  for (LinkId l = 0; l < view.num_links(); ++l) view.mutable_link(l).up = link_up_[l];
  static_ = AgentTablesFromRouting(ComputeStaticTables(view), config_.self, /*is_static=*/true);
}

std::vector<bool> TableStore::Reachable() const {
  std::vector<bool> seen(static_cast<size_t>(topology_.num_nodes()), false);
  std::deque<NodeId> queue = {config_.self};
  seen[config_.self] = true;
  while (!queue.empty()) {
    const NodeId v = queue.front();
    queue.pop_front();
    for (const LinkId l : topology_.node(v).out_links) {
      const NodeId w = topology_.link(l).dst;
      if (!link_up_[l] || seen[w]) continue;
      seen[w] = true;
      queue.push_back(w);
    }
  }
  return seen;
}

absl::Status TableStore::CheckRoute(const v1::Route& route, CheckMode mode, NodeId& dest) const {
  dest = NodeOf(route.destination_id());
  if (dest == kNoNode) {
    return Refusal(fmt::format("unknown destination node id {}", route.destination_id()));
  }
  if (dest == config_.self) return Refusal("a route to this node itself");
  if (route.traffic_class() >= static_cast<uint32_t>(kTrafficClasses)) {
    return Refusal(
        fmt::format("unknown traffic class {} (0 latency, 1 bulk)", route.traffic_class()));
  }
  const double phi = route.potential();
  if (route.next_hops().empty()) {
    if (phi == std::numeric_limits<double>::infinity()) return absl::OkStatus();
    return Refusal(
        fmt::format("no next hops (a row without next hops must have potential +inf: unreachable), "
                    "potential {}",
                    phi));
  }
  if (!std::isfinite(phi)) return Refusal(fmt::format("potential {} is not finite", phi));
  RowWeights weights;
  std::set<uint32_t> seen;
  for (const v1::NextHop& h : route.next_hops()) {
    const NeighbourConfig* n = config_.FindNeighbour(h.neighbor_id());
    if (n == nullptr) {
      return Refusal(fmt::format("next hop {} is not a neighbour of node {}", h.neighbor_id(),
                                 config_.self_node().id));
    }
    if (!seen.insert(h.neighbor_id()).second) {
      return Refusal(fmt::format("next hop {} appears twice", h.neighbor_id()));
    }
    if (mode == CheckMode::kOffer && !link_up_[n->out_link]) {
      return Refusal(fmt::format("next hop {} is over a link the data plane reports down (via {})",
                                 h.neighbor_id(), n->interface));
    }
    weights.Add(h.weight());
    if (weights.first_bad() >= 0) {
      return Refusal(fmt::format("next hop {} has weight {}: must be finite and positive",
                                 h.neighbor_id(), h.weight()));
    }
    if (!std::isfinite(h.potential()) || !(h.potential() < phi)) {
      return Refusal(fmt::format(
          "next hop {} has potential {}, not strictly below this node's {} (not downhill: "
          "could loop)",
          h.neighbor_id(), h.potential(), phi));
    }
  }
  if (!weights.sums_to_one()) {
    return Refusal(fmt::format("weights sum to {:.9g}, not 1", weights.sum()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TableStore::Rows> TableStore::Check(const v1::RouteTable& table,
                                                   CheckMode mode) const {
  const uint64_t v = table.version();
  if (absl::Status s = NonZeroVersion(v); !s.ok()) return s;
  Rows rows;
  if (table.stub_digest() != 0 && table.stub_digest() != stub_digest_) {
    return FormRefusal(fmt::format(
        "the table leaves out rows toward stubs {:016x}, but this node's configuration has "
        "stubs {:016x} (its nodes and links differ from the controller's)",
        table.stub_digest(), stub_digest_));
  }
  if (table.base_version() != 0) {
    if (mode == CheckMode::kDisk) return Refusal("a delta, not a full table");
    if (current_ == nullptr) {
      return Refusal(fmt::format("a delta against version {}, but no table is installed",
                                 table.base_version()));
    }
    if (table.base_version() != VersionLocked()) {
      return Refusal(fmt::format("a delta against version {}, but the installed version is {}",
                                 table.base_version(), VersionLocked()));
    }
    if (table.stub_digest() != rows_.stub_digest) {
      return FormRefusal(
          fmt::format("a delta with stubs {:016x} against a table with stubs {:016x}",
                      table.stub_digest(), rows_.stub_digest));
    }
    rows = rows_;
  } else {
    for (auto& r : rows.rows) r.resize(static_cast<size_t>(topology_.num_nodes()));
  }
  rows.stub_digest = table.stub_digest();
  rows.default_route = nullptr;
  if (table.has_default_route()) {
    const uint32_t id = table.default_route().neighbor_id();
    const NeighbourConfig* n = config_.FindNeighbour(id);
    if (n == nullptr) {
      return Refusal(fmt::format("default route: node {} is not a neighbour of node {}", id,
                                 config_.self_node().id));
    }
    // Only where it cannot loop: at a stub, whose one neighbour has other links and, its
    // rows running downhill, never sends back to it.
    if (stub_switch_[config_.self] != n->node) {
      return FormRefusal(
          fmt::format("default route: node {} is no stub (a node on a single link "
                      "whose neighbour has several), and only a stub takes one",
                      config_.self_node().id));
    }
    if (mode == CheckMode::kOffer && !link_up_[n->out_link]) {
      return Refusal(
          fmt::format("default route: node {} is over a link the data plane reports down (via {})",
                      id, n->interface));
    }
    rows.default_route = n;
  }

  for (int i = 0; i < table.removed_size(); ++i) {
    const v1::RouteKey& k = table.removed(i);
    const NodeId dest = NodeOf(k.destination_id());
    if (dest == kNoNode) {
      return Refusal(
          fmt::format("removed[{}]: unknown destination node id {}", i, k.destination_id()));
    }
    if (k.traffic_class() >= static_cast<uint32_t>(kTrafficClasses)) {
      return Refusal(fmt::format("removed[{}]: unknown traffic class {}", i, k.traffic_class()));
    }
    rows.rows[k.traffic_class()][dest].reset();
  }

  std::set<std::pair<uint32_t, NodeId>> seen;
  for (int i = 0; i < table.routes_size(); ++i) {
    const v1::Route& r = table.routes(i);
    NodeId dest = kNoNode;
    if (absl::Status s = CheckRoute(r, mode, dest); !s.ok()) {
      return Refusal(fmt::format("routes[{}] ({}): {}", i, RowName(r), std::string(s.message())));
    }
    if (!seen.insert({r.traffic_class(), dest}).second) {
      return Refusal(fmt::format("routes[{}] ({}): a second row for it", i, RowName(r)));
    }
    rows.rows[r.traffic_class()][dest] = r;
  }

  if (mode == CheckMode::kOffer) {
    const std::vector<bool> reachable = Reachable();
    for (int cls = 0; cls < kTrafficClasses; ++cls) {
      for (NodeId d = 0; d < topology_.num_nodes(); ++d) {
        if (d == config_.self || !reachable[d] || rows.default_route != nullptr ||
            SentRow(rows, cls, d) != nullptr) {
          continue;
        }
        return Refusal(
            fmt::format("destination {} ({}) class {} is reachable but has no route (black hole)",
                        config_.nodes[d].id, config_.nodes[d].name, cls));
      }
    }
  }
  return rows;
}

std::shared_ptr<const AgentTables> TableStore::BuildTables(const Rows& rows,
                                                           uint64_t version) const {
  auto t = std::make_shared<AgentTables>();
  t->version = version;
  t->is_static = false;
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    auto& out = t->rows[cls];
    out.resize(static_cast<size_t>(topology_.num_nodes()));
    for (NodeId d = 0; d < topology_.num_nodes(); ++d) {
      if (d == config_.self) continue;
      const v1::Route* row = SentRow(rows, cls, d);
      if (row == nullptr) {
        if (rows.default_route != nullptr) {
          out[d].push_back(NextHop{rows.default_route->out_link, 1.0});
        }
        continue;
      }
      for (const v1::NextHop& h : row->next_hops()) {
        out[d].push_back(NextHop{config_.FindNeighbour(h.neighbor_id())->out_link, h.weight()});
      }
    }
  }
  return t;
}

absl::Status TableStore::Save(uint64_t version, const Rows& rows, int64_t computed_unix_ns) const {
  if (config_.state_dir.empty()) return absl::OkStatus();
  v1::RouteTable full;
  full.set_version(version);
  full.set_computed_unix_ns(computed_unix_ns);
  full.set_stub_digest(rows.stub_digest);
  if (rows.default_route != nullptr) {
    full.mutable_default_route()->set_neighbor_id(rows.default_route->id);
  }
  for (const auto& by_dest : rows.rows) {
    for (const auto& row : by_dest) {
      if (row.has_value()) *full.add_routes() = *row;
    }
  }
  std::string payload;
  if (!full.SerializeToString(&payload)) return absl::InternalError("cannot serialise the table");
  const std::string data =
      fmt::format(
          "{} {} node={} size={} fnv1a64={:016x}\n", kFileMagic,
          full.has_default_route() || full.stub_digest() != 0 ? kCompactFileFormat : kFileFormat,
          config_.self_node().id, payload.size(), Fnv1a64Of(payload)) +
      payload;

  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir, ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("{}: cannot create the state dir: {}", config_.state_dir, ec.message()));
  }
  return WriteFileAtomically(file_path(), data, 0644);
}

absl::Status TableStore::LoadFromDisk(Time now) {
  const std::string path = file_path();
  absl::StatusOr<std::string> data = ReadFile(path, kMaxTableFileBytes);
  if (absl::IsNotFound(data.status())) {
    Log(LogLevel::kInfo, "no table on disk: starting on the static table", {{"file", path}});
    return data.status();
  }
  const auto ignore = [&](const std::string& why) {
    MutexLock lock(&mu_);
    ++counters_.disk_ignored;
    Log(LogLevel::kWarn, "ignored the table on disk: starting on the static table",
        {{"file", path}, {"reason", why}});
    return absl::DataLossError(fmt::format("{}: {}", path, why));
  };
  if (!data.ok()) return ignore(std::string(data.status().message()));

  const size_t eol = data->find('\n');
  if (eol == std::string::npos || eol > 200) return ignore("no header line");
  const std::string header = data->substr(0, eol);
  char magic[32] = {};
  int format = 0;
  unsigned node = 0;
  size_t size = 0;
  uint64_t checksum = 0;
  if (std::sscanf(header.c_str(), "%31s %d node=%u size=%zu fnv1a64=%" SCNx64, magic, &format,
                  &node, &size, &checksum) != 5 ||
      std::string(magic) != kFileMagic) {
    return ignore(fmt::format("not a table file (header '{}')", header));
  }
  if (format != kFileFormat && format != kCompactFileFormat) {
    return ignore(fmt::format("unknown format {}", format));
  }
  if (node != config_.self_node().id) {
    return ignore(
        fmt::format("the table of node {}, not of this node ({})", node, config_.self_node().id));
  }
  const std::string_view payload = std::string_view(*data).substr(eol + 1);
  if (payload.size() != size) {
    return ignore(
        fmt::format("{} bytes of table, the header says {} (truncated?)", payload.size(), size));
  }
  if (Fnv1a64Of(payload) != checksum) return ignore("checksum mismatch (corrupted)");
  v1::RouteTable table;
  if (!table.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return ignore("the table does not parse");
  }

  MutexLock lock(&mu_);
  // A table already held (read before, or sent since) is newer or the same: the file changes
  // nothing.
  const absl::Status newer = chain_.CheckVersion(table.version());
  absl::StatusOr<Rows> rows = newer.ok() ? Check(table, CheckMode::kDisk) : newer;
  if (!rows.ok()) {
    ++counters_.disk_ignored;
    const std::string why = std::string(rows.status().message());
    Log(LogLevel::kWarn, "ignored the table on disk: starting on the static table",
        {{"file", path}, {"reason", why}});
    return absl::DataLossError(fmt::format("{}: {}", path, why));
  }
  rows_ = std::move(*rows);
  chain_.Accept(table.version(), now);
  current_ = BuildTables(rows_, table.version());
  ++counters_.loaded_from_disk;
  SourceLocked(now);
  Log(LogLevel::kInfo, "forwarding with the table from disk",
      {{"file", path}, {"version", table.version()}, {"routes", table.routes_size()}});
  return absl::OkStatus();
}

absl::Status TableStore::Offer(const v1::RouteTable& table, Time now) {
  MutexLock lock(&mu_);
  ++counters_.offered;
  // An older or repeated version changes nothing; a newer one refused for anything else makes
  // the table held the last good one.
  absl::Status version = NonZeroVersion(table.version());
  if (version.ok()) version = chain_.CheckVersion(table.version());
  absl::StatusOr<Rows> rows = version.ok() ? Check(table, CheckMode::kOffer) : version;
  if (!rows.ok()) {
    ++counters_.refused;
    last_refusal_ = std::string(rows.status().message());
    Log(LogLevel::kWarn, "table refused",
        {{"version", table.version()},
         {"base_version", table.base_version()},
         {"reason", last_refusal_}});
    if (version.ok()) {
      chain_.RefuseInvalid();
      SourceLocked(now);
    }
    return rows.status();
  }
  rows_ = std::move(*rows);
  chain_.Accept(table.version(), now);
  current_ = BuildTables(rows_, table.version());
  ++counters_.accepted;
  SourceLocked(now);
  Log(LogLevel::kDebug, "table accepted",
      {{"version", table.version()},
       {"base_version", table.base_version()},
       {"routes", table.routes_size()},
       {"removed", table.removed_size()}});
  if (absl::Status s = Save(table.version(), rows_, table.computed_unix_ns()); !s.ok()) {
    ++counters_.disk_write_errors;
    Log(LogLevel::kError, "cannot save the table",
        {{"version", table.version()}, {"error", std::string(s.message())}});
  }
  return absl::OkStatus();
}

void TableStore::SetNeighbourUp(NodeId neighbour, bool up) {
  MutexLock lock(&mu_);
  bool changed = false;
  for (const NeighbourConfig& n : config_.neighbours) {
    if (n.node != neighbour) continue;
    for (const LinkId l : {n.out_link, n.in_link}) {
      changed |= link_up_[l] != up;
      link_up_[l] = up;
    }
  }
  if (!changed) return;
  ++counters_.link_changes;
  RecomputeStatic();
}

void TableStore::set_stale_after(Duration stale_after) {
  MutexLock lock(&mu_);
  chain_.set_stale_after(stale_after);
}

Duration TableStore::stale_after() const {
  MutexLock lock(&mu_);
  return chain_.stale_after();
}

TableSource TableStore::SourceLocked(Time now) {
  const TableSource before = chain_.source();
  const int64_t recoveries = chain_.counters().recoveries_from_static;
  const TableSource after = chain_.Observe(now);
  if (after == before) return after;
  const uint64_t version = VersionLocked();
  if (after == TableSource::kStatic) {
    Log(LogLevel::kWarn, "table stale: falling back to the static table",
        {{"version", version},
         {"age_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - chain_.accepted_at())
              .count()},
         {"stale_after_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(chain_.stale_after()).count()}});
  } else if (after == TableSource::kLastGood) {
    Log(LogLevel::kWarn, "serving the last good table: a newer one was refused",
        {{"version", version}, {"reason", last_refusal_}});
  } else if (chain_.counters().recoveries_from_static > recoveries) {
    Log(LogLevel::kInfo, "controller table again after the static fallback",
        {{"version", version}});
  }
  return after;
}

TableSource TableStore::Source(Time now) {
  MutexLock lock(&mu_);
  return SourceLocked(now);
}

std::shared_ptr<const AgentTables> TableStore::Active(Time now) {
  MutexLock lock(&mu_);
  return SourceLocked(now) == TableSource::kStatic ? static_ : current_;
}

std::shared_ptr<const AgentTables> TableStore::TakeChange(Time now) {
  MutexLock lock(&mu_);
  std::shared_ptr<const AgentTables> active =
      SourceLocked(now) == TableSource::kStatic ? static_ : current_;
  if (active == handed_out_) return nullptr;
  handed_out_ = active;
  return active;
}

uint64_t TableStore::installed_version() const {
  MutexLock lock(&mu_);
  return VersionLocked();
}

TableStoreCounters TableStore::counters() const {
  MutexLock lock(&mu_);
  TableStoreCounters c = counters_;
  static_cast<FallbackCounters&>(c) = chain_.counters();
  return c;
}

std::string TableStore::last_refusal() const {
  MutexLock lock(&mu_);
  return last_refusal_;
}

}  // namespace dar::agent
