#include "core/telemetry.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

// ComputeTwoWayDelay ---------------------------------------------------------------------------

// 5 ms each way, the peer's clock 1 s ahead, no hold time.
TEST(TwoWayDelayTest, SymmetricPathWithClockOffset) {
  absl::StatusOr<TwoWayDelay> d = ComputeTwoWayDelay(Milliseconds(100), Milliseconds(1105),
                                                     Milliseconds(1105), Milliseconds(110));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rtt, Milliseconds(10));
  EXPECT_EQ(d->offset, Seconds(1));
}

// 8 ms out, 2 ms back, clocks in sync: the offset estimate is off by half the asymmetry.
TEST(TwoWayDelayTest, AsymmetricPath) {
  absl::StatusOr<TwoWayDelay> d =
      ComputeTwoWayDelay(Time{0}, Milliseconds(8), Milliseconds(8), Milliseconds(10));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rtt, Milliseconds(10));
  EXPECT_EQ(d->offset, Milliseconds(3));
  EXPECT_LE(d->offset, d->rtt / 2);
}

// 5 ms each way, the peer holds the probe 20 ms, its clock 3 s behind.
TEST(TwoWayDelayTest, PeerHoldTimeIsExcluded) {
  const Time t1 = Seconds(10);
  const Time t2 = t1 + Milliseconds(5) - Seconds(3);
  const Time t3 = t2 + Milliseconds(20);
  const Time t4 = t1 + Milliseconds(30);
  absl::StatusOr<TwoWayDelay> d = ComputeTwoWayDelay(t1, t2, t3, t4);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rtt, Milliseconds(10));
  EXPECT_EQ(d->offset, -Seconds(3));
}

TEST(TwoWayDelayTest, ZeroRttIsValid) {
  absl::StatusOr<TwoWayDelay> d = ComputeTwoWayDelay(Time{5}, Time{7}, Time{9}, Time{7});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rtt, Duration::zero());
  EXPECT_EQ(d->offset, Nanoseconds(2));
}

TEST(TwoWayDelayTest, InvalidTimestampsAreErrors) {
  // Received before sent.
  absl::StatusOr<TwoWayDelay> d =
      ComputeTwoWayDelay(Milliseconds(10), Milliseconds(11), Milliseconds(12), Milliseconds(9));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("before it was sent"));
  // The peer replied before it received the probe.
  d = ComputeTwoWayDelay(Milliseconds(10), Milliseconds(12), Milliseconds(11), Milliseconds(20));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  // The peer's hold time exceeds the round trip: negative RTT.
  d = ComputeTwoWayDelay(Milliseconds(10), Milliseconds(10), Milliseconds(30), Milliseconds(20));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("hold time"));
  // Differences that overflow 64 bits.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  d = ComputeTwoWayDelay(Time{kMin}, Time{kMax}, Time{kMax}, Time{kMin + 10});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

// LossWindow -----------------------------------------------------------------------------------

TEST(LossWindowTest, NoProbesYet) {
  LossWindow w;
  EXPECT_EQ(w.loss_rate(), 0);
  EXPECT_EQ(w.judged(), 0);
  EXPECT_EQ(w.consecutive_missed(), 0);
  EXPECT_FALSE(w.OnReply(1));
  EXPECT_EQ(w.unknown_replies(), 1);
}

TEST(LossWindowTest, NewestProbesAreInGrace) {
  LossWindow w(/*window=*/100, /*grace=*/3);
  for (uint64_t seq = 1; seq <= 3; ++seq) w.OnSent(seq);
  EXPECT_EQ(w.judged(), 0);
  EXPECT_EQ(w.loss_rate(), 0);
  w.OnSent(4);
  w.OnSent(5);
  EXPECT_EQ(w.judged(), 2);
  EXPECT_EQ(w.loss_rate(), 1.0);
  EXPECT_TRUE(w.OnReply(1));
  EXPECT_EQ(w.loss_rate(), 0.5);
}

