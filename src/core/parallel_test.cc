#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dar {
namespace {

// Every part runs exactly once, whatever the number of parts and threads.
TEST(RunEachTest, RunsEveryPartOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (int n : {0, 1, 2, 3, 7, 40}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      RunEach(n, threads, [&](int i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1)
            << "part " << i << " of " << n << " on " << threads << " threads";
      }
    }
  }
}

// At most `threads` threads, the caller's among them; one thread: the caller's alone, in order.
TEST(RunEachTest, UsesAtMostThreadsThreads) {
  for (int threads : {1, 2, 3}) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    std::vector<int> order;
    RunEach(12, threads, [&](int i) {
      // Long enough that a second thread, once started, takes parts too.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      order.push_back(i);
    });
    EXPECT_LE(ids.size(), static_cast<size_t>(threads)) << threads << " threads";
    EXPECT_EQ(order.size(), 12u);
    if (threads == 1) {
      EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u);
      EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
    }
  }
}

}  // namespace
}  // namespace dar
