// `allreduce`: AllReduce among one group of hosts or several concurrent jobs, iterated, with
// compute between rounds: ring, or halving-doubling (Rabenseifner's recursive-halving
// reduce-scatter then recursive-doubling all-gather; Thakur, Rabenseifner and Gropp 2005).
//
// YAML:
//   type: allreduce
//   hosts | group_size | group       one group (default group: all), or
//   jobs, job_size, placement, hosts several jobs on a pool of hosts (sim/workloads/jobs.h)
//   algorithm: ring          ring | halving_doubling (default ring)
//   message_mb: 64           the buffer each host reduces per iteration (any size unit; required)
//   iterations: 10           default 1
//   compute_ms: 5            compute time per iteration (any duration unit; default 0)
//   slow_hosts: [h3]         hosts whose compute takes `slowdown` times longer (default none);
//                            in the one-group form they must be in the group, with jobs in the
//                            pool (a slow host no job was placed on is unused)
//   slowdown: 2.0            default 1
//   traffic_class: 0         default 0
//   start_ms: 0              when the first iteration starts (default 0)
//
// Each job runs on its own; jobs only share the network. A job of G hosts splits the buffer
// into G chunks of c = ceil(size / G) bytes. Each iteration every host computes, then runs the
// algorithm's steps; in every step a host sends one message to one peer and receives one:
//   ring              2(G-1) steps; in each host i sends c bytes to host (i+1) % G.
//   halving_doubling  2 log2(G) steps (G a power of two); in reduce-scatter step s
//                     (s = 0 .. log2(G)-1) host i exchanges c * G / 2^(s+1) bytes with host
//                     i XOR G / 2^(s+1) (half the buffer at distance G/2 first, down to one
//                     chunk at distance 1); all-gather step t mirrors it: c * 2^t bytes with host
//                     i XOR 2^t. Each host sends 2 (G-1) c bytes per iteration, as in the ring.
// Host i starts step s once it has finished computing, its own step s-1 send has been
// delivered and it holds its step s-1 peer's message. Host i has finished step s when its step
// s send is delivered and it holds the step s message sent to it; after its last step it
// starts computing the next iteration. The workload is closed: it runs all its iterations
// whatever the scenario's end time.
//
// Metrics (over completed iterations, i.e. finished by every host of the job); one group:
//   iterations_completed
//   iteration_time_s   mean of (last host finishes its last step - first host starts computing)
//   comm_time_s        mean of (last host finishes its last step - last host finishes computing)
//   step_times_s       last completed iteration: per step, the time from the job finishing the
//                      previous step (for step 0: the last compute finishing) to every host
//                      having finished this one
//   step_time_p50_s, step_time_max_s   over step_times_s
// With jobs/job_size, per job J ("job0", ...) and over jobs:
//   jobs                              number of jobs
//   iterations_completed              summed over jobs; iterations_completed_by_job
//   comm_time_s, iteration_time_s     the mean over jobs of each job's mean
//   comm_time_max_s, iteration_time_max_s   the slowest job's mean
//   comm_time_by_job_s, iteration_time_by_job_s, racks_by_job (racks a job spans),
//   hosts_by_job (host names in rank order)
//   step_time_p50_s, step_time_max_s  over every job's last completed iteration's steps
#include <algorithm>
#include <cassert>
#include <memory>
#include <set>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"
#include "sim/workloads/jobs.h"

namespace dar::sim::workloads {
namespace {

enum class Algorithm { kRing, kHalvingDoubling };

struct AllReduceConfig {
  JobsSpec jobs;
  Algorithm algorithm = Algorithm::kRing;
  std::vector<NodeId> slow_hosts;
  int64_t message_bytes = 0;
  int iterations = 1;
  Duration compute{0};
  double slowdown = 1.0;
  uint8_t traffic_class = 0;
  Duration start{0};
};

// What one job reports.
struct AllReduceReport {
  int iterations_completed = 0;
  std::vector<double> iteration_times;
  std::vector<double> comm_times;
  std::vector<double> last_step_times;  // the last completed iteration's
};

int Log2(int g) {
  int l = 0;
  while ((1 << l) < g) ++l;
  return l;
}

// One AllReduce job: G hosts running the algorithm's steps, iteration after iteration.
class AllReduceJob {
 public:
  AllReduceJob(const AllReduceConfig& config, std::vector<NodeId> group, std::vector<bool> slow)
      : config_(config),
        group_(std::move(group)),
        slow_(std::move(slow)),
        size_(static_cast<int>(group_.size())),
        log2_(Log2(size_)),
        steps_(config.algorithm == Algorithm::kRing ? 2 * (size_ - 1) : 2 * log2_),
        chunk_bytes_(std::max<int64_t>(1, (config.message_bytes + size_ - 1) / size_)) {
    assert(config.algorithm == Algorithm::kRing || (1 << log2_) == size_);
  }

  const std::vector<NodeId>& group() const { return group_; }

