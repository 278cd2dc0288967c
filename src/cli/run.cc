#include "cli/run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "base/mutex.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "learn/policy_loader.h"
#include "sim/runner.h"
#include "sim/scenario.h"
#include "sim/seed_summary.h"
#include "spdlog/spdlog.h"

namespace dar::cli {
namespace {

struct RunFlags {
  std::string scenario;
  std::string out = "out";
  int64_t seed = -1;
  std::string seeds;     // run once per seed, then the summary (sim/seed_summary.h)
  std::string baseline;  // the reference of the paired differences; default ecmp
  std::vector<std::string> policies;
  bool quiet = false;
  int jobs = 0;  // 0: one per core
};

// A single progress line on a terminal, redrawn at most a few times a second and only once a
// run has taken longer than a second.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), start_(Clock::now()) {}
  ~ProgressLine() { Clear(); }

  // Thread-safe: policies may run side by side.
  void Update(const sim::RunProgress& p) {
    if (!enabled_) return;
    MutexLock lock(&mu_);
    const auto now = Clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::milliseconds(200)) {
      return;
    }
    last_ = now;
    std::fprintf(stderr, "\r  %-12s sim %8.4f s / %.4f s   %6.1fM events   ", p.policy.c_str(),
                 ToSeconds(p.now), ToSeconds(p.duration), p.events / 1e6);
    std::fflush(stderr);
    drawn_ = true;
  }
  void Clear() {
    MutexLock lock(&mu_);
    if (!drawn_) return;
    std::fprintf(stderr, "\r%80s\r", "");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Mutex mu_;
  const bool enabled_;
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
  const Clock::time_point start_;
  Clock::time_point last_ ABSL_GUARDED_BY(mu_);
};

// Writes `results` to `dir`/results.json and, unless quiet, prints `table` (default: the
// results' comparison table).
bool WriteResults(const nlohmann::json& results, const std::string& dir, bool quiet,
                  const std::string& table = "") {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (std::filesystem::path(dir) / "results.json").string();
  std::ofstream out(path);
  out << results.dump(2) << "\n";
  if (!out) {
    fmt::print(stderr, "dar-sim: cannot write {}\n", path);
    return false;
  }
  if (!quiet) {
    fmt::print("{}\nwrote {}\n", table.empty() ? sim::FormatComparison(results) : table, path);
  }
  return true;
}

// Whether a policy left work unfinished at the drain limit (says which).
bool Unfinished(const nlohmann::json& results) {
  for (const auto& p : results["policies"]) {
    if (!p["metrics"]["completed"].get<bool>()) {
      fmt::print(stderr, "dar-sim: policy {} did not finish its work within the drain limit\n",
                 p["name"].get<std::string>());
      return true;
    }
  }
  return false;
}

// Runs every policy of `scenario` and writes `out`/results.json; prints the table unless
// quiet or `brief` (one line then). Returns the exit code (docs/simulator.md) and the results.
int RunOnce(const sim::Scenario& scenario, const RunFlags& flags, const std::string& out,
            bool brief, nlohmann::json& results) {
  if (!flags.quiet) {
    fmt::print("scenario {}: {}, seed {}, {} policies\n", scenario.name,
               scenario.topology.Summary(), scenario.seed, scenario.policies.size());
  }
  ProgressLine progress(!flags.quiet && isatty(STDERR_FILENO));
  sim::RunOptions options;
  options.policy_loader = learn::LearnedPolicyLoader();
  options.on_progress = [&progress](const sim::RunProgress& p) { progress.Update(p); };
  options.jobs = flags.jobs > 0
                     ? flags.jobs
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  absl::StatusOr<nlohmann::json> run = sim::RunScenario(scenario, options);
  progress.Clear();
  if (!run.ok()) {
    fmt::print(stderr, "dar-sim: {}\n", std::string(run.status().message()));
    return 1;
  }
  results = std::move(*run);
  if (!WriteResults(results, out, flags.quiet || brief)) return 1;
  if (brief && !flags.quiet) fmt::print("wrote {}/results.json\n", out);
  return Unfinished(results) ? 3 : 0;
}

int Run(const RunFlags& flags) {
  absl::StatusOr<sim::Scenario> scenario = sim::LoadScenario(flags.scenario);
  if (!scenario.ok()) {
    fmt::print(stderr, "dar-sim: {}\n", std::string(scenario.status().message()));
    return 2;
  }
  if (flags.seed >= 0) scenario->seed = static_cast<uint64_t>(flags.seed);
  if (!flags.policies.empty()) {
    std::vector<sim::PolicySpec> chosen;
    for (const std::string& name : flags.policies) {
      auto it = std::find_if(scenario->policies.begin(), scenario->policies.end(),
                             [&](const sim::PolicySpec& p) { return p.name == name; });
      if (it == scenario->policies.end()) {
        fmt::print(stderr, "dar-sim: --policy {}: the scenario has no such policy\n", name);
        return 2;
      }
      chosen.push_back(*it);
    }
    scenario->policies = std::move(chosen);
  }
  nlohmann::json results;
  if (flags.seeds.empty()) {
    if (!flags.baseline.empty()) {
      fmt::print(stderr, "dar-sim: --baseline compares over seeds: give --seeds too\n");
      return 2;
    }
    return RunOnce(*scenario, flags, flags.out, /*brief=*/false, results);
  }

  absl::StatusOr<std::vector<uint64_t>> seeds = sim::ParseSeedList(flags.seeds);
  if (!seeds.ok()) {
    fmt::print(stderr, "dar-sim: --seeds: {}\n", std::string(seeds.status().message()));
    return 2;
  }
  // The reference policy: --baseline, else ecmp where the scenario has it, else its first.
  std::string baseline = flags.baseline;
  auto has = [&](const std::string& name) {
    return std::any_of(scenario->policies.begin(), scenario->policies.end(),
                       [&](const sim::PolicySpec& p) { return p.name == name; });
  };
  if (baseline.empty()) baseline = has("ecmp") ? "ecmp" : scenario->policies.front().name;
  if (!has(baseline)) {
    fmt::print(stderr, "dar-sim: --baseline {}: the scenario has no such policy\n", baseline);
    return 2;
  }

  // One run per seed, each in DIR/seed-N, then their summary in DIR.
  int code = 0;
  std::vector<nlohmann::json> runs;
  for (uint64_t seed : *seeds) {
    scenario->seed = seed;
    const std::string dir = (std::filesystem::path(flags.out) / fmt::format("seed-{}", seed));
    const int c = RunOnce(*scenario, flags, dir, /*brief=*/true, results);
    if (c == 1) return 1;
    code = std::max(code, c);
    runs.push_back(std::move(results));
  }
  absl::StatusOr<nlohmann::json> summary = sim::SummarizeSeeds(runs, baseline);
  if (!summary.ok()) {
    fmt::print(stderr, "dar-sim: {}\n", std::string(summary.status().message()));
    return 1;
  }
  if (!flags.quiet) fmt::print("\nseeds {}:\n", fmt::join(*seeds, ", "));
  if (!WriteResults(*summary, flags.out, flags.quiet, sim::FormatSeedSummary(*summary))) return 1;
  return code;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "Run a scenario and compare its policies");
  cmd->add_option("scenario", flags->scenario, "Scenario file (YAML)")->required();
  cmd->add_option("--out", flags->out, "Directory for results.json");
  cmd->add_option("--seed", flags->seed, "Override the scenario's seed");
  cmd->add_option("--seeds", flags->seeds,
                  "Run once per seed, e.g. 1..10 or 1,4,7..9 (results in DIR/seed-N); write the "
                  "means with 95% intervals and the paired differences to DIR")
      ->excludes("--seed");
  cmd->add_option("--baseline", flags->baseline,
                  "With --seeds: the policy the others are compared with, seed by seed "
                  "(default: ecmp, else the scenario's first)");
  cmd->add_option("--policy", flags->policies, "Run only these policies (repeatable)");
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing but errors");
  cmd->add_option("-j,--jobs", flags->jobs,
                  "Policies simulated at once (default: one per core); results do not depend on it")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([flags] { throw CLI::RuntimeError(Run(*flags)); });
}

}  // namespace dar::cli
