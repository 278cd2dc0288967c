#include "cli/report.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "cli/svg_chart.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "sim/records.h"
#include "sim/stats.h"

namespace dar::cli {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A CSV file read whole: its header, and its rows with the line each is on.
struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;  // by row: its line in the file, from 1
};

// Splits CSV text into rows of cells (RFC 4180: quoted cells may hold commas, doubled quotes
// and line breaks). `lines` receives the line each row starts on.
absl::StatusOr<std::vector<std::vector<std::string>>> SplitCsv(const std::string& path,
                                                               const std::string& text,
                                                               std::vector<int>& lines) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false;
  int line = 1;
  int row_line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        cell += c;
      }
    } else if (c == '"' && cell.empty()) {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(std::move(cell));
      cell.clear();
      rows.push_back(std::move(row));
      row.clear();
      lines.push_back(row_line);
      row_line = ++line;
    } else {
      cell += c;
    }
  }
  if (quoted) return absl::InvalidArgumentError(fmt::format("{}:{}: unclosed quote", path, line));
  if (!cell.empty() || !row.empty()) {
    row.push_back(std::move(cell));
    rows.push_back(std::move(row));
    lines.push_back(row_line);
  }
  return rows;
}

// Reads a CSV file with a header; every row must have as many cells as the header.
absl::StatusOr<CsvTable> ReadCsv(const fs::path& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path.string()));
  CsvTable t;
  t.path = path.string();
  std::vector<int> lines;
  ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> rows, SplitCsv(t.path, text, lines));
  if (rows.empty()) return absl::InvalidArgumentError(fmt::format("{}:1: no header", t.path));
  t.header = std::move(rows[0]);
  for (size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() != t.header.size()) {
      return absl::InvalidArgumentError(fmt::format("{}:{}: {} cells, the header has {}", t.path,
                                                    lines[r], rows[r].size(), t.header.size()));
    }
    t.rows.push_back(std::move(rows[r]));
    t.lines.push_back(lines[r]);
  }
  return t;
}

// The index of column `name`, or an error naming the file.
absl::StatusOr<size_t> Column(const CsvTable& t, std::string_view name) {
  auto it = std::find(t.header.begin(), t.header.end(), name);
  if (it == t.header.end()) {
    return absl::InvalidArgumentError(fmt::format("{}:1: no column '{}'", t.path, name));
  }
  return static_cast<size_t>(it - t.header.begin());
}

// A number cell; an empty one is NaN.
absl::StatusOr<double> Number(const CsvTable& t, size_t row, size_t column) {
  const std::string& s = t.rows[row][column];
  if (s.empty()) return kNaN;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return absl::InvalidArgumentError(fmt::format("{}:{}: column '{}': not a number: '{}'", t.path,
                                                  t.lines[row], t.header[column], s));
  }
  return v;
}

// The numbers of some columns of a table, column by column.
absl::StatusOr<std::vector<std::vector<double>>> Numbers(const CsvTable& t,
                                                         const std::vector<std::string>& names) {
  std::vector<std::vector<double>> out;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(const size_t c, Column(t, name));
    out.emplace_back();
    for (size_t r = 0; r < t.rows.size(); ++r) {
      ASSIGN_OR_RETURN(const double v, Number(t, r, c));
      out.back().push_back(v);
    }
  }
  return out;
}

// A completed piece of work, from flows-<policy>.csv.
struct FlowRow {
  std::string kind;
  double bytes = 0;
  double finish_s = 0;
  double fct_s = 0;
  double slowdown = kNaN;
};

// What the report draws of one policy.
struct PolicyData {
  std::string name;
  std::vector<FlowRow> flows;  // every run's (seed's)
  std::vector<FlowRow> first_run_flows;
  // The first run's time series: time_s, util_max, queue_max_bytes, route_changes.
  std::vector<std::vector<double>> series;
  std::vector<nlohmann::json> metrics;  // by run: its results.json metrics
};

