// Time and data-rate types shared by the engine, the simulator and the daemons.
//
// Time is integer nanoseconds everywhere. `Time` is a point measured from the start of a run
// (simulation start, or the daemon's monotonic epoch); `Duration` is a span. Both are
// std::chrono::nanoseconds so that arithmetic and comparisons are free and unit-checked.
#ifndef DAR_CORE_UNITS_H_
#define DAR_CORE_UNITS_H_

#include <chrono>
#include <cstdint>
#include <limits>

namespace dar {

using Duration = std::chrono::nanoseconds;
using Time = std::chrono::nanoseconds;

inline constexpr Duration Nanoseconds(int64_t n) { return Duration(n); }
inline constexpr Duration Microseconds(int64_t n) { return Duration(n * 1000); }
inline constexpr Duration Milliseconds(int64_t n) { return Duration(n * 1000 * 1000); }
inline constexpr Duration Seconds(int64_t n) { return Duration(n * 1000 * 1000 * 1000); }
// Rounds to the nearest nanosecond, halves away from zero (as std::llround, which is not
// constexpr). For configuration input only, never on a hot path.
inline constexpr Duration SecondsF(double s) {
  const double ns = s * 1e9;
  const auto whole = static_cast<int64_t>(ns);  // toward zero
  const double rest = ns - static_cast<double>(whole);
  return Duration(rest >= 0.5 ? whole + 1 : rest <= -0.5 ? whole - 1 : whole);
}
inline constexpr double ToSeconds(Duration d) { return static_cast<double>(d.count()) * 1e-9; }
inline constexpr double ToMillis(Duration d) { return static_cast<double>(d.count()) * 1e-6; }

// A distance, cost, rate or bound with no finite value (an unreachable node, an unlimited
// link).
inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A data rate in bits per second.
class DataRate {
 public:
  constexpr DataRate() = default;
  static constexpr DataRate BitsPerSecond(int64_t bps) { return DataRate(bps); }
  static constexpr DataRate Mbps(double m) { return DataRate(static_cast<int64_t>(m * 1e6)); }
  static constexpr DataRate Gbps(double g) { return DataRate(static_cast<int64_t>(g * 1e9)); }

  constexpr int64_t bps() const { return bps_; }
  constexpr double gbps() const { return static_cast<double>(bps_) * 1e-9; }
  constexpr bool is_zero() const { return bps_ == 0; }

  // Time to put `bytes` on the wire at this rate, rounded up to a whole nanosecond.
  // REQUIRES: !is_zero().
  constexpr Duration TransmitTime(int64_t bytes) const {
    return Duration((bytes * 8 * int64_t{1000000000} + bps_ - 1) / bps_);
  }
  // Bytes that fit in `d` at this rate (rounded down).
  constexpr int64_t BytesIn(Duration d) const {
    return static_cast<int64_t>(static_cast<__int128>(bps_) * d.count() / 8 / 1000000000);
  }
  constexpr DataRate Scaled(double f) const {
    return DataRate(static_cast<int64_t>(static_cast<double>(bps_) * f));
  }

  friend constexpr bool operator==(DataRate a, DataRate b) { return a.bps_ == b.bps_; }
  friend constexpr auto operator<=>(DataRate a, DataRate b) { return a.bps_ <=> b.bps_; }

 private:
  explicit constexpr DataRate(int64_t bps) : bps_(bps) {}
  int64_t bps_ = 0;
};

}  // namespace dar

#endif  // DAR_CORE_UNITS_H_
