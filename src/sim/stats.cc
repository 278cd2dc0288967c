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

}  // namespace dar::sim