absl::StatusOr<nlohmann::json> ReadJson(const fs::path& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path.string()));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("policies") || !j["policies"].is_array()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: not a results file of dar-sim run", path.string()));
  }
  return j;
}

absl::StatusOr<std::vector<FlowRow>> ReadFlows(const fs::path& path) {
  ASSIGN_OR_RETURN(const CsvTable t, ReadCsv(path));
  ASSIGN_OR_RETURN(const size_t kind, Column(t, "kind"));
  ASSIGN_OR_RETURN(const auto columns, Numbers(t, {"size_bytes", "finish_s", "fct_s", "slowdown"}));
  std::vector<FlowRow> rows;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    rows.push_back(
        FlowRow{t.rows[r][kind], columns[0][r], columns[1][r], columns[2][r], columns[3][r]});
  }
  return rows;
}

// Reads every run's records of every policy in results.json. A --seeds summary's runs are in
// dir/seed-N/.
absl::StatusOr<std::vector<PolicyData>> ReadRuns(const fs::path& dir,
                                                 const nlohmann::json& results) {
  std::vector<fs::path> runs;
  if (results.contains("seeds")) {
    for (const nlohmann::json& seed : results["seeds"]) {
      runs.push_back(dir / fmt::format("seed-{}", seed.dump()));
    }
  } else {
    runs.push_back(dir);
  }
  std::vector<PolicyData> policies;
  for (const nlohmann::json& p : results["policies"]) {
    if (!p.contains("name") || !p["name"].is_string()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: a policy without a name", (dir / "results.json").string()));
    }
    policies.push_back(PolicyData{p["name"].get<std::string>()});
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    ASSIGN_OR_RETURN(const nlohmann::json run, ReadJson(runs[i] / "results.json"));
    for (PolicyData& p : policies) {
      for (const nlohmann::json& q : run["policies"]) {
        if (q.value("name", "") == p.name)
          p.metrics.push_back(q.value("metrics", nlohmann::json()));
      }
      const fs::path flows = runs[i] / sim::RecordsFileName("flows", p.name);
      if (!fs::exists(flows)) {
        return absl::NotFoundError(
            fmt::format("{}: no such file (was the run made with --no-records?)", flows.string()));
      }
      ASSIGN_OR_RETURN(std::vector<FlowRow> rows, ReadFlows(flows));
      p.flows.insert(p.flows.end(), rows.begin(), rows.end());
      if (i > 0) continue;
      p.first_run_flows = std::move(rows);
      ASSIGN_OR_RETURN(const CsvTable series,
                       ReadCsv(runs[i] / sim::RecordsFileName("timeseries", p.name)));
      ASSIGN_OR_RETURN(p.series,
                       Numbers(series, {"time_s", "util_max", "queue_max_bytes", "route_changes"}));
    }
  }
  return policies;
}

// A chart written into the report, with its caption.
struct Figure {
  std::string file;
  std::string caption;
};

// Writes the charts into the report's directory, then the index.html that shows them in the
// order they were added.
class ReportWriter {
 public:
  ReportWriter(fs::path dir, std::string run_note)
      : dir_(std::move(dir)), note_(std::move(run_note)) {}

  absl::Status Add(const std::string& file, const std::string& svg, const std::string& caption) {
    const std::string path = (dir_ / file).string();
    std::ofstream out(path, std::ios::binary);
    out << svg;
    if (!out) return absl::InternalError(fmt::format("cannot write {}", path));
    figures_.push_back(Figure{file, caption});
    return absl::OkStatus();
  }

