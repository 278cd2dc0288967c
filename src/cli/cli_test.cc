// End-to-end tests of the dar-sim binary: real process, real files, exit codes and output.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli/cli_test_util.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar::cli {
namespace {

using ::testing::HasSubstr;

using Result = BinaryResult;

std::string TempDir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("dar-cli-test-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The ECMP loads of abilene.json, scaled so the busiest link reads 100, match the loads the
// file itself carries (ecmp_fwd.uni for source->target, ecmp_bwd.uni for the reverse).
TEST(DarSimCliTest, EcmpLoadsMatchAbilene) {
  const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json";
  const Result r =
      RunDarSim(fmt::format("loads --topology {} --demand uniform --policy ecmp --json", file));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json out = nlohmann::json::parse(r.output);
  std::map<std::pair<std::string, std::string>, double> load;
  double busiest = 0;
  for (const auto& l : out["links"]) {
    load[{l["src"], l["dst"]}] = l["load"];
    busiest = std::max(busiest, l["load"].get<double>());
  }
  ASSERT_GT(busiest, 0);
  std::ifstream in(file);
  const nlohmann::json topo = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& e : topo["edges"]) {
    const std::string s = e["source"], t = e["target"];
    EXPECT_NEAR(load.at({s, t}) * 100 / busiest, e["ecmp_fwd"]["uni"].get<double>(), 0.5)
        << s << "->" << t;
    EXPECT_NEAR(load.at({t, s}) * 100 / busiest, e["ecmp_bwd"]["uni"].get<double>(), 0.5)
        << t << "->" << s;
    checked += 2;
  }
  EXPECT_EQ(checked, 28);
  EXPECT_EQ(out["links"].size(), 28u);
}

// DAR's tables for the fluid loads of a demand below saturation spread load better than
// ECMP's hop-count split.
TEST(DarSimCliTest, DarLoadsSettleBelowEcmpMaxUtilisation) {
  const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json";
  double max_util[2];
  const char* policies[] = {"ecmp", "dar"};
  for (int i = 0; i < 2; ++i) {
    const Result r = RunDarSim(
        fmt::format("loads --topology {} --policy {} --unit-gbps 0.5 --json", file, policies[i]));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    max_util[i] = out["max_utilisation"].get<double>();
    if (i == 1) {
      EXPECT_TRUE(out["dar"]["settled"].get<bool>());
    }
  }
  std::printf("abilene, uniform demand of 0.5 Gb/s per pair: max utilisation ECMP %.3f, DAR %.3f\n",
              max_util[0], max_util[1]);
  EXPECT_LT(max_util[1], max_util[0]);
}

nlohmann::json RunLoadsJson(const std::string& args) {
  const Result r = RunDarSim(fmt::format("loads {} --json", args));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return nlohmann::json();
  return nlohmann::json::parse(r.output);
}

// The TE optimum under a gravity matrix on real WANs: never above ECMP's maximum utilisation,
// strictly below it where ECMP's hop-count split is not optimal; every pair is reported.
TEST(DarSimCliTest, LpLoadsNeverAboveEcmpUnderGravity) {
  const std::string wan = std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/";
  for (const char* name : {"Abilene", "Sprint", "VtlWavenet2011"}) {
    const std::string file = wan + name + ".json";
    const nlohmann::json ecmp =
        RunLoadsJson(fmt::format("--topology {} --policy ecmp --demand gravity", file));
    const nlohmann::json lp =
        RunLoadsJson(fmt::format("--topology {} --policy lp --demand gravity", file));
    ASSERT_TRUE(ecmp.is_object() && lp.is_object()) << name;
    const double ecmp_util = ecmp["max_utilisation"].get<double>();
    const double lp_util = lp["max_utilisation"].get<double>();
    std::printf("%s, gravity: max utilisation ECMP %.4f, LP %.4f\n", name, ecmp_util, lp_util);
    EXPECT_LE(lp_util, ecmp_util * (1 + 1e-6)) << name;
    EXPECT_NEAR(lp["lp"]["lambda"].get<double>(), lp_util, 1e-3 * lp_util) << name;
    if (std::string(name) != "VtlWavenet2011") {  // nearly a tree: ECMP is optimal there
      EXPECT_LT(lp_util, ecmp_util * 0.95) << name;
    }
    EXPECT_EQ(lp["links"].size(), ecmp["links"].size());
    EXPECT_FALSE(lp["pairs"].empty());
    for (const auto& pair : lp["pairs"]) {
      if (!pair["stretch"].is_null()) {
        EXPECT_GE(pair["stretch"].get<double>(), 1 - 1e-9);
      }
    }
    EXPECT_GE(lp["stretch"].get<double>(), 1 - 1e-9);
    EXPECT_NEAR(lp["demand_total"].get<double>(), ecmp["demand_total"].get<double>(), 1e-6);
  }
}

// Overload: at 10x the rate, the admitted fraction falls as the maximum utilisation says, and
// DAR reports its objective.
TEST(DarSimCliTest, LoadsReportAdmissionAndDarObjective) {
  const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/Abilene.json";
  const nlohmann::json ecmp =
      RunLoadsJson(fmt::format("--topology {} --policy ecmp --unit-gbps 5", file));
  ASSERT_TRUE(ecmp.is_object());
  const double util = ecmp["max_utilisation"].get<double>();
  ASSERT_GT(util, 1);
  EXPECT_NEAR(ecmp["min_pair_admitted"].get<double>(), 1 / util, 1e-9);
  EXPECT_LT(ecmp["admitted_fraction"].get<double>(), 1);
  EXPECT_GE(ecmp["admitted_fraction"].get<double>(), 1 / util);

  // DAR at the same overload: settled, within its own optimum's gap, and its least-served pair
  // better served. (The total admitted may be lower: balance takes longer paths.)
  const nlohmann::json dar =
      RunLoadsJson(fmt::format("--topology {} --policy dar --unit-gbps 5", file));
  ASSERT_TRUE(dar.is_object());
  EXPECT_TRUE(dar["dar"]["settled"].get<bool>());
  EXPECT_GT(dar["dar"]["iterations"].get<int>(), 0);
  const double objective = dar["dar"]["objective"].get<double>();
  EXPECT_LE(dar["dar"]["lower_bound"].get<double>(), objective);
  EXPECT_NEAR(dar["dar"]["gap"].get<double>(),
              (objective - dar["dar"]["lower_bound"].get<double>()) / objective, 1e-12);
  EXPECT_LT(dar["max_utilisation"].get<double>(), util);
  EXPECT_GT(dar["min_pair_admitted"].get<double>(), ecmp["min_pair_admitted"].get<double>());
  // The objective's parameters come from the command line.
  const nlohmann::json p8 = RunLoadsJson(
      fmt::format("--topology {} --policy dar --unit-gbps 5 --objective-power 8", file));
  ASSERT_TRUE(p8.is_object());
  EXPECT_EQ(p8["dar"]["power"].get<double>(), 8);
  EXPECT_NE(p8["dar"]["objective"].get<double>(), objective);
}

// A matrix file: read in any of its shapes, refused with the file and line when bad.
TEST(DarSimCliTest, LoadsReadsAndChecksAMatrixFile) {
  const std::string dir = TempDir("matrix");
  const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/Abilene.json";
  { std::ofstream(dir + "/m.json") << "{\"0\": {\"5\": 4.0}, \"5\": {\"0\": 1.5}}\n"; }
  const nlohmann::json ok =
      RunLoadsJson(fmt::format("--topology {} --policy lp --demand {}/m.json", file, dir));
  ASSERT_TRUE(ok.is_object());
  EXPECT_EQ(ok["pairs"].size(), 2u);
  EXPECT_DOUBLE_EQ(ok["demand_total"].get<double>(), 5.5);

  {
    std::ofstream(dir + "/bad.json") << "[{\"src\": 0, \"dst\": 5, \"demand\": 1},\n"
                                        " {\"src\": 0, \"dst\": 99, \"demand\": 1}]\n";
  }
  Result r = RunDarSim(fmt::format("loads --topology {} --demand {}/bad.json", file, dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("{}/bad.json:2: /1/dst: destination '99'", dir)));
  { std::ofstream(dir + "/broken.json") << "{\"0\": {\"5\": 4.0,}}\n"; }
  r = RunDarSim(fmt::format("loads --topology {} --demand {}/broken.json", file, dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("{}/broken.json:1:", dir)));
  // The topology file itself has an empty graph.demands.
  r = RunDarSim(fmt::format("loads --topology {0} --demand {0}", file));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/graph/demands: the matrix has no positive demand"));
  r = RunDarSim(fmt::format("loads --topology {} --demand nonsense", file));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown demand 'nonsense'"));
  std::filesystem::remove_all(dir);
}

TEST(DarSimCliTest, LoadsRejectsUnknownPolicyAndMissingFile) {
  const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/abilene.json";
  Result r = RunDarSim(fmt::format("loads --topology {} --policy warp --json", file));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("warp"));
  r = RunDarSim("loads --topology /nonexistent/topo.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/topo.json"));
}

