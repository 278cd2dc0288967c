#include "sim/stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace dar::sim {

double Mean(absl::Span<const double> samples) {
  assert(!samples.empty());
  double sum = 0;
  for (double x : samples) sum += x;
  return sum / static_cast<double>(samples.size());
}

double StdDev(absl::Span<const double> samples) {
  const double mean = Mean(samples);
  double sum_sq = 0;
  for (double x : samples) sum_sq += (x - mean) * (x - mean);
  return std::sqrt(sum_sq / static_cast<double>(samples.size()));
}

double QuantileSorted(absl::Span<const double> sorted, double q) {
  assert(!sorted.empty() && q >= 0 && q <= 1);
  const double h = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double Quantile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  return QuantileSorted(samples, q);
}

std::vector<double> Quantiles(std::vector<double> samples, absl::Span<const double> qs) {
  std::sort(samples.begin(), samples.end());
  std::vector<double> out;
  out.reserve(qs.size());
  for (double q : qs) out.push_back(QuantileSorted(samples, q));
  return out;
}

double StudentT975(int df) {
  assert(df >= 1);
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                      2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                      2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                      2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df <= 30) return kTable[df - 1];
  // Cornish-Fisher (Abramowitz & Stegun 26.7.5) around z = 1.959964.
  const double z = 1.959963984540054;
  const double v = df;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v);
}

MeanInterval MeanCi95(absl::Span<const double> samples) {
  assert(!samples.empty());
  MeanInterval out;
  out.n = static_cast<int>(samples.size());
  out.mean = Mean(samples);
  if (out.n < 2) {
    out.low = out.high = std::nan("");
    return out;
  }
  double sum_sq = 0;
  for (double x : samples) sum_sq += (x - out.mean) * (x - out.mean);
  const double s = std::sqrt(sum_sq / (out.n - 1));
  const double half = StudentT975(out.n - 1) * s / std::sqrt(static_cast<double>(out.n));
  out.low = out.mean - half;
  out.high = out.mean + half;
  return out;
}

}  // namespace dar::sim
