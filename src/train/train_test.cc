// Short trainings against the simulator (label integration: a minute or two).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "train/trainer.h"

namespace dar::train {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(DAR_BINARY_DIR) / "test-out" / name;
  std::filesystem::remove_all(dir);
  return dir.string();
}

TrainConfig SmokeConfig() {
  absl::StatusOr<TrainConfig> c =
      LoadTrainConfig(std::string(DAR_SOURCE_DIR) + "/configs/train/smoke.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// On the smoke scenario (a slow spine cable the analytic engine still sends traffic over),
// the mean reward of the last iterations is above that of the first ones.
TEST(TrainTest, SmokeTrainingImprovesTheReturn) {
  const TrainConfig config = SmokeConfig();
  TrainOptions options;
  options.out_dir = TempDir("smoke");
  options.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  absl::StatusOr<TrainResult> r = Train(config, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->records.size(), static_cast<size_t>(config.iterations));
  const auto& rec = r->records;
  const double first = (rec[0].mean_reward + rec[1].mean_reward + rec[2].mean_reward) / 3;
  const size_t n = rec.size();
  const double last =
      (rec[n - 1].mean_reward + rec[n - 2].mean_reward + rec[n - 3].mean_reward) / 3;
  EXPECT_GT(last, first);
  for (const IterationRecord& i : rec) EXPECT_GT(i.decisions, 0);

  // What dar-train leaves behind: a model the engine can load, and the curve.
  absl::StatusOr<learn::PolicyModel> model = learn::LoadPolicyModel(r->model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name, config.name);
  EXPECT_EQ(model->layers.size(), config.hidden.size() + 1);
  const std::string csv = ReadFile(options.out_dir + "/learning_curve.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), config.iterations + 1);
  const std::string svg = ReadFile(options.out_dir + "/learning_curve.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("mean reward per decision"), std::string::npos);
}

// The same config and seed give the same model file, byte for byte, whether the episodes run
// one at a time or side by side; another seed gives another model.
TEST(TrainTest, SameSeedSameModel) {
  TrainConfig config = SmokeConfig();
  config.iterations = 2;
  config.scenarios[0].episodes = 2;
  std::string files[3];
  for (int run = 0; run < 3; ++run) {
    config.jobs = run == 1 ? 2 : 1;
    config.seed = run == 2 ? 2 : 1;
    TrainOptions options;
    options.out_dir = TempDir("repro" + std::to_string(run));
    absl::StatusOr<TrainResult> r = Train(config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    files[run] = ReadFile(r->model_path);
  }
  EXPECT_FALSE(files[0].empty());
  EXPECT_EQ(files[0], files[1]);
  EXPECT_NE(files[0], files[2]);
}

TEST(TrainTest, ABadScenarioIsReportedWithItsPath) {
  TrainConfig config = SmokeConfig();
  config.scenarios[0].path = std::string(DAR_SOURCE_DIR) + "/scenarios/train/no-such.yaml";
  TrainOptions options;
  options.out_dir = TempDir("bad");
  absl::StatusOr<TrainResult> r = Train(config, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such.yaml"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace dar::train
