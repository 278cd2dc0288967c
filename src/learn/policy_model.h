// The learned policy's network and its model file, and the two ways to run it: FP32 (the
// reference, and what dar-train exports) and INT8 (what the engine runs).
//
// The network scores each candidate of a row on its own (core/weight_policy.h features in,
// one logit out): a small MLP, input -> hidden ReLU layers -> 1. A row's weights are the
// softmax of its candidates' logits, each floored at min_weight and renormalised. Scoring
// candidates one at a time with shared parameters is what makes the policy size-independent:
// a row with 2 candidates and one with 16 use the same network.
//
// Model file (JSON, small, versioned; written by dar-train, read by the engine):
//   {"format": "dar-policy", "format_version": 1,
//    "name": "...", "created_by": "dar-train ...", "seed": N, "config": {...},
//    "features": ["analytic_logit", ...],        // must equal PolicyFeatureNames()
//    "feature_mean": [...], "feature_scale": [...],  // x' = (x - mean) / scale, per feature
//    "layers": [{"in": I, "out": O, "weight": [O*I floats, row-major by output],
//                "bias": [O floats]}, ...],      // ReLU between layers, none after the last
//    "min_weight": w, "checksum": "fnv1a64:<16 hex digits>"}
// The checksum covers every number above in file order (features excluded), so a file cut
// short or edited by hand is refused rather than run: FNV-1a 64 over the little-endian bytes
// of format_version and seed (as int64), feature_mean and feature_scale (float32), each
// layer's in and out (int64), weight and bias (float32), then min_weight (float64); name,
// created_by and config are not covered. Numbers are written so that they read back exactly. Load
// refuses, with the file's path and what is wrong: a missing or unreadable file, bad JSON (with its
// line), another format, a format_version this build does not know, other features, inconsistent
// shapes, a non-finite number, a wrong checksum.
//
// INT8. Weights are quantised per output channel (symmetric, scale = max |w| / 127); each
// layer's input vector is quantised on the fly with its own scale: the first layer's (signed
// features) to [-127, 127] (max |x| / 127), the others' (after a ReLU, never negative) to
// unsigned [0, 255] (max x / 255), twice the resolution; products accumulate in int32 and
// are rescaled to float with the two scales, plus the FP32 bias.
#ifndef DAR_LEARN_POLICY_MODEL_H_
#define DAR_LEARN_POLICY_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/weight_policy.h"
#include "nlohmann/json.hpp"

namespace dar::learn {

inline constexpr int kModelFormatVersion = 1;

struct DenseLayer {
  int in = 0;
  int out = 0;
  std::vector<float> weight;  // out * in, row-major by output
  std::vector<float> bias;    // out
};

// The FP32 network and what the file says about it.
struct PolicyModel {
  std::string name;
  std::string created_by;
  uint64_t seed = 0;
  nlohmann::json config;             // the training config, as given (for the record)
  std::vector<float> feature_mean;   // kPolicyFeatures
  std::vector<float> feature_scale;  // kPolicyFeatures, > 0
  std::vector<DenseLayer> layers;    // first in == kPolicyFeatures, last out == 1
  double min_weight = 0.001;

  // OK, or InvalidArgument naming the first inconsistency (shapes, non-finite numbers).
  absl::Status Validate() const;
};

// Reads and checks a model file (see the top comment); errors name `path`.
absl::StatusOr<PolicyModel> LoadPolicyModel(const std::string& path);
// Writes `model` with its checksum, atomically (a temporary file, then rename).
absl::Status SavePolicyModel(const PolicyModel& model, const std::string& path);

// FP32 inference: one logit per row of `features` (n rows of kPolicyFeatures, raw features:
// normalisation is applied here).
void LogitsFloat(const PolicyModel& model, absl::Span<const float> features,
                 absl::Span<float> logits);

// The INT8 form of a model, built once at load.
class QuantizedPolicyModel {
 public:
  explicit QuantizedPolicyModel(const PolicyModel& model);
  // As LogitsFloat, in INT8 arithmetic: an AVX2 kernel where the processor has it, else a
  // portable one; the two give the same logits bit for bit.
  void Logits(absl::Span<const float> features, absl::Span<float> logits) const;
  // Logits with the portable kernel whatever the processor (for tests).
  void LogitsPortable(absl::Span<const float> features, absl::Span<float> logits) const;

 private:
  struct Layer {
    int in = 0;
    int out = 0;
    int in_padded = 0;           // `in` rounded up for the kernels (zeros past `in`)
    int out_padded = 0;          // `out` rounded up likewise
    std::vector<int8_t> weight;  // out * in_padded
    // The same weights for the AVX2 kernel: [in_padded / 2][out_padded][2].
    std::vector<int16_t> pairs;
    std::vector<float> scale;  // per output channel, out_padded (zeros past `out`)
    std::vector<float> bias;   // out_padded (zeros past `out`)
  };
  void Run(absl::Span<const float> features, absl::Span<float> logits, bool avx2) const;

  std::vector<float> feature_mean_, feature_inv_scale_;
  std::vector<Layer> layers_;
};

// Softmax of `logits` over each decision's candidates, floored at min_weight (at least 1e-9:
// the validator refuses a weight of 0), renormalised.
void WeightsFromLogits(const PolicyBatch& batch, absl::Span<const float> logits, double min_weight,
                       absl::Span<double> weights);

// The engine's learned policy: a loaded model run in INT8 (or FP32, for comparisons).
class LearnedPolicy : public WeightPolicy {
 public:
  enum class Precision { kInt8, kFloat };
  LearnedPolicy(PolicyModel model, std::string path, Precision precision = Precision::kInt8);
  // Loads `path`; the error says why the file was refused.
  static absl::StatusOr<std::unique_ptr<LearnedPolicy>> Load(const std::string& path,
                                                             Precision precision);

  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights) override;
  std::string Describe() const override;
  const PolicyModel& model() const { return model_; }

 private:
  PolicyModel model_;
  std::string path_;
  Precision precision_;
  QuantizedPolicyModel quantized_;
  std::vector<float> features_, logits_;  // scratch
};

}  // namespace dar::learn

#endif  // DAR_LEARN_POLICY_MODEL_H_
