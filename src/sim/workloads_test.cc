// The workloads on a real event loop, network and transport, one section per workload; one
// file because they share the small networks they run on.
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/registry.h"
#include "core/topology_gen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/sim_test_util.h"
#include "sim/workload.h"

namespace dar::sim {
namespace {

using testing::Harness;
using ::testing::HasSubstr;

constexpr double kLinkBps = 10e9;

// `hosts` hosts h0.. on one switch s0, 10 Gb/s links with 1 us delay.
Topology Star(int hosts) {
  Topology t;
  for (int i = 0; i < hosts; ++i) t.AddNode("h" + std::to_string(i), NodeKind::kHost);
  const NodeId s = t.AddNode("s0", NodeKind::kSwitch);
  for (NodeId h = 0; h < hosts; ++h) t.AddDuplexLink(h, s, LinkParams());
  return t;
}

absl::StatusOr<WorkloadPtr> Create(const std::string& yaml, const Topology& topo) {
  ConfigContext ctx{"test.yaml: workloads[0]", DAR_SOURCE_DIR, &topo};
  return CreateWorkload(YAML::Load(yaml), ctx);
}

// Builds the workload, starts it with new work allowed until `end`, runs until it is done (or
// `limit`), and returns its report.
struct Result {
  nlohmann::json metrics;
  bool done = false;
  Time finished{0};
  TransportCounters counters;
  std::map<int64_t, int> messages_by_segments;  // data segments sent -> messages
  std::vector<int64_t> host_rx_bytes;           // by node id: bytes down the host's link
};

Result RunWorkload(const std::string& yaml, const Topology& topo, Time end,
                   Time limit = Seconds(10), uint64_t seed = 7) {
  Result result;
  absl::StatusOr<WorkloadPtr> w = Create(yaml, topo);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return result;
  Harness h(topo, ForwardingMode::kPerFlow);
  Random rng(seed);
  WorkloadContext ctx{h.loop, h.transport, topo, rng, end};
  (*w)->Start(ctx);
  while (!(*w)->Done() && h.loop.now() < limit && h.loop.RunOne()) {
  }
  result.done = (*w)->Done();
  result.finished = h.loop.now();
  result.counters = h.transport.counters();
  for (uint64_t id = 0; id < h.transport.num_messages(); ++id) {
    ++result.messages_by_segments[h.transport.flow_counters(id).sent];
  }
  result.host_rx_bytes.assign(topo.num_nodes(), 0);
  for (NodeId n : topo.Hosts()) {
    const LinkId down = topo.link(topo.node(n).out_links[0]).reverse;
    result.host_rx_bytes[n] = h.net.counters(down).tx_bytes;
  }
  (*w)->Report(result.metrics);
  return result;
}

double Num(const nlohmann::json& j) { return j.get<double>(); }

// Bytes on the wire for a message of `bytes` with the default transport.
double WireBytesOf(int64_t bytes) {
  const TransportConfig tc;
  const int64_t segments = (bytes + tc.mss - 1) / tc.mss;
  return static_cast<double>(bytes + segments * tc.header_bytes);
}

// ---- allreduce ----

TEST(AllReduceTest, CompletesEveryIterationNearTheBandwidthBound) {
  const Topology topo = Star(4);
  const Result r = RunWorkload(R"(
type: allreduce
hosts: [h0, h1, h2, h3]
message_mb: 4
iterations: 3
compute_ms: 1
)",
                               topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["iterations_completed"], 3);
  // 3 iterations x 4 hosts x 2(G-1) = 6 steps.
  EXPECT_EQ(r.counters.messages_completed, 3 * 4 * 6);
  ASSERT_EQ(r.metrics["step_times_s"].size(), 6u);
  const double bytes = 4.0 * (1 << 20);
  const double bound = 1e-3 + 2.0 * 3 / 4 * bytes * 8 / kLinkBps;
  const double iteration = Num(r.metrics["iteration_time_s"]);
  EXPECT_GE(iteration, bound);
  EXPECT_LE(iteration, 1.1 * bound);
  const double comm = Num(r.metrics["comm_time_s"]);
  EXPECT_GE(comm, 2.0 * 3 / 4 * bytes * 8 / kLinkBps);
  EXPECT_LE(comm, iteration - 1e-3 + 1e-9);
  double steps = 0;
  for (const auto& s : r.metrics["step_times_s"]) {
    EXPECT_GT(s.get<double>(), 0);
    steps += s.get<double>();
  }
  EXPECT_LE(Num(r.metrics["step_time_p50_s"]), Num(r.metrics["step_time_max_s"]));
  // The last iteration's steps add up to its communication time (close to the mean).
  EXPECT_NEAR(steps, comm, 0.05 * comm);
}

TEST(AllReduceTest, SlowHostAddsItsExtraCompute) {
  const Topology topo = Star(4);
  const std::string base = R"(
type: allreduce
group_size: 4
message_mb: 1
iterations: 4
compute_ms: 2
)";
  const Result fast = RunWorkload(base, topo, Time{0});
  const Result slow = RunWorkload(base + "slow_hosts: [h1]\nslowdown: 3\n", topo, Time{0});
  ASSERT_TRUE(fast.done);
  ASSERT_TRUE(slow.done);
  const double added =
      Num(slow.metrics["iteration_time_s"]) - Num(fast.metrics["iteration_time_s"]);
  // h1 computes 6 ms instead of 2: about 4 ms more per iteration, less what the other hosts'
  // first step overlaps with it (at most one step).
  const double step = Num(fast.metrics["step_time_max_s"]);
  EXPECT_GT(added, 4e-3 - 1.5 * step);
  EXPECT_LT(added, 4e-3 + 0.5 * step);
}

