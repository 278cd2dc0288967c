// Where the engine's independent parts run. The engine (src/core) never starts a thread: its
// owner passes an Executor in. The simulator and the tests run everything on the caller's
// thread (InlineExecutor); the controller owns a ThreadPool started once, so a decision cycle
// shares its parts among threads that already exist instead of starting one per call.
//
// An executor's concurrency is also how finely the engine cuts its work (RouteComputer: one
// share of a class's destinations per thread). The engine's output does not depend on it.
#ifndef DAR_BASE_EXECUTOR_H_
#define DAR_BASE_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "base/mutex.h"

namespace dar {

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs fn(0) .. fn(n - 1) and returns when all are done. Parts may run side by side, on up
  // to concurrency() threads, the caller's among them, each taking the next index not yet
  // taken when it is free (give the longest parts the lowest indexes). fn must not throw.
  // Thread-safe: a call while another is running (from another thread, or from inside a
  // part) runs its parts on its caller's thread.
  virtual void RunEach(int n, absl::FunctionRef<void(int)> fn) = 0;
  // How many parts may run at once: >= 1.
  virtual int concurrency() const = 0;
};

// Every part on the caller's thread, in index order. Stateless.
class InlineExecutor final : public Executor {
 public:
  void RunEach(int n, absl::FunctionRef<void(int)> fn) override {
    for (int i = 0; i < n; ++i) fn(i);
  }
  int concurrency() const override { return 1; }
};

// The executor for code that was not given one: an InlineExecutor. Immutable, so sharing it
// across threads and objects is safe.
Executor& InlineExecutorInstance();

// `threads` - 1 worker threads, started by the constructor and joined by the destructor; a
// RunEach shares its parts among them and its caller. One RunEach at a time uses the
// workers; another at the same time runs inline (see Executor::RunEach).
class ThreadPool final : public Executor {
 public:
  // REQUIRES: threads >= 1 (1: no workers, every part on the caller's thread).
  explicit ThreadPool(int threads);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void RunEach(int n, absl::FunctionRef<void(int)> fn) override;
  int concurrency() const override { return static_cast<int>(workers_.size()) + 1; }

 private:
  // The parts of one RunEach: on the caller's stack, published to the workers until the
  // caller has finished its own share.
  struct Batch {
    Batch(int n, absl::FunctionRef<void(int)> fn) : n(n), fn(fn) {}
    const int n;
    const absl::FunctionRef<void(int)> fn;
    std::atomic<int> next = 0;
  };

  // Runs the batch's parts not yet taken, one at a time.
  static void Drain(Batch& batch);
  void WorkerLoop();

  Mutex run_mu_;  // held by the RunEach that has the workers
  Mutex mu_;
  CondVar cv_;
  Batch* batch_ ABSL_GUARDED_BY(mu_) = nullptr;   // null: none to join
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // batches published so far
  int joined_ ABSL_GUARDED_BY(mu_) = 0;           // workers inside the published batch
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace dar

#endif  // DAR_BASE_EXECUTOR_H_
