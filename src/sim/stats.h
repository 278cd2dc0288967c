// Summary statistics over samples (latencies, completion times, slowdowns).
//
// Quantiles interpolate linearly between the two closest ranks (Hyndman & Fan type 7, the
// default of numpy and R): for sorted samples x[0..n-1] and q in [0, 1], the quantile is
// x[h] interpolated at h = q * (n - 1). So Quantile(x, 0) is the minimum, Quantile(x, 1) the
// maximum, and the quantile of a single sample is that sample.
// Pure functions; thread-compatible.
#ifndef DAR_SIM_STATS_H_
#define DAR_SIM_STATS_H_

#include <vector>

#include "absl/types/span.h"

namespace dar::sim {

// The arithmetic mean. REQUIRES: !samples.empty().
double Mean(absl::Span<const double> samples);

// The population standard deviation (divides by n, so one sample gives 0).
// REQUIRES: !samples.empty().
double StdDev(absl::Span<const double> samples);

// The q-quantile of samples already sorted ascending (see the file comment).
// REQUIRES: !sorted.empty(), 0 <= q <= 1.
double QuantileSorted(absl::Span<const double> sorted, double q);

// The q-quantile of `samples` in any order (sorts a copy). REQUIRES as QuantileSorted.
double Quantile(std::vector<double> samples, double q);

// Several quantiles of one sample set, sorting once; result i is Quantile(samples, qs[i]).
// REQUIRES: !samples.empty(), every q in [0, 1].
std::vector<double> Quantiles(std::vector<double> samples, absl::Span<const double> qs);

// The 0.975 quantile of Student's t distribution with `df` degrees of freedom: the factor of
// a two-sided 95% confidence interval. Exact (to 4 digits) for df <= 30 from the standard
// table, then the Cornish-Fisher expansion around the normal quantile (error below 1e-4).
// REQUIRES: df >= 1.
double StudentT975(int df);

// A sample mean with its two-sided 95% confidence interval by Student's t:
// mean ± t(0.975, n-1) · s / sqrt(n), with s the sample standard deviation (divides by n-1).
// The interval assumes the samples independent and their mean near-normal (independent seeds
// of one scenario). With one sample the interval is undefined: low and high are NaN.
struct MeanInterval {
  double mean = 0;
  double low = 0;
  double high = 0;
  int n = 0;
  // Both ends finite and on one side of zero (or zero-width away from it).
  bool ExcludesZero() const { return low > 0 || high < 0; }
};
// REQUIRES: !samples.empty().
MeanInterval MeanCi95(absl::Span<const double> samples);

}  // namespace dar::sim

#endif  // DAR_SIM_STATS_H_