TEST(AllReduceTest, TwoHostRing) {
  const Topology topo = Star(3);
  const Result r = RunWorkload("{type: allreduce, hosts: [h2, h0], message_kb: 64, iterations: 2}",
                               topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["iterations_completed"], 2);
  EXPECT_EQ(r.counters.messages_completed, 2 * 2 * 2);
}

TEST(AllReduceTest, RingIsTheDefaultAlgorithm) {
  const Topology topo = Star(4);
  const std::string base = "{type: allreduce, group_size: 4, message_kb: 256, iterations: 2";
  const Result a = RunWorkload(base + "}", topo, Time{0});
  const Result b = RunWorkload(base + ", algorithm: ring}", topo, Time{0});
  ASSERT_TRUE(a.done);
  EXPECT_EQ(a.metrics.dump(), b.metrics.dump());
  // 2 iterations x 4 hosts x 2(G-1) steps, each a 64 KB chunk (45 segments).
  EXPECT_EQ(a.messages_by_segments, (std::map<int64_t, int>{{45, 2 * 4 * 6}}));
}

// The chunk is c = 8 segments; reduce-scatter sends 4c, 2c, c, all-gather c, 2c, 4c.
constexpr char kHalvingDoubling[] = R"(
type: allreduce
algorithm: halving_doubling
group_size: 8
message_bytes: 93440
iterations: 2
)";

TEST(AllReduceTest, HalvingDoublingTakesLog2StepsEachWayWithHalvingSizes) {
  const Topology topo = Star(8);
  const Result r = RunWorkload(kHalvingDoubling, topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["iterations_completed"], 2);
  ASSERT_EQ(r.metrics["step_times_s"].size(), 6u);  // log2(8) each way
  EXPECT_EQ(r.counters.messages_completed, 2 * 8 * 6);
  EXPECT_EQ(r.messages_by_segments, (std::map<int64_t, int>{{8, 32}, {16, 32}, {32, 32}}));
  // Every host sends and receives 2(G-1)c bytes per iteration, as in the ring.
  EXPECT_EQ(r.counters.bytes_delivered, int64_t{2} * 8 * 2 * 7 * 11680);
  const int64_t rx0 = r.host_rx_bytes[0];
  for (NodeId h = 1; h < 8; ++h) EXPECT_EQ(r.host_rx_bytes[h], rx0) << "h" << h;
  std::vector<double> st;
  for (const auto& s : r.metrics["step_times_s"]) st.push_back(s.get<double>());
  EXPECT_GT(st[0], st[1]);
  EXPECT_GT(st[1], st[2]);
  EXPECT_LT(st[3], st[4]);
  EXPECT_LT(st[4], st[5]);
}

TEST(AllReduceTest, HalvingDoublingMovesTheRingsBytesInFewerSteps) {
  const Topology topo = Star(8);
  const std::string body = "group_size: 8\nmessage_mb: 2\niterations: 2\n";
  const Result ring = RunWorkload("type: allreduce\n" + body, topo, Time{0});
  const Result hd =
      RunWorkload("type: allreduce\nalgorithm: halving_doubling\n" + body, topo, Time{0});
  ASSERT_TRUE(ring.done);
  ASSERT_TRUE(hd.done);
  EXPECT_EQ(ring.counters.bytes_delivered, hd.counters.bytes_delivered);
  const double bound = 2.0 * 7 / 8 * 2 * (1 << 20) * 8 / kLinkBps;
  const double hd_comm = Num(hd.metrics["comm_time_s"]);
  EXPECT_GE(hd_comm, bound);
  EXPECT_LE(hd_comm, 1.1 * bound);
  EXPECT_LE(hd_comm, 1.05 * Num(ring.metrics["comm_time_s"]));
}

