// A mutex, its scoped lock and a condition variable that both ThreadSanitizer and clang's
// thread-safety analysis understand: declare shared state ABSL_GUARDED_BY(mu_), functions that
// need it held ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
//
// Why not absl::Mutex: Debian 12's libabsl is built without ThreadSanitizer's annotations, so
// a TSan build cannot see absl::Mutex lock and unlock and reports a race on every variable it
// guards (a counter under absl::MutexLock, four threads: a race at once). std::mutex locks
// through pthread_mutex_lock, which TSan intercepts; what std::mutex lacks, the capability
// annotations, this wrapper adds. The names follow absl's, so that a build with an
// instrumented abseil can switch back by changing this file alone.
//
// Thread-safe, as a mutex is. Not recursive.
#ifndef DAR_BASE_MUTEX_H_
#define DAR_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace dar {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Locks and returns true if no other thread holds it, else returns false at once.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (a callback documented to run under the lock). Does
  // not check.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its lifetime. REQUIRES: mu outlives it.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waiting for a condition on state a Mutex guards. The predicate is evaluated with the mutex
// held; spurious wake-ups are absorbed. Notify with or without the mutex held.
class CondVar {
 public:
  // Returns once pred() is true. REQUIRES: mu held; it is held again on return.
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, pred);
    lock.release();
  }
  // As Wait, but gives up at `deadline` (a steady-clock point): returns pred()'s last value.
  template <typename Pred>
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline, Pred pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool ok = cv_.wait_until(lock, deadline, pred);
    lock.release();
    return ok;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace dar

#endif  // DAR_BASE_MUTEX_H_