TEST(LossWindowTest, ReorderedRepliesCount) {
  LossWindow w(/*window=*/10, /*grace=*/0);
  for (uint64_t seq = 1; seq <= 10; ++seq) w.OnSent(seq);
  for (uint64_t seq = 10; seq >= 1; --seq) EXPECT_TRUE(w.OnReply(seq));
  EXPECT_EQ(w.loss_rate(), 0);
  EXPECT_EQ(w.judged(), 10);
}

TEST(LossWindowTest, DuplicatesAndUnknownRepliesAreIgnoredAndCounted) {
  LossWindow w(/*window=*/4, /*grace=*/0);
  for (uint64_t seq = 1; seq <= 4; ++seq) w.OnSent(seq);
  EXPECT_TRUE(w.OnReply(2));
  EXPECT_FALSE(w.OnReply(2));
  EXPECT_FALSE(w.OnReply(99));  // never sent
  EXPECT_EQ(w.duplicate_replies(), 1);
  EXPECT_EQ(w.unknown_replies(), 1);
  EXPECT_EQ(w.loss_rate(), 0.75);
}

TEST(LossWindowTest, WindowWrapsAndForgetsOldProbes) {
  LossWindow w(/*window=*/10, /*grace=*/2);
  for (uint64_t seq = 0; seq < 100; ++seq) {
    w.OnSent(seq);
    if (seq % 2 == 0) {
      EXPECT_TRUE(w.OnReply(seq));
    }
  }
  EXPECT_EQ(w.judged(), 10);
  EXPECT_DOUBLE_EQ(w.loss_rate(), 0.5);
  // Seqs 88..99 are held; 87 has left the window.
  EXPECT_FALSE(w.OnReply(87));
  EXPECT_EQ(w.unknown_replies(), 1);
  // A late reply for a probe still in the window counts.
  EXPECT_TRUE(w.OnReply(89));
  EXPECT_DOUBLE_EQ(w.loss_rate(), 0.4);
}

TEST(LossWindowTest, BurstOfLoss) {
  LossWindow w(/*window=*/100, /*grace=*/3);
  int max_missed = 0;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    w.OnSent(seq);
    if (seq < 150 || seq >= 170) w.OnReply(seq);
    max_missed = std::max(max_missed, w.consecutive_missed());
    if (seq == 169) {
      EXPECT_EQ(w.consecutive_missed(), 20);
    }
  }
  EXPECT_EQ(max_missed, 20);
  EXPECT_EQ(w.consecutive_missed(), 0);
  // Judged: seqs 97..196, of which 150..169 were lost.
  EXPECT_DOUBLE_EQ(w.loss_rate(), 0.2);
}

// Replies three probes behind (RTT of three periods): the link still looks healthy.
TEST(LossWindowTest, LongRttDoesNotLookLikeMissedProbes) {
  LossWindow w;
  for (uint64_t seq = 0; seq < 50; ++seq) {
    w.OnSent(seq);
    // Until the first reply arrives, every probe counts as missed.
    EXPECT_EQ(w.consecutive_missed(), seq <= 3 ? static_cast<int>(seq) + 1 : 1) << seq;
    if (seq >= 3) w.OnReply(seq - 3);
  }
  EXPECT_EQ(w.consecutive_missed(), 0);
}

TEST(LossWindowTest, NonIncreasingSendsAreIgnored) {
  LossWindow w(/*window=*/10, /*grace=*/0);
  w.OnSent(5);
  w.OnSent(5);
  w.OnSent(3);
  EXPECT_EQ(w.sent(), 1);
  EXPECT_EQ(w.ignored_sends(), 2);
}