// 4 racks (leaves) of 4 hosts.
Topology FourRacks() {
  LeafSpineParams p;
  p.leaves = 4;
  p.spines = 2;
  p.hosts_per_leaf = 4;
  return LeafSpine(p);
}

std::vector<std::string> Names(const nlohmann::json& j) {
  return j.get<std::vector<std::string>>();
}

TEST(AllReduceTest, JobsArePlacedAcrossRacksAsPlacementSays) {
  const Topology topo = FourRacks();
  const std::string base = "{type: allreduce, jobs: 2, job_size: 8, message_kb: 64, placement: ";
  const Result packed = RunWorkload(base + "packed}", topo, Time{0});
  ASSERT_TRUE(packed.done);
  EXPECT_EQ(packed.metrics["racks_by_job"], (nlohmann::json{{"job0", 2}, {"job1", 2}}));
  EXPECT_EQ(Names(packed.metrics["hosts_by_job"]["job0"]),
            (std::vector<std::string>{"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"}));
  const Result spread = RunWorkload(base + "spread}", topo, Time{0});
  ASSERT_TRUE(spread.done);
  EXPECT_EQ(spread.metrics["racks_by_job"], (nlohmann::json{{"job0", 4}, {"job1", 4}}));
  EXPECT_EQ(Names(spread.metrics["hosts_by_job"]["job0"]),
            (std::vector<std::string>{"h0", "h4", "h8", "h12", "h1", "h5", "h9", "h13"}));
  EXPECT_EQ(Names(spread.metrics["hosts_by_job"]["job1"]),
            (std::vector<std::string>{"h2", "h6", "h10", "h14", "h3", "h7", "h11", "h15"}));
  // Random: every host in exactly one job, the same for the same seed.
  const Result a = RunWorkload(base + "random}", topo, Time{0}, Seconds(10), 3);
  const Result b = RunWorkload(base + "random}", topo, Time{0}, Seconds(10), 3);
  const Result c = RunWorkload(base + "random}", topo, Time{0}, Seconds(10), 4);
  ASSERT_TRUE(a.done);
  EXPECT_EQ(a.metrics.dump(), b.metrics.dump());
  EXPECT_NE(a.metrics["hosts_by_job"], c.metrics["hosts_by_job"]);
  std::set<std::string> used;
  for (const char* job : {"job0", "job1"}) {
    for (const std::string& h : Names(a.metrics["hosts_by_job"][job])) used.insert(h);
  }
  EXPECT_EQ(used.size(), 16u);
}

TEST(AllReduceTest, ConcurrentJobsReportPerJobAndOverJobs) {
  const Topology topo = FourRacks();
  const Result r = RunWorkload(R"(
type: allreduce
jobs: 2
job_size: 8
placement: spread
message_kb: 512
iterations: 2
compute_ms: 1
slow_hosts: [h0]
slowdown: 2
)",
                               topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["jobs"], 2);
  EXPECT_EQ(r.metrics["iterations_completed"], 4);
  EXPECT_EQ(r.metrics["iterations_completed_by_job"], (nlohmann::json{{"job0", 2}, {"job1", 2}}));
  EXPECT_EQ(r.counters.messages_completed, 2 * 2 * 8 * 14);
  const double j0 = Num(r.metrics["iteration_time_by_job_s"]["job0"]);
  const double j1 = Num(r.metrics["iteration_time_by_job_s"]["job1"]);
  // h0 (job 0) computes 2 ms instead of 1.
  EXPECT_GT(j0, j1 + 0.5e-3);
  EXPECT_DOUBLE_EQ(Num(r.metrics["iteration_time_max_s"]), std::max(j0, j1));
  EXPECT_DOUBLE_EQ(Num(r.metrics["iteration_time_s"]), (j0 + j1) / 2);
  EXPECT_GE(Num(r.metrics["comm_time_max_s"]), Num(r.metrics["comm_time_s"]));
  EXPECT_EQ(r.metrics["comm_time_by_job_s"].size(), 2u);
}

// ---- alltoall ----

