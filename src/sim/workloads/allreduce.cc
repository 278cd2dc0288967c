// `allreduce`: ring AllReduce among a group of hosts, iterated, with compute between rounds.
//
// YAML:
//   type: allreduce
//   hosts: [h0, h1, ...]     | group_size: G (the first G hosts) | group: all   (default: all)
//   message_mb: 64           the buffer reduced per iteration (any size unit; required)
//   iterations: 10           default 1
//   compute_ms: 5            compute time per iteration (any duration unit; default 0)
//   slow_hosts: [h3]         hosts whose compute takes `slowdown` times longer (default none)
//   slowdown: 2.0            default 1
//   traffic_class: 0         default 0
//   start_ms: 0              when the first iteration starts (default 0)
//
// Each iteration every host computes, then runs 2(G-1) steps; in step s host i sends a chunk of
// ceil(size / G) bytes to host (i+1) % G. Host i starts step s once it has finished computing,
// its own step s-1 send has been delivered and it holds its predecessor's step s-1 chunk. Host
// i has finished step s when its step s send is delivered and it holds the predecessor's step
// s chunk; after its last step it starts computing the next iteration. The workload is closed:
// it runs all its iterations whatever the scenario's end time.
//
// Metrics (over completed iterations, i.e. finished by every host):
//   iterations_completed
//   iteration_time_s   mean of (last host finishes its last step - first host starts computing)
//   comm_time_s        mean of (last host finishes its last step - last host finishes computing)
//   step_times_s       last completed iteration: per step, the time from the ring finishing the
//                      previous step (for step 0: the last compute finishing) to every host
//                      having finished this one
//   step_time_p50_s, step_time_max_s   over step_times_s
#include <algorithm>
#include <memory>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {
namespace {

struct AllReduceConfig {
  std::vector<NodeId> group;
  std::vector<bool> slow;  // by position in group
  int64_t message_bytes = 0;
  int iterations = 1;
  Duration compute{0};
  double slowdown = 1.0;
  uint8_t traffic_class = 0;
  Duration start{0};
};

class AllReduce : public Workload {
 public:
  explicit AllReduce(AllReduceConfig config)
      : config_(std::move(config)),
        size_(static_cast<int>(config_.group.size())),
        steps_(2 * (size_ - 1)),
        chunk_bytes_(std::max<int64_t>(1, (config_.message_bytes + size_ - 1) / size_)) {}

  void Start(WorkloadContext& ctx) override {
    loop_ = &ctx.loop;
    transport_ = &ctx.transport;
    iterations_.resize(config_.iterations);
    for (Iteration& it : iterations_) it.step_done.assign(steps_, Time{0});
    for (int i = 0; i < size_; ++i) {
      auto host = std::make_unique<Host>(ctx.loop, [this, i] { OnComputed(i); });
      hosts_.push_back(std::move(host));
    }
    start_timer_ = std::make_unique<Timer>(ctx.loop, [this] {
      for (int i = 0; i < size_; ++i) BeginIteration(i);
    });
    start_timer_->ScheduleAt(std::max(ctx.loop.now(), Time{0} + config_.start));
    started_ = true;
  }

  bool Done() const override { return started_ && completed_ == config_.iterations; }

  void Report(nlohmann::json& metrics) const override {
    std::vector<double> iteration_times;
    std::vector<double> comm_times;
    const Iteration* last = nullptr;
    for (const Iteration& it : iterations_) {
      if (it.hosts_done < size_) continue;
      iteration_times.push_back(ToSeconds(it.end - it.start));
      comm_times.push_back(ToSeconds(it.end - it.compute_end));
      last = &it;
    }
    metrics["iterations_completed"] = completed_;
    metrics["iteration_time_s"] = MeanOrNull(iteration_times);
    metrics["comm_time_s"] = MeanOrNull(comm_times);
    std::vector<double> step_times;
    if (last != nullptr) {
      Time prev = last->compute_end;
      for (Time t : last->step_done) {
        step_times.push_back(ToSeconds(t - prev));
        prev = t;
      }
    }
    metrics["step_times_s"] = step_times;
    metrics["step_time_p50_s"] = QuantileOrNull(step_times, 0.5);
    metrics["step_time_max_s"] = QuantileOrNull(step_times, 1.0);
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
    int64_t received = 0;        // predecessor's chunks held, over all iterations
    int64_t steps_finished = 0;  // steps finished, over all iterations
  };
  struct Iteration {
    Time start = Time::max();  // earliest compute start
    Time compute_end{0};       // latest compute end
    std::vector<Time> step_done;
    Time end{0};
    int hosts_done = 0;
  };