  // Creates the hosts' timers; Begin() starts the first iteration.
  void Start(EventLoop& loop, Transport& transport, WorkRecords* records, int job) {
    loop_ = &loop;
    transport_ = &transport;
    records_ = records;
    job_ = job;
    iterations_.resize(config_.iterations);
    for (Iteration& it : iterations_) it.step_done.assign(steps_, Time{0});
    for (int i = 0; i < size_; ++i) {
      hosts_.push_back(std::make_unique<Host>(loop, [this, i] { OnComputed(i); }));
    }
  }
  void Begin() {
    for (int i = 0; i < size_; ++i) BeginIteration(i);
  }

  bool Done() const { return completed_ == config_.iterations; }

  AllReduceReport Report() const {
    AllReduceReport r;
    r.iterations_completed = completed_;
    const Iteration* last = nullptr;
    for (const Iteration& it : iterations_) {
      if (it.hosts_done < size_) continue;
      r.iteration_times.push_back(ToSeconds(it.end - it.start));
      r.comm_times.push_back(ToSeconds(it.end - it.compute_end));
      last = &it;
    }
    if (last != nullptr) {
      Time prev = last->compute_end;
      for (Time t : last->step_done) {
        r.last_step_times.push_back(ToSeconds(t - prev));
        prev = t;
      }
    }
    return r;
  }

 private:
  struct Host {
    Host(EventLoop& loop, std::function<void()> on_computed)
        : compute_timer(loop, std::move(on_computed)) {}
    Timer compute_timer;
    int iteration = -1;          // the iteration being worked on
    bool computed = false;       // this iteration's compute is over
    int next_step = 0;           // the next step of this iteration to start
    int64_t sends_done = 0;      // sends delivered, over all iterations
    int64_t received = 0;        // steps (over all iterations) up to which every message is held
    std::set<int64_t> early;     // steps past `received` whose message is held
    int64_t steps_finished = 0;  // steps finished, over all iterations
  };
  struct Iteration {
    Time start = Time::max();  // earliest compute start
    Time compute_end{0};       // latest compute end
    std::vector<Time> step_done;
    Time end{0};
    int hosts_done = 0;
  };

  // The host that host i sends to in step s.
  int Peer(int i, int s) const {
    if (config_.algorithm == Algorithm::kRing) return (i + 1) % size_;
    return i ^ Distance(s);
  }
  // Halving-doubling: the partners' distance in step s.
  int Distance(int s) const { return s < log2_ ? size_ >> (s + 1) : 1 << (s - log2_); }
  int64_t StepBytes(int s) const {
    if (config_.algorithm == Algorithm::kRing) return chunk_bytes_;
    return chunk_bytes_ * Distance(s);
  }

  void BeginIteration(int i) {
    Host& h = *hosts_[i];
    ++h.iteration;
    h.computed = false;
    h.next_step = 0;
    Iteration& it = iterations_[h.iteration];
    it.start = std::min(it.start, loop_->now());
    Duration compute = config_.compute;
    if (slow_[i]) compute = FromSeconds(ToSeconds(compute) * config_.slowdown);
    h.compute_timer.ScheduleIn(compute);
  }

  void OnComputed(int i) {
    Host& h = *hosts_[i];
    Iteration& it = iterations_[h.iteration];
    it.compute_end = std::max(it.compute_end, loop_->now());
    h.computed = true;
    Advance(i);
  }

  void OnDelivered(int i, int64_t global_step) {
    const int to = Peer(i, static_cast<int>(global_step % steps_));
    ++hosts_[i]->sends_done;
    Host& r = *hosts_[to];
    if (global_step == r.received) {
      ++r.received;
      while (!r.early.empty() && *r.early.begin() == r.received) {
        r.early.erase(r.early.begin());
        ++r.received;
      }
    } else {
      r.early.insert(global_step);
    }
    Advance(i);
    Advance(to);
  }

  // Records finished steps, then starts the next step or iteration if host i may.
  void Advance(int i) {
    Host& h = *hosts_[i];
    const Time now = loop_->now();
    const int64_t finished = std::min(h.sends_done, h.received);
    while (h.steps_finished < finished) {
      Iteration& it = iterations_[h.steps_finished / steps_];
      Time& done = it.step_done[h.steps_finished % steps_];
      done = std::max(done, now);
      ++h.steps_finished;
    }
    if (h.iteration < 0 || !h.computed) return;
    const int64_t base = static_cast<int64_t>(h.iteration) * steps_;
    if (h.next_step < steps_) {
      const int64_t global = base + h.next_step;
      if (h.next_step > 0 && (h.sends_done < global || h.received < global)) return;
      const int s = h.next_step++;
      transport_->Send(group_[i], group_[Peer(i, s)], StepBytes(s), config_.traffic_class,
                       [this, i, global](const MessageResult&) { OnDelivered(i, global); });
      return;
    }
    if (h.steps_finished < base + steps_) return;
    Iteration& it = iterations_[h.iteration];
    it.end = std::max(it.end, now);
    if (++it.hosts_done == size_) {
      ++completed_;
      Record(h.iteration);
    }
    h.computed = false;
    if (h.iteration + 1 < config_.iterations) BeginIteration(i);
  }