TEST(AllToAllTest, EveryHostSendsToEveryOtherInEachPhase) {
  const Topology topo = Star(4);
  // 4 hosts x 64 KB to each other host; dispatch and combine.
  const Result r =
      RunWorkload("{type: alltoall, group: all, message_kb: 256, iterations: 3}", topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["alltoall_iterations_completed"], 3);
  EXPECT_EQ(r.messages_by_segments, (std::map<int64_t, int>{{45, 3 * 2 * 4 * 3}}));
  // Each host sends and receives three 64 KB messages per phase at 10 Gb/s.
  const double bound = 3.0 * WireBytesOf(64 << 10) * 8 / kLinkBps;
  const double t = Num(r.metrics["alltoall_time_s"]);
  EXPECT_GE(t, bound);
  EXPECT_LE(t, 1.2 * bound);
  EXPECT_LE(t, Num(r.metrics["alltoall_time_max_s"]));
  EXPECT_NEAR(Num(r.metrics["alltoall_comm_time_s"]), 2 * t, 1e-12);
  const Result once =
      RunWorkload("{type: alltoall, group: all, message_kb: 256, iterations: 3, combine: false}",
                  topo, Time{0});
  EXPECT_EQ(once.counters.messages_completed, 3 * 4 * 3);
}

TEST(AllToAllTest, ExpertComputeSitsBetweenDispatchAndCombine) {
  const Topology topo = Star(4);
  const Result r = RunWorkload(
      "{type: alltoall, group_size: 4, message_kb: 64, iterations: 2, compute_ms: 1, "
      "expert_compute_ms: 2}",
      topo, Time{0});
  ASSERT_TRUE(r.done);
  const double iteration = Num(r.metrics["alltoall_iteration_time_s"]);
  const double comm = Num(r.metrics["alltoall_comm_time_s"]);
  EXPECT_NEAR(iteration, 3e-3 + comm, 1e-6);
}

TEST(AllToAllTest, JobsSpreadOverRacksAndRepeatWithTheSeed) {
  const Topology topo = FourRacks();
  const std::string yaml =
      "{type: alltoall, jobs: 3, job_size: 4, placement: random, message_kb: 64, iterations: 2}";
  const Result a = RunWorkload(yaml, topo, Time{0}, Seconds(10), 5);
  const Result b = RunWorkload(yaml, topo, Time{0}, Seconds(10), 5);
  ASSERT_TRUE(a.done);
  EXPECT_EQ(a.metrics.dump(), b.metrics.dump());
  EXPECT_EQ(a.metrics["alltoall_iterations_completed"], 6);
  EXPECT_EQ(a.counters.messages_completed, 3 * 2 * 2 * 4 * 3);
  const Result spread = RunWorkload(
      "{type: alltoall, jobs: 4, job_size: 4, placement: spread, message_kb: 64}", topo, Time{0});
  for (const auto& [job, racks] : spread.metrics["alltoall_racks_by_job"].items()) {
    EXPECT_EQ(racks, 4) << job;
  }
}

// ---- incast ----

TEST(IncastTest, FanInSendersAnswerOneReceiverPerQuery) {
  const Topology topo = Star(9);
  const Result r = RunWorkload(
      "{type: incast, fan_in: 8, response_kb: 32, rounds: 5, receivers: [h8]}", topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["queries_completed"], 5);
  EXPECT_EQ(r.counters.messages_completed, 5 * 8);
  EXPECT_EQ(r.counters.bytes_delivered, 5 * 8 * (32 << 10));
  // All data goes down h8's link; the senders' links carry only ACKs (64 B per segment; the
  // run stops when the last segment arrives, so the last ACKs may still be on their way).
  EXPECT_GE(r.host_rx_bytes[8], 5 * 8 * (32 << 10));
  for (NodeId h = 0; h < 8; ++h) {
    EXPECT_LE(r.host_rx_bytes[h], 5 * 23 * 64) << "h" << h;
    EXPECT_GE(r.host_rx_bytes[h], (5 * 23 - 2) * 64) << "h" << h;
  }
  const double ideal = 8.0 * WireBytesOf(32 << 10) * 8 / kLinkBps;
  EXPECT_NEAR(Num(r.metrics["qct_ideal_s"]), ideal, 1e-12);
  EXPECT_GE(Num(r.metrics["qct_mean_s"]), ideal);
  EXPECT_LE(Num(r.metrics["qct_p50_s"]), Num(r.metrics["qct_p99_s"]));
  EXPECT_LE(Num(r.metrics["qct_p99_s"]), Num(r.metrics["qct_max_s"]));
  EXPECT_LE(Num(r.metrics["response_fct_p99_s"]), Num(r.metrics["qct_max_s"]));
  // Rounds run one after another.
  EXPECT_GE(ToSeconds(r.finished), 5 * Num(r.metrics["qct_mean_s"]) * 0.999);
}

