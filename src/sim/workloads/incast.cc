// `incast`: partition-aggregate queries: N senders answer one receiver at the same instant.
//
// YAML:
//   type: incast
//   fan_in: 16            senders per query (required, >= 1)
//   response_kb: 64       bytes each sender returns (any size unit; required)
//   rounds: 100           closed loop: this many queries, one after another, each `gap`
//   gap_us: 0               after the previous one completed (default 0), or
//   rate_per_s: 500       open loop: queries arrive as a Poisson process of this rate until
//                           the scenario's end time (give exactly one of rounds, rate_per_s)
//   hosts: [h0, ...]      the hosts senders are drawn from (default: every host)
//   receivers: [h0, ...]  the hosts a query's receiver is drawn from (default: `hosts`)
//   traffic_class: 0      default 0 (latency)
//   start_ms: 0           the first query starts at this time (default 0)
//
// Every query draws its receiver uniformly from `receivers`, then fan_in distinct senders
// uniformly from `hosts` without the receiver, from the workload's seeded random stream; every
// sender starts its response at the query's start (the request itself is not modelled: it is
// small, and what hurts is the synchronised answer). Query completion time (QCT) = the receiver
// holds every response - the query started. With rounds the workload is closed (all rounds
// run whatever the end time); with a rate no query starts at or after the end time.
//
// Metrics: queries_started, queries_completed, qct_mean_s, qct_p50_s, qct_p99_s, qct_max_s,
// response_fct_mean_s, response_fct_p99_s (each response on its own), qct_ideal_s (fan_in
// responses, headers included, serialised back to back at the receiver's link rate: the bound
// an ideal transport would meet).
#include <algorithm>
#include <memory>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {
namespace {

struct IncastConfig {
  std::vector<NodeId> hosts;
  std::vector<NodeId> receivers;
  int fan_in = 0;
  int64_t response_bytes = 0;
  int rounds = 0;         // 0: open loop at `rate_per_s`
  double rate_per_s = 0;  // queries per second
  Duration gap{0};
  uint8_t traffic_class = 0;
  Duration start{0};
};

class Incast : public Workload {
 public:
  explicit Incast(IncastConfig config) : config_(std::move(config)) {}

  void Start(WorkloadContext& ctx) override {
    loop_ = &ctx.loop;
    transport_ = &ctx.transport;
    topo_ = &ctx.topology;
    rng_ = &ctx.rng;
    records_ = ctx.records;
    end_time_ = ctx.end_time;
    timer_ = std::make_unique<Timer>(ctx.loop, [this] { OnQueryTime(); });
    const Time first = std::max(ctx.loop.now(), Time{0} + config_.start);
    if (closed_loop()) {
      timer_->ScheduleAt(first);
    } else {
      ScheduleArrival(first);
    }
    started_ = true;
  }

  bool Done() const override {
    if (!started_ || completed_ < static_cast<int64_t>(queries_.size())) return false;
    if (closed_loop()) return completed_ == config_.rounds;
    return !timer_->pending();
  }

  void Report(nlohmann::json& metrics) const override {
    metrics["queries_started"] = queries_.size();
    metrics["queries_completed"] = completed_;
    metrics["qct_mean_s"] = MeanOrNull(qcts_);
    metrics["qct_p50_s"] = QuantileOrNull(qcts_, 0.5);
    metrics["qct_p99_s"] = QuantileOrNull(qcts_, 0.99);
    metrics["qct_max_s"] = QuantileOrNull(qcts_, 1.0);
    metrics["response_fct_mean_s"] = MeanOrNull(fcts_);
    metrics["response_fct_p99_s"] = QuantileOrNull(fcts_, 0.99);
    metrics["qct_ideal_s"] = MeanOrNull(ideals_);
  }

 private:
  struct Query {
    Time start;
    int outstanding;
    double ideal_s;
  };

  bool closed_loop() const { return config_.rounds > 0; }

  void ScheduleArrival(Time from) {
    const Time at = from + FromSeconds(rng_->Exponential(1.0 / config_.rate_per_s));
    if (at < end_time_) timer_->ScheduleAt(at);
  }

