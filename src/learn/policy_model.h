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
// INT8. Every layer after the first runs with INT8 weights, 16-bit activations and int32
// accumulation: weights quantised per output channel (symmetric, levels [-127, 127], scale =
// max |w| / 127), each candidate's input vector to the layer (a ReLU output, never negative)
// quantised on the fly with its own scale to [0, 32767] (max x / 32767: 15 bits, so valid
// int16); products of int16 pairs accumulate in int32 and are rescaled to float with the two
// scales, plus the FP32 bias. 16-bit rather than 8-bit activations because the hidden
// layer's 8-bit rounding was what changed the chosen next hop: on the k=8 fat-tree
// evaluation, the same next hop as FP32 in 98.7% of decisions with 8-bit activations, 99.8%
// with 16-bit ones (issue 5 asks for 99%). A sum of `in` products is at most
// in * 32767 * 127 in magnitude, so an INT8 layer takes at most kMaxInt8LayerInput (516)
// inputs: a wider model is refused at load (PolicyModel::Validate). The first layer stays
// FP32 (11 inputs, a small share of the work once split as below, and where quantising
// signed raw features would cost the most accuracy), with the normalisation folded into its
// weights and bias. It splits: the features of the candidate's link (kFeatLinkDelay ..
// kFeatLinkUtilisationNow) are the same in every row that uses the link, so their half of
// the first layer is computed once per link and added per candidate
// (QuantizedPolicyModel::BatchLogits). The kernels take rows in blocks; for hidden layers of
// at most 32 (dar-train's default), the AVX2 ones run 8 rows at a time, one per lane, and the
// AVX-512 one 16.
//
// The code, one concern per file: the model file and FP32 in policy_model.cc; the INT8 model
// and its link halves in policy_quantized.cc; the row kernels in policy_kernels.cc; the
// softmax and LearnedPolicy in learned_policy.cc.
#ifndef DAR_LEARN_POLICY_MODEL_H_
#define DAR_LEARN_POLICY_MODEL_H_

#include <array>
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

struct LinkHalves;  // policy_kernels.h

inline constexpr int kModelFormatVersion = 1;

// The widest input of a layer after the first (an INT8 layer): the largest n with
// n * 32767 * 127 <= 2^31 - 1, so that no int32 sum of a row's products can overflow.
inline constexpr int kMaxInt8LayerInput = 516;
static_assert(int64_t{kMaxInt8LayerInput} * 32767 * 127 <= INT32_MAX &&
              int64_t{kMaxInt8LayerInput + 1} * 32767 * 127 > INT32_MAX);

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

  // OK, or InvalidArgument naming the first inconsistency (shapes, non-finite numbers, a
  // layer after the first wider than kMaxInt8LayerInput).
  absl::Status Validate() const;
};

// The checksum a model file carries for `model`'s numbers: "fnv1a64:<16 hex digits>".
std::string PolicyModelChecksum(const PolicyModel& model);

// Reads and checks a model file (see the top comment); errors name `path`.
absl::StatusOr<PolicyModel> LoadPolicyModel(const std::string& path);
// Writes `model` with its checksum, atomically (a temporary file, then rename).
absl::Status SavePolicyModel(const PolicyModel& model, const std::string& path);

// A model of one layer without normalisation: logit = weights . features + bias. With 1 on
// kFeatAnalyticLogit and 0 elsewhere it is the analytic engine's own weights (softmax of ln w
// is w); tests make other hand-written policies with it.
PolicyModel LinearPolicyModel(std::string name, const std::array<float, kPolicyFeatures>& weights,
                              float bias = 0);

// FP32 inference: one logit per row of `features` (n rows of kPolicyFeatures, raw features:
// normalisation is applied here).
void LogitsFloat(const PolicyModel& model, absl::Span<const float> features,
                 absl::Span<float> logits);

// The INT8 form of a model (see the top comment), built once at load. Thread-safe (const);
// BatchLogits' scratch is the caller's.
class QuantizedPolicyModel {
 public:
  // REQUIRES: model.Validate().ok() (aborts on a layer wider than kMaxInt8LayerInput).
  explicit QuantizedPolicyModel(const PolicyModel& model);

  // The kernels, which give the same logits bit for bit for finite features (a NaN may go
  // through the vector kernels' ReLU as 0, and through the portable one as NaN, which Weigh
  // refuses; PolicyFeatureBuilder makes no such feature): kAuto is the fastest this
  // processor runs (kAvx512Vnni where it has AVX-512 F, BW, VL, DQ and VNNI; else AVX2 and
  // FMA, with AVX-VNNI or AVX512-VNNI where it has them); the others are for tests and
  // benchmarks. kAvx512Vnni runs 16 rows per zmm register for hidden layers of at most 32
  // (about twice as fast as the AVX2 ones on a Sapphire Rapids Xeon) and the
  // kAvx2VnniEvex kernel for wider ones.
  enum class Kernel { kAuto, kPortable, kAvx2, kAvx2VnniVex, kAvx2VnniEvex, kAvx512Vnni };
  // Whether this processor runs `kernel`.
  static bool Supports(Kernel kernel);

  // As LogitsFloat, in INT8 weights and 16-bit activations. REQUIRES: Supports(kernel).
  void Logits(absl::Span<const float> features, absl::Span<float> logits,
              Kernel kernel = Kernel::kAuto) const;

