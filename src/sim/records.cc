#include "sim/records.h"

#include <algorithm>

#include "fmt/format.h"

namespace dar::sim {
namespace {

// A CSV cell: quoted (with quotes doubled) if it holds a comma, a quote or a line break.
std::string CsvCell(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Seconds with nanosecond digits, exactly: "0.012345678".
std::string Seconds9(Time t) {
  const int64_t ns = t.count();
  const char* sign = ns < 0 ? "-" : "";
  const int64_t a = ns < 0 ? -ns : ns;
  return fmt::format("{}{}.{:09}", sign, a / 1000000000, a % 1000000000);
}

// An optional integer column: empty when negative.
std::string IndexCell(int32_t i) { return i < 0 ? std::string() : fmt::format("{}", i); }

bool SameRow(absl::Span<const NextHop> a, absl::Span<const NextHop> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].link != b[i].link || a[i].weight != b[i].weight) return false;
  }
  return true;
}

// Rows (node, destination) whose next hops or weights differ between two table sets; blocks
// and tables the two share are equal without a look.
int64_t ChangedRows(const RoutingTables& before, const RoutingTables& after) {
  int64_t changed = 0;
  for (NodeId d : after.destinations()) {
    if (!before.IsDestination(d)) continue;
    const DestinationTable* a = before.Table(d);
    const DestinationTable* b = after.Table(d);
    if (a == b || a == nullptr || b == nullptr) continue;
    if (a->SameLayoutAs(*b)) {
      const uint32_t rows = a->row_map() == nullptr ? static_cast<uint32_t>(a->num_nodes())
                                                    : static_cast<uint32_t>(a->row_map()->size());
      for (size_t k = 0; k < a->blocks().size(); ++k) {
        if (a->blocks()[k] == b->blocks()[k]) continue;
        const uint32_t first = static_cast<uint32_t>(k) * DestinationTable::kRowsPerBlock;
        const uint32_t last = std::min(rows, first + DestinationTable::kRowsPerBlock);
        for (uint32_t r = first; r < last; ++r) changed += SameRow(a->Row(r), b->Row(r)) ? 0 : 1;
      }
      continue;
    }
    for (NodeId n = 0; n < std::min(a->num_nodes(), b->num_nodes()); ++n) {
      changed += SameRow(a->At(n), b->At(n)) ? 0 : 1;
    }
  }
  return changed;
}

}  // namespace

std::string FlowsCsv(std::string_view policy, const std::vector<WorkloadRecords>& workloads) {
  std::string out =
      "policy,workload,kind,traffic_class,job,iteration,step,size_bytes,start_s,finish_s,fct_s,"
      "slowdown\n";
  const std::string p = CsvCell(policy);
  for (const WorkloadRecords& w : workloads) {
    const std::string name = CsvCell(w.name);
    for (const WorkRecord& r : w.records) {
      const std::string slowdown = r.slowdown ? fmt::format("{:.6g}", *r.slowdown) : "";
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", p, name, r.kind, r.traffic_class,
                         IndexCell(r.job), IndexCell(r.iteration), IndexCell(r.step), r.bytes,
                         Seconds9(r.start), Seconds9(r.finish), Seconds9(r.finish - r.start),
                         slowdown);
    }
  }
  return out;
}

Duration SampleInterval(Duration duration) {
  const int64_t ms = (duration.count() / 1000 + 999999) / 1000000;  // duration/1000, whole ms up
  return Milliseconds(std::max<int64_t>(1, ms));
}

LinkSampler::LinkSampler(const Network& net, Time start, Duration interval)
    : net_(net),
      interval_(interval),
      last_(start),
      last_tx_bytes_(net.topology().num_links(), 0),
      last_drops_(net.total_drops()) {
  for (LinkId l = 0; l < net.topology().num_links(); ++l) {
    last_tx_bytes_[l] = net.counters(l).tx_bytes;
  }
  for (int c = 0; c < Network::kClasses; ++c) last_tables_[c] = net.shared_tables(c);
}

