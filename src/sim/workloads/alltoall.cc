// `alltoall`: all-to-all exchanges as mixture-of-experts layers run them (dispatch tokens to
// the experts, expert compute, combine the results back), in one or several concurrent jobs.
//
// YAML:
//   type: alltoall
//   hosts | group_size | group       one group (default group: all), or
//   jobs, job_size, placement, hosts several jobs on a pool of hosts (sim/workloads/jobs.h)
//   message_mb: 16           the buffer each host exchanges per all-to-all (any size unit;
//                            required): ceil(size / G) bytes to each of the G-1 others
//   iterations: 10           layers run, one after the other (default 1)
//   compute_ms: 1            compute before each dispatch (any duration unit; default 0)
//   expert_compute_ms: 0     compute between dispatch and combine (default 0)
//   combine: true            each iteration is dispatch then combine (two all-to-alls);
//                            false: one all-to-all per iteration (default true)
//   slow_hosts: [h3], slowdown: 2.0   as for allreduce: their compute (both kinds) is slower
//   traffic_class: 0         default 0
//   start_ms: 0              when the first iteration starts (default 0)
//
// Each job runs on its own; jobs only share the network. A host that has finished computing
// starts the phase (an all-to-all) by sending its G-1 messages at once, to ranks i+1, i+2, ..
// (mod G) in that order; the transport serves them round-robin. A host has finished a phase
// when all its messages are delivered and it holds the G-1 sent to it in that phase; it then
// computes (expert compute after a dispatch, the next iteration's compute after the last
// phase). The workload is closed: it runs all its iterations whatever the scenario's end time.
//
// Metrics (keys start with alltoall_ so that an allreduce beside it keeps its own; over
// completed iterations; per job J: "job0", ...):
//   alltoall_jobs, alltoall_iterations_completed (summed over jobs)
//   alltoall_time_s, alltoall_time_p99_s, alltoall_time_max_s   one all-to-all, over every
//       phase of every job: from the last host being ready for it to the last host finishing it
//   alltoall_comm_time_s      mean over jobs of a job's mean per-iteration all-to-all time
//                             (the sum of its phases' times)
//   alltoall_comm_time_max_s  the slowest job's; alltoall_comm_time_by_job_s per job
//   alltoall_iteration_time_s mean over jobs of (last host finishes - first host starts
//                             computing), per iteration; alltoall_iteration_time_by_job_s
//   alltoall_racks_by_job, alltoall_hosts_by_job   where the jobs run
#include <algorithm>
#include <memory>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"
#include "sim/workloads/jobs.h"

namespace dar::sim::workloads {
namespace {

struct AllToAllConfig {
  JobsSpec jobs;
  std::vector<NodeId> slow_hosts;
  int64_t message_bytes = 0;
  int iterations = 1;
  Duration compute{0};
  Duration expert_compute{0};
  bool combine = true;
  double slowdown = 1.0;
  uint8_t traffic_class = 0;
  Duration start{0};
};

struct AllToAllReport {
  int iterations_completed = 0;
  std::vector<double> phase_times;  // every phase of every completed iteration
  std::vector<double> comm_times;   // per completed iteration
  std::vector<double> iteration_times;
};

class AllToAllJob {
 public:
  AllToAllJob(const AllToAllConfig& config, std::vector<NodeId> group, std::vector<bool> slow)
      : config_(config),
        group_(std::move(group)),
        slow_(std::move(slow)),
        size_(static_cast<int>(group_.size())),
        phases_(config.combine ? 2 : 1),
        peer_bytes_(std::max<int64_t>(1, (config.message_bytes + size_ - 1) / size_)) {}

  const std::vector<NodeId>& group() const { return group_; }

  void Start(EventLoop& loop, Transport& transport, WorkRecords* records, int job) {
    loop_ = &loop;
    transport_ = &transport;
    records_ = records;
    job_ = job;
    const int64_t total_phases = static_cast<int64_t>(config_.iterations) * phases_;
    iterations_.resize(config_.iterations);
    for (Iteration& it : iterations_) {
      it.ready_last.assign(phases_, Time{0});
      it.done_last.assign(phases_, Time{0});
    }
    for (int i = 0; i < size_; ++i) {
      hosts_.push_back(std::make_unique<Host>(loop, [this, i] { OnComputed(i); }));
      hosts_.back()->received.assign(total_phases, 0);
    }
  }
  void Begin() {
    for (int i = 0; i < size_; ++i) Compute(i, config_.compute, /*new_iteration=*/true);
  }

