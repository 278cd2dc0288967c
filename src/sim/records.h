// What a run leaves for people who would rather look than read: a record of every piece of
// work a workload measured (a flow, a request, a query, a collective's iteration and its
// steps) and a time series of the links, sampled at a fixed simulated interval. `dar-sim run`
// writes them beside results.json as flows-<policy>.csv and timeseries-<policy>.csv
// (docs/simulator.md says their columns); `dar-sim report` draws them.
//
// Nothing here schedules an event or changes what a run does: the sampler reads the network's
// counters between the runner's steps, so results.json is the same with records or without.
// Thread-compatible; a run keeps its own.
#ifndef DAR_SIM_RECORDS_H_
#define DAR_SIM_RECORDS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/units.h"
#include "sim/network.h"

namespace dar::sim {

// Flow-size buckets, decimal units, each bound inclusive: the background workload's
// slowdown_by_size in results.json and the report's slowdown by size use the same ones.
struct SizeBucket {
  const char* label;
  double max_bytes;
};
inline constexpr std::array<SizeBucket, 5> kSizeBuckets = {
    {{"<=10KB", 10e3},
     {"10KB-100KB", 100e3},
     {"100KB-1MB", 1e6},
     {"1MB-10MB", 10e6},
     {">10MB", std::numeric_limits<double>::infinity()}}};

// The index in kSizeBuckets of a flow of `bytes`.
inline size_t SizeBucketOf(double bytes) {
  size_t b = 0;
  while (bytes > kSizeBuckets[b].max_bytes) ++b;
  return b;
}

// One piece of work a workload measured, recorded when it completed.
struct WorkRecord {
  // What it was: "flow" (background), "transfer" (bulk), "request" (serving: the request
  // issued until its response received), "query" and "response" (incast), "iteration" and
  // "step" (allreduce), "iteration" and "phase" (alltoall). Static storage.
  std::string_view kind;
  uint8_t traffic_class = 0;
  int32_t job = -1;        // collectives: the job, from 0; -1 for the others
  int32_t iteration = -1;  // collectives: the iteration, from 0
  int32_t step = -1;       // collectives: the step (allreduce) or phase (alltoall), from 0
  // Payload bytes: a message's; a request's own (not its response's); a query's responses
  // together; per host, a step's message, a phase's messages together, an iteration's buffer.
  int64_t bytes = 0;
  Time start{0};
  Time finish{0};
  // The completion time over the workload's ideal one, where it has an ideal (background
  // flows, incast queries); none otherwise.
  std::optional<double> slowdown;
};
using WorkRecords = std::vector<WorkRecord>;

// The records of one workload of a run: `name` is its `type`, with "#<index>" after it when
// the scenario has several workloads of that type.
struct WorkloadRecords {
  std::string name;
  WorkRecords records;
};

// flows-<policy>.csv: a header, then one row per record, workload by workload in completion
// order. Times in seconds with nanosecond digits; empty cells where a column does not apply.
std::string FlowsCsv(std::string_view policy, const std::vector<WorkloadRecords>& workloads);

// The sampling interval of a run lasting `duration`: a thousandth of it rounded up to a whole
// millisecond, at least 1 ms (so at most about 1,000 samples before the drain).
Duration SampleInterval(Duration duration);

// Samples the network's links every `interval` of simulated time: per link the bytes sent
// (as utilisation of its capacity at the time) and the queue at the sample, and how many
// routing-table rows changed. Holds per sample 8 bytes per link until Csv().
class LinkSampler {
 public:
  // The links with most bytes over the run that get columns of their own in Csv().
  static constexpr int kTopLinks = 8;

  // Starts at `start` (now), from the counters and tables of then. `net` must outlive the
  // sampler. REQUIRES: interval > 0.
  LinkSampler(const Network& net, Time start, Duration interval);

  // Takes a sample if an interval has passed since the last one. Call as time advances; the
  // runner's steps of 1 ms end on whole milliseconds, so samples fall on multiples of the
  // interval.
  void Advance(Time now);
  // Takes a last, shorter sample if time has moved since the last one (a run that stopped
  // between two samples).
  void Finish(Time now);

  // timeseries-<policy>.csv: one row per sample (see docs/simulator.md for the columns).
  std::string Csv() const;

 private:
  using TableSet = std::shared_ptr<const RoutingTables>;

  void Sample(Time now);
  int64_t RouteChanges();

  struct Row {
    Time at{0};
    double util_max = 0;
    double util_mean = 0;
    int64_t queue_max_bytes = 0;
    int64_t drops = 0;
    int64_t route_changes = 0;
  };

  const Network& net_;
  const Duration interval_;
  Time last_{0};
  std::vector<int64_t> last_tx_bytes_;  // by link, at the last sample
  int64_t last_drops_ = 0;
  std::array<TableSet, Network::kClasses> last_tables_;
  std::vector<Row> rows_;
  std::vector<float> link_util_;     // sample-major: [sample * links + link]
  std::vector<int32_t> link_queue_;  // bytes, as link_util_
};

// "<prefix>-<policy>.csv", the policy's name with every character but letters, digits, '.',
// '_' and '-' replaced by '_': the file a policy's records are written to.
std::string RecordsFileName(std::string_view prefix, std::string_view policy);

}  // namespace dar::sim

#endif  // DAR_SIM_RECORDS_H_
