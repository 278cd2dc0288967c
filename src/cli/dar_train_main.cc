// dar-train: trains DAR's learned weight policy with PPO against the simulator (LibTorch;
// built only when it is installed). See src/train/trainer.h.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "base/version.h"
#include "fmt/format.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"dar-train: train DAR's learned policy with PPO against the simulator"};
  app.set_version_flag("--version", dar::VersionLine("dar-train"));
  std::string config_path, out_dir;
  int64_t seed = -1;
  int iterations = 0, jobs = 0;
  app.add_option("--config", config_path, "training config (YAML)")->required();
  app.add_option("--out", out_dir, "output directory: model, learning_curve.csv/.svg")->required();
  app.add_option("--seed", seed, "overrides the config's seed")->check(CLI::NonNegativeNumber);
  app.add_option("--iterations", iterations, "overrides the config's iterations")
      ->check(CLI::PositiveNumber);
  app.add_option("--jobs", jobs, "episodes simulated at once (the result does not depend on it)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<dar::train::TrainConfig> config = dar::train::LoadTrainConfig(config_path);
  if (!config.ok()) {
    fmt::print(stderr, "dar-train: {}\n", std::string(config.status().message()));
    return 2;
  }
  if (seed >= 0) config->seed = static_cast<uint64_t>(seed);
  if (iterations > 0) config->iterations = iterations;
  if (jobs > 0) config->jobs = jobs;

  dar::train::TrainOptions options;
  options.out_dir = out_dir;
  options.created_by = fmt::format("dar-train --config {} --seed {} --iterations {}", config_path,
                                   config->seed, config->iterations);
  options.progress = [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  absl::StatusOr<dar::train::TrainResult> result = dar::train::Train(*config, options);
  if (!result.ok()) {
    fmt::print(stderr, "dar-train: {}\n", std::string(result.status().message()));
    return 1;
  }
  fmt::print("wrote {} and {}/learning_curve.{{csv,svg}}\n", result->model_path, out_dir);
  return 0;
}