  bool Done() const { return completed_ == config_.iterations; }

  AllToAllReport Report() const {
    AllToAllReport r;
    r.iterations_completed = completed_;
    for (const Iteration& it : iterations_) {
      if (it.hosts_done < size_) continue;
      double comm = 0;
      for (int p = 0; p < phases_; ++p) {
        const double t = ToSeconds(it.done_last[p] - it.ready_last[p]);
        r.phase_times.push_back(t);
        comm += t;
      }
      r.comm_times.push_back(comm);
      r.iteration_times.push_back(ToSeconds(it.end - it.start));
    }
    return r;
  }

 private:
  struct Host {
    Host(EventLoop& loop, std::function<void()> on_computed)
        : compute_timer(loop, std::move(on_computed)) {}
    Timer compute_timer;
    int64_t phase = -1;         // the global phase (iteration * phases + p) being worked on
    bool in_phase = false;      // sending or waiting for the phase's messages
    int sends_done = 0;         // of the current phase
    std::vector<int> received;  // by global phase: messages held
  };
  struct Iteration {
    Time start = Time::max();
    std::vector<Time> ready_last;  // by phase: the last host ready for it
    std::vector<Time> done_last;   // by phase: the last host finishing it
    Time end{0};
    int hosts_done = 0;
  };

  void Compute(int i, Duration d, bool new_iteration) {
    Host& h = *hosts_[i];
    if (new_iteration) {
      Iteration& it = iterations_[(h.phase + 1) / phases_];
      it.start = std::min(it.start, loop_->now());
    }
    if (slow_[i]) d = FromSeconds(ToSeconds(d) * config_.slowdown);
    h.compute_timer.ScheduleIn(d);
  }

  void OnComputed(int i) {
    Host& h = *hosts_[i];
    ++h.phase;
    h.in_phase = true;
    h.sends_done = 0;
    Iteration& it = iterations_[h.phase / phases_];
    Time& ready = it.ready_last[h.phase % phases_];
    ready = std::max(ready, loop_->now());
    const int64_t phase = h.phase;
    for (int k = 1; k < size_; ++k) {
      const int to = (i + k) % size_;
      transport_->Send(group_[i], group_[to], peer_bytes_, config_.traffic_class,
                       [this, i, to, phase](const MessageResult&) { OnDelivered(i, to, phase); });
    }
  }

  void OnDelivered(int from, int to, int64_t phase) {
    ++hosts_[from]->sends_done;
    ++hosts_[to]->received[phase];
    Advance(from);
    Advance(to);
  }

  // Finishes host i's phase if it can, and starts what comes next.
  void Advance(int i) {
    Host& h = *hosts_[i];
    if (!h.in_phase || h.sends_done < size_ - 1 || h.received[h.phase] < size_ - 1) return;
    h.in_phase = false;
    const Time now = loop_->now();
    Iteration& it = iterations_[h.phase / phases_];
    const int p = static_cast<int>(h.phase % phases_);
    it.done_last[p] = std::max(it.done_last[p], now);
    if (p + 1 < phases_) {
      Compute(i, config_.expert_compute, /*new_iteration=*/false);
      return;
    }
    it.end = std::max(it.end, now);
    if (++it.hosts_done == size_) {
      ++completed_;
      Record(static_cast<int>(h.phase / phases_));
    }
    if ((h.phase + 1) / phases_ < config_.iterations) {
      Compute(i, config_.compute, /*new_iteration=*/true);
    }
  }