void LinkSampler::Advance(Time now) {
  if (now - last_ >= interval_) Sample(now);
}

void LinkSampler::Finish(Time now) {
  if (now > last_) Sample(now);
}

void LinkSampler::Sample(Time now) {
  const Topology& topo = net_.current();
  const double seconds = ToSeconds(now - last_);
  Row row;
  row.at = now;
  double util_sum = 0;
  int links_up = 0;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const int64_t tx = net_.counters(l).tx_bytes;
    const double bps = static_cast<double>(topo.link(l).params.capacity.bps());
    const double util =
        bps > 0 ? 8.0 * static_cast<double>(tx - last_tx_bytes_[l]) / (bps * seconds) : 0;
    last_tx_bytes_[l] = tx;
    const int64_t queue = net_.QueuedBytes(l);
    row.util_max = std::max(row.util_max, util);
    row.queue_max_bytes = std::max(row.queue_max_bytes, queue);
    if (topo.link(l).up) {
      util_sum += util;
      ++links_up;
    }
    link_util_.push_back(static_cast<float>(util));
    link_queue_.push_back(static_cast<int32_t>(std::min<int64_t>(queue, INT32_MAX)));
  }
  row.util_mean = links_up > 0 ? util_sum / links_up : 0;
  row.drops = net_.total_drops() - last_drops_;
  last_drops_ = net_.total_drops();
  row.route_changes = RouteChanges();
  rows_.push_back(row);
  last_ = now;
}

// Over the classes' distinct table sets: a set installed for several classes counts once.
int64_t LinkSampler::RouteChanges() {
  std::array<TableSet, Network::kClasses> now;
  int64_t changed = 0;
  for (int c = 0; c < Network::kClasses; ++c) {
    now[c] = net_.shared_tables(c);
    bool seen = false;
    for (int e = 0; e < c; ++e)
      seen = seen || (now[e] == now[c] && last_tables_[e] == last_tables_[c]);
    if (!seen && now[c] != nullptr && last_tables_[c] != nullptr && now[c] != last_tables_[c]) {
      changed += ChangedRows(*last_tables_[c], *now[c]);
    }
  }
  last_tables_ = now;
  return changed;
}

std::string LinkSampler::Csv() const {
  const Topology& topo = net_.topology();
  const size_t links = static_cast<size_t>(topo.num_links());
  // The busiest links over the run, most bytes first (ties: lower id); only links that sent.
  std::vector<LinkId> top;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    if (net_.counters(l).tx_bytes > 0) top.push_back(l);
  }
  std::stable_sort(top.begin(), top.end(), [this](LinkId a, LinkId b) {
    return net_.counters(a).tx_bytes > net_.counters(b).tx_bytes;
  });
  if (top.size() > static_cast<size_t>(kTopLinks)) top.resize(kTopLinks);

  std::string out = "time_s,util_max,util_mean,queue_max_bytes,drops,route_changes";
  for (LinkId l : top) {
    const std::string name =
        fmt::format("{}->{}", topo.node(topo.link(l).src).name, topo.node(topo.link(l).dst).name);
    out += fmt::format(",{},{}", CsvCell("util:" + name), CsvCell("queue_bytes:" + name));
  }
  out += "\n";
  for (size_t s = 0; s < rows_.size(); ++s) {
    const Row& r = rows_[s];
    out += fmt::format("{},{:.4f},{:.4f},{},{},{}", Seconds9(r.at), r.util_max, r.util_mean,
                       r.queue_max_bytes, r.drops, r.route_changes);
    for (LinkId l : top) {
      const size_t i = s * links + static_cast<size_t>(l);
      out += fmt::format(",{:.4f},{}", link_util_[i], link_queue_[i]);
    }
    out += "\n";
  }
  return out;
}

std::string RecordsFileName(std::string_view prefix, std::string_view policy) {
  std::string name(policy);
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return fmt::format("{}-{}.csv", prefix, name);
}

}  // namespace dar::sim
