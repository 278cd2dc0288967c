// Side by side for the few: fn(0) .. fn(n - 1) on up to `threads` threads. For the route
// computer's cycle, whose parts (a traffic class, or a share of its destinations) are
// independent and a few milliseconds each, so a thread per call (tens of microseconds to
// start) is cheap enough and there is no pool to own.
#ifndef DAR_CORE_PARALLEL_H_
#define DAR_CORE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace dar {

// Runs fn(0) .. fn(n - 1) and returns when all are done: on the caller's thread one after the
// other if threads < 2, else on the caller's and min(n, threads) - 1 threads of its own, each
// taking the next index not yet taken when it is free (so the parts are shared out as they
// finish: give the longest the lowest indexes). A thread the system refuses to start (a limit
// on tasks) costs only time: the others take its share. fn must not throw.
template <typename Fn>
void RunEach(int n, int threads, Fn&& fn) {
  if (threads < 2 || n < 2) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int> next = 0;
  const auto work = [&fn, &next, n] {
    for (int i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> others;
  const int extra = std::min(n, threads) - 1;
  others.reserve(static_cast<size_t>(extra));
  for (int t = 0; t < extra; ++t) {
    try {
      others.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : others) t.join();
}

}  // namespace dar

#endif  // DAR_CORE_PARALLEL_H_