  void OnQueryTime() {
    const NodeId receiver = config_.receivers[rng_->Below(config_.receivers.size())];
    std::vector<NodeId> candidates;
    for (NodeId h : config_.hosts) {
      if (h != receiver) candidates.push_back(h);
    }
    // The first fan_in entries of a partial Fisher-Yates shuffle.
    for (int k = 0; k < config_.fan_in; ++k) {
      const size_t pick = k + rng_->Below(candidates.size() - k);
      std::swap(candidates[k], candidates[pick]);
    }
    const size_t id = queries_.size();
    const TransportConfig& tc = transport_->config();
    const int64_t segments = (config_.response_bytes + tc.mss - 1) / tc.mss;
    const double wire_bits =
        8.0 * static_cast<double>(config_.response_bytes + segments * tc.header_bytes);
    ideals_.push_back(config_.fan_in * wire_bits /
                      static_cast<double>(HostLinkRate(*topo_, receiver).bps()));
    queries_.push_back(Query{loop_->now(), config_.fan_in, ideals_.back()});
    for (int k = 0; k < config_.fan_in; ++k) {
      transport_->Send(candidates[k], receiver, config_.response_bytes, config_.traffic_class,
                       [this, id](const MessageResult& r) { OnResponse(id, r); });
    }
    if (!closed_loop()) ScheduleArrival(loop_->now());
  }

  void OnResponse(size_t id, const MessageResult& r) {
    fcts_.push_back(ToSeconds(r.duration()));
    if (records_ != nullptr) {
      records_->push_back(WorkRecord{.kind = "response",
                                     .traffic_class = r.traffic_class,
                                     .bytes = r.bytes,
                                     .start = r.start,
                                     .finish = r.finish});
    }
    Query& q = queries_[id];
    if (--q.outstanding > 0) return;
    ++completed_;
    const double qct = ToSeconds(loop_->now() - q.start);
    qcts_.push_back(qct);
    if (records_ != nullptr) {
      records_->push_back(WorkRecord{.kind = "query",
                                     .traffic_class = config_.traffic_class,
                                     .bytes = config_.fan_in * config_.response_bytes,
                                     .start = q.start,
                                     .finish = loop_->now(),
                                     .slowdown = qct / q.ideal_s});
    }
    if (closed_loop() && static_cast<int>(queries_.size()) < config_.rounds) {
      timer_->ScheduleIn(config_.gap);
    }
  }

  IncastConfig config_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  const Topology* topo_ = nullptr;
  Random* rng_ = nullptr;
  WorkRecords* records_ = nullptr;
  Time end_time_{0};
  std::unique_ptr<Timer> timer_;
  std::vector<Query> queries_;
  int64_t completed_ = 0;
  std::vector<double> qcts_;
  std::vector<double> fcts_;
  std::vector<double> ideals_;
  bool started_ = false;
};

absl::StatusOr<WorkloadPtr> CreateIncast(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  IncastConfig c;
  ASSIGN_OR_RETURN(c.hosts, r.OptionalHosts("hosts", topo, SendingHosts(topo)));
  ASSIGN_OR_RETURN(c.receivers, r.OptionalHosts("receivers", topo, c.hosts));
  if (c.receivers.empty()) return r.Error("receivers", "needs at least one receiver");
  ASSIGN_OR_RETURN(c.fan_in, r.Required<int>("fan_in", Bounds::AtLeast(1)));
  for (NodeId receiver : c.receivers) {
    const bool in_pool = std::find(c.hosts.begin(), c.hosts.end(), receiver) != c.hosts.end();
    const int available = static_cast<int>(c.hosts.size()) - int{in_pool};
    if (c.fan_in > available) {
      return r.Error(
          "fan_in",
          fmt::format("{} senders besides receiver '{}' need {} hosts; {} "
                      "has {}",
                      c.fan_in, topo.node(receiver).name, c.fan_in + int{in_pool},
                      r.Has("hosts") ? "the hosts list" : "the topology", c.hosts.size()));
    }
  }
  ASSIGN_OR_RETURN(c.response_bytes,
                   r.RequiredSize("response", Bounds::Positive(), kMaxMessageBytes));
  const bool has_rounds = r.Has("rounds");
  const bool has_rate = r.Has("rate_per_s");
  if (has_rounds == has_rate) {
    return r.Error(has_rounds ? "rate_per_s" : "rounds", "give exactly one of rounds, rate_per_s");
  }
  if (has_rounds) {
    ASSIGN_OR_RETURN(c.rounds, r.Required<int>("rounds", Bounds::InRange(1, kMaxRepeats)));
    ASSIGN_OR_RETURN(c.gap, r.OptionalDuration("gap", Duration(0)));
  } else {
    ASSIGN_OR_RETURN(
        c.rate_per_s,
        r.Required<double>("rate_per_s", Bounds::PositiveAtMost(kMaxArrivalsPerSecond)));
    if (r.HasDuration("gap")) return r.Error("gap_us", "goes with rounds, not rate_per_s");
  }
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<Incast>(std::move(c));
}

REGISTER_WORKLOAD("incast", CreateIncast);

}  // namespace
}  // namespace dar::sim::workloads
