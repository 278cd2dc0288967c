#include "cli/table.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "sim/seed_summary.h"

namespace dar::cli {
namespace {

struct TableFlags {
  std::string results;
  std::string baseline;  // re-summarise the seed runs against this policy
  std::vector<std::string> metrics;
  std::vector<std::string> policies;
};

int Table(const TableFlags& flags) {
  std::filesystem::path path = flags.results;
  if (std::filesystem::is_directory(path)) path /= "results.json";
  std::ifstream in(path);
  if (!in) {
    fmt::print(stderr, "dar-sim table: cannot read {}\n", path.string());
    return 2;
  }
  nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (summary.is_discarded() || !summary.is_object() || !summary.contains("policies")) {
    fmt::print(stderr, "dar-sim table: {}: not a results file\n", path.string());
    return 2;
  }
  if (!summary.contains("baseline") || !summary.contains("seeds")) {
    fmt::print(stderr,
               "dar-sim table: {}: not a summary of several seeds (run dar-sim run --seeds)\n",
               path.string());
    return 2;
  }
  if (!flags.baseline.empty()) {
    // The per-seed results beside the summary, summarised afresh against another policy.
    std::vector<nlohmann::json> runs;
    for (const nlohmann::json& seed : summary["seeds"]) {
      const std::filesystem::path run =
          path.parent_path() / fmt::format("seed-{}", seed.dump()) / "results.json";
      std::ifstream rin(run);
      nlohmann::json r = nlohmann::json::parse(rin, nullptr, /*allow_exceptions=*/false);
      if (!rin || r.is_discarded() || !r.is_object() || !r.contains("policies")) {
        fmt::print(stderr, "dar-sim table: --baseline needs the seed's results: cannot read {}\n",
                   run.string());
        return 2;
      }
      runs.push_back(std::move(r));
    }
    absl::StatusOr<nlohmann::json> again = sim::SummarizeSeeds(runs, flags.baseline);
    if (!again.ok()) {
      fmt::print(stderr, "dar-sim table: --baseline {}: {}\n", flags.baseline,
                 std::string(again.status().message()));
      return 2;
    }
    summary = *std::move(again);
  }
  try {
    for (const std::string& name : flags.policies) {
      bool found = false;
      for (const nlohmann::json& p : summary["policies"])
        found = found || p.value("name", "") == name;
      if (!found) {
        fmt::print(stderr, "dar-sim table: --policy {}: {} has no such policy\n", name,
                   path.string());
        return 2;
      }
    }
    fmt::print("{}", sim::FormatSeedMarkdown(summary, flags.metrics, flags.policies));
  } catch (const nlohmann::json::exception& e) {
    fmt::print(stderr, "dar-sim table: {}: not a summary dar-sim wrote: {}\n", path.string(),
               e.what());
    return 2;
  }
  return 0;
}

}  // namespace

void AddTableCommand(CLI::App& app) {
  auto flags = std::make_shared<TableFlags>();
  CLI::App* cmd = app.add_subcommand("table", "A Markdown table of a dar-sim run --seeds summary");
  cmd->add_option("results", flags->results, "results.json of a --seeds run, or its directory")
      ->required();
  cmd->add_option("--metric", flags->metrics, "A metric to show (repeatable; dotted for nested)")
      ->required();
  cmd->add_option("--policy", flags->policies, "Show only these policies, in this order");
  cmd->add_option("--baseline", flags->baseline,
                  "Compare with this policy instead, from the seed runs in the same directory");
  cmd->callback([flags] { throw CLI::RuntimeError(Table(*flags)); });
}

}  // namespace dar::cli
