#include "learn/policy_audit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dar::learn {
namespace {

double Share(int64_t part, int64_t whole) {
  return whole == 0 ? 1.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// The first largest of w[0, n).
uint32_t ArgMax(const double* w, uint32_t n) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; ++i) {
    if (w[i] > w[best]) best = i;
  }
  return best;
}

// For a uniform u in [0, 1), candidate i takes [C(i-1), C(i)) of the cumulative weights. The
// candidates of u under a and b differ exactly where u lies between C_a(i) and C_b(i) for
// some boundary i < n - 1. Those intervals' ends both rise with i, so their union is one
// sweep. (Weights sum to 1 within 1e-6; the last boundary is 1 for both.)
double DifferingShare(const double* a, const double* b, uint32_t n) {
  double ca = 0, cb = 0, covered = 0, reach = 0;
  for (uint32_t i = 0; i + 1 < n; ++i) {
    ca += a[i];
    cb += b[i];
    const double lo = std::max(std::min(ca, cb), reach);
    const double hi = std::max(ca, cb);
    if (hi > lo) covered += hi - lo;
    reach = std::max(reach, hi);
  }
  return std::min(covered, 1.0);
}

}  // namespace

double PolicyAgreement::same_argmax_share() const { return Share(same_argmax, rows); }
double PolicyAgreement::clear_same_argmax_share() const {
  return Share(clear_same_argmax, clear_rows);
}
double PolicyAgreement::same_hash_share() const {
  return rows == 0 ? 1.0 : 1.0 - differing_hashes / static_cast<double>(rows);
}

double PolicyAgreement::mean_weight_error() const {
  return candidates == 0 ? 0.0 : sum_weight_error / static_cast<double>(candidates);
}

void PolicyAgreement::Add(const PolicyAgreement& other) {
  rows += other.rows;
  same_argmax += other.same_argmax;
  clear_rows += other.clear_rows;
  clear_same_argmax += other.clear_same_argmax;
  differing_hashes += other.differing_hashes;
  max_weight_error = std::max(max_weight_error, other.max_weight_error);
  candidates += other.candidates;
  sum_weight_error += other.sum_weight_error;
}

PolicyAgreement CompareWeights(const PolicyBatch& batch, absl::Span<const double> weights,
                               absl::Span<const double> reference, double clear_margin) {
  PolicyAgreement out;
  for (const PolicyDecision& d : batch.decisions) {
    const double* w = weights.data() + d.first;
    const double* r = reference.data() + d.first;
    ++out.rows;
    for (uint32_t i = 0; i < d.count; ++i) {
      const double error = std::abs(w[i] - r[i]);
      out.max_weight_error = std::max(out.max_weight_error, error);
      out.sum_weight_error += error;
    }
    out.candidates += d.count;
    const uint32_t best = ArgMax(r, d.count);
    const bool same = ArgMax(w, d.count) == best;
    out.same_argmax += same;
    double second = 0;
    for (uint32_t i = 0; i < d.count; ++i) {
      if (i != best) second = std::max(second, r[i]);
    }
    if (r[best] - second >= clear_margin) {
      ++out.clear_rows;
      out.clear_same_argmax += same;
    }
    out.differing_hashes += DifferingShare(w, r, d.count);
  }
  return out;
}

AuditedPolicy::AuditedPolicy(std::unique_ptr<WeightPolicy> acting,
                             std::unique_ptr<WeightPolicy> reference)
    : acting_(std::move(acting)), reference_(std::move(reference)) {}

absl::Status AuditedPolicy::Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                                  Executor& executor) {
  absl::Status status = acting_->Weigh(batch, weights, executor);
  if (!status.ok()) return status;
  reference_weights_.resize(batch.candidates.size());
  if (!reference_->Weigh(batch, absl::MakeSpan(reference_weights_), executor).ok()) {
    ++reference_failures_;
    return absl::OkStatus();
  }
  agreement_.Add(CompareWeights(batch, weights, reference_weights_));
  return absl::OkStatus();
}

std::string AuditedPolicy::Describe() const {
  return absl::StrCat(acting_->Describe(), ", audited against ", reference_->Describe());
}

}  // namespace dar::learn