TEST(LossWindowTest, GapsInSeqsAndSendTimes) {
  LossWindow w(/*window=*/8, /*grace=*/0);
  for (uint64_t seq = 0; seq < 40; seq += 2) w.OnSent(seq, Milliseconds(100 * seq));
  // Seqs 24..38 are held.
  EXPECT_FALSE(w.OnReply(31));  // never sent
  EXPECT_EQ(w.SentAt(30), Milliseconds(3000));
  EXPECT_EQ(w.SentAt(31), std::nullopt);
  EXPECT_EQ(w.SentAt(24), Milliseconds(2400));
  EXPECT_EQ(w.SentAt(22), std::nullopt);  // left the window
  for (uint64_t seq = 24; seq < 40; seq += 2) EXPECT_TRUE(w.OnReply(seq));
  EXPECT_EQ(w.loss_rate(), 0);
}

// RttEstimator ---------------------------------------------------------------------------------

TEST(RttEstimatorTest, Empty) {
  RttEstimator r;
  EXPECT_EQ(r.smoothed(), Duration::zero());
  EXPECT_EQ(r.min(), Duration::zero());
  EXPECT_EQ(r.percentile(), Duration::zero());
  EXPECT_EQ(r.count(), 0);
}

TEST(RttEstimatorTest, SmoothedIsTcpSrtt) {
  RttEstimator r;
  r.AddSample(Milliseconds(8));
  EXPECT_EQ(r.smoothed(), Milliseconds(8));
  r.AddSample(Milliseconds(16));
  EXPECT_EQ(r.smoothed(), Milliseconds(9));
  r.AddSample(Milliseconds(1));
  EXPECT_EQ(r.smoothed(), Milliseconds(8));
}

TEST(RttEstimatorTest, NearestRankPercentile) {
  RttEstimator r(/*window=*/64, /*quantile=*/0.95);
  for (int ms : {40, 10, 30, 20}) r.AddSample(Milliseconds(ms));
  EXPECT_EQ(r.percentile(), Milliseconds(40));  // rank ceil(3.8) = 4
  EXPECT_EQ(r.min(), Milliseconds(10));
  RttEstimator median(/*window=*/64, /*quantile=*/0.5);
  for (int ms : {40, 10, 30, 20}) median.AddSample(Milliseconds(ms));
  EXPECT_EQ(median.percentile(), Milliseconds(20));  // rank 2
}

TEST(RttEstimatorTest, WindowSlides) {
  RttEstimator r(/*window=*/64);
  for (int ms = 1; ms <= 100; ++ms) r.AddSample(Milliseconds(ms));
  // Kept: 37..100 ms; P95 is the 61st smallest.
  EXPECT_EQ(r.min(), Milliseconds(37));
  EXPECT_EQ(r.percentile(), Milliseconds(97));
  EXPECT_EQ(r.count(), 100);
}

// The underlay moved to a longer path: the windowed minimum follows.
TEST(RttEstimatorTest, MinimumRecoversAfterPathChange) {
  RttEstimator r(/*window=*/16);
  for (int i = 0; i < 16; ++i) r.AddSample(Milliseconds(5));
  for (int i = 0; i < 16; ++i) r.AddSample(Milliseconds(20));
  EXPECT_EQ(r.min(), Milliseconds(20));
}

TEST(RttEstimatorTest, NegativeSamplesAreIgnored) {
  RttEstimator r;
  r.AddSample(Milliseconds(-1));
  EXPECT_EQ(r.count(), 0);
}

TEST(RttEstimatorTest, MatchesBruteForceOnRandomSamples) {
  Random rng(7);
  constexpr int kWindow = 20;
  RttEstimator r(kWindow, 0.9);
  std::vector<Duration> all;
  for (int i = 0; i < 1000; ++i) {
    // Few distinct values, so that equal samples are evicted correctly too.
    const Duration rtt = Milliseconds(static_cast<int64_t>(rng.Below(10)));
    r.AddSample(rtt);
    all.push_back(rtt);
    std::vector<Duration> kept(all.end() - std::min<size_t>(all.size(), kWindow), all.end());
    std::sort(kept.begin(), kept.end());
    const size_t rank = static_cast<size_t>(std::ceil(0.9 * kept.size() - 1e-9));
    ASSERT_EQ(r.min(), kept.front()) << i;
    ASSERT_EQ(r.percentile(), kept[rank - 1]) << i;
  }
}