TEST(IncastTest, ReceiversAndSendersAreDrawnEveryRound) {
  const Topology topo = Star(9);
  const Result r =
      RunWorkload("{type: incast, fan_in: 3, response_kb: 16, rounds: 60}", topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.counters.messages_completed, 60 * 3);
  int receivers = 0;
  for (NodeId h = 0; h < 9; ++h) receivers += r.host_rx_bytes[h] > 3 * (16 << 10);
  EXPECT_GE(receivers, 7);
}

TEST(IncastTest, RateModeIsOpenLoopAndRepeatsWithTheSeed) {
  const Topology topo = Star(9);
  const std::string yaml = "{type: incast, fan_in: 4, response_kb: 16, rate_per_s: 2000}";
  const Result a = RunWorkload(yaml, topo, Milliseconds(50), Seconds(10), 3);
  const Result b = RunWorkload(yaml, topo, Milliseconds(50), Seconds(10), 3);
  const Result c = RunWorkload(yaml, topo, Milliseconds(50), Seconds(10), 4);
  ASSERT_TRUE(a.done);
  const int64_t started = a.metrics["queries_started"];
  EXPECT_EQ(a.metrics["queries_completed"], started);
  EXPECT_GT(started, 60);  // 100 expected
  EXPECT_LT(started, 140);
  EXPECT_EQ(a.metrics.dump(), b.metrics.dump());
  EXPECT_NE(a.metrics.dump(), c.metrics.dump());
}

// ---- serving ----

constexpr char kServing[] = R"(
type: serving
clients: [h0, h1, h2, h3]
servers: [h4, h5]
rate_per_client: 2000
request: {short_kb: 4, long_mb: 1, long_fraction: 0.1}
response: {kb: 16}
server_time_us: 20
)";

TEST(ServingTest, PercentilesAreOrderedAndLongRequestsTakeLonger) {
  const Topology topo = Star(6);
  const Result r = RunWorkload(kServing, topo, Milliseconds(100));
  ASSERT_TRUE(r.done);
  const int64_t completed = r.metrics["requests_completed"];
  EXPECT_EQ(completed, r.metrics["requests_issued"]);
  // 4 clients x 2000/s x 0.1 s = 800 expected.
  EXPECT_GT(completed, 650);
  EXPECT_LT(completed, 950);
  EXPECT_EQ(r.counters.messages_completed, 2 * completed);
  const double p50 = Num(r.metrics["latency_p50_s"]);
  const double p99 = Num(r.metrics["latency_p99_s"]);
  const double p999 = Num(r.metrics["latency_p999_s"]);
  EXPECT_GT(p50, 20e-6);  // at least the server time
  EXPECT_LE(p50, p99);
  EXPECT_LE(p99, p999);
  const double long_p50 = Num(r.metrics["latency_long_p50_s"]);
  EXPECT_GT(long_p50, (1 << 20) * 8 / kLinkBps);
  EXPECT_GT(long_p50, 10 * Num(r.metrics["latency_short_p50_s"]));
  const int64_t long_done = r.metrics["requests_long_completed"];
  EXPECT_GT(long_done, completed / 20);
  EXPECT_LT(long_done, completed / 5);
  // No request is issued at or after the end time.
  EXPECT_GE(r.finished, Milliseconds(100) - Milliseconds(5));
}

TEST(ServingTest, SameSeedSameResult) {
  const Topology topo = Star(6);
  const Result a = RunWorkload(kServing, topo, Milliseconds(20), Seconds(10), 3);
  const Result b = RunWorkload(kServing, topo, Milliseconds(20), Seconds(10), 3);
  const Result c = RunWorkload(kServing, topo, Milliseconds(20), Seconds(10), 4);
  EXPECT_EQ(a.metrics.dump(), b.metrics.dump());
  EXPECT_NE(a.metrics.dump(), c.metrics.dump());
}

TEST(ServingTest, DefaultsPickTheLastHostAsServer) {
  const Topology topo = Star(3);
  const Result r = RunWorkload(
      "{type: serving, rate_per_client: 1000, request: {kb: 1}, "
      "response: {bytes: 100}}",
      topo, Milliseconds(10));
  ASSERT_TRUE(r.done);
  EXPECT_GT(r.metrics["requests_completed"].get<int64_t>(), 5);
  EXPECT_FALSE(r.metrics.contains("latency_long_p50_s"));
}

// ---- bulk ----

