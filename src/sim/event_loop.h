// The discrete-event engine: integer-nanosecond virtual time and cancellable timers.
//
// Events are Timers. A Timer is a handle owned by whoever wants to be called back; scheduling
// it only moves it within the loop's indexed heap, so the hot path never allocates (the heap's
// vector grows to the peak number of pending timers once). Destroying a Timer cancels it
// (Envoy's envoy/event/timer.h). Events at the same time run in the order they were
// scheduled, so a run is a function of its inputs and seed alone.
//
// Single-threaded. Several EventLoops may live in one process (no globals).
#ifndef DAR_SIM_EVENT_LOOP_H_
#define DAR_SIM_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "core/units.h"

namespace dar::sim {

class Timer;

class EventLoop {
 public:
  EventLoop() = default;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  ~EventLoop();

  Time now() const { return now_; }

  // Runs the next event, if any; returns false when none is pending.
  bool RunOne();
  // Runs events while the next one is at or before `end`, then sets now() to `end`
  // (unless stopped). Returns early after Stop().
  void RunUntil(Time end);
  // Runs until no event is pending or Stop() is called.
  void Run();
  // Makes Run/RunUntil return after the current event.
  void Stop() { stopped_ = true; }

  bool empty() const { return heap_.empty(); }
  size_t pending() const { return heap_.size(); }
  // Events run so far.
  uint64_t events_run() const { return events_run_; }

 private:
  friend class Timer;
  struct Entry {
    Time when;
    uint64_t seq;
    Timer* timer;
  };
  static bool Before(const Entry& a, const Entry& b) {
    return a.when < b.when || (a.when == b.when && a.seq < b.seq);
  }
  void Push(Timer* t, Time when);
  void Remove(Timer* t);
  void SiftUp(size_t i);
  void SiftDown(size_t i);
  void Place(size_t i, const Entry& e);

  std::vector<Entry> heap_;
  Time now_{0};
  uint64_t next_seq_ = 0;
  uint64_t events_run_ = 0;
  bool stopped_ = false;
};

// A callback that runs at a chosen virtual time. At most one pending instance: scheduling a
// pending timer moves it. Not copyable or movable (the loop points at it).
class Timer {
 public:
  Timer(EventLoop& loop, std::function<void()> callback)
      : loop_(&loop), callback_(std::move(callback)) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer() { Cancel(); }

  // REQUIRES: when >= loop.now().
  void ScheduleAt(Time when);
  void ScheduleIn(Duration d) { ScheduleAt(loop_->now() + d); }
  void Cancel() {
    if (heap_index_ >= 0) loop_->Remove(this);
  }
  bool pending() const { return heap_index_ >= 0; }
  Time when() const { return when_; }

 private:
  friend class EventLoop;
  EventLoop* loop_;
  std::function<void()> callback_;
  int64_t heap_index_ = -1;
  Time when_{0};
};

}  // namespace dar::sim

#endif  // DAR_SIM_EVENT_LOOP_H_
