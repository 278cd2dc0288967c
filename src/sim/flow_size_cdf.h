// An empirical flow-size distribution: a piecewise-linear CDF over flow sizes in bytes.
//
// File format (data/flow-sizes/README.md): '#' starts a comment, blank lines are skipped, every
// other line is "<bytes> <cumulative percent>". Sizes and percents must not decrease, percents
// lie in [0, 100] and the last one is 100. Between two points the CDF is linear; a first
// point with a percent above 0 is a point mass at its size (e.g. "100 20" first: 20% of flows
// are exactly 100 bytes).
// Immutable once built; const methods are thread-safe.
#ifndef DAR_SIM_FLOW_SIZE_CDF_H_
#define DAR_SIM_FLOW_SIZE_CDF_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/random.h"

namespace dar::sim {

class FlowSizeCdf {
 public:
  struct Point {
    double bytes = 0;
    double percent = 0;  // of flows with size <= bytes
  };

  // Validates `points` (see the file comment); errors name `where`.
  static absl::StatusOr<FlowSizeCdf> FromPoints(std::vector<Point> points, std::string_view where);
  // Parses the file format; errors name `where` and the line number.
  static absl::StatusOr<FlowSizeCdf> Parse(std::string_view text, std::string_view where);
  // Reads and parses a file.
  static absl::StatusOr<FlowSizeCdf> Load(const std::string& path);

  // Where the CDF named by `spec` lives. A bare name (letters, digits, '-', '_'; no '/' or
  // '.') is a shipped distribution: <data dir>/flow-sizes/<name>.cdf, where the data dir is
  // $DAR_DATA_DIR if set, else the repository's data/ directory. Anything else is a path,
  // relative to `base_dir` unless absolute (or base_dir is empty).
  static std::string ResolvePath(std::string_view spec, std::string_view base_dir);

  // The mean flow size in bytes of the piecewise-linear distribution (exact, not sampled).
  double MeanBytes() const { return mean_; }
  // The inverse CDF: the size at cumulative fraction u. REQUIRES: 0 <= u <= 1.
  double Quantile(double u) const;
  // The fraction of flows of at most `bytes`.
  double Cdf(double bytes) const;
  // A random flow size: Quantile(rng.Uniform()) rounded to the nearest byte, and at least 1.
  int64_t Sample(Random& rng) const;

  const std::vector<Point>& points() const { return points_; }

 private:
  explicit FlowSizeCdf(std::vector<Point> points);

  std::vector<Point> points_;
  double mean_ = 0;
};

}  // namespace dar::sim

#endif  // DAR_SIM_FLOW_SIZE_CDF_H_
