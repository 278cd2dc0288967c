// `bulk`: replication transfers between fixed pairs of hosts, back to back.
//
// YAML:
//   type: bulk
//   transfers: [{src: h0, dst: h5}, ...]   (or `pairs:`; required, non-empty)
//   size_mb: 100          bytes per transfer (any size unit; required)
//   repeat: 3             transfers per pair, one after the other (default 1)
//   gap_ms: 0             pause between a transfer's completion and the next (default 0)
//   traffic_class: 1      default 1 (bulk)
//   start_ms: 0           when the first transfers start (default 0)
//
// Every pair starts its first transfer at start time. The workload is closed: each pair makes
// all its transfers whatever the scenario's end time.
// Completion time = the receiver holds the whole transfer - the transfer started.
// Metrics: transfers_completed, completion_mean_s, completion_stddev_s (population standard
// deviation), completion_p99_s, completion_max_s.
#include <algorithm>
#include <memory>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {
namespace {

struct BulkConfig {
  std::vector<std::pair<NodeId, NodeId>> pairs;
  int64_t size_bytes = 0;
  int repeat = 1;
  Duration gap{0};
  uint8_t traffic_class = 1;
  Duration start{0};
};

class Bulk : public Workload {
 public:
  explicit Bulk(BulkConfig config) : config_(std::move(config)) {}

  void Start(WorkloadContext& ctx) override {
    transport_ = &ctx.transport;
    records_ = ctx.records;
    const Time first = std::max(ctx.loop.now(), Time{0} + config_.start);
    for (size_t p = 0; p < config_.pairs.size(); ++p) {
      timers_.push_back(std::make_unique<Timer>(ctx.loop, [this, p] { StartTransfer(p); }));
      timers_.back()->ScheduleAt(first);
    }
    done_per_pair_.assign(config_.pairs.size(), 0);
    started_ = true;
  }

  bool Done() const override {
    return started_ && static_cast<int64_t>(completions_.size()) ==
                           static_cast<int64_t>(config_.pairs.size()) * config_.repeat;
  }

  void Report(nlohmann::json& metrics) const override {
    metrics["transfers_completed"] = completions_.size();
    metrics["completion_mean_s"] = MeanOrNull(completions_);
    metrics["completion_stddev_s"] =
        completions_.empty() ? nlohmann::json(nullptr) : nlohmann::json(StdDev(completions_));
    metrics["completion_p99_s"] = QuantileOrNull(completions_, 0.99);
    metrics["completion_max_s"] = QuantileOrNull(completions_, 1.0);
  }

 private:
  void StartTransfer(size_t p) {
    const auto [src, dst] = config_.pairs[p];
    transport_->Send(src, dst, config_.size_bytes, config_.traffic_class,
                     [this, p](const MessageResult& r) { OnTransferDone(p, r); });
  }

  void OnTransferDone(size_t p, const MessageResult& r) {
    completions_.push_back(ToSeconds(r.duration()));
    if (records_ != nullptr) {
      records_->push_back(WorkRecord{.kind = "transfer",
                                     .traffic_class = r.traffic_class,
                                     .bytes = r.bytes,
                                     .start = r.start,
                                     .finish = r.finish});
    }
    if (++done_per_pair_[p] < config_.repeat) timers_[p]->ScheduleIn(config_.gap);
  }

  BulkConfig config_;
  Transport* transport_ = nullptr;
  WorkRecords* records_ = nullptr;
  std::vector<std::unique_ptr<Timer>> timers_;  // by pair: starts its next transfer
  std::vector<int> done_per_pair_;
  std::vector<double> completions_;
  bool started_ = false;
};

absl::StatusOr<WorkloadPtr> CreateBulk(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  BulkConfig c;
  const bool has_transfers = r.Has("transfers");
  const bool has_pairs = r.Has("pairs");
  if (has_transfers && has_pairs) return r.Error("pairs", "give transfers or pairs, not both");
  const std::string key = has_pairs ? "pairs" : "transfers";
  ASSIGN_OR_RETURN(std::vector<YamlReader> entries, r.RequiredMapList(key));
  if (entries.empty()) return r.Error(key, "needs at least one transfer");
  for (size_t i = 0; i < entries.size(); ++i) {
    YamlReader& e = entries[i];
    ASSIGN_OR_RETURN(const NodeId src, e.RequiredHost("src", topo));
    ASSIGN_OR_RETURN(const NodeId dst, e.RequiredHost("dst", topo));
    if (src == dst) return e.Error("dst", "must differ from src");
    RETURN_IF_ERROR(e.CheckNoUnknownKeys());
    c.pairs.emplace_back(src, dst);
  }
  ASSIGN_OR_RETURN(c.size_bytes, r.RequiredSize("size", Bounds::Positive(), kMaxMessageBytes));
  ASSIGN_OR_RETURN(c.repeat, r.Optional<int>("repeat", 1, Bounds::InRange(1, kMaxRepeats)));
  ASSIGN_OR_RETURN(c.gap, r.OptionalDuration("gap", Duration(0)));
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 1));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<Bulk>(std::move(c));
}

REGISTER_WORKLOAD("bulk", CreateBulk);

}  // namespace
}  // namespace dar::sim::workloads
