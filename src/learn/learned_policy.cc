// The engine's learned policy (learn/policy_model.h): WeightsFromLogits (softmax with a floor)
// and LearnedPolicy, which runs a loaded model over a batch, in INT8 or FP32, on the executor.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "base/status_macros.h"
#include "core/vector_exp.h"
#include "fmt/format.h"
#include "learn/policy_model.h"

namespace dar::learn {
namespace {

constexpr double kSmallestWeight = 1e-9;  // WeightsFromLogits' floor when min_weight is 0

}  // namespace

namespace {

// Each decision's exps (in `w`) divided by their sum, floored at min_weight, divided by the
// floored sum. The sums run in candidate order; the divisions, element by element, are the
// same in any order, so they are in loops of their own, which the compiler vectorises.
inline void NormaliseRowsLoop(absl::Span<const PolicyDecision> decisions, double min_weight,
                              double* w) {
  for (const PolicyDecision& d : decisions) {
    double* row = w + d.first;
    const uint32_t n = d.count;
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) sum += row[i];
    for (uint32_t i = 0; i < n; ++i) row[i] = std::max(row[i] / sum, min_weight);
    double floored = 0;
    for (uint32_t i = 0; i < n; ++i) floored += row[i];
    for (uint32_t i = 0; i < n; ++i) row[i] /= floored;
  }
}

void NormaliseRows(absl::Span<const PolicyDecision> decisions, double min_weight, double* w) {
  NormaliseRowsLoop(decisions, min_weight, w);
}

__attribute__((target("avx2"))) void NormaliseRowsAvx2(absl::Span<const PolicyDecision> decisions,
                                                       double min_weight, double* w) {
  NormaliseRowsLoop(decisions, min_weight, w);
}

}  // namespace

void WeightsFromLogits(const PolicyBatch& batch, absl::Span<const float> logits, double min_weight,
                       absl::Span<double> weights) {
  WeightsFromLogits(batch.decisions, logits, min_weight, weights);
}

void WeightsFromLogits(absl::Span<const PolicyDecision> decisions, absl::Span<const float> logits,
                       double min_weight, absl::Span<double> weights) {
  if (decisions.empty()) return;
  // The forwarders' validator refuses a zero weight, which softmax can underflow to.
  min_weight = std::max(min_weight, kSmallestWeight);
  // Each logit less its row's largest, then the exps (within 2 ulp) in one vector pass where
  // the rows tile the weights (as PolicyFeatureBuilder's do), else row by row.
  bool tiled = true;
  const uint32_t start = decisions.front().first;
  uint32_t next = start;
  for (const PolicyDecision& d : decisions) {
    double top = -std::numeric_limits<double>::infinity();
    for (uint32_t i = d.first; i < d.first + d.count; ++i) top = std::max<double>(top, logits[i]);
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      weights[i] = static_cast<double>(logits[i]) - top;
    }
    tiled = tiled && d.first == next;
    next = d.first + d.count;
  }
  if (tiled) {
    ExpNonPositive(weights.data() + start, weights.data() + start, next - start);
  } else {
    for (const PolicyDecision& d : decisions) {
      ExpNonPositive(weights.data() + d.first, weights.data() + d.first, d.count);
    }
  }
  static const auto normalise = __builtin_cpu_supports("avx2") ? NormaliseRowsAvx2 : NormaliseRows;
  normalise(decisions, min_weight, weights.data());
}

namespace {

// Whether the batch's decisions cover its candidates one after the other, in order.
bool TilesInOrder(const PolicyBatch& batch) {
  uint32_t next = 0;
  for (const PolicyDecision& d : batch.decisions) {
    if (d.first != next) return false;
    next += d.count;
  }
  return next == batch.candidates.size();
}

}  // namespace

LearnedPolicy::LearnedPolicy(PolicyModel model, std::string path, Precision precision)
    : model_(std::move(model)), path_(std::move(path)), precision_(precision), quantized_(model_) {}

absl::StatusOr<std::unique_ptr<LearnedPolicy>> LearnedPolicy::Load(const std::string& path,
                                                                   Precision precision) {
  ASSIGN_OR_RETURN(PolicyModel model, LoadPolicyModel(path));
  return std::make_unique<LearnedPolicy>(std::move(model), path, precision);
}

absl::Status LearnedPolicy::Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                                  Executor& executor) {
  const size_t n = batch.candidates.size();
  if (weights.size() != n) {
    return absl::InvalidArgumentError(
        fmt::format("{} weights for {} candidates", weights.size(), n));
  }
  logits_.resize(n);
  // Half h is decisions [row[h], row[h + 1]) and their candidates [cut[h], cut[h + 1]): two
  // halves for INT8 where there are threads, the batch is large enough to be worth one, and
  // its decisions tile its candidates in order (PolicyFeatureBuilder's do); FP32, the
  // reference, runs whole.
  const std::vector<PolicyDecision>& decisions = batch.decisions;
  std::array<size_t, 3> row = {0, decisions.size(), decisions.size()};
  std::array<size_t, 3> cut = {0, n, n};
  constexpr size_t kSmallestSplit = 4096;
  if (precision_ == Precision::kInt8 && executor.concurrency() >= 2 && n >= kSmallestSplit &&
      TilesInOrder(batch)) {
    const auto middle =
        std::partition_point(decisions.begin(), decisions.end(),
                             [n](const PolicyDecision& d) { return d.first < n / 2; });
    if (middle != decisions.end()) {
      row[1] = static_cast<size_t>(middle - decisions.begin());
      cut[1] = middle->first;
    }
  }
  const int halves = row[1] < decisions.size() ? 2 : 1;
  std::atomic<bool> finite = true;
  executor.RunEach(halves, [&](int h) {
    const absl::Span<float> logits = absl::MakeSpan(logits_).subspan(cut[h], cut[h + 1] - cut[h]);
    if (precision_ == Precision::kInt8) {
      quantized_.BatchLogits(batch, cut[h], logits, workspaces_[h]);
    } else {
      features_.resize(n * kPolicyFeatures);
      for (size_t i = 0; i < n; ++i) {
        std::copy(batch.candidates[i].features.begin(), batch.candidates[i].features.end(),
                  features_.begin() + static_cast<std::ptrdiff_t>(i * kPolicyFeatures));
      }
      LogitsFloat(model_, features_, logits);
    }
    for (float x : logits) {
      if (!std::isfinite(x)) finite = false;
    }
    if (!finite) return;
    WeightsFromLogits(absl::MakeConstSpan(decisions).subspan(row[h], row[h + 1] - row[h]), logits_,
                      model_.min_weight, weights);
  });
  if (!finite) return absl::InternalError("the network gave a non-finite logit");
  return absl::OkStatus();
}

std::string LearnedPolicy::Describe() const {
  return fmt::format("{} model {} ({})", precision_ == Precision::kInt8 ? "int8" : "float",
                     model_.name.empty() ? "(unnamed)" : model_.name, path_);
}

}  // namespace dar::learn
