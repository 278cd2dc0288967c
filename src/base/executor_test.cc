#include "base/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using std::chrono::steady_clock;

// The thread ids that ran each part.
class Recorder {
 public:
  void Add(int part) {
    MutexLock lock(&mu_);
    ids_.insert(std::this_thread::get_id());
    parts_.push_back(part);
  }
  std::set<std::thread::id> ids() {
    MutexLock lock(&mu_);
    return ids_;
  }
  std::vector<int> parts() {
    MutexLock lock(&mu_);
    return parts_;
  }

 private:
  Mutex mu_;
  std::set<std::thread::id> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<int> parts_ ABSL_GUARDED_BY(mu_);
};

// Every part runs exactly once, whatever the number of parts and threads.
TEST(ExecutorTest, RunsEveryPartOnce) {
  InlineExecutor inline_executor;
  ThreadPool one(1), two(2), three(3), eight(8);
  for (Executor* e : std::vector<Executor*>{&inline_executor, &one, &two, &three, &eight}) {
    for (int n : {0, 1, 2, 3, 7, 40, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      e->RunEach(n, [&](int i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
            << "part " << i << " of " << n << " on " << e->concurrency() << " threads";
      }
    }
  }
}

// Inline: the caller's thread alone, in index order.
TEST(ExecutorTest, InlineRunsOnTheCallersThreadInOrder) {
  Recorder r;
  InlineExecutorInstance().RunEach(12, [&](int i) { r.Add(i); });
  EXPECT_EQ(InlineExecutorInstance().concurrency(), 1);
  EXPECT_EQ(r.ids(), std::set<std::thread::id>{std::this_thread::get_id()});
  const std::vector<int> parts = r.parts();
  EXPECT_EQ(parts.size(), 12u);
  EXPECT_TRUE(std::is_sorted(parts.begin(), parts.end()));
}

// A pool of three really runs three parts at once: each part waits (with a deadline, so a
// pool that ran them one after the other fails instead of hanging) until all three are in.
TEST(ExecutorTest, APoolRunsItsPartsSideBySide) {
  ThreadPool pool(3);
  ASSERT_EQ(pool.concurrency(), 3);
  Mutex mu;
  CondVar cv;
  int inside = 0;
  std::atomic<int> met = 0;
  Recorder r;
  pool.RunEach(3, [&](int i) {
    r.Add(i);
    MutexLock lock(&mu);
    ++inside;
    cv.NotifyAll();
    const bool all = cv.WaitUntil(&mu, steady_clock::now() + std::chrono::seconds(10),
                                  [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return inside == 3; });
    if (all) met.fetch_add(1);
  });
  EXPECT_EQ(met.load(), 3);
  EXPECT_EQ(r.ids().size(), 3u);
  EXPECT_EQ(r.ids().count(std::this_thread::get_id()), 1u);  // the caller's among them
}

// The workers are started once: a hundred calls use no thread but the caller's and the
// pool's own.
TEST(ExecutorTest, APoolStartsNoThreadPerCall) {
  ThreadPool pool(2);
  Recorder r;
  for (int call = 0; call < 100; ++call) {
    pool.RunEach(8, [&](int i) { r.Add(i); });
  }
  EXPECT_LE(r.ids().size(), 2u);
  EXPECT_EQ(r.parts().size(), 800u);
}

// A part that calls RunEach on the same pool runs that call's parts on its own thread, and
// both calls finish; so do calls from two threads at once.
TEST(ExecutorTest, NestedAndConcurrentCallsFinish) {
  ThreadPool pool(2);
  std::atomic<int> inner = 0;
  pool.RunEach(4, [&](int) { pool.RunEach(5, [&](int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 20);

  std::atomic<int> total = 0;
  std::vector<std::thread> callers;
  callers.reserve(3);
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int k = 0; k < 50; ++k) pool.RunEach(6, [&](int) { total.fetch_add(1); });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 50 * 6);
}

// The parts' writes are visible to the caller when RunEach returns (each part writes its own
// slot, without atomics: a ThreadSanitizer build checks the ordering).
TEST(ExecutorTest, PartsWritesAreVisibleAfterwards) {
  ThreadPool pool(3);
  std::vector<int64_t> out(64);
  for (int round = 1; round <= 20; ++round) {
    pool.RunEach(64, [&](int i) { out[static_cast<size_t>(i)] = int64_t{round} * i; });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], int64_t{round} * i);
  }
}

}  // namespace
}  // namespace dar
