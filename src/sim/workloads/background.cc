// `background`: open-loop flows with sizes from an empirical flow-size CDF.
//
// YAML:
//   type: background
//   cdf: websearch        a shipped CDF (data/flow-sizes/<name>.cdf) or a file path relative
//                         to the scenario's directory (required; see FlowSizeCdf)
//   load: 0.4             offered load as a fraction of each host's link capacity, (0, 1]
//   hosts: [h0, h1, ...]  default: all hosts
//   traffic_class: 0      default 0
//   start_ms: 0           flows start after this time (default 0)
//
// Every host starts flows as a Poisson process of rate
//   load * host link capacity (bits/s) / (8 * mean flow size in bytes)
// (the mean of the piecewise-linear CDF), each to another host of the set chosen uniformly at
// random, with a size drawn from the CDF (rounded to the nearest byte; 0 becomes 1). No flow
// starts at or after the scenario's end time; the workload is done when every started flow has
// finished.
//
// FCT = the receiver holds the whole flow - the flow started. Slowdown = FCT / ideal FCT, where
// the ideal is the flow alone on the idle network, sent at full rate on the routing's
// shortest path (least metric, then least propagation delay): every byte on the wire (segment
// headers included) serialised once at the path's slowest link, plus one segment's
// store-and-forward at every other hop, plus the path's one-way propagation delay. A lone flow
// whose window never limits it therefore has a slowdown of about 1.
//
// Metrics: flows_started, flows_completed, fct_mean_s, fct_p50_s, fct_p99_s, offered_load
// (bytes started / (active time * total host capacity)), slowdown_mean, slowdown_p99 and
// slowdown_by_size: {"<=10KB": {count, mean, p99}, "10KB-100KB", "100KB-1MB", "1MB-10MB",
// ">10MB"} over flow sizes in (lo, hi], decimal units (1 KB = 1000 bytes) as in the CDFs.
#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <queue>
#include <vector>

#include "fmt/format.h"
#include "sim/flow_size_cdf.h"
#include "sim/records.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {
namespace {

struct BackgroundConfig {
  explicit BackgroundConfig(FlowSizeCdf c) : cdf(std::move(c)) {}
  FlowSizeCdf cdf;
  double load = 0;
  std::vector<NodeId> hosts;
  uint8_t traffic_class = 0;
  Duration start{0};
};

// The unloaded path from one host to another, as the ideal FCT needs it.
struct PathInfo {
  double delay_s = std::numeric_limits<double>::quiet_NaN();  // NaN: unreachable
  double min_bps = 0;                                         // slowest link
  double inv_rate_sum = 0;                                    // sum over links of 1 / bps
};

class Background : public Workload {
 public:
  explicit Background(BackgroundConfig config) : config_(std::move(config)) {}

  void Start(WorkloadContext& ctx) override {
    loop_ = &ctx.loop;
    transport_ = &ctx.transport;
    topo_ = &ctx.topology;
    rng_ = &ctx.rng;
    records_ = ctx.records;
    end_time_ = ctx.end_time;
    start_ = std::max(ctx.loop.now(), Time{0} + config_.start);
    paths_.resize(config_.hosts.size());
    for (size_t i = 0; i < config_.hosts.size(); ++i) {
      const double bps = static_cast<double>(HostLinkRate(*topo_, config_.hosts[i]).bps());
      total_capacity_bps_ += bps;
      mean_gap_s_.push_back(8 * config_.cdf.MeanBytes() / (config_.load * bps));
      arrivals_.push_back(std::make_unique<Timer>(ctx.loop, [this, i] { OnArrival(i); }));
      ScheduleArrival(i, start_);
    }
    started_ = true;
  }

  bool Done() const override {
    if (!started_ || flows_completed_ < flows_started_) return false;
    return std::none_of(arrivals_.begin(), arrivals_.end(),
                        [](const std::unique_ptr<Timer>& t) { return t->pending(); });
  }

  void Report(nlohmann::json& metrics) const override {
    metrics["flows_started"] = flows_started_;
    metrics["flows_completed"] = flows_completed_;
    metrics["fct_mean_s"] = MeanOrNull(fcts_);
    metrics["fct_p50_s"] = QuantileOrNull(fcts_, 0.5);
    metrics["fct_p99_s"] = QuantileOrNull(fcts_, 0.99);
    const double active_s = started_ ? ToSeconds(end_time_ - start_) : 0;
    metrics["offered_load"] =
        active_s > 0 ? nlohmann::json(8 * bytes_started_ / (active_s * total_capacity_bps_))
                     : nlohmann::json(nullptr);
    std::vector<double> all;
    nlohmann::json by_size = nlohmann::json::object();
    for (size_t b = 0; b < kSizeBuckets.size(); ++b) {
      const std::vector<double>& s = slowdowns_[b];
      all.insert(all.end(), s.begin(), s.end());
      by_size[kSizeBuckets[b].label] = {
          {"count", s.size()}, {"mean", MeanOrNull(s)}, {"p99", QuantileOrNull(s, 0.99)}};
    }
    metrics["slowdown_mean"] = MeanOrNull(all);
    metrics["slowdown_p99"] = QuantileOrNull(all, 0.99);
    metrics["slowdown_by_size"] = by_size;
  }

 private:
  void ScheduleArrival(size_t i, Time from) {
    const Time at = from + FromSeconds(rng_->Exponential(mean_gap_s_[i]));
    if (at < end_time_) arrivals_[i]->ScheduleAt(at);
  }

