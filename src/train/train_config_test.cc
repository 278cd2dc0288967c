#include "train/train_config.h"

#include "gtest/gtest.h"

namespace dar::train {
namespace {

TEST(TrainConfigTest, DefaultsAndPathsRelativeToTheFile) {
  absl::StatusOr<TrainConfig> c =
      ParseTrainConfig("scenarios:\n  - {file: ../s/a.yaml, seeds: [3, 4]}\n", "cfg/train/x.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->scenarios.size(), 1u);
  EXPECT_EQ(c->scenarios[0].path, "cfg/s/a.yaml");
  EXPECT_EQ(c->scenarios[0].seeds, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(c->scenarios[0].policy, "dar");
  EXPECT_EQ(c->hidden, (std::vector<int>{32, 32}));
  EXPECT_EQ(c->ppo.epochs, 4);
  EXPECT_DOUBLE_EQ(c->reward.alpha, 1.0);
  EXPECT_EQ(c->ToJson()["hidden"], nlohmann::json({32, 32}));
}

TEST(TrainConfigTest, RejectsUnknownKeysAndBadValues) {
  absl::StatusOr<TrainConfig> c =
      ParseTrainConfig("scenarios: [{file: a.yaml}]\nppo: {epoch: 3}\n", "x.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("epoch"), std::string::npos) << c.status();

  c = ParseTrainConfig("scenarios: [{file: a.yaml}]\nppo: {clip: 1.5}\n", "x.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("ppo.clip"), std::string::npos) << c.status();

  c = ParseTrainConfig("iterations: 3\n", "x.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("scenarios"), std::string::npos) << c.status();

  c = ParseTrainConfig("scenarios: [{file: a.yaml}]\nreward: {alpha: 0, beta: 0, gamma: 0}\n",
                       "x.yaml");
  EXPECT_FALSE(c.ok());
}

TEST(TrainConfigTest, LoadsTheCheckedInConfigs) {
  for (const char* f : {"configs/train/default.yaml", "configs/train/smoke.yaml"}) {
    absl::StatusOr<TrainConfig> c = LoadTrainConfig(std::string(DAR_SOURCE_DIR) + "/" + f);
    EXPECT_TRUE(c.ok()) << f << ": " << c.status();
  }
}

}  // namespace
}  // namespace dar::train
