// A control channel with a delay: items reach the sink `delay` after they are sent, in the
// order sent (agent -> controller reports, controller -> forwarder tables). One timer for the
// head of the line; nothing is allocated per item once the line has grown.
// Single-threaded.
#ifndef DAR_SIM_DELAY_LINE_H_
#define DAR_SIM_DELAY_LINE_H_

#include <functional>
#include <utility>

#include "sim/event_loop.h"
#include "sim/ring_buffer.h"

namespace dar::sim {

template <typename T>
class DelayLine {
 public:
  using Sink = std::function<void(T&&)>;

  // `loop` must outlive the line.
  DelayLine(EventLoop& loop, Sink sink)
      : loop_(loop), sink_(std::move(sink)), timer_(loop, [this] { DeliverDue(); }) {}

  // Delivers `item` `delay` from now; with no delay and nothing in line, at once.
  // REQUIRES: items are sent with non-decreasing arrival times (a constant delay does).
  void Send(T item, Duration delay) {
    if (delay == Duration(0) && line_.empty()) {
      sink_(std::move(item));
      return;
    }
    line_.push_back(Entry{loop_.now() + delay, std::move(item)});
    if (!timer_.pending()) timer_.ScheduleAt(line_.front().at);
  }

 private:
  struct Entry {
    Time at{0};
    T item;
  };

  void DeliverDue() {
    while (!line_.empty() && line_.front().at <= loop_.now())
      sink_(std::move(line_.pop_front().item));
    if (!line_.empty()) timer_.ScheduleAt(line_.front().at);
  }

  EventLoop& loop_;
  Sink sink_;
  RingBuffer<Entry> line_;
  Timer timer_;
};

}  // namespace dar::sim

#endif  // DAR_SIM_DELAY_LINE_H_