  void BeginIteration(int i) {
    Host& h = *hosts_[i];
    ++h.iteration;
    h.computed = false;
    h.next_step = 0;
    Iteration& it = iterations_[h.iteration];
    it.start = std::min(it.start, loop_->now());
    Duration compute = config_.compute;
    if (config_.slow[i]) compute = FromSeconds(ToSeconds(compute) * config_.slowdown);
    h.compute_timer.ScheduleIn(compute);
  }

  void OnComputed(int i) {
    Host& h = *hosts_[i];
    Iteration& it = iterations_[h.iteration];
    it.compute_end = std::max(it.compute_end, loop_->now());
    h.computed = true;
    Advance(i);
  }

  void OnChunkDelivered(int i) {
    const int next = (i + 1) % size_;
    ++hosts_[i]->sends_done;
    ++hosts_[next]->received;
    Advance(i);
    Advance(next);
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
      ++h.next_step;
      transport_->Send(config_.group[i], config_.group[(i + 1) % size_], chunk_bytes_,
                       config_.traffic_class,
                       [this, i](const MessageResult&) { OnChunkDelivered(i); });
      return;
    }
    if (h.steps_finished < base + steps_) return;
    Iteration& it = iterations_[h.iteration];
    it.end = std::max(it.end, now);
    if (++it.hosts_done == size_) ++completed_;
    h.computed = false;
    if (h.iteration + 1 < config_.iterations) BeginIteration(i);
  }

  AllReduceConfig config_;
  const int size_;
  const int steps_;
  const int64_t chunk_bytes_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::unique_ptr<Timer> start_timer_;
  std::vector<Iteration> iterations_;
  int completed_ = 0;
  bool started_ = false;
};

absl::StatusOr<WorkloadPtr> CreateAllReduce(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  const std::vector<NodeId> all = SendingHosts(topo);
  AllReduceConfig c;
  const int ways = int{r.Has("hosts")} + int{r.Has("group_size")} + int{r.Has("group")};
  if (ways > 1) return r.Error("hosts", "give only one of hosts, group_size and group");
  if (r.Has("hosts")) {
    ASSIGN_OR_RETURN(c.group, r.RequiredHosts("hosts", topo));
    if (c.group.size() < 2) return r.Error("hosts", "needs at least 2 hosts");
  } else if (r.Has("group_size")) {
    ASSIGN_OR_RETURN(const int g, r.Required<int>("group_size", Bounds::AtLeast(2)));
    if (static_cast<size_t>(g) > all.size()) {
      return r.Error("group_size",
                     fmt::format("{} exceeds the topology's {} hosts", g, all.size()));
    }
    c.group.assign(all.begin(), all.begin() + g);
  } else {
    ASSIGN_OR_RETURN(const std::string group, r.OptionalChoice("group", "all", {"all"}));
    c.group = all;
    if (c.group.size() < 2) return r.Error("group", "the topology has fewer than 2 hosts");
  }
  ASSIGN_OR_RETURN(c.message_bytes, r.RequiredSize("message"));
  ASSIGN_OR_RETURN(c.iterations, r.Optional<int>("iterations", 1, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(c.compute, r.OptionalDuration("compute", Duration(0)));
  ASSIGN_OR_RETURN(const std::vector<NodeId> slow, r.OptionalHosts("slow_hosts", topo, {}));
  c.slow.assign(c.group.size(), false);
  for (size_t i = 0; i < slow.size(); ++i) {
    auto pos = std::find(c.group.begin(), c.group.end(), slow[i]);
    if (pos == c.group.end()) {
      return r.Error(fmt::format("slow_hosts[{}]", i),
                     fmt::format("'{}' is not in the group", topo.node(slow[i]).name));
    }
    c.slow[pos - c.group.begin()] = true;
  }
  ASSIGN_OR_RETURN(c.slowdown, r.Optional<double>("slowdown", 1.0, Bounds::Positive()));
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<AllReduce>(std::move(c));
}

REGISTER_WORKLOAD("allreduce", CreateAllReduce);

}  // namespace
}  // namespace dar::sim::workloads