  void OnArrival(size_t i) {
    const size_t n = config_.hosts.size();
    size_t j = rng_->Below(n - 1);
    if (j >= i) ++j;
    const int64_t bytes = config_.cdf.Sample(*rng_);
    ++flows_started_;
    bytes_started_ += static_cast<double>(bytes);
    transport_->Send(config_.hosts[i], config_.hosts[j], bytes, config_.traffic_class,
                     [this, i, j](const MessageResult& r) { OnFlowDone(i, j, r); });
    ScheduleArrival(i, loop_->now());
  }

  void OnFlowDone(size_t i, size_t j, const MessageResult& r) {
    ++flows_completed_;
    const double fct = ToSeconds(r.duration());
    fcts_.push_back(fct);
    const double ideal = IdealFct(i, j, r.bytes);
    const bool reachable = ideal > 0;  // not when the workload started
    if (records_ != nullptr) {
      records_->push_back(
          WorkRecord{.kind = "flow",
                     .traffic_class = r.traffic_class,
                     .bytes = r.bytes,
                     .start = r.start,
                     .finish = r.finish,
                     .slowdown = reachable ? std::optional(fct / ideal) : std::nullopt});
    }
    if (!reachable) return;
    slowdowns_[SizeBucketOf(static_cast<double>(r.bytes))].push_back(fct / ideal);
  }

  double IdealFct(size_t i, size_t j, int64_t bytes) {
    if (paths_[i].empty()) paths_[i] = ComputePaths(config_.hosts[i]);
    const PathInfo& p = paths_[i][j];
    const TransportConfig& tc = transport_->config();
    const int64_t segments = (bytes + tc.mss - 1) / tc.mss;
    const double wire_bits = 8.0 * static_cast<double>(bytes + segments * tc.header_bytes);
    const double segment_bits =
        8.0 * static_cast<double>(std::min<int64_t>(bytes, tc.mss) + tc.header_bytes);
    return wire_bits / p.min_bps + segment_bits * (p.inv_rate_sum - 1 / p.min_bps) + p.delay_s;
  }

  // Shortest paths (least metric, then least delay) from `src` to every host of the set, over
  // up links; hosts other than src do not forward.
  std::vector<PathInfo> ComputePaths(NodeId src) const {
    const Topology& t = *topo_;
    struct Label {
      double metric = std::numeric_limits<double>::infinity();
      double delay = 0;
      PathInfo path;
    };
    std::vector<Label> best(t.num_nodes());
    using Entry = std::pair<std::pair<double, double>, NodeId>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    best[src].metric = 0;
    best[src].path = PathInfo{0, std::numeric_limits<double>::infinity(), 0};
    queue.push({{0, 0}, src});
    std::vector<bool> settled(t.num_nodes(), false);
    while (!queue.empty()) {
      const NodeId u = queue.top().second;
      queue.pop();
      if (settled[u]) continue;
      settled[u] = true;
      if (u != src && t.node(u).kind == NodeKind::kHost) continue;
      for (LinkId l : t.node(u).out_links) {
        const Link& link = t.link(l);
        if (!link.up || link.params.capacity.is_zero()) continue;
        const double metric = best[u].metric + link.params.metric;
        const double delay = best[u].delay + ToSeconds(link.params.delay);
        Label& v = best[link.dst];
        if (std::make_pair(metric, delay) < std::make_pair(v.metric, v.delay)) {
          const double bps = static_cast<double>(link.params.capacity.bps());
          v.metric = metric;
          v.delay = delay;
          v.path = PathInfo{delay, std::min(best[u].path.min_bps, bps),
                            best[u].path.inv_rate_sum + 1 / bps};
          queue.push({{metric, delay}, link.dst});
        }
      }
    }
    std::vector<PathInfo> out;
    for (NodeId h : config_.hosts) {
      out.push_back(std::isfinite(best[h].metric) && h != src ? best[h].path : PathInfo{});
    }
    return out;
  }

  BackgroundConfig config_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  const Topology* topo_ = nullptr;
  Random* rng_ = nullptr;
  WorkRecords* records_ = nullptr;
  Time end_time_{0};
  Time start_{0};
  std::vector<double> mean_gap_s_;                // by host: mean time between flow starts
  std::vector<std::unique_ptr<Timer>> arrivals_;  // by host
  std::vector<std::vector<PathInfo>> paths_;      // by source host, filled on first use
  double total_capacity_bps_ = 0;
  int64_t flows_started_ = 0;
  int64_t flows_completed_ = 0;
  double bytes_started_ = 0;
  std::vector<double> fcts_;
  std::array<std::vector<double>, kSizeBuckets.size()> slowdowns_;
  bool started_ = false;
};

absl::StatusOr<WorkloadPtr> CreateBackground(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  ASSIGN_OR_RETURN(const std::string cdf_spec, r.Required<std::string>("cdf"));
  const std::string path = FlowSizeCdf::ResolvePath(cdf_spec, ctx.base_dir);
  absl::StatusOr<FlowSizeCdf> cdf = FlowSizeCdf::Load(path);
  if (!cdf.ok()) return r.Error("cdf", cdf.status());
  if (!(cdf->MeanBytes() > 0)) return r.Error("cdf", fmt::format("{}: mean flow size is 0", path));
  BackgroundConfig c(*std::move(cdf));
  ASSIGN_OR_RETURN(c.load, r.Required<double>("load", Bounds{0.0, false, 1.0, true}));
  ASSIGN_OR_RETURN(c.hosts, r.OptionalHosts("hosts", topo, SendingHosts(topo)));
  if (c.hosts.size() < 2) return r.Error("hosts", "needs at least 2 hosts");
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<Background>(std::move(c));
}

REGISTER_WORKLOAD("background", CreateBackground);

}  // namespace
}  // namespace dar::sim::workloads
