// dar-sim's records and report: the SVG chart writer on its own, then `dar-sim run` and
// `dar-sim report` end to end through the binary this build made.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/svg_chart.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Whether `xml` is well-formed as far as a test needs: tags balanced and properly nested,
// every '&' an entity. Returns the problem, or "" if none.
std::string XmlProblem(const std::string& xml) {
  std::vector<std::string> open;
  static const std::regex kEntity("^&(amp|lt|gt|quot|apos);");
  for (size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] == '&' && !std::regex_search(xml.substr(i, 6), kEntity)) {
      return fmt::format("bare & at {}", i);
    }
    if (xml[i] != '<') continue;
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unclosed <";
    const std::string tag = xml.substr(i + 1, end - i - 1);
    i = end;
    if (tag.empty() || tag[0] == '!' || tag[0] == '?' || tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" \n") - (tag[0] == '/'));
    if (tag[0] != '/') {
      open.push_back(name);
    } else if (open.empty() || open.back() != name) {
      return fmt::format("</{}> closes {}", name, open.empty() ? "nothing" : "<" + open.back());
    } else {
      open.pop_back();
    }
  }
  return open.empty() ? "" : fmt::format("<{}> never closed", open.back());
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SvgChartTest, LinearTicksAreRoundAndCoverTheRange) {
  using ::testing::DoubleNear;
  EXPECT_THAT(LinearTicks(0, 1), ElementsAre(0, DoubleNear(0.2, 1e-12), DoubleNear(0.4, 1e-12),
                                             DoubleNear(0.6, 1e-12), DoubleNear(0.8, 1e-12), 1));
  EXPECT_THAT(LinearTicks(3, 97), ElementsAre(0, 20, 40, 60, 80, 100));
  EXPECT_THAT(LinearTicks(0, 0.004), ElementsAre(0, 0.001, 0.002, 0.003, 0.004));
  const std::vector<double> t = LinearTicks(-0.013, 0.021);
  EXPECT_LE(t.front(), -0.013);
  EXPECT_GE(t.back(), 0.021);
  EXPECT_THAT(t, ::testing::Contains(0.0));
}

TEST(SvgChartTest, LogTicksArePowersOfTen) {
  EXPECT_THAT(LogTicks(2e-6, 0.3), ElementsAre(1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1));
  EXPECT_THAT(LogTicks(10, 100), ElementsAre(10, 100));
  EXPECT_EQ(TickLabel(1e-5), "1e-05");
  EXPECT_EQ(TickLabel(0.25), "0.25");
  EXPECT_EQ(TickLabel(2000), "2000");
  EXPECT_EQ(TickLabel(-0.0), "0");
}