  absl::Status WriteIndex(const std::string& title) const {
    std::string html = fmt::format(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>{0}</title>\n<style>body{{font-family:sans-serif;max-width:800px;margin:auto}}"
        "figure{{margin:2em 0}}img{{max-width:100%}}</style>\n</head>\n<body>\n<h1>{0}</h1>\n"
        "<p>{1}</p>\n",
        XmlEscape(title), XmlEscape(note_));
    for (const Figure& f : figures_) {
      html += fmt::format(
          "<figure>\n<a href=\"{0}\"><img src=\"{0}\" alt=\"{1}\"></a>\n"
          "<figcaption>{1}</figcaption>\n</figure>\n",
          XmlEscape(f.file), XmlEscape(f.caption));
    }
    html += "</body>\n</html>\n";
    const std::string path = (dir_ / "index.html").string();
    std::ofstream out(path, std::ios::binary);
    out << html;
    if (!out) return absl::InternalError(fmt::format("cannot write {}", path));
    return absl::OkStatus();
  }

 private:
  const fs::path dir_;
  const std::string note_;
  std::vector<Figure> figures_;
};

// The kinds of record that are messages (not a collective's iterations and steps), in the
// order the report shows them.
constexpr std::array<const char*, 5> kMessageKinds = {"flow", "transfer", "request", "query",
                                                      "response"};

// At most this many points of a CDF are drawn: enough for the eye, and the file stays small.
constexpr size_t kCdfPoints = 400;

std::vector<std::pair<double, double>> Cdf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<std::pair<double, double>> points;
  const size_t n = values.size();
  for (size_t k = 0; k < std::min(n, kCdfPoints); ++k) {
    const size_t i = n <= kCdfPoints ? k : k * (n - 1) / (kCdfPoints - 1);
    points.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return points;
}

absl::Status DrawMessages(const std::vector<PolicyData>& policies, ReportWriter& report) {
  for (const char* kind : kMessageKinds) {
    LineChart cdf{fmt::format("Completion time CDF: {}s", kind),
                  Axis{"completion time (s)", /*log=*/true},
                  Axis{"fraction completed by then", false, 0.0, 1.0},
                  /*steps=*/true};
    bool any = false;
    bool slowdowns = true;  // every record of the kind has a slowdown
    for (const PolicyData& p : policies) {
      std::vector<double> fcts;
      for (const FlowRow& f : p.flows) {
        if (f.kind != kind) continue;
        fcts.push_back(f.fct_s);
        slowdowns = slowdowns && std::isfinite(f.slowdown);
      }
      any = any || !fcts.empty();
      cdf.series.push_back(LineSeries{p.name, Cdf(std::move(fcts))});
    }
    if (!any) continue;
    RETURN_IF_ERROR(report.Add(
        fmt::format("fct-cdf-{}.svg", kind), RenderLineChart(cdf),
        fmt::format("Completion time of every {} (log scale), as a cumulative distribution per "
                    "policy: the further left, the faster.",
                    kind)));

    // Mean and 99th percentile by size bucket.
    const std::string what = slowdowns ? "slowdown" : "completion time (s)";
    for (const bool p99 : {false, true}) {
      BarChart bars{fmt::format("{} {} by {} size", p99 ? "p99" : "Mean",
                                slowdowns ? "slowdown" : "completion time", kind),
                    what};
      std::vector<bool> used(sim::kSizeBuckets.size(), false);
      for (const PolicyData& p : policies) {
        std::vector<std::vector<double>> by_bucket(sim::kSizeBuckets.size());
        for (const FlowRow& f : p.flows) {
          if (f.kind != kind) continue;
          const size_t b = sim::SizeBucketOf(f.bytes);
          by_bucket[b].push_back(slowdowns ? f.slowdown : f.fct_s);
          used[b] = true;
        }
        BarSeries s{p.name, {}, {}};
        for (const std::vector<double>& v : by_bucket) {
          s.values.push_back(v.empty() ? kNaN : p99 ? sim::Quantile(v, 0.99) : sim::Mean(v));
        }
        bars.series.push_back(std::move(s));
      }
      // Only the buckets some policy has records in.
      for (size_t b = sim::kSizeBuckets.size(); b-- > 0;) {
        if (used[b]) continue;
        for (BarSeries& s : bars.series) s.values.erase(s.values.begin() + static_cast<long>(b));
      }
      for (size_t b = 0; b < sim::kSizeBuckets.size(); ++b) {
        if (used[b]) bars.categories.emplace_back(sim::kSizeBuckets[b].label);
      }
      RETURN_IF_ERROR(report.Add(
          fmt::format("{}-{}-by-size-{}.svg", slowdowns ? "slowdown" : "fct", p99 ? "p99" : "mean",
                      kind),
          RenderBarChart(bars),
          fmt::format(
              "{} {} of {}s by size (bytes, decimal units), per policy{}.",
              p99 ? "99th percentile" : "Mean", slowdowns ? "slowdown" : "completion time", kind,
              slowdowns ? " (slowdown: completion time over the ideal on an idle network)" : "")));
    }
  }
  return absl::OkStatus();
}

