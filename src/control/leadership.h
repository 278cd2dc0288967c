// One leader among a controller's replicas, chosen by etcd (control/etcd_client.h), and the
// state they share there. Each replica holds a lease that it keeps alive and campaigns with in
// etcd's election service; the one etcd makes leader takes the next term (a counter in etcd,
// bumped in a transaction that holds only while it still leads) and runs the cycle; the others
// wait in the queue. A leader whose lease is not renewed in time — it is cut off from etcd, or
// was paused — steps down on its own clock before etcd can have handed the lease's key to
// another: Leading() turns false at the last keep-alive's send time plus the TTL less a
// margin, whatever the threads are doing. A killed leader's lease expires in etcd one TTL after
// its last keep-alive; a stopped one resigns and revokes its lease, and another leads at once.
//
// Keys, under the prefix (e.g. "/dar/lab.dar/"): election "<prefix>leader", the term counter
// "<prefix>term", shared documents "<prefix>state/<name>" (store()).
//
// Fencing. Terms only grow, so a table version made of the term and a count within it
// (TableVersions::ForTerm) is above every version of any earlier leader, and agents install
// only newer versions: a deposed leader's late tables are refused. Its writes to the shared
// state are refused by etcd itself (they hold only while its election key is there).
//
// Thread-safe. Runs two threads of its own (the lease's keeper and the campaign).
#ifndef DAR_CONTROL_LEADERSHIP_H_
#define DAR_CONTROL_LEADERSHIP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/json_log.h"
#include "base/mutex.h"
#include "base/state_store.h"
#include "control/etcd_client.h"
#include "core/units.h"

namespace dar::control {

struct LeadershipOptions {
  std::string prefix;     // ends in '/'
  std::string advertise;  // where agents reach this replica (host:port): the leader's value
  // The lease's time to live: how long a killed leader keeps the others waiting. etcd raises
  // it to its own minimum (1.5 x its election timeout, rounded up to a second: 2 s by default).
  Duration lease_ttl = Seconds(2);
};

class Leadership {
 public:
  struct Callbacks {
    // etcd made this replica leader, in `term`: it gets ready to act (reads the shared state).
    // Called on the campaign's thread, before Leading() turns true; an error gives the lead
    // back (resigned, another campaign after a pause).
    std::function<absl::Status(uint64_t term)> elected;
    // Leading() has just turned true (after elected returned OK). Optional.
    std::function<void()> leading;
    // It does not lead any more (`why`): called once after each elected that returned OK, on
    // either thread, with Leading() already false.
    std::function<void(const std::string& why)> lost;
  };

  Leadership(LeadershipOptions options, std::unique_ptr<EtcdClient> etcd, JsonLog& log,
             Callbacks callbacks);
  ~Leadership();  // Stop()
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  void Start();
  // Resigns if leading (lost is called), revokes the lease and joins the threads. Idempotent.
  void Stop();

  // Leads, and the lease is certainly still held.
  bool Leading() const;
  uint64_t term() const;
  // Where the leading replica says agents reach it, as etcd said at most half a second ago;
  // empty if nobody leads or etcd cannot be asked.
  std::string LeaderAddress();
  // The documents the replicas share: read by any, written only by the leader (others get
  // FailedPrecondition).
  std::shared_ptr<StateStore> store() const { return store_; }

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  class EtcdStateStore;

  void KeepLease();
  void Campaign();
  // The next term, bumped in etcd while `key` leads; error if that cannot be done.
  absl::StatusOr<uint64_t> NextTerm(const EtcdLeaderKey& key);
  // Drops the lease (and leadership, calling lost outside the lock).
  void Lose(const std::string& why);
  // Sleeps until `until` or Stop; false if stopping.
  bool SleepUntil(SteadyTime until);

  const LeadershipOptions options_;
  const std::unique_ptr<EtcdClient> etcd_;
  JsonLog& log_;
  const Callbacks callbacks_;
  std::shared_ptr<StateStore> store_;

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  Duration ttl_ ABSL_GUARDED_BY(mu_){0};
  SteadyTime valid_until_ ABSL_GUARDED_BY(mu_);  // of the lease, with the margin
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  // Elected, and getting ready (Callbacks::elected runs): it may write the shared state.
  bool preparing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  EtcdLeaderKey key_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  SteadyTime leader_asked_ ABSL_GUARDED_BY(mu_);
  std::thread keeper_, campaigner_;
};

}  // namespace dar::control

#endif  // DAR_CONTROL_LEADERSHIP_H_
