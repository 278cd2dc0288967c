// A FIFO over a power-of-two circular array that grows and never shrinks, so a steady-state
// queue allocates nothing (std::deque frees and reallocates its blocks as it drains).
#ifndef DAR_SIM_RING_BUFFER_H_
#define DAR_SIM_RING_BUFFER_H_

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace dar::sim {

template <typename T>
class RingBuffer {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() {
    assert(size_ > 0);
    return slots_[head_];
  }
  void push_back(T v) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(v);
    ++size_;
  }
  T pop_front() {
    assert(size_ > 0);
    T v = std::move(slots_[head_]);
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return v;
  }

 private:
  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace dar::sim

#endif  // DAR_SIM_RING_BUFFER_H_