// RateMeter ------------------------------------------------------------------------------------

TEST(RateMeterTest, RateOverLastInterval) {
  RateMeter m;
  m.OnSample(Seconds(1), 1000);
  EXPECT_EQ(m.last_rate(), std::nullopt);
  EXPECT_EQ(m.smoothed_rate(), std::nullopt);
  m.OnSample(Seconds(1) + Milliseconds(100), 1000 + 125000);  // 1 Mbit in 100 ms
  ASSERT_TRUE(m.last_rate().has_value());
  EXPECT_EQ(*m.last_rate(), DataRate::Mbps(10));
  EXPECT_EQ(m.smoothed_rate(), DataRate::Mbps(10));
}

TEST(RateMeterTest, EwmaWeighsByTime) {
  RateMeter m(/*time_constant=*/Seconds(1));
  m.OnSample(Time{0}, 0);
  m.OnSample(Seconds(1), 1250000);            // 10 Mbps
  m.OnSample(Seconds(2), 1250000 + 2500000);  // 20 Mbps
  EXPECT_EQ(m.last_rate(), DataRate::Mbps(20));
  ASSERT_TRUE(m.smoothed_rate().has_value());
  EXPECT_NEAR(m.smoothed_rate()->bps(), 10e6 + (1 - std::exp(-1.0)) * 10e6, 1);
}

TEST(RateMeterTest, CounterResetRestarts) {
  RateMeter m;
  m.OnSample(Time{0}, 0);
  m.OnSample(Seconds(1), 1250000);
  m.OnSample(Seconds(2), 500);  // reset
  EXPECT_EQ(m.last_rate(), std::nullopt);
  EXPECT_EQ(m.restarts(), 1);
  EXPECT_EQ(m.smoothed_rate(), DataRate::Mbps(10));  // kept
  m.OnSample(Seconds(3), 500 + 125000);
  EXPECT_EQ(m.last_rate(), DataRate::Mbps(1));
}

TEST(RateMeterTest, ZeroIntervalIsIgnored) {
  RateMeter m;
  m.OnSample(Time{0}, 0);
  m.OnSample(Time{0}, 1000);
  EXPECT_EQ(m.last_rate(), std::nullopt);
  m.OnSample(Seconds(1), 125000);
  EXPECT_EQ(m.last_rate(), DataRate::Mbps(1));
}

TEST(RateMeterTest, TimeGoingBackwardsRestarts) {
  RateMeter m;
  m.OnSample(Seconds(5), 0);
  m.OnSample(Seconds(6), 125000);
  m.OnSample(Seconds(4), 250000);
  EXPECT_EQ(m.last_rate(), std::nullopt);
  EXPECT_EQ(m.restarts(), 1);
}

TEST(RateMeterTest, Utilisation) {
  EXPECT_DOUBLE_EQ(Utilisation(DataRate::Gbps(5), DataRate::Gbps(10)), 0.5);
  EXPECT_EQ(Utilisation(DataRate::Gbps(5), DataRate()), 0);
}

// LinkMonitor ----------------------------------------------------------------------------------

TEST(LinkMonitorConfigTest, Validate) {
  EXPECT_TRUE(LinkMonitorConfig().Validate().ok());
  LinkMonitorConfig c;
  c.loss_window = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("loss_window"));
  c = LinkMonitorConfig();
  c.rtt_quantile = 1.5;
  EXPECT_THAT(c.Validate().message(), HasSubstr("rtt_quantile"));
  c = LinkMonitorConfig();
  c.sample_period = Duration::zero();
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = LinkMonitorConfig();
  c.capacity = DataRate::Mbps(-1);
  EXPECT_THAT(c.Validate().message(), HasSubstr("capacity"));
}