  // Appends the records of a completed iteration: the iteration, then its phases (each from the
  // last host being ready for it to the last host finishing it).
  void Record(int iteration) {
    if (records_ == nullptr) return;
    const Iteration& it = iterations_[iteration];
    records_->push_back(WorkRecord{.kind = "iteration",
                                   .traffic_class = config_.traffic_class,
                                   .job = job_,
                                   .iteration = iteration,
                                   .bytes = config_.message_bytes,
                                   .start = it.start,
                                   .finish = it.end});
    for (int p = 0; p < phases_; ++p) {
      records_->push_back(WorkRecord{.kind = "phase",
                                     .traffic_class = config_.traffic_class,
                                     .job = job_,
                                     .iteration = iteration,
                                     .step = p,
                                     .bytes = peer_bytes_ * (size_ - 1),
                                     .start = it.ready_last[p],
                                     .finish = it.done_last[p]});
    }
  }

  const AllToAllConfig& config_;
  const std::vector<NodeId> group_;
  const std::vector<bool> slow_;
  const int size_;
  const int phases_;
  const int64_t peer_bytes_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  WorkRecords* records_ = nullptr;
  int job_ = 0;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<Iteration> iterations_;
  int completed_ = 0;
};

class AllToAll : public JobsWorkload<AllToAllConfig, AllToAllJob> {
 public:
  using JobsWorkload::JobsWorkload;

  void Report(nlohmann::json& metrics) const override {
    int completed = 0;
    std::vector<double> phases, comm_means, iteration_means;
    std::vector<nlohmann::json> comm_by_job, iteration_by_job;
    for (const auto& job : jobs()) {
      const AllToAllReport r = job->Report();
      completed += r.iterations_completed;
      phases.insert(phases.end(), r.phase_times.begin(), r.phase_times.end());
      if (!r.comm_times.empty()) comm_means.push_back(Mean(r.comm_times));
      if (!r.iteration_times.empty()) iteration_means.push_back(Mean(r.iteration_times));
      comm_by_job.push_back(MeanOrNull(r.comm_times));
      iteration_by_job.push_back(MeanOrNull(r.iteration_times));
    }
    metrics["alltoall_jobs"] = config().jobs.jobs;
    metrics["alltoall_iterations_completed"] = completed;
    metrics["alltoall_time_s"] = MeanOrNull(phases);
    metrics["alltoall_time_p99_s"] = QuantileOrNull(phases, 0.99);
    metrics["alltoall_time_max_s"] = QuantileOrNull(phases, 1.0);
    metrics["alltoall_comm_time_s"] = MeanOrNull(comm_means);
    metrics["alltoall_comm_time_max_s"] = QuantileOrNull(comm_means, 1.0);
    metrics["alltoall_comm_time_by_job_s"] = ByJob(comm_by_job);
    metrics["alltoall_iteration_time_s"] = MeanOrNull(iteration_means);
    metrics["alltoall_iteration_time_by_job_s"] = ByJob(iteration_by_job);
    metrics["alltoall_racks_by_job"] = RacksByJob();
    metrics["alltoall_hosts_by_job"] = HostsByJob();
  }
};

absl::StatusOr<WorkloadPtr> CreateAllToAll(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  AllToAllConfig c;
  std::string size_key;
  ASSIGN_OR_RETURN(c.jobs, ReadJobs(r, topo, &size_key));
  ASSIGN_OR_RETURN(c.message_bytes,
                   r.RequiredSize("message", Bounds::Positive(), kMaxMessageBytes));
  ASSIGN_OR_RETURN(c.iterations, r.Optional<int>("iterations", 1, Bounds::InRange(1, kMaxRepeats)));
  ASSIGN_OR_RETURN(c.compute, r.OptionalDuration("compute", Duration(0)));
  ASSIGN_OR_RETURN(c.expert_compute, r.OptionalDuration("expert_compute", Duration(0)));
  ASSIGN_OR_RETURN(c.combine, r.Optional<bool>("combine", true));
  ASSIGN_OR_RETURN(c.slow_hosts, ReadSlowHosts(r, topo, c.jobs));
  ASSIGN_OR_RETURN(c.slowdown,
                   r.Optional<double>("slowdown", 1.0, Bounds::PositiveAtMost(kMaxSlowdown)));
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<AllToAll>(std::move(c));
}

REGISTER_WORKLOAD("alltoall", CreateAllToAll);

}  // namespace
}  // namespace dar::sim::workloads