TEST(BulkTest, IdenticalTransfersOnAnIdleNetworkTakeTheSameTime) {
  const Topology topo = Star(4);
  const Result r = RunWorkload(R"(
type: bulk
transfers: [{src: h0, dst: h1}, {src: h2, dst: h3}]
size_mb: 2
repeat: 3
gap_ms: 1
)",
                               topo, Time{0});
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.metrics["transfers_completed"], 6);
  const double mean = Num(r.metrics["completion_mean_s"]);
  EXPECT_GE(mean, 2.0 * (1 << 20) * 8 / kLinkBps);
  EXPECT_LE(mean, 1.1 * 2.0 * (1 << 20) * 8 / kLinkBps);
  EXPECT_LT(Num(r.metrics["completion_stddev_s"]), 1e-3 * mean);
  EXPECT_GE(Num(r.metrics["completion_p99_s"]), mean);
  // Three transfers back to back with two gaps of 1 ms.
  EXPECT_GE(r.finished, Milliseconds(2) + SecondsF(3 * mean));
}

TEST(BulkTest, SharedDestinationSplitsTheLink) {
  const Topology topo = Star(3);
  const Result r = RunWorkload(
      "{type: bulk, pairs: [{src: h0, dst: h2}, {src: h1, dst: h2}], "
      "size_mb: 2}",
      topo, Time{0});
  ASSERT_TRUE(r.done);
  // Both share h2's link: each takes about twice as long as alone.
  EXPECT_GT(Num(r.metrics["completion_mean_s"]), 1.5 * 2.0 * (1 << 20) * 8 / kLinkBps);
}

// ---- background ----

TEST(BackgroundTest, ReachesTheOfferedLoadAndFinishesEveryFlow) {
  const Topology topo = Star(8);
  const Time end = Milliseconds(300);
  const Result r = RunWorkload("{type: background, cdf: fb-hadoop, load: 0.3}", topo, end);
  ASSERT_TRUE(r.done);
  const int64_t started = r.metrics["flows_started"];
  EXPECT_EQ(r.metrics["flows_completed"], started);
  EXPECT_GT(started, 1000);
  EXPECT_EQ(r.counters.messages_completed, started);
  // Every started flow was delivered, so delivered bytes measure the offered load.
  const double measured =
      static_cast<double>(r.counters.bytes_delivered) * 8 / (ToSeconds(end) * 8 * kLinkBps);
  EXPECT_NEAR(measured, 0.3, 0.06);
  EXPECT_NEAR(r.metrics["offered_load"].get<double>(), measured, 1e-9);
  int64_t bucketed = 0;
  for (const auto& [label, bucket] : r.metrics["slowdown_by_size"].items()) {
    bucketed += bucket["count"].get<int64_t>();
    if (bucket["count"] == 0) continue;
    EXPECT_GE(bucket["mean"].get<double>(), 0.99) << label;
    EXPECT_GE(bucket["p99"].get<double>(), bucket["mean"].get<double>() * 0.99) << label;
  }
  EXPECT_EQ(bucketed, started);
  EXPECT_EQ(r.metrics["slowdown_by_size"].size(), 5u);
  EXPECT_LE(Num(r.metrics["fct_p50_s"]), Num(r.metrics["fct_p99_s"]));
}

TEST(BackgroundTest, LoneFlowsHaveSlowdownNearOne) {
  // Two hosts on different leaves: a four-hop path.
  LeafSpineParams p;
  p.leaves = 2;
  p.spines = 1;
  p.hosts_per_leaf = 1;
  const Topology topo = LeafSpine(p);
  const Result r = RunWorkload("{type: background, cdf: fb-hadoop, load: 0.002}", topo, Seconds(1));
  ASSERT_TRUE(r.done);
  EXPECT_GT(r.metrics["flows_completed"].get<int64_t>(), 20);
  EXPECT_GE(r.metrics["slowdown_mean"].get<double>(), 0.999);
  EXPECT_LE(r.metrics["slowdown_mean"].get<double>(), 1.05);
}

TEST(BackgroundTest, CdfPathRelativeToTheScenario) {
  const Topology topo = Star(2);
  // base_dir is the repository root in these tests.
  const Result r =
      RunWorkload("{type: background, cdf: data/flow-sizes/websearch.cdf, load: 0.1, start_ms: 5}",
                  topo, Milliseconds(50));
  ASSERT_TRUE(r.done);
  EXPECT_GT(r.metrics["flows_started"].get<int64_t>(), 0);
}

// ---- configuration errors ----

