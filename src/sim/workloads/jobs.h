// Jobs of a collective workload (allreduce, alltoall): which hosts each job runs on. Internal
// to the workloads in this directory.
//
// YAML, either one group (the original allreduce form):
//   hosts: [h0, h1, ...]  | group_size: G (the first G hosts) | group: all   (default: all)
// or several jobs placed on a pool of hosts:
//   jobs: 4               number of concurrent jobs (default 1)
//   job_size: 16          hosts per job (required in this form, >= 2)
//   placement: packed     packed | spread | random (default packed)
//   hosts: [...]          the pool to place on (default: every host)
//
// A rack is the switch a host hangs off (a leaf or edge switch). Racks are ordered by their
// first host in the pool, hosts within a rack in pool order. Placement, job j taking the next
// job_size hosts of an ordering of the pool:
//   packed  rack by rack: a job fills a rack before it uses the next (fewest racks per job);
//   spread  round-robin over the racks (one host of each rack, then a second of each, ...):
//           every job spans as many racks as it can, and consecutive ranks sit in different
//           racks;
//   random  a uniformly random permutation of the pool, drawn from the workload's seeded
//           random stream when it starts.
// A job's rank order (the ring order, the halving-doubling partners) is the order its hosts
// were taken in.
#ifndef DAR_SIM_WORKLOADS_JOBS_H_
#define DAR_SIM_WORKLOADS_JOBS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/random.h"
#include "core/topology.h"
#include "nlohmann/json.hpp"
#include "sim/event_loop.h"
#include "sim/workload.h"

namespace dar::sim::workloads {

enum class Placement { kPacked, kSpread, kRandom };

struct JobsSpec {
  // The jobs/job_size form was used (reports then carry per-job metrics).
  bool multi = false;
  std::vector<NodeId> pool;  // one group: the group itself, in rank order
  int jobs = 1;
  int job_size = 0;
  Placement placement = Placement::kPacked;
};

// Reads the keys above. `key_for_size` receives the key that fixed the job size (for errors
// about it: "job_size", "hosts", "group_size" or "group").
absl::StatusOr<JobsSpec> ReadJobs(YamlReader& r, const Topology& topo, std::string* key_for_size);

// The hosts of every job, in rank order. Draws from `rng` only for random placement.
std::vector<std::vector<NodeId>> PlaceJobs(const JobsSpec& spec, const Topology& topo, Random& rng);

// `slow_hosts` (default none): hosts that must be in spec.pool; errors name the element.
absl::StatusOr<std::vector<NodeId>> ReadSlowHosts(YamlReader& r, const Topology& topo,
                                                  const JobsSpec& spec);
// By rank of `group`: whether the host is one of `slow_hosts`.
std::vector<bool> SlowFlags(const std::vector<NodeId>& group,
                            const std::vector<NodeId>& slow_hosts);

// The switch `host` hangs off. REQUIRES: host has exactly one link.
NodeId RackOf(const Topology& topo, NodeId host);
// The number of distinct racks among `hosts`.
int RacksSpanned(const Topology& topo, const std::vector<NodeId>& hosts);

// {"job0": ..., "job1": ...} from per-job values.
template <typename T>
nlohmann::json ByJob(const std::vector<T>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t j = 0; j < values.size(); ++j) out["job" + std::to_string(j)] = values[j];
  return out;
}

// The Workload of a collective run by one or several jobs (allreduce, alltoall). Start() places
// config.jobs (PlaceJobs, drawing from the workload's random stream), makes one `Job` per job
// with its hosts in rank order and their SlowFlags, starts every job, and at config.start (or
// at once, if that has passed) begins them all. Done() once started and every job is done.
// Subclasses add Report(). Not thread-safe: runs on its event loop.
//
// REQUIRES: `Config` has `JobsSpec jobs`, `std::vector<NodeId> slow_hosts` and
// `Duration start`; `Job` has
//   Job(const Config& config, std::vector<NodeId> group, std::vector<bool> slow);
//   // Creates its timers; appends its WorkRecords (as job `job`) to `records` unless null.
//   void Start(EventLoop& loop, Transport& transport, WorkRecords* records, int job);
//   void Begin();                                       // starts its first iteration
//   bool Done() const;                                  // has run all its iterations
//   const std::vector<NodeId>& group() const;           // its hosts in rank order
// A Job may keep `config` by reference: the workload outlives its jobs.
template <typename Config, typename Job>
class JobsWorkload : public Workload {
 public:
  explicit JobsWorkload(Config config) : config_(std::move(config)) {}

  void Start(WorkloadContext& ctx) override {
    topo_ = &ctx.topology;
    for (std::vector<NodeId>& group : PlaceJobs(config_.jobs, ctx.topology, ctx.rng)) {
      std::vector<bool> slow = SlowFlags(group, config_.slow_hosts);
      jobs_.push_back(std::make_unique<Job>(config_, std::move(group), std::move(slow)));
      jobs_.back()->Start(ctx.loop, ctx.transport, ctx.records, static_cast<int>(jobs_.size() - 1));
    }
    start_timer_ = std::make_unique<Timer>(ctx.loop, [this] {
      for (const std::unique_ptr<Job>& job : jobs_) job->Begin();
    });
    start_timer_->ScheduleAt(std::max(ctx.loop.now(), Time{0} + config_.start));
    started_ = true;
  }

  bool Done() const override {
    return started_ && std::all_of(jobs_.begin(), jobs_.end(),
                                   [](const std::unique_ptr<Job>& job) { return job->Done(); });
  }

 protected:
  const Config& config() const { return config_; }
  // In job order; empty before Start().
  const std::vector<std::unique_ptr<Job>>& jobs() const { return jobs_; }

  // ByJob of the number of racks each job spans (RacksSpanned).
  nlohmann::json RacksByJob() const {
    std::vector<int> racks;
    for (const std::unique_ptr<Job>& job : jobs_) {
      racks.push_back(RacksSpanned(*topo_, job->group()));
    }
    return ByJob(racks);
  }
  // ByJob of each job's host names in rank order.
  nlohmann::json HostsByJob() const {
    std::vector<std::vector<std::string>> hosts;
    for (const std::unique_ptr<Job>& job : jobs_) {
      hosts.emplace_back();
      for (NodeId h : job->group()) hosts.back().push_back(topo_->node(h).name);
    }
    return ByJob(hosts);
  }

 private:
  Config config_;
  const Topology* topo_ = nullptr;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::unique_ptr<Timer> start_timer_;
  bool started_ = false;
};

}  // namespace dar::sim::workloads

#endif  // DAR_SIM_WORKLOADS_JOBS_H_
