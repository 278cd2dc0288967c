#include "sim/event_loop.h"

#include <cassert>

namespace dar::sim {

EventLoop::~EventLoop() {
  for (Entry& e : heap_) e.timer->heap_index_ = -1;
}

void Timer::ScheduleAt(Time when) {
  assert(when >= loop_->now());
  if (heap_index_ >= 0) loop_->Remove(this);
  when_ = when;
  loop_->Push(this, when);
}

void EventLoop::Place(size_t i, const Entry& e) {
  heap_[i] = e;
  e.timer->heap_index_ = static_cast<int64_t>(i);
}

void EventLoop::SiftUp(size_t i) {
  Entry e = heap_[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!Before(e, heap_[parent])) break;
    Place(i, heap_[parent]);
    i = parent;
  }
  Place(i, e);
}

void EventLoop::SiftDown(size_t i) {
  Entry e = heap_[i];
  const size_t n = heap_.size();
  while (true) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], e)) break;
    Place(i, heap_[child]);
    i = child;
  }
  Place(i, e);
}

void EventLoop::Push(Timer* t, Time when) {
  heap_.push_back(Entry{when, next_seq_++, t});
  SiftUp(heap_.size() - 1);
}

void EventLoop::Remove(Timer* t) {
  const size_t i = static_cast<size_t>(t->heap_index_);
  t->heap_index_ = -1;
  const size_t last = heap_.size() - 1;
  if (i != last) {
    Place(i, heap_[last]);
    heap_.pop_back();
    if (i > 0 && Before(heap_[i], heap_[(i - 1) / 2])) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  } else {
    heap_.pop_back();
  }
}

bool EventLoop::RunOne() {
  if (heap_.empty()) return false;
  Timer* t = heap_[0].timer;
  now_ = heap_[0].when;
  Remove(t);
  ++events_run_;
  t->callback_();
  return true;
}

void EventLoop::RunUntil(Time end) {
  stopped_ = false;
  while (!stopped_ && !heap_.empty() && heap_[0].when <= end) RunOne();
  if (!stopped_ && now_ < end) now_ = end;
}

void EventLoop::Run() {
  stopped_ = false;
  while (!stopped_ && RunOne()) {
  }
}

}  // namespace dar::sim