constexpr char kScenario[] = R"(
name: cli
duration_ms: 2
topology:
  type: leaf_spine
  leaves: 2
  spines: 2
  hosts_per_leaf: 2
workloads:
  - {type: bulk, size_mb: 1, repeat: 2, transfers: [{src: h0, dst: h3}, {src: h1, dst: h2}]}
policies: [static, ecmp]
)";

TEST(DarSimCliTest, RunWritesResultsAndPrintsTheTable) {
  const std::string dir = TempDir("run");
  { std::ofstream(dir + "/s.yaml") << kScenario; }
  const Result r = RunDarSim(fmt::format("run {0}/s.yaml --out {0}/out", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("completion_mean_s"));
  std::ifstream in(dir + "/out/results.json");
  const nlohmann::json results = nlohmann::json::parse(in);
  ASSERT_EQ(results["policies"].size(), 2u);
  EXPECT_EQ(results["policies"][0]["name"], "static");
  EXPECT_EQ(results["policies"][1]["name"], "ecmp");
  for (const auto& p : results["policies"]) {
    EXPECT_EQ(p["metrics"]["transfers_completed"], 4);
    EXPECT_EQ(p["metrics"]["routing_loops"], 0);
  }
  std::filesystem::remove_all(dir);
}

// The SHA-256 of a file, by coreutils.
std::string Sha256Sum(const std::string& path) {
  FILE* pipe = popen(fmt::format("sha256sum '{}'", path).c_str(), "r");
  if (pipe == nullptr) return "";
  char buf[65] = {};
  const size_t n = fread(buf, 1, 64, pipe);
  pclose(pipe);
  return std::string(buf, n);
}

// A results file says which build made it and from which scenario file, by its hash; the
// summary of several seeds alike.
TEST(DarSimCliTest, ResultsNameTheBuildAndTheScenarioHash) {
  const std::string dir = TempDir("stamp");
  { std::ofstream(dir + "/s.yaml") << kScenario; }
  const Result version = RunDarSim("--version");
  ASSERT_EQ(version.exit_code, 0) << version.output;
  for (const std::string& out : {std::string("one"), std::string("seeds")}) {
    const Result r = RunDarSim(fmt::format("run {0}/s.yaml --out {0}/{1} {2}", dir, out,
                                           out == "seeds" ? "--seeds 1..2" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(fmt::format("{}/{}/results.json", dir, out));
    const nlohmann::json results = nlohmann::json::parse(in);
    EXPECT_EQ(results["scenario_sha256"], Sha256Sum(dir + "/s.yaml")) << out;
    const std::string commit = results["dar_sim"]["commit"].get<std::string>();
    EXPECT_EQ(version.output, fmt::format("dar-sim {} (commit {})\n",
                                          results["dar_sim"]["version"].get<std::string>(), commit))
        << out;
  }
  // Another file, another hash.
  { std::ofstream(dir + "/s.yaml", std::ios::app) << "# a comment\n"; }
  ASSERT_EQ(RunDarSim(fmt::format("run {0}/s.yaml --out {0}/again", dir)).exit_code, 0);
  std::ifstream in(dir + "/again/results.json");
  EXPECT_EQ(nlohmann::json::parse(in)["scenario_sha256"], Sha256Sum(dir + "/s.yaml"));
  std::filesystem::remove_all(dir);
}

// A bad command line is a usage error, exit 2, with the reason; --help and --version exit 0.
TEST(DarSimCliTest, UsageErrorsExitTwo) {
  for (const char* args :
       {"", "run", "run s.yaml --bogus", "no-such-command", "run s.yaml -j -1"}) {
    const Result r = RunDarSim(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("--help")) << args;
  }
  EXPECT_EQ(RunDarSim("--help").exit_code, 0);
  EXPECT_EQ(RunDarSim("run --help").exit_code, 0);
}

// A learned model that cannot be loaded makes the scenario a bad one (exit 2, naming the file
// and why), unless the policy says `fallback: analytic`.
TEST(DarSimCliTest, ARefusedModelIsABadScenario) {
  const std::string dir = TempDir("model");
  std::string text = kScenario;
  text.replace(text.find("policies: [static, ecmp]"), 24,
               "policies: [ecmp, {name: dar-learned, period_ms: 1, model: nope.json}]");
  { std::ofstream(dir + "/s.yaml") << text; }
  const Result r = RunDarSim(fmt::format("run {0}/s.yaml --out {0}/out", dir));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/nope.json"));
  EXPECT_THAT(r.output, HasSubstr("fallback: analytic"));
  text.replace(text.find("model: nope.json"), 16, "model: nope.json, fallback: analytic");
  { std::ofstream(dir + "/s.yaml") << text; }
  const Result fallback = RunDarSim(fmt::format("run {0}/s.yaml --out {0}/out", dir));
  EXPECT_EQ(fallback.exit_code, 0) << fallback.output;
  std::ifstream in(dir + "/out/results.json");
  EXPECT_THAT(
      nlohmann::json::parse(in)["policies"][1]["metrics"]["learned_policy"].get<std::string>(),
      ::testing::StartsWith("refused: "));
  std::filesystem::remove_all(dir);
}

// darctl takes a traffic class by name or number; anything else is refused, naming the flag
// (here before any connection: the TLS files are missing on purpose).
TEST(DaemonsCliTest, DarctlTakesClassNames) {
  for (const char* c : {"latency", "bulk", "BULK", "0", "1"}) {
    const Result r =
        RunBinary("darctl", fmt::format("show routes --class {} --controller 127.0.0.1:1", c));
    EXPECT_THAT(r.output, HasSubstr("no TLS files")) << c;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("--class"))) << c;
  }
  for (const char* c : {"2", "bul", "-1"}) {
    const Result r =
        RunBinary("darctl", fmt::format("show routes --class {} --controller 127.0.0.1:1", c));
    EXPECT_EQ(r.exit_code, 2) << c;  // a usage error
    EXPECT_THAT(r.output, HasSubstr("--class")) << c;
  }
}

// Every binary tells its version and the commit it was built from.
TEST(DaemonsCliTest, EveryBinaryTellsItsVersion) {
  for (const char* binary : {"dar-sim", "dar-controller", "dar-agent", "darctl", "dar-lab"}) {
    const Result r = RunBinary(binary, "--version");
    EXPECT_EQ(r.exit_code, 0) << binary << ": " << r.output;
    EXPECT_THAT(r.output, ::testing::MatchesRegex(fmt::format(
                              "{} [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ([0-9a-f]{{12}}(-dirty)?|"
                              "unknown)\\)\n",
                              binary)))
        << binary;
  }
}

// Through a pipe, progress comes as lines every --progress-every seconds (here a millisecond,
// so that the simulator's own pace, a report every millisecond of simulated time, sets it), with
// the share done (never past 100%) and the time left; a policy whose control loop is slower
// than the run is warned of.
TEST(DarSimCliTest, ProgressThroughAPipeAndASlowLoopWarned) {
  const std::string dir = TempDir("progress");
  std::string text = kScenario;
  text.replace(text.find("duration_ms: 2"), 14, "duration_ms: 40");
  text.insert(text.find("policies:"), "  - {type: background, cdf: websearch, load: 0.6}\n");
  text.replace(text.find("policies: [static, ecmp]"), 24,
               "policies: [ecmp, {name: dar, period_ms: 5}, {name: dar-slow, routing: dar}]");
  { std::ofstream(dir + "/s.yaml") << text; }
  const Result r =
      RunDarSim(fmt::format("run {0}/s.yaml --out {0}/out --progress-every 0.001 -j 1", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("warning: policy dar-slow: its control loop runs every 100 ms "
                                  "and the scenario lasts 40 ms"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("policy dar:")));
  int lines = 0;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    int percent = -1;
    if (std::sscanf(line.c_str(), "dar-sim: %d%%", &percent) != 1) continue;
    ++lines;
    EXPECT_GE(percent, 0) << line;
    EXPECT_LE(percent, 100) << line;
    EXPECT_THAT(line, HasSubstr("elapsed")) << line;
  }
  EXPECT_GE(lines, 2) << r.output;
  std::filesystem::remove_all(dir);
}

// --seeds runs once per seed into DIR/seed-N and writes the mean of their metrics, with 95%
// intervals and the paired differences against the baseline, to DIR.
TEST(DarSimCliTest, SeedsRunOncePerSeedAndWriteTheMean) {
  const std::string dir = TempDir("seeds");
  std::string text = kScenario;  // with traffic that the seed draws
  text.insert(text.find("policies:"), "  - {type: background, cdf: websearch, load: 0.3}\n");
  { std::ofstream(dir + "/s.yaml") << text; }
  const Result r = RunDarSim(fmt::format("run {0}/s.yaml --out {0}/out --seeds 3..4", dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("seed 3,"));
  EXPECT_THAT(r.output, HasSubstr("seed 4,"));
  EXPECT_THAT(r.output, HasSubstr("mean over 2 seeds"));
  EXPECT_THAT(r.output, HasSubstr("paired difference against ecmp"));
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json a = read(dir + "/out/seed-3/results.json");
  const nlohmann::json b = read(dir + "/out/seed-4/results.json");
  const nlohmann::json mean = read(dir + "/out/results.json");
  EXPECT_EQ(a["seed"], 3);
  EXPECT_EQ(b["seed"], 4);
  EXPECT_EQ(mean["seeds"], nlohmann::json::array({3, 4}));
  EXPECT_FALSE(mean.contains("seed"));
  ASSERT_EQ(mean["policies"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& m = mean["policies"][i]["metrics"];
    const auto& ma = a["policies"][i]["metrics"];
    const auto& mb = b["policies"][i]["metrics"];
    EXPECT_DOUBLE_EQ(
        m["completion_mean_s"].get<double>(),
        (ma["completion_mean_s"].get<double>() + mb["completion_mean_s"].get<double>()) / 2);
    EXPECT_DOUBLE_EQ(m["events"].get<double>(),
                     (ma["events"].get<double>() + mb["events"].get<double>()) / 2);
    EXPECT_EQ(m["completed"], true);
    const auto& ci = mean["policies"][i]["ci95"]["completion_mean_s"];
    EXPECT_LE(ci[0].get<double>(), m["completion_mean_s"].get<double>());
    EXPECT_GE(ci[1].get<double>(), m["completion_mean_s"].get<double>());
  }
  EXPECT_EQ(mean["baseline"], "ecmp");
  EXPECT_TRUE(mean["policies"][0]["vs_baseline"].contains("completion_mean_s"));
  EXPECT_FALSE(mean["policies"][1].contains("vs_baseline"));
  // The two seeds are two different runs.
  EXPECT_NE(a["policies"][1]["metrics"]["events"], b["policies"][1]["metrics"]["events"]);
  const Result both = RunDarSim(fmt::format("run {0}/s.yaml --seeds 3 --seed 4", dir));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.output, HasSubstr("excludes"));
  // The report table of the summary; a single run's results are refused.
  const Result table =
      RunDarSim(fmt::format("table {0}/out --metric completion_mean_s --metric events", dir));
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("| policy | completion_mean_s | vs ecmp | events |"));
  EXPECT_THAT(table.output, HasSubstr("| static |"));
  EXPECT_THAT(table.output, HasSubstr("(baseline)"));
  const Result against =
      RunDarSim(fmt::format("table {0}/out --metric completion_mean_s --baseline static", dir));
  ASSERT_EQ(against.exit_code, 0) << against.output;
  EXPECT_THAT(against.output, HasSubstr("| completion_mean_s | vs static |"));
  EXPECT_THAT(against.output, HasSubstr("| ecmp |"));
  const Result no_base = RunDarSim(fmt::format("table {0}/out --metric events --baseline x", dir));
  EXPECT_EQ(no_base.exit_code, 2);
  EXPECT_THAT(no_base.output, HasSubstr("baseline 'x' is not a policy"));
  const Result single = RunDarSim(fmt::format("table {0}/out/seed-3 --metric events", dir));
  EXPECT_EQ(single.exit_code, 2);
  EXPECT_THAT(single.output, HasSubstr("not a summary of several seeds"));
  const Result no_such = RunDarSim(fmt::format("run {0}/s.yaml --seeds 3,4 --baseline dar", dir));
  EXPECT_EQ(no_such.exit_code, 2);
  EXPECT_THAT(no_such.output, HasSubstr("--baseline dar: the scenario has no such policy"));
  const Result bad_list = RunDarSim(fmt::format("run {0}/s.yaml --seeds 4..3", dir));
  EXPECT_EQ(bad_list.exit_code, 2);
  EXPECT_THAT(bad_list.output, HasSubstr("'4..3'"));
  std::filesystem::remove_all(dir);
}

TEST(DarSimCliTest, RunRejectsABadScenarioWithTheKey) {
  const std::string dir = TempDir("bad");
  std::string text = kScenario;
  text.replace(text.find("size_mb: 1"), 10, "size_mb: -1");
  { std::ofstream(dir + "/bad.yaml") << text; }
  const Result r = RunDarSim(fmt::format("run {0}/bad.yaml --out {0}/out", dir));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("bad.yaml"));
  EXPECT_THAT(r.output, HasSubstr("size_mb"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/results.json"));
  std::filesystem::remove_all(dir);
}

// A new user's first steps, through the binaries: a CA and certificates in two darctl
// commands, then the controller's and an agent's configuration checked against them; a bad
// file is refused with the file, the line or the field, and what is wrong.
TEST(DaemonsCliTest, CertsInTwoCommandsThenEachDaemonChecksItsConfig) {
  const std::string dir = TempDir("daemons");
  const Result init =
      RunBinary("darctl", fmt::format("certs init --dir {}/certs --domain cli.test", dir));
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const Result issue = RunBinary("darctl", fmt::format("certs issue --dir {}/certs --node 1", dir));
  ASSERT_EQ(issue.exit_code, 0) << issue.output;
  EXPECT_THAT(issue.output, HasSubstr("spiffe://cli.test/node/1"));
  for (const char* f : {"ca.crt", "controller.crt", "controller.key", "node-1.crt", "node-1.key"}) {
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/certs/{}", dir, f))) << f;
  }
  const Result again = RunBinary("darctl", fmt::format("certs issue --dir {}/certs --node 1", dir));
  EXPECT_NE(again.exit_code, 0) << "an existing certificate is replaced only with --force";

  const std::string topology = R"(nodes:
  - {id: 1, name: A, overlay: 10.77.0.1}
  - {id: 2, name: B, overlay: 10.77.0.2}
links:
  - {a: A, b: B, capacity_mbps: 100}
)";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  // A controller configuration with the certificate `cert` (controller or node-1) and `extra`.
  const auto controller_yaml = [&](const std::string& cert, const std::string& extra) {
    return fmt::format(
        "listen: 127.0.0.1:50051\ntls: {{cert: certs/{0}.crt, key: certs/{0}.key, ca: "
        "certs/ca.crt}}\n{1}{2}",
        cert, extra, topology);
  };
  const std::string ctl =
      write("controller.yaml", controller_yaml("controller", "trust_domain: cli.test\n"));
  Result r = RunBinary("dar-controller", "--check-config " + ctl);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("OK"));
  const std::string bad_ctl =
      write("bad-controller.yaml", controller_yaml("controller", "cycle_ms: -5\n"));
  r = RunBinary("dar-controller", "--check-config " + bad_ctl);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bad-controller.yaml:3"));
  EXPECT_THAT(r.output, HasSubstr("cycle"));
  // A node's certificate is not a controller's.
  const std::string wrong_cert = write("node-cert-controller.yaml", controller_yaml("node-1", ""));
  r = RunBinary("dar-controller", "--check-config " + wrong_cert);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not of a controller"));

  const std::string agent_text =
      "node: {id: 1, name: A}\n"
      "controller: 127.0.0.1:50051\n"
      "tls: {cert: certs/node-1.crt, key: certs/node-1.key, ca: "
      "certs/ca.crt}\n"
      "state_dir: state/A\n"
      "nodes:\n"
      "  - {id: 1, name: A}\n"
      "  - {id: 2, name: B}\n"
      "links:\n"
      "  - {a: A, b: B, capacity_bps: 100000000}\n"
      "neighbours:\n"
      "  - {id: 2, link: 0, interface: a-b, address: 10.1.0.1/30, "
      "peer_address: 10.1.0.2}\n";
  r = RunBinary("dar-agent", "--config " + write("A.yaml", agent_text) + " --check-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("OK (node 1 'A', 2 nodes, 1 links, 1 neighbours)"));
  std::string bad_agent = agent_text;
  bad_agent.replace(bad_agent.find("link: 0"), 7, "link: 3");
  r = RunBinary("dar-agent", "--config " + write("bad-A.yaml", bad_agent) + " --check-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bad-A.yaml"));
  EXPECT_THAT(r.output, HasSubstr("neighbours[0].link"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dar::cli
