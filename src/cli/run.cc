#include "cli/run.h"

#include <openssl/evp.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "base/files.h"
#include "base/mutex.h"
#include "base/version.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "learn/policy_loader.h"
#include "sim/records.h"
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
  bool no_records = false;    // write no flows-*.csv and timeseries-*.csv
  int jobs = 0;               // 0: one per core
  double progress_every = 5;  // seconds between progress lines when stderr is no terminal
};

// Wall time for a person: "0.4 s", "37 s", "12 min 05 s".
std::string WallTime(double s) {
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 120) return fmt::format("{:.0f} s", s);
  const int64_t whole = std::lround(s);
  return fmt::format("{} min {:02} s", whole / 60, whole % 60);
}

// The width of the terminal on stderr; 80 if it does not say.
size_t TerminalColumns() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 10) return w.ws_col;
  return 80;
}

// How far the runs have got and about how long they have left. On a terminal one line,
// redrawn a few times a second once the runs have taken a second; through a pipe or into a
// file, a line every `every` seconds. Each policy counts by its simulated time against the
// run's duration (its drain past the end counts as done), each run (seed) alike.
class Progress {
 public:
  Progress(bool enabled, bool terminal, double every_s, int runs)
      : enabled_(enabled),
        terminal_(terminal),
        every_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(every_s))),
        runs_(runs),
        start_(Clock::now()),
        last_(start_) {}
  ~Progress() { Clear(); }

  // The run of index `run` (0-based) begins, with `policies` policies.
  void StartRun(int run, int policies) {
    MutexLock lock(&mu_);
    run_ = run;
    policies_ = std::max(1, policies);
    done_.clear();
  }

  // Thread-safe: policies may run side by side.
  void Update(const sim::RunProgress& p) {
    if (!enabled_) return;
    MutexLock lock(&mu_);
    const double duration = ToSeconds(p.duration);
    const double now_s = ToSeconds(p.now);
    done_[p.policy] = duration > 0 ? std::min(1.0, now_s / duration) : 1.0;
    const auto now = Clock::now();
    if (terminal_
            ? now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::milliseconds(200)
            : now - last_ < every_) {
      return;
    }
    last_ = now;
    double sum = 0;
    for (const auto& [name, share] : done_) sum += share;
    const double share = (run_ + sum / policies_) / runs_;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const std::string left =
        share > 0.01 ? fmt::format("about {} left", WallTime(elapsed * (1 - share) / share))
                     : "time left not known yet";
    const std::string where =
        now_s <= duration ? fmt::format("{} at {:.4f} s of {:.4f} s", p.policy, now_s, duration)
                          : fmt::format("{} draining", p.policy);
    const std::string seed = runs_ > 1 ? fmt::format("run {} of {}, ", run_ + 1, runs_) : "";
    if (terminal_) {
      // One line as wide as the terminal at most, so that \r redraws it in place.
      std::string line = fmt::format("  {:3.0f}%  {}{}  {:.1f}M events  {}", share * 100, seed,
                                     where, p.events / 1e6, left);
      line.resize(std::min(line.size(), TerminalColumns() - 1));
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "dar-sim: %.0f%% (%s%s), %s elapsed, %s\n", share * 100, seed.c_str(),
                   where.c_str(), WallTime(elapsed).c_str(), left.c_str());
    }
    std::fflush(stderr);
  }
  void Clear() {
    MutexLock lock(&mu_);
    if (!drawn_) return;
    std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Mutex mu_;
  const bool enabled_;
  const bool terminal_;
  const Clock::duration every_;
  const int runs_;
  const Clock::time_point start_;
  Clock::time_point last_ ABSL_GUARDED_BY(mu_);
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
  int run_ ABSL_GUARDED_BY(mu_) = 0;
  int policies_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, double> done_ ABSL_GUARDED_BY(mu_);  // by policy, 0..1
};

// The SHA-256 of `bytes`, in hex.
std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1) return "";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

// What a results file says of where it came from: dar-sim's version and commit, and the
// scenario file's SHA-256 (the same file gives the same hash; a run's --seed is in "seed").
void Stamp(nlohmann::json& results, const std::string& scenario_sha256) {
  results["dar_sim"] = {{"version", std::string(Version())},
                        {"commit", std::string(BuildCommit())}};
  results["scenario_sha256"] = scenario_sha256;
}

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

// Says which policies' control loops are no faster than the run: they never react to what
// they measure (only to links going down or up), which is seldom what was meant (a 100 ms
// default in a 50 ms scenario).
void WarnSlowControlLoops(const nlohmann::json& results) {
  const double duration = results["duration_s"].get<double>();
  for (const auto& p : results["policies"]) {
    const auto& m = p["metrics"];
    if (m.contains("control_period_s") && m["control_period_s"].get<double>() >= duration) {
      fmt::print(stderr,
                 "dar-sim: warning: policy {}: its control loop runs every {:g} ms and the "
                 "scenario lasts {:g} ms, so it never reacts to what it measures, only to links "
                 "going down or up (set period_ms)\n",
                 p["name"].get<std::string>(), m["control_period_s"].get<double>() * 1e3,
                 duration * 1e3);
    }
  }
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

// Writes `text` to `dir`/`name`; says so on stderr if it cannot, and returns whether it could.
bool WriteText(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) {
    fmt::print(stderr, "dar-sim: cannot write {}\n", path);
    return false;
  }
  return true;
}

