// dar-train's loop: simulator episodes with the policy in DAR's route computer, then a PPO
// update, for a number of iterations; the learning curve and the model file at the end.
//
// Before the first iteration every (scenario, seed) pair the episodes will use is run once
// with the analytic engine (RolloutPolicy's analytic mode): its features set the network's
// input normalisation, and its reward and metrics are the baseline each iteration is compared
// with. An iteration runs every training scenario `episodes` times, the simulator seeds
// cycling through the scenario's list, and updates the network on all their decisions.
//
// Deterministic: the same config and seed give the same model file, whatever `jobs` is.
// Torch runs on one thread (at::set_num_threads(1), set by Train); episodes may run on
// several, each with its own copy of the network and its own random stream.
#ifndef DAR_TRAIN_TRAINER_H_
#define DAR_TRAIN_TRAINER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "learn/policy_model.h"
#include "train/learning_curve.h"
#include "train/train_config.h"

namespace dar::train {

struct TrainOptions {
  // Where learning_curve.csv, learning_curve.svg and the model file go; created if missing.
  std::string out_dir;
  // Called with a line of progress (no newline) after the baseline and every iteration.
  std::function<void(const std::string&)> progress;
  // For the model file's created_by, e.g. the command line.
  std::string created_by = "dar-train";
};

struct TrainResult {
  std::vector<IterationRecord> records;
  learn::PolicyModel model;
  std::string model_path;
};

absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainOptions& options);

}  // namespace dar::train

#endif  // DAR_TRAIN_TRAINER_H_
