// The controller's clock seam: monotonic time for timeouts and cycles, wall-clock time for
// what people and other machines read (events, logs, table timestamps). Tests use a clock
// they move by hand.
#ifndef DAR_CONTROL_CONTROLLER_CLOCK_H_
#define DAR_CONTROL_CONTROLLER_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/units.h"

namespace dar::control {

// Thread-safe.
class ControllerClock {
 public:
  virtual ~ControllerClock() = default;
  // Monotonic time since an arbitrary epoch; never goes backwards.
  virtual Time Now() const = 0;
  // Nanoseconds since the Unix epoch.
  virtual int64_t UnixNanos() const = 0;
};

// std::chrono::steady_clock and system_clock.
class RealClock final : public ControllerClock {
 public:
  Time Now() const override {
    return std::chrono::duration_cast<Time>(std::chrono::steady_clock::now().time_since_epoch());
  }
  int64_t UnixNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to; both readings move together. For tests.
class ManualClock final : public ControllerClock {
 public:
  explicit ManualClock(int64_t unix_start_ns = 1'700'000'000'000'000'000)
      : unix_start_(unix_start_ns) {}
  Time Now() const override { return Time(now_.load()); }
  int64_t UnixNanos() const override { return unix_start_ + now_.load(); }
  void Advance(Duration d) { now_ += d.count(); }

 private:
  const int64_t unix_start_;
  std::atomic<int64_t> now_{0};
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_CLOCK_H_