  // Scratch of BatchLogits, kept between calls so that a cycle allocates nothing.
  struct Workspace {
    // What a link's candidates share, together so that a candidate's check is one cache line.
    struct Link {
      uint32_t stamp = 0;                  // the call that last gave it a slot
      uint32_t slot = 0;                   // its slot in that call
      std::array<uint32_t, 5> features{};  // the bits of its link features in that slot
    };
    std::vector<Link> links;      // by link
    std::vector<float> partials;  // by slot: the first layer's link half
    uint32_t slots = 0;           // in this call
    uint32_t call = 0;
  };
  // The logits of `batch`'s candidates, the same bit for bit as Logits over their features,
  // with the first layer's link half computed once per link: from batch.link_features where
  // the batch has them, else once per distinct link features met (a link's candidates may
  // differ in them). REQUIRES: logits.size() == batch.candidates.size().
  void BatchLogits(const PolicyBatch& batch, absl::Span<float> logits, Workspace& ws,
                   Kernel kernel = Kernel::kAuto) const;
  // The same for candidates [begin, begin + logits.size()) only: logits[i] is candidate
  // begin + i's. Calls on other threads with other workspaces may run at the same time.
  // REQUIRES: begin + logits.size() <= batch.candidates.size().
  void BatchLogits(const PolicyBatch& batch, size_t begin, absl::Span<float> logits, Workspace& ws,
                   Kernel kernel = Kernel::kAuto) const;

 private:
  struct Layer {
    int in = 0;
    int out = 0;
    int in_padded = 0;   // `in` rounded up to a multiple of 32 (zeros past `in`)
    int out_padded = 0;  // `out` rounded up to 32, or 8 for the last layer (zeros past `out`)
    // The INT8 weights, widened to int16 (the kernels multiply int16 pairs).
    // out_padded x in_padded, row-major, zeros past `out` (portable and AVX-512 kernels).
    std::vector<int16_t> weight;
    // The same weights for the AVX2 kernel: [out_padded / 8][in_padded / 2][8 outputs][2].
    std::vector<int16_t> packed;
    // And for the 8-rows-at-once kernel: [out][in_padded / 2][8 copies][2].
    std::vector<int16_t> broadcast;
    std::vector<float> scale;  // per output channel, out_padded (zeros past `out`)
    std::vector<float> bias;   // out_padded (zeros past `out`)
  };
  // The link half of the first layer for the features `x` (out1_padded_ floats).
  void LinkPartial(const float* x, float* out) const;
  // The slot in `ws` of the first layer's link half for `c`, made if it has none this call.
  uint32_t LinkSlot(const PolicyCandidate& c, Workspace& ws) const;
  // Logits of n rows: row r's features at rows + r * stride bytes, their link halves from
  // `halves` (policy_kernels.h), by the kernel `kernel` picks (policy_quantized.cc).
  void Run(const char* rows, size_t stride, size_t n, const LinkHalves& halves, float* logits,
           Kernel kernel) const;

  int out1_padded_ = 0;        // the first layer's out, rounded up to 32 (8 if it is last)
  bool relu1_ = false;         // the first layer is not the last
  std::vector<float> w1_;      // [kPolicyFeatures][out1_padded_]: weight / feature_scale
  std::vector<float> b1_;      // out1_padded_: bias - sum of weight * mean / scale
  std::vector<float> wide1_;   // per output: b1_, then w1_ of each row feature, each 8 times
  std::vector<Layer> layers_;  // the INT8 layers, after the first
  int widest_ = 0;             // of any padded width
};

// Softmax of `logits` over each decision's candidates, floored at min_weight (at least 1e-9:
// the validator refuses a weight of 0), renormalised.
void WeightsFromLogits(const PolicyBatch& batch, absl::Span<const float> logits, double min_weight,
                       absl::Span<double> weights);
// The same for `decisions` only (a run of a batch's decisions; logits and weights indexed by
// candidate as in the batch).
void WeightsFromLogits(absl::Span<const PolicyDecision> decisions, absl::Span<const float> logits,
                       double min_weight, absl::Span<double> weights);

// The engine's learned policy: a loaded model run in INT8 (or FP32, for comparisons). On an
// executor of concurrency >= 2 (the controller's pool, policy.cycle_threads), INT8 inference
// and the softmax run over the batch's two halves side by side (split at a decision), the
// same bit for bit.
class LearnedPolicy : public WeightPolicy {
 public:
  enum class Precision { kInt8, kFloat };
  LearnedPolicy(PolicyModel model, std::string path, Precision precision = Precision::kInt8);
  // Loads `path`; the error says why the file was refused.
  static absl::StatusOr<std::unique_ptr<LearnedPolicy>> Load(const std::string& path,
                                                             Precision precision);

  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                     Executor& executor) override;
  // Inference needs the features only.
  bool wants_reward_terms() const override { return false; }
  std::string Describe() const override;
  const PolicyModel& model() const { return model_; }

 private:
  PolicyModel model_;
  std::string path_;
  Precision precision_;
  QuantizedPolicyModel quantized_;
  std::array<QuantizedPolicyModel::Workspace, 2> workspaces_;  // by half of a batch
  std::vector<float> features_, logits_;                       // scratch
};

}  // namespace dar::learn

#endif  // DAR_LEARN_POLICY_MODEL_H_
