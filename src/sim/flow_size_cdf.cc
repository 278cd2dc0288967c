#include "sim/flow_size_cdf.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"

#ifndef DAR_DATA_DIR
#define DAR_DATA_DIR "data"
#endif

namespace dar::sim {

FlowSizeCdf::FlowSizeCdf(std::vector<Point> points) : points_(std::move(points)) {
  // A point mass at the first size, then a uniform density on every segment.
  mean_ = points_[0].bytes * points_[0].percent / 100;
  for (size_t i = 1; i < points_.size(); ++i) {
    const Point& a = points_[i - 1];
    const Point& b = points_[i];
    mean_ += (b.percent - a.percent) / 100 * (a.bytes + b.bytes) / 2;
  }
}

absl::StatusOr<FlowSizeCdf> FlowSizeCdf::FromPoints(std::vector<Point> points,
                                                    std::string_view where) {
  if (points.empty()) return absl::InvalidArgumentError(fmt::format("{}: no points", where));
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    if (!std::isfinite(p.bytes) || p.bytes < 0) {
      return absl::InvalidArgumentError(
          fmt::format("{}: point {}: size must be >= 0, got {}", where, i + 1, p.bytes));
    }
    if (!std::isfinite(p.percent) || p.percent < 0 || p.percent > 100) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: point {}: percent must be in [0, 100], got {}", where, i + 1, p.percent));
    }
    if (i > 0 && (p.bytes < points[i - 1].bytes || p.percent < points[i - 1].percent)) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: point {}: sizes and percents must not decrease ({} {} after {} {})", where, i + 1,
          p.bytes, p.percent, points[i - 1].bytes, points[i - 1].percent));
    }
  }
  if (points.back().percent != 100) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the last point must be at 100 percent, got {}", where, points.back().percent));
  }
  return FlowSizeCdf(std::move(points));
}

absl::StatusOr<FlowSizeCdf> FlowSizeCdf::Parse(std::string_view text, std::string_view where) {
  std::vector<Point> points;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    Point p;
    if (!(fields >> p.bytes)) {
      fields.clear();
      std::string rest;
      if (fields >> rest) {
        return absl::InvalidArgumentError(
            fmt::format("{}:{}: expected '<bytes> <percent>', got '{}'", where, line_no, line));
      }
      continue;  // blank
    }
    std::string extra;
    if (!(fields >> p.percent) || (fields >> extra)) {
      return absl::InvalidArgumentError(
          fmt::format("{}:{}: expected '<bytes> <percent>', got '{}'", where, line_no, line));
    }
    points.push_back(p);
  }
  return FromPoints(std::move(points), where);
}

absl::StatusOr<FlowSizeCdf> FlowSizeCdf::Load(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return Parse(text, path);
}

std::string FlowSizeCdf::ResolvePath(std::string_view spec, std::string_view base_dir) {
  const bool bare_name = !spec.empty() && std::all_of(spec.begin(), spec.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (bare_name) {
    const char* env = std::getenv("DAR_DATA_DIR");
    const std::string data_dir = env != nullptr && *env != '\0' ? env : DAR_DATA_DIR;
    return fmt::format("{}/flow-sizes/{}.cdf", data_dir, spec);
  }
  const std::filesystem::path path{std::string(spec)};
  if (path.is_absolute() || base_dir.empty()) return path.string();
  return (std::filesystem::path(std::string(base_dir)) / path).string();
}

double FlowSizeCdf::Quantile(double u) const {
  const double pct = u * 100;
  if (pct <= points_[0].percent) return points_[0].bytes;
  // The first point at or above pct; segments of zero width in percent are never chosen.
  auto it = std::lower_bound(points_.begin(), points_.end(), pct,
                             [](const Point& p, double v) { return p.percent < v; });
  if (it == points_.end()) return points_.back().bytes;
  const Point& b = *it;
  const Point& a = *(it - 1);
  const double f = (pct - a.percent) / (b.percent - a.percent);
  return a.bytes + f * (b.bytes - a.bytes);
}

double FlowSizeCdf::Cdf(double bytes) const {
  if (bytes < points_[0].bytes) return 0;
  // The last point at or below `bytes`.
  auto it = std::upper_bound(points_.begin(), points_.end(), bytes,
                             [](double v, const Point& p) { return v < p.bytes; });
  const Point& a = *(it - 1);
  if (it == points_.end() || a.bytes == bytes) return a.percent / 100;
  const Point& b = *it;
  return (a.percent + (bytes - a.bytes) / (b.bytes - a.bytes) * (b.percent - a.percent)) / 100;
}

int64_t FlowSizeCdf::Sample(Random& rng) const {
  return std::max<int64_t>(1, std::llround(Quantile(rng.Uniform())));
}

}  // namespace dar::sim