std::string CreateError(const std::string& yaml, int hosts = 4) {
  const Topology topo = Star(hosts);
  absl::StatusOr<WorkloadPtr> w = Create(yaml, topo);
  EXPECT_FALSE(w.ok()) << yaml;
  return w.ok() ? "" : std::string(w.status().message());
}

TEST(WorkloadConfigTest, ErrorsNameTheKey) {
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, iteratons: 3}"),
              HasSubstr("test.yaml: workloads[0].iteratons: unknown key"));
  EXPECT_THAT(CreateError("{type: allreduce}"), HasSubstr("workloads[0].message_mb: required"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, group_size: 9}"),
              HasSubstr("workloads[0].group_size: 9 exceeds"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, hosts: [h0, h1], slow_hosts: [h2]}"),
              HasSubstr("workloads[0].slow_hosts[0]: 'h2' is not in the group"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, hosts: [h0, h1], group_size: 2}"),
              HasSubstr("give only one of"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, compute_ms: -2}"),
              HasSubstr("workloads[0].compute_ms: must be >= 0"));
  EXPECT_THAT(CreateError("{type: bulk, transfers: [{src: h0, dst: h1}], size_mb: -1}"),
              HasSubstr("workloads[0].size_mb: must be > 0, got -1"));
  EXPECT_THAT(CreateError("{type: bulk, transfers: [{src: h0, dst: h9}], size_mb: 1}"),
              HasSubstr("workloads[0].transfers[0].dst: unknown node 'h9'"));
  EXPECT_THAT(CreateError("{type: bulk, pairs: [{src: h0, dst: h0}], size_mb: 1}"),
              HasSubstr("workloads[0].pairs[0].dst: must differ from src"));
  EXPECT_THAT(CreateError("{type: bulk, transfers: [{src: h0, dst: h1, size: 3}], size_mb: 1}"),
              HasSubstr("workloads[0].transfers[0].size: unknown key"));
  EXPECT_THAT(CreateError("{type: bulk, transfers: [{src: h0, dst: s0}], size_mb: 1}"),
              HasSubstr("transfers[0].dst: 's0' is not a host"));
  EXPECT_THAT(CreateError("{type: bulk, transfers: [{src: h0, dst: h1}], size_mb: 1, "
                          "traffic_class: 9}"),
              HasSubstr("workloads[0].traffic_class: must be >= 0 and <= 7"));
  EXPECT_THAT(CreateError("{type: serving, clients: [h0, nope], rate_per_client: 1, "
                          "request: {kb: 1}, response: {kb: 1}}"),
              HasSubstr("workloads[0].clients[1]: unknown node 'nope'"));
  EXPECT_THAT(CreateError("{type: serving, clients: [h0], servers: [h0], rate_per_client: 1, "
                          "request: {kb: 1}, response: {kb: 1}}"),
              HasSubstr("workloads[0].clients[0]: 'h0' is also a server"));
  EXPECT_THAT(CreateError("{type: serving, rate_per_client: 0, request: {kb: 1}, "
                          "response: {kb: 1}}"),
              HasSubstr("workloads[0].rate_per_client: must be > 0"));
  EXPECT_THAT(CreateError("{type: serving, rate_per_client: 1, request: {kb: 1, short_kb: 2}, "
                          "response: {kb: 1}}"),
              HasSubstr("workloads[0].request: give either one size"));
  EXPECT_THAT(CreateError("{type: serving, rate_per_client: 1, request: {short_kb: 1, "
                          "long_mb: 2}, response: {kb: 1}}"),
              HasSubstr("workloads[0].request.long_fraction:"));
  EXPECT_THAT(CreateError("{type: serving, rate_per_client: 1, request: {kb: 1}, "
                          "response: {kb: 1, typo: 2}}"),
              HasSubstr("workloads[0].response.typo: unknown key"));
  EXPECT_THAT(CreateError("{type: serving, rate_per_client: 1, request: {kb: 1}}"),
              HasSubstr("workloads[0].response: required"));
  EXPECT_THAT(CreateError("{type: background, cdf: websearch}"),
              HasSubstr("workloads[0].load: required"));
  EXPECT_THAT(CreateError("{type: background, cdf: websearch, load: 1.5}"),
              HasSubstr("workloads[0].load: must be > 0 and <= 1, got 1.5"));
  EXPECT_THAT(CreateError("{type: background, cdf: no-such-cdf, load: 0.5}"),
              HasSubstr("workloads[0].cdf: "));
  EXPECT_THAT(CreateError("{type: background, cdf: websearch, load: 0.5, hosts: [h1]}"),
              HasSubstr("workloads[0].hosts: needs at least 2 hosts"));
  EXPECT_THAT(CreateError("{type: nosuch}"), HasSubstr("workloads[0].type: unknown workload"));
}