// Writes each policy's records as its run ends (several policies' at once with --jobs > 1;
// each policy to its own files), into `dir`. One file per policy rather than one for all: a
// policy's rows can be written as soon as it ends, with no lock and no merge, and stay in a
// fixed order whatever order the policies end in. Remembers whether any could not be written.
class RecordsWriter {
 public:
  explicit RecordsWriter(std::string dir) : dir_(std::move(dir)) {}

  void Write(const sim::PolicySpec& policy, const sim::PolicyRecords& records) {
    const bool ok =
        WriteText(dir_, sim::RecordsFileName("flows", policy.name), records.flows_csv) &&
        WriteText(dir_, sim::RecordsFileName("timeseries", policy.name), records.timeseries_csv);
    if (!ok) failed_ = true;
  }
  bool failed() const { return failed_; }

 private:
  const std::filesystem::path dir_;
  std::atomic<bool> failed_{false};
};

// Runs every policy of `scenario` and writes `out`/results.json; prints the table unless
// quiet or `brief` (one line then). Returns the exit code (docs/simulator.md) and the results.
int RunOnce(const sim::Scenario& scenario, const RunFlags& flags, const std::string& out,
            bool brief, const std::string& scenario_sha256, Progress& progress,
            nlohmann::json& results) {
  if (!flags.quiet) {
    fmt::print("scenario {}: {}, seed {}, {} policies\n", scenario.name,
               scenario.topology.Summary(), scenario.seed, scenario.policies.size());
  }
  sim::RunOptions options;
  options.policy_loader = learn::LearnedPolicyLoader();
  options.on_progress = [&progress](const sim::RunProgress& p) { progress.Update(p); };
  options.jobs = flags.jobs > 0
                     ? flags.jobs
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  RecordsWriter records(out);
  // Records an earlier run left in `out` go first: a report must not read another run's.
  std::error_code listing;
  for (const auto& entry : std::filesystem::directory_iterator(out, listing)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".csv") && (name.starts_with("flows-") || name.starts_with("timeseries-"))) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
  if (!flags.no_records) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    options.on_records = [&records](const sim::PolicySpec& policy, const sim::PolicyRecords& r) {
      records.Write(policy, r);
    };
  }
  absl::StatusOr<nlohmann::json> run = sim::RunScenario(scenario, options);
  progress.Clear();
  if (records.failed()) return 1;
  if (!run.ok()) {
    fmt::print(stderr, "dar-sim: {}\n", std::string(run.status().message()));
    // A scenario that loaded but cannot run as written (a refused model): a bad scenario.
    return absl::IsInvalidArgument(run.status()) ? 2 : 1;
  }
  results = std::move(*run);
  Stamp(results, scenario_sha256);
  if (!flags.quiet && !brief) WarnSlowControlLoops(results);
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
  absl::StatusOr<std::string> text = ReadFile(flags.scenario);
  if (!text.ok()) {  // read a moment ago, so hardly ever
    fmt::print(stderr, "dar-sim: {}\n", std::string(text.status().message()));
    return 2;
  }
  const std::string sha256 = Sha256Hex(*text);
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
    Progress progress(!flags.quiet, isatty(STDERR_FILENO) != 0, flags.progress_every, 1);
    progress.StartRun(0, static_cast<int>(scenario->policies.size()));
    return RunOnce(*scenario, flags, flags.out, /*brief=*/false, sha256, progress, results);
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
  Progress progress(!flags.quiet, isatty(STDERR_FILENO) != 0, flags.progress_every,
                    static_cast<int>(seeds->size()));
  for (uint64_t seed : *seeds) {
    scenario->seed = seed;
    progress.StartRun(static_cast<int>(runs.size()), static_cast<int>(scenario->policies.size()));
    const std::string dir = (std::filesystem::path(flags.out) / fmt::format("seed-{}", seed));
    const int c = RunOnce(*scenario, flags, dir, /*brief=*/true, sha256, progress, results);
    if (c == 1 || c == 2) return c;
    code = std::max(code, c);
    if (runs.empty() && !flags.quiet) WarnSlowControlLoops(results);  // once, not per seed
    runs.push_back(std::move(results));
  }
  absl::StatusOr<nlohmann::json> summary = sim::SummarizeSeeds(runs, baseline);
  if (!summary.ok()) {
    fmt::print(stderr, "dar-sim: {}\n", std::string(summary.status().message()));
    return 1;
  }
  Stamp(*summary, sha256);
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
  cmd->add_flag("--no-records", flags->no_records,
                "Write no per-flow records (flows-POLICY.csv) or time series "
                "(timeseries-POLICY.csv) beside results.json");
  cmd->add_option("-j,--jobs", flags->jobs,
                  "Policies simulated at once (default: one per core); results do not depend on it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--progress-every", flags->progress_every,
                  "Seconds between progress lines on stderr when it is not a terminal")
      ->check(CLI::Range(0.001, 3600.0));
  cmd->callback([flags] { throw CLI::RuntimeError(Run(*flags)); });
}

}  // namespace dar::cli
