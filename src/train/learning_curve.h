// dar-train's learning curve: one record per iteration, written as CSV and as an SVG plot.
#ifndef DAR_TRAIN_LEARNING_CURVE_H_
#define DAR_TRAIN_LEARNING_CURVE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "train/ppo.h"

namespace dar::train {

struct IterationRecord {
  int iteration = 0;  // 1-based
  int episodes = 0;
  int64_t decisions = 0;       // rewarded decisions that went into the update
  double mean_reward = 0;      // per rewarded decision
  double analytic_reward = 0;  // the same, for the analytic engine on the same episodes
  // Episode metrics, means over the episodes that report them (NaN: none does).
  double fct_mean_s = 0;
  double fct_p99_s = 0;
  double latency_p99_s = 0;
  double completion_mean_s = 0;
  // Geometric mean, over episodes and the metrics above that they report, of the learned
  // policy's value over the analytic engine's on the same scenario and seed: < 1 is better.
  double metric_ratio = 1;
  PpoStats ppo;
  double wall_s = 0;  // this iteration, rollouts and update
};

std::string LearningCurveCsv(const std::vector<IterationRecord>& records);
// Two panels over the iterations: the mean reward (and the analytic engine's, dashed), and
// metric_ratio (1, the analytic engine, dashed).
std::string LearningCurveSvg(const std::vector<IterationRecord>& records, const std::string& title);

// Writes `text` to `path`; the error names the path.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace dar::train

#endif  // DAR_TRAIN_LEARNING_CURVE_H_
