// The clock seam of the daemons: monotonic time for timeouts, cycles and staleness, and
// wall-clock time for what people and other machines read (events, logs, stamps, certificate
// validity). The controller and the agent's control client read time only through it, so a
// test moves their time by hand (ManualClock) instead of waiting for it. The simulator has
// its own clock (sim/event_queue.h) and does not use this.
#ifndef DAR_BASE_CLOCK_H_
#define DAR_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace dar {

// Times are nanoseconds, the same type as core/units.h's Time and Duration (base sits below
// core). Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time since an arbitrary epoch; never goes backwards.
  virtual std::chrono::nanoseconds Now() const = 0;
  // Nanoseconds since the Unix epoch.
  virtual int64_t UnixNanos() const = 0;
};

// std::chrono::steady_clock and system_clock.
class RealClock final : public Clock {
 public:
  std::chrono::nanoseconds Now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch());
  }
  int64_t UnixNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  // One for whoever is given no clock; it has no state.
  static const RealClock& Instance() {
    static const RealClock clock;
    return clock;
  }
};

// A clock that moves only when told to; both readings move together. For tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t unix_start_ns = 1'700'000'000'000'000'000)
      : unix_start_(unix_start_ns) {}
  std::chrono::nanoseconds Now() const override { return std::chrono::nanoseconds(now_.load()); }
  int64_t UnixNanos() const override { return unix_start_ + now_.load(); }
  void Advance(std::chrono::nanoseconds d) { now_ += d.count(); }

 private:
  const int64_t unix_start_;
  std::atomic<int64_t> now_{0};
};

}  // namespace dar

#endif  // DAR_BASE_CLOCK_H_