// A 10 Gb/s link with a 10 ms RTT and the peer's clock 1 s ahead, probed every 100 ms; it
// carries 5 Gb/s, then fails.
TEST(LinkMonitorTest, HealthyThenDown) {
  LinkMonitor m(LinkMonitorConfig{.capacity = DataRate::Gbps(10)});
  const Duration period = Milliseconds(100);
  Time now{0};
  uint64_t seq = 0;
  for (; seq < 50; ++seq, now += period) {
    m.OnProbeSent(seq, now);
    const Time t2 = now + Milliseconds(5) + Seconds(1);
    ASSERT_TRUE(m.OnProbeReply(seq, now, t2, t2, now + Milliseconds(10)).ok());
    m.OnCounters(now, DataRate::Gbps(5).BytesIn(now), 1500);
  }
  LinkSample s = m.Sample(now);
  EXPECT_EQ(s.at, now);
  EXPECT_EQ(s.rtt_smoothed, Milliseconds(10));
  EXPECT_EQ(s.rtt_min, Milliseconds(10));
  EXPECT_EQ(s.rtt_p95, Milliseconds(10));
  EXPECT_EQ(s.loss, 0);
  EXPECT_EQ(s.throughput, DataRate::Gbps(5));
  EXPECT_DOUBLE_EQ(s.utilisation, 0.5);
  EXPECT_EQ(s.queue_bytes, 1500);
  EXPECT_EQ(m.peer_offset(), Seconds(1));

  // No more replies: the probes count as lost once past the grace, and the link's throughput
  // falls to nothing (liveness is LinkLiveness's verdict, not the monitor's).
  for (int missed = 1; missed <= 10; ++missed, ++seq, now += period) {
    m.OnProbeSent(seq, now);
    m.OnCounters(now, DataRate::Gbps(5).BytesIn(Milliseconds(100) * 49), 0);
  }
  s = m.Sample(now);
  EXPECT_GT(s.loss, 0);
  EXPECT_EQ(s.throughput, DataRate());
  EXPECT_EQ(m.loss().consecutive_missed(), 10);
}

TEST(LinkMonitorTest, BadRepliesAreRejected) {
  LinkMonitor m(LinkMonitorConfig{});
  m.OnProbeSent(1, Milliseconds(100));
  m.OnProbeSent(2, Milliseconds(200));
  // The echoed t1 does not match: ignored entirely.
  bool counted = true;
  absl::Status s = m.OnProbeReply(1, Milliseconds(101), Milliseconds(105), Milliseconds(105),
                                  Milliseconds(110), &counted);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(counted);
  EXPECT_EQ(m.loss().consecutive_missed(), 2);
  // Valid seq, unusable timestamps: counts for liveness, not for RTT.
  s = m.OnProbeReply(1, Milliseconds(100), Milliseconds(105), Milliseconds(105), Milliseconds(90),
                     &counted);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(counted);
  EXPECT_EQ(m.loss().consecutive_missed(), 0);
  EXPECT_EQ(m.rtt().count(), 0);
  // Duplicate and unknown replies.
  s = m.OnProbeReply(1, Milliseconds(100), Milliseconds(105), Milliseconds(105), Milliseconds(110),
                     &counted);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(counted);
  s = m.OnProbeReply(7, Milliseconds(100), Milliseconds(105), Milliseconds(105), Milliseconds(110));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.loss().duplicate_replies(), 1);
  EXPECT_EQ(m.loss().unknown_replies(), 1);
  // Before any RTT sample or counters.
  const LinkSample sample = m.Sample(Milliseconds(300));
  EXPECT_EQ(sample.rtt_smoothed, Duration::zero());
  EXPECT_EQ(sample.throughput, DataRate());
  EXPECT_EQ(sample.utilisation, 0);
}

}  // namespace
}  // namespace dar