TEST(WorkloadConfigTest, CollectiveAndIncastErrorsNameTheKey) {
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, algorithm: halving_doubling, "
                          "group_size: 3}"),
              HasSubstr("workloads[0].algorithm: halving_doubling needs a power-of-two number of "
                        "hosts per job, got 3"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, algorithm: halving_doubling, "
                          "job_size: 3}"),
              HasSubstr("workloads[0].job_size: halving_doubling needs a power-of-two"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, algorithm: tree}"),
              HasSubstr("workloads[0].algorithm: "));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, jobs: 3, job_size: 2}"),
              HasSubstr("workloads[0].jobs: 3 job(s) of 2 hosts need 6 hosts; the topology has 4"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, job_size: 3, hosts: [h0, h1]}"),
              HasSubstr("workloads[0].job_size: 1 job(s) of 3 hosts need 3 hosts; the hosts list "
                        "has 2"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, jobs: 2}"),
              HasSubstr("workloads[0].job_size: required"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, jobs: 2, job_size: 2, group_size: 2}"),
              HasSubstr("workloads[0].group_size: give jobs/job_size"));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, job_size: 2, placement: diagonal}"),
              HasSubstr("workloads[0].placement: "));
  EXPECT_THAT(CreateError("{type: allreduce, message_mb: 1, job_size: 2, hosts: [h0, h1], "
                          "slow_hosts: [h3]}"),
              HasSubstr("workloads[0].slow_hosts[0]: 'h3' is not in the pool"));
  EXPECT_THAT(CreateError("{type: alltoall, message_mb: 1, job_size: 8}"),
              HasSubstr("workloads[0].job_size: 1 job(s) of 8 hosts need 8 hosts"));
  EXPECT_THAT(CreateError("{type: alltoall, message_mb: 1, combin: false}"),
              HasSubstr("workloads[0].combin: unknown key"));
  EXPECT_THAT(CreateError("{type: alltoall, group: all}"),
              HasSubstr("workloads[0].message_mb: required"));
  EXPECT_THAT(CreateError("{type: alltoall, message_mb: 1, expert_compute_ms: -1}"),
              HasSubstr("workloads[0].expert_compute_ms: must be >= 0"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 4, response_kb: 64, rounds: 1}"),
              HasSubstr("workloads[0].fan_in: 4 senders besides receiver 'h0' need 5 hosts; the "
                        "topology has 4"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 0, response_kb: 64, rounds: 1}"),
              HasSubstr("workloads[0].fan_in: must be >= 1"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, response_kb: 64, rounds: 1, "
                          "rate_per_s: 10}"),
              HasSubstr("workloads[0].rate_per_s: give exactly one of rounds, rate_per_s"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, response_kb: 64}"),
              HasSubstr("workloads[0].rounds: give exactly one of rounds, rate_per_s"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, response_kb: 64, rate_per_s: 10, "
                          "gap_us: 5}"),
              HasSubstr("workloads[0].gap_us: goes with rounds"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, rounds: 3}"),
              HasSubstr("workloads[0].response_mb: required"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, response_kb: 1, rounds: 3, "
                          "receivers: [h7]}"),
              HasSubstr("workloads[0].receivers[0]: unknown node 'h7'"));
  EXPECT_THAT(CreateError("{type: incast, fan_in: 2, response_kb: 1, rounds: 3, fanin: 2}"),
              HasSubstr("workloads[0].fanin: unknown key"));
}

TEST(BackgroundTest, AnyCdfFileInTheFormatIsAccepted) {
  const std::string path = ::testing::TempDir() + "/tiny.cdf";
  {
    std::ofstream out(path);
    out << "# two sizes\n1000 50\n20000 100\n";
  }
  const Topology topo = Star(4);
  const Result r =
      RunWorkload("{type: background, cdf: " + path + ", load: 0.2}", topo, Milliseconds(20));
  ASSERT_TRUE(r.done);
  EXPECT_GT(r.metrics["flows_completed"].get<int64_t>(), 100);
  EXPECT_EQ(r.metrics["slowdown_by_size"]["100KB-1MB"]["count"], 0);
}

TEST(WorkloadConfigTest, AllTypesAreRegistered) {
  const std::vector<std::string> types = Registry<WorkloadFactory>::Names();
  for (const char* t : {"allreduce", "alltoall", "serving", "bulk", "background", "incast"}) {
    EXPECT_THAT(types, ::testing::Contains(t));
  }
}

}  // namespace
}  // namespace dar::sim