TEST(SvgChartTest, TextIsEscaped) {
  EXPECT_EQ(XmlEscape(R"(a<b & "c" 'd'>)"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  LineChart chart{"p99 < 1 ms & more", Axis{"x <s>"}, Axis{"y & z"}};
  chart.series.push_back(LineSeries{"a<b>&c", {{0, 1}, {1, 2}}});
  const std::string svg = RenderLineChart(chart);
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_THAT(svg, HasSubstr("p99 &lt; 1 ms &amp; more"));
  EXPECT_THAT(svg, HasSubstr("a&lt;b&gt;&amp;c"));
  EXPECT_EQ(svg.find("a<b>"), std::string::npos);
}

TEST(SvgChartTest, LineChartDrawsOnePolylinePerSeriesAndDropsWhatALogAxisCannotShow) {
  LineChart chart{"t", Axis{"x", /*log=*/true}, Axis{"y"}, /*steps=*/true};
  chart.series.push_back(LineSeries{"one", {{0, 5}, {1e-3, 0.5}, {1e-1, 1}}});
  chart.series.push_back(LineSeries{"two", {}});
  chart.series.push_back(LineSeries{"three", {{1e-2, 0.2}}});
  const std::string svg = RenderLineChart(chart);
  ASSERT_EQ(XmlProblem(svg), "");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(Count(svg, "<polyline"), 3u);
  // The point at x = 0 is left out: "one" has two points, drawn as three for the step.
  const std::smatch m = [&] {
    std::smatch match;
    static const std::regex kPoints("<polyline[^>]*points=\"([^\"]*)\"");
    std::regex_search(svg, match, kPoints);
    return match;
  }();
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(Count(m[1].str(), ","), 3u) << m[1];
  // Ticks at the powers of ten of the data's range.
  EXPECT_THAT(svg, HasSubstr(">0.001</text>"));
  EXPECT_THAT(svg, HasSubstr(">0.1</text>"));
}

TEST(SvgChartTest, BarChartDrawsBarsAndErrorBars) {
  BarChart chart{"bars", "seconds", {"small", "large"}};
  chart.series.push_back(BarSeries{"ecmp", {1, 2}, {{0.5, 1.5}, {1.5, 2.5}}});
  chart.series.push_back(BarSeries{"dar", {0.5, std::nan("")}, {}});
  const std::string svg = RenderBarChart(chart);
  ASSERT_EQ(XmlProblem(svg), "");
  EXPECT_EQ(Count(svg, "<rect class=\"bar\""), 3u);
  EXPECT_EQ(Count(svg, "<path d=\"M"), 2u);
  EXPECT_THAT(svg, HasSubstr(">small</text>"));
  EXPECT_THAT(svg, HasSubstr(">2.5</text>"));  // the y axis reaches the top error bar
}

using Result = BinaryResult;

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream s(line);
  std::string cell;
  while (std::getline(s, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

// A scenario that runs in well under a second: an AllReduce and background flows on a small
// leaf-spine, three policies.
constexpr const char* kScenario = R"(name: tiny
seed: 3
duration_ms: 5
topology:
  type: leaf_spine
  leaves: 2
  spines: 2
  hosts_per_leaf: 4
  host_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
  fabric_link: {capacity_gbps: 10, delay_us: 1, queue_kb: 256}
network:
  ecn_threshold_kb: 64
workloads:
  - type: allreduce
    group_size: 4
    message_mb: 0.5
    iterations: 2
    compute_ms: 0.2
  - type: background
    cdf: websearch
    load: 0.4
policies:
  - ecmp
  - spray
  - {name: dar, forwarding: drill_flowlet, period_ms: 1}
)";

const std::vector<std::string> kPolicies = {"ecmp", "spray", "dar"};

class ReportEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("dar-report-test-{}-{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    scenario_ = (dir_ / "tiny.yaml").string();
    std::ofstream(scenario_) << kScenario;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `dar-sim run` of the scenario into `out`, one policy at a time unless `extra` says
  // otherwise.
  Result Run(const std::string& out, const std::string& extra = "-j 1") {
    return RunDarSim(fmt::format("run {} --out {} -q {}", scenario_, out, extra));
  }

  fs::path dir_;
  std::string scenario_;
};

TEST_F(ReportEndToEndTest, RunWritesRecordsThatMatchItsResults) {
  const fs::path out = dir_ / "a";
  const Result r = Run(out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json results = nlohmann::json::parse(Read(out / "results.json"));
  for (const nlohmann::json& p : results["policies"]) {
    const std::string name = p["name"].get<std::string>();
    SCOPED_TRACE(name);
    std::stringstream flows(Read(out / fmt::format("flows-{}.csv", name)));
    std::string line;
    ASSERT_TRUE(std::getline(flows, line));
    EXPECT_EQ(line,
              "policy,workload,kind,traffic_class,job,iteration,step,size_bytes,start_s,finish_s,"
              "fct_s,slowdown");
    int64_t flow_rows = 0;
    int64_t iteration_rows = 0;
    int64_t step_rows = 0;
    while (std::getline(flows, line)) {
      const std::vector<std::string> c = Split(line);
      ASSERT_EQ(c.size(), 12u) << line;
      EXPECT_EQ(c[0], name);
      EXPECT_GT(std::stod(c[10]), 0) << line;                                  // fct_s
      EXPECT_NEAR(std::stod(c[9]) - std::stod(c[8]), std::stod(c[10]), 1e-9);  // finish - start
      EXPECT_GT(std::stoll(c[7]), 0) << line;
      if (c[2] == "flow") {
        ++flow_rows;
        EXPECT_EQ(c[1], "background");
        EXPECT_GE(std::stod(c[11]), 0.5) << line;  // a slowdown near 1 or above
      } else if (c[2] == "iteration") {
        ++iteration_rows;
        EXPECT_EQ(c[1], "allreduce");
      } else if (c[2] == "step") {
        ++step_rows;
        EXPECT_EQ(c[11], "");  // no ideal, no slowdown
      }
    }
    const nlohmann::json& m = p["metrics"];
    EXPECT_GT(flow_rows, 0);
    EXPECT_EQ(flow_rows, m["flows_completed"].get<int64_t>());
    EXPECT_EQ(iteration_rows, m["iterations_completed"].get<int64_t>());
    EXPECT_EQ(step_rows, iteration_rows * 2 * (4 - 1));  // a ring of 4: 6 steps an iteration

    std::stringstream series(Read(out / fmt::format("timeseries-{}.csv", name)));
    ASSERT_TRUE(std::getline(series, line));
    EXPECT_EQ(line.rfind("time_s,util_max,util_mean,queue_max_bytes,drops,route_changes,util:", 0),
              0u)
        << line;
    const size_t columns = Split(line).size();
    int rows = 0;
    double last = 0;
    while (std::getline(series, line)) {
      const std::vector<std::string> c = Split(line);
      ASSERT_EQ(c.size(), columns) << line;
      EXPECT_GT(std::stod(c[0]), last);
      last = std::stod(c[0]);
      EXPECT_GE(std::stod(c[1]), std::stod(c[2]));  // the busiest link at least the mean
      ++rows;
    }
    // A sample every millisecond of the run (the last one shorter).
    EXPECT_EQ(rows, static_cast<int>(std::ceil(m["sim_time_s"].get<double>() * 1e3 - 1e-9)));
  }
}

TEST_F(ReportEndToEndTest, TheSameSeedGivesTheSameBytes) {
  ASSERT_EQ(Run((dir_ / "a").string()).exit_code, 0);
  ASSERT_EQ(Run((dir_ / "b").string(), "--jobs 3").exit_code, 0);
  for (const std::string& p : kPolicies) {
    for (const std::string& file : {"flows-" + p + ".csv", "timeseries-" + p + ".csv"}) {
      SCOPED_TRACE(file);
      const std::string a = Read(dir_ / "a" / file);
      EXPECT_FALSE(a.empty());
      EXPECT_EQ(a, Read(dir_ / "b" / file));
    }
  }
}

TEST_F(ReportEndToEndTest, NoRecordsWritesNone) {
  const fs::path out = dir_ / "a";
  // Records of an earlier run in the same directory go: a report must not read them.
  ASSERT_EQ(Run(out.string(), "-j 1").exit_code, 0);
  ASSERT_TRUE(fs::exists(out / "flows-ecmp.csv"));
  ASSERT_EQ(Run(out.string(), "-j 1 --no-records").exit_code, 0);
  EXPECT_TRUE(fs::exists(out / "results.json"));
  EXPECT_FALSE(fs::exists(out / "flows-ecmp.csv"));
  EXPECT_FALSE(fs::exists(out / "timeseries-ecmp.csv"));
  const Result r = RunDarSim(fmt::format("report {}", out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr((out / "flows-ecmp.csv").string()));
  EXPECT_THAT(r.output, HasSubstr("--no-records"));
}

// Every SVG of the report is well-formed, the line charts have a line per policy, and the
// index shows every chart.
void ExpectReport(const fs::path& report) {
  const std::string index = Read(report / "index.html");
  ASSERT_FALSE(index.empty());
  int svgs = 0;
  for (const auto& entry : fs::directory_iterator(report)) {
    if (entry.path().extension() != ".svg") continue;
    ++svgs;
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    const std::string svg = Read(entry.path());
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_EQ(XmlProblem(svg), "");
    EXPECT_THAT(index, HasSubstr(fmt::format("<img src=\"{}\"", file)));
    for (const std::string& p : kPolicies) EXPECT_THAT(svg, HasSubstr(">" + p + "</text>"));
    if (svg.find("<polyline") != std::string::npos) {
      EXPECT_EQ(Count(svg, "<polyline"), kPolicies.size());
    }
  }
  EXPECT_EQ(Count(index, "<img src="), static_cast<size_t>(svgs));
  for (const char* file :
       {"fct-cdf-flow.svg", "slowdown-mean-by-size-flow.svg", "slowdown-p99-by-size-flow.svg",
        "step-times.svg", "util-max.svg", "queue-max.svg", "route-changes.svg"}) {
    EXPECT_TRUE(fs::exists(report / file)) << file;
  }
}

TEST_F(ReportEndToEndTest, ReportDrawsOneRun) {
  const fs::path out = dir_ / "a";
  ASSERT_EQ(Run(out.string()).exit_code, 0);
  const Result r = RunDarSim(fmt::format("report {}", out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectReport(out / "report");
  EXPECT_FALSE(fs::exists(out / "report" / "seeds-fct_mean_s.svg"));
}

TEST_F(ReportEndToEndTest, ReportDrawsSeveralSeedsWithIntervals) {
  const fs::path out = dir_ / "s";
  const Result run = Run(out.string(), "-j 1 --seeds 1..3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(fs::exists(out / "seed-2" / "flows-dar.csv"));
  const Result r = RunDarSim(fmt::format("report {}", out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectReport(out / "report");
  for (const char* metric : {"fct_mean_s", "comm_time_s", "slowdown_p99"}) {
    const std::string svg = Read(out / "report" / fmt::format("seeds-{}.svg", metric));
    EXPECT_EQ(Count(svg, "<rect class=\"bar\""), kPolicies.size()) << metric;
    EXPECT_EQ(Count(svg, "<path d=\"M"), kPolicies.size()) << metric;  // an interval each
  }
}

TEST_F(ReportEndToEndTest, BadInputIsAnErrorNamingTheFileAndLine) {
  Result r = RunDarSim(fmt::format("report {}", (dir_ / "missing").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("missing: no such directory"));

  r = RunDarSim(fmt::format("report {}", dir_.string()));  // no results.json
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr((dir_ / "results.json").string()));

  const fs::path out = dir_ / "a";
  ASSERT_EQ(Run(out.string()).exit_code, 0);
  const std::string flows = Read(out / "flows-spray.csv");
  const auto lines = static_cast<int>(Count(flows, "\n"));
  std::ofstream(out / "flows-spray.csv", std::ios::app) << "spray,background,flow,0,,,,12,x\n";
  r = RunDarSim(fmt::format("report {}", out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output,
              HasSubstr(fmt::format("flows-spray.csv:{}: 9 cells, the header has 12", lines + 1)));

  std::ofstream(out / "flows-spray.csv", std::ios::binary)
      << flows << "spray,background,flow,0,,,,12,0.1,0.2,fast,\n";
  r = RunDarSim(fmt::format("report {}", out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output,
              HasSubstr(fmt::format("flows-spray.csv:{}: column 'fct_s': not a number: 'fast'",
                                    lines + 1)));

  EXPECT_EQ(RunDarSim("report").exit_code, 2);  // a usage error
}

}  // namespace
}  // namespace dar::cli
