// Side by side for the few: fn(0) .. fn(n - 1) on threads of their own. For the route
// computer's traffic classes (two), whose work in a cycle is independent and a few
// milliseconds each, so a thread per call (tens of microseconds to start) is cheap enough
// and there is no pool to own.
#ifndef DAR_CORE_PARALLEL_H_
#define DAR_CORE_PARALLEL_H_

#include <system_error>
#include <thread>
#include <vector>

namespace dar {

// Runs fn(0) .. fn(n - 1) and returns when all are done: on the caller's thread one after the
// other if threads < 2, else fn(0) on the caller's and each other on a thread of its own
// (`threads` only switches this on: n - 1 threads are started whatever its value). A thread
// the system refuses to start (a limit on tasks) costs only time: its fn runs on the
// caller's thread. fn must not throw.
template <typename Fn>
void RunEach(int n, int threads, Fn&& fn) {
  if (threads < 2 || n < 2) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> others;
  std::vector<int> here;  // those no thread could be started for
  others.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    try {
      others.emplace_back([&fn, i] { fn(i); });
    } catch (const std::system_error&) {
      here.push_back(i);
    }
  }
  fn(0);
  for (int i : here) fn(i);
  for (std::thread& t : others) t.join();
}

}  // namespace dar

#endif  // DAR_CORE_PARALLEL_H_
