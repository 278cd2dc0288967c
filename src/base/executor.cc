#include "base/executor.h"

#include <system_error>

namespace dar {

Executor& InlineExecutorInstance() {
  static InlineExecutor instance;
  return instance;
}

ThreadPool::ThreadPool(int threads) {
  const int workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    try {
      workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error&) {
      break;  // a limit on tasks: fewer workers, which concurrency() says
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain(Batch& batch) {
  for (int i = batch.next.fetch_add(1); i < batch.n; i = batch.next.fetch_add(1)) batch.fn(i);
}

void ThreadPool::RunEach(int n, absl::FunctionRef<void(int)> fn) {
  // Inline: nothing to share, no workers, or the workers are another call's (a part that
  // calls RunEach, or a second caller).
  if (n < 2 || workers_.empty() || !run_mu_.TryLock()) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  Batch batch(n, fn);
  {
    MutexLock lock(&mu_);
    batch_ = &batch;
    ++generation_;
  }
  cv_.NotifyAll();
  Drain(batch);
  {
    // Every part is taken; those a worker took are done once no worker is inside the batch.
    // Unpublished first, so that no worker joins it from here on.
    MutexLock lock(&mu_);
    batch_ = nullptr;
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return joined_ == 0; });
  }
  run_mu_.Unlock();
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  MutexLock lock(&mu_);
  for (;;) {
    cv_.Wait(&mu_, [this, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || generation_ != seen;
    });
    if (stopping_) return;
    seen = generation_;
    Batch* batch = batch_;
    if (batch == nullptr) continue;  // finished before this worker woke
    ++joined_;
    mu_.Unlock();
    Drain(*batch);
    mu_.Lock();
    if (--joined_ == 0) cv_.NotifyAll();
  }
}

}  // namespace dar