absl::Status DrawSteps(const std::vector<PolicyData>& policies, const std::string& run,
                       ReportWriter& report) {
  LineChart chart{fmt::format("Collective step times{}", run), Axis{"simulated time (s)"},
                  Axis{"step time (s)"}};
  bool any = false;
  for (const PolicyData& p : policies) {
    std::vector<std::pair<double, double>> points;
    for (const FlowRow& f : p.first_run_flows) {
      if (f.kind == "step" || f.kind == "phase") points.emplace_back(f.finish_s, f.fct_s);
    }
    std::stable_sort(points.begin(), points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    any = any || !points.empty();
    chart.series.push_back(LineSeries{p.name, std::move(points)});
  }
  if (!any) return absl::OkStatus();
  return report.Add("step-times.svg", RenderLineChart(chart),
                    "Each AllReduce step (or all-to-all phase) by the time it ended, and how long "
                    "it took: from the job finishing the previous one to every host finishing it.");
}

absl::Status DrawTimeSeries(const std::vector<PolicyData>& policies, const std::string& run,
                            ReportWriter& report) {
  struct Plot {
    const char* file;
    const char* title;
    const char* y_label;
    size_t column;  // in PolicyData::series
    double scale;
    bool steps;
    const char* caption;
  };
  const std::array<Plot, 3> plots = {{
      {"util-max.svg", "Busiest link's utilisation", "utilisation", 1, 1, false,
       "The busiest link's utilisation in each sampling interval: its bytes sent over what its "
       "capacity allows."},
      {"queue-max.svg", "Longest queue", "queue (KB)", 2, 1e-3, false,
       "The longest output queue of any link at each sample, in KB."},
      {"route-changes.svg", "Route changes", "rows changed", 3, 1, true,
       "Routing-table rows (node, destination) whose next hops or weights changed since the "
       "previous sample: how much the routing moves traffic."},
  }};
  for (const Plot& plot : plots) {
    LineChart chart{fmt::format("{}{}", plot.title, run), Axis{"simulated time (s)"},
                    Axis{plot.y_label}, plot.steps};
    chart.y.min = 0.0;
    for (const PolicyData& p : policies) {
      if (p.series.size() <= static_cast<size_t>(plot.column)) continue;  // no series read
      std::vector<std::pair<double, double>> points;
      for (size_t r = 0; r < p.series[0].size(); ++r) {
        points.emplace_back(p.series[0][r], p.series[plot.column][r] * plot.scale);
      }
      chart.series.push_back(LineSeries{p.name, std::move(points)});
    }
    RETURN_IF_ERROR(report.Add(plot.file, RenderLineChart(chart), plot.caption));
  }
  return absl::OkStatus();
}

// The metrics drawn with their 95% intervals over seeds, where the runs report them.
constexpr std::array<const char*, 16> kKeyMetrics = {
    "fct_mean_s",        "fct_p99_s",        "slowdown_mean",        "slowdown_p99",
    "comm_time_s",       "iteration_time_s", "alltoall_comm_time_s", "alltoall_time_p99_s",
    "qct_mean_s",        "qct_p99_s",        "latency_p99_s",        "latency_p999_s",
    "completion_mean_s", "completion_max_s", "packets_dropped",      "retransmissions"};

absl::Status DrawSeedIntervals(const std::vector<PolicyData>& policies, size_t seeds,
                               ReportWriter& report) {
  for (const char* metric : kKeyMetrics) {
    BarChart chart{
        fmt::format("{}: mean over {} seeds, 95% interval", metric, seeds), metric, {metric}};
    bool any = false;
    for (const PolicyData& p : policies) {
      std::vector<double> samples;
      for (const nlohmann::json& m : p.metrics) {
        if (m.is_object() && m.contains(metric) && m[metric].is_number()) {
          samples.push_back(m[metric].get<double>());
        }
      }
      BarSeries s{p.name, {kNaN}, {{kNaN, kNaN}}};
      if (!samples.empty()) {
        const sim::MeanInterval ci = sim::MeanCi95(samples);
        s.values[0] = ci.mean;
        s.errors[0] = {ci.low, ci.high};
        any = true;
      }
      chart.series.push_back(std::move(s));
    }
    if (!any) continue;
    RETURN_IF_ERROR(report.Add(
        fmt::format("seeds-{}.svg", metric), RenderBarChart(chart),
        fmt::format("{} per policy: the mean over the seeds with its 95% confidence interval "
                    "(Student t). Intervals that overlap do not show a difference; the paired "
                    "differences in results.json are sharper.",
                    metric)));
  }
  return absl::OkStatus();
}

struct ReportFlags {
  std::string dir;
};

// Exit codes as docs/simulator.md: 2 for input that is missing or not what dar-sim run
// writes, 1 for a report that cannot be written.
int Report(const ReportFlags& flags) {
  const fs::path dir = flags.dir;
  if (!fs::is_directory(dir)) {
    fmt::print(stderr, "dar-sim report: {}: no such directory\n", dir.string());
    return 2;
  }
  absl::StatusOr<nlohmann::json> results = ReadJson(dir / "results.json");
  if (!results.ok()) {
    fmt::print(stderr, "dar-sim report: {}\n", std::string(results.status().message()));
    return 2;
  }
  absl::StatusOr<std::vector<PolicyData>> policies = ReadRuns(dir, *results);
  if (!policies.ok()) {
    fmt::print(stderr, "dar-sim report: {}\n", std::string(policies.status().message()));
    return 2;
  }
  const bool multi = results->contains("seeds");
  const size_t seeds = multi ? (*results)["seeds"].size() : 1;
  const std::string first =
      multi && seeds > 0 ? fmt::format(" (seed {})", (*results)["seeds"][0].dump()) : "";
  const std::string note =
      multi ? fmt::format(
                  "{} seeds: {}. Distributions pool every seed's records; the time "
                  "series show the first seed's.",
                  seeds, (*results)["seeds"].dump())
            : fmt::format("Seed {}.", results->value("seed", nlohmann::json()).dump());

  const fs::path out = dir / "report";
  std::error_code ec;
  fs::create_directories(out, ec);
  ReportWriter report(out, note);
  absl::Status s = DrawMessages(*policies, report);
  if (s.ok()) s = DrawSteps(*policies, first, report);
  if (s.ok()) s = DrawTimeSeries(*policies, first, report);
  if (s.ok() && multi) s = DrawSeedIntervals(*policies, seeds, report);
  if (s.ok()) {
    s = report.WriteIndex(fmt::format("dar-sim report: {}", results->value("scenario", "")));
  }
  if (!s.ok()) {
    fmt::print(stderr, "dar-sim report: {}\n", std::string(s.message()));
    return 1;
  }
  fmt::print("wrote {}\n", (out / "index.html").string());
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Draw what dar-sim run --out DIR wrote: SVG charts and DIR/report/index.html");
  cmd->add_option("dir", flags->dir, "The --out directory of dar-sim run (one run or --seeds)")
      ->required();
  cmd->callback([flags] { throw CLI::RuntimeError(Report(*flags)); });
}

}  // namespace dar::cli