  // Appends the records of a completed iteration: the iteration, then its steps.
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
    Time prev = it.compute_end;
    for (int s = 0; s < steps_; ++s) {
      records_->push_back(WorkRecord{.kind = "step",
                                     .traffic_class = config_.traffic_class,
                                     .job = job_,
                                     .iteration = iteration,
                                     .step = s,
                                     .bytes = StepBytes(s),
                                     .start = prev,
                                     .finish = it.step_done[s]});
      prev = it.step_done[s];
    }
  }

  const AllReduceConfig& config_;
  const std::vector<NodeId> group_;
  const std::vector<bool> slow_;  // by rank
  const int size_;
  const int log2_;
  const int steps_;
  const int64_t chunk_bytes_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  WorkRecords* records_ = nullptr;
  int job_ = 0;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<Iteration> iterations_;
  int completed_ = 0;
};

class AllReduce : public JobsWorkload<AllReduceConfig, AllReduceJob> {
 public:
  using JobsWorkload::JobsWorkload;

  void Report(nlohmann::json& metrics) const override {
    std::vector<AllReduceReport> reports;
    for (const auto& job : jobs()) reports.push_back(job->Report());
    if (!config().jobs.multi) {
      const AllReduceReport r = reports.empty() ? AllReduceReport() : reports.front();
      metrics["iterations_completed"] = r.iterations_completed;
      metrics["iteration_time_s"] = MeanOrNull(r.iteration_times);
      metrics["comm_time_s"] = MeanOrNull(r.comm_times);
      metrics["step_times_s"] = r.last_step_times;
      metrics["step_time_p50_s"] = QuantileOrNull(r.last_step_times, 0.5);
      metrics["step_time_max_s"] = QuantileOrNull(r.last_step_times, 1.0);
      return;
    }
    int completed = 0;
    std::vector<int> completed_by_job;
    std::vector<nlohmann::json> comm_by_job, iteration_by_job;
    std::vector<double> comm_means, iteration_means, steps;
    for (const AllReduceReport& r : reports) {
      completed += r.iterations_completed;
      completed_by_job.push_back(r.iterations_completed);
      comm_by_job.push_back(MeanOrNull(r.comm_times));
      iteration_by_job.push_back(MeanOrNull(r.iteration_times));
      if (!r.comm_times.empty()) comm_means.push_back(Mean(r.comm_times));
      if (!r.iteration_times.empty()) iteration_means.push_back(Mean(r.iteration_times));
      steps.insert(steps.end(), r.last_step_times.begin(), r.last_step_times.end());
    }
    metrics["jobs"] = config().jobs.jobs;
    metrics["iterations_completed"] = completed;
    metrics["iterations_completed_by_job"] = ByJob(completed_by_job);
    metrics["comm_time_s"] = MeanOrNull(comm_means);
    metrics["comm_time_max_s"] = QuantileOrNull(comm_means, 1.0);
    metrics["comm_time_by_job_s"] = ByJob(comm_by_job);
    metrics["iteration_time_s"] = MeanOrNull(iteration_means);
    metrics["iteration_time_max_s"] = QuantileOrNull(iteration_means, 1.0);
    metrics["iteration_time_by_job_s"] = ByJob(iteration_by_job);
    metrics["step_time_p50_s"] = QuantileOrNull(steps, 0.5);
    metrics["step_time_max_s"] = QuantileOrNull(steps, 1.0);
    metrics["racks_by_job"] = RacksByJob();
    metrics["hosts_by_job"] = HostsByJob();
  }
};

absl::StatusOr<WorkloadPtr> CreateAllReduce(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  AllReduceConfig c;
  std::string size_key;
  ASSIGN_OR_RETURN(c.jobs, ReadJobs(r, topo, &size_key));
  ASSIGN_OR_RETURN(const std::string algorithm,
                   r.OptionalChoice("algorithm", "ring", {"ring", "halving_doubling"}));
  if (algorithm == "halving_doubling") {
    c.algorithm = Algorithm::kHalvingDoubling;
    const int g = c.jobs.job_size;
    if ((g & (g - 1)) != 0) {
      return r.Error(c.jobs.multi ? "job_size" : "algorithm",
                     fmt::format("halving_doubling needs a power-of-two number of hosts per job, "
                                 "got {} (from {})",
                                 g, size_key));
    }
  }
  ASSIGN_OR_RETURN(c.message_bytes,
                   r.RequiredSize("message", Bounds::Positive(), kMaxMessageBytes));
  ASSIGN_OR_RETURN(c.iterations, r.Optional<int>("iterations", 1, Bounds::InRange(1, kMaxRepeats)));
  ASSIGN_OR_RETURN(c.compute, r.OptionalDuration("compute", Duration(0)));
  ASSIGN_OR_RETURN(c.slow_hosts, ReadSlowHosts(r, topo, c.jobs));
  ASSIGN_OR_RETURN(c.slowdown,
                   r.Optional<double>("slowdown", 1.0, Bounds::PositiveAtMost(kMaxSlowdown)));
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<AllReduce>(std::move(c));
}

REGISTER_WORKLOAD("allreduce", CreateAllReduce);

}  // namespace
}  // namespace dar::sim::workloads
