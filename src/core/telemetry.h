// Link telemetry estimators: what a node measures about each of its outgoing links.
//
// Pure computation shared by the simulator and the agent: the caller sends the probes, reads
// the counters and the clock, and feeds the results here. Nothing in this file reads a clock,
// allocates per sample or starts a thread. None of the classes is thread-safe; give each
// thread (or each link) its own instance.
#ifndef DAR_CORE_TELEMETRY_H_
#define DAR_CORE_TELEMETRY_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/units.h"

namespace dar {

// The result of one two-way probe.
struct TwoWayDelay {
  // Round-trip time on the network, without the time the peer held the probe.
  Duration rtt{0};
  // The peer's clock minus ours, assuming a symmetric path (NTP's estimate). Its error is at
  // most rtt / 2.
  Duration offset{0};
};

// RTT and clock offset from the four timestamps of one probe: `t1` sent by us, `t2` received
// by the peer, `t3` sent back by the peer, `t4` received by us (t1, t4 on our clock, t2, t3 on
// the peer's). rtt = (t4 - t1) - (t3 - t2); offset = ((t2 - t1) + (t3 - t4)) / 2, truncated
// toward zero to a whole nanosecond.
// Errors: InvalidArgument if t4 < t1, t3 < t2, the peer's hold time exceeds the round trip
// (rtt < 0) or a difference overflows; the timestamps come from the network.
absl::StatusOr<TwoWayDelay> ComputeTwoWayDelay(Time t1, Time t2, Time t3, Time t4);

// Packet loss over a sliding window of probe sequence numbers.
//
// The window holds the newest `window + grace` probes sent. The newest `grace` of them may
// still be in flight and are not judged; loss_rate() is the fraction of the `window` probes
// before them (fewer while fewer have been sent) that have no reply. A reply that arrives late
// for a probe still in the window counts; a reply for a probe that has left the window does
// not.
class LossWindow {
 public:
  // REQUIRES: window >= 1, grace >= 0.
  explicit LossWindow(int window = 100, int grace = 3);

  // Records probe `seq` as sent at `sent_at` (our clock; only kept for SentAt()).
  // REQUIRES: seq is greater than every seq passed before; a call that breaks this is ignored
  // and counted in ignored_sends().
  void OnSent(uint64_t seq, Time sent_at = Time{0});

  // Records a reply for probe `seq`; replies may arrive in any order. Returns true if it was
  // counted. A duplicate reply is ignored and counted in duplicate_replies(); a reply for a
  // seq never sent or no longer in the window is ignored and counted in unknown_replies().
  bool OnReply(uint64_t seq);

  // The send time given to OnSent for `seq`, if `seq` is in the window.
  std::optional<Time> SentAt(uint64_t seq) const;

  // Fraction of judged probes without a reply, in [0, 1]; 0 while none is judged (fewer than
  // grace + 1 probes sent). O(window).
  double loss_rate() const;
  // The number of probes loss_rate() judges: min(window, sent - grace), at least 0.
  int judged() const;

  // Probes sent since the last counted reply arrived (all probes sent if none has). On a
  // healthy link this stays at 0 or 1 whatever the RTT, because replies arrive as fast as
  // probes leave; after a failure it grows by one per probe. A late reply for an old probe
  // resets it too: the link carried it.
  int consecutive_missed() const { return consecutive_missed_; }

  int64_t sent() const { return sent_; }
  int64_t duplicate_replies() const { return duplicate_replies_; }
  int64_t unknown_replies() const { return unknown_replies_; }
  int64_t ignored_sends() const { return ignored_sends_; }

 private:
  struct Slot {
    uint64_t seq = 0;
    Time sent_at{0};
    bool replied = false;
  };
  // The index in ring_ of the slot holding `seq`, if it is in the window.
  std::optional<size_t> IndexOf(uint64_t seq) const;
  // The index in ring_ of the i-th newest probe (0 = newest). REQUIRES: i < min(sent_, size).
  size_t NewestIndex(int64_t i) const;

  int window_;
  int grace_;
  std::vector<Slot> ring_;  // ring_[k % size] holds the k-th probe sent (k from 0).
  int64_t sent_ = 0;
  int consecutive_missed_ = 0;
  int64_t duplicate_replies_ = 0;
  int64_t unknown_replies_ = 0;
  int64_t ignored_sends_ = 0;
};

// Round-trip time statistics: a smoothed value and the minimum and a high percentile of the
// most recent samples.
class RttEstimator {
 public:
  // Keeps the last `window` samples for min() and percentile(). `quantile` is the fraction
  // percentile() reports (0.95 = P95).
  // REQUIRES: window >= 1, 0 < quantile <= 1.
  explicit RttEstimator(int window = 64, double quantile = 0.95);

  // Adds one RTT sample. O(window) worst case (a shift in a sorted array), no allocation.
  // REQUIRES: rtt >= 0 (negative samples are ignored).
  void AddSample(Duration rtt);

  // EWMA with gain 1/8 as TCP's srtt (RFC 6298), in integer nanoseconds; the first sample
  // initialises it. Zero before the first sample.
  Duration smoothed() const { return smoothed_; }
  // The smallest of the last `window` samples; zero before the first sample. A windowed
  // minimum (not an all-time one) so that a longer underlay path is picked up.
  Duration min() const;
  // Nearest-rank percentile of the last `window` samples: the ceil(quantile * n)-th smallest
  // of the n samples kept (for 64 samples and P95, the 61st, i.e. the 4th largest). Zero
  // before the first sample.
  Duration percentile() const;
  // Samples added so far.
  int64_t count() const { return count_; }

 private:
  double quantile_;
  std::vector<Duration> ring_;    // last samples in arrival order, ring_[k % size]
  std::vector<Duration> sorted_;  // the same samples, ascending; capacity reserved up front
  Duration smoothed_{0};
  int64_t count_ = 0;
};

// `rate` / `capacity`; 0 when capacity is zero (unknown).
double Utilisation(DataRate rate, DataRate capacity);

// Data rate from samples of a cumulative byte counter (e.g. an interface's tx_bytes).
class RateMeter {
 public:
  // The EWMA weights an interval of length dt by 1 - exp(-dt / time_constant), so that
  // irregular sampling does not change its meaning. REQUIRES: time_constant > 0.
  explicit RateMeter(Duration time_constant = Seconds(1));

  // Adds a counter sample. The first sample, a sample whose counter is smaller than the
  // previous one (the counter was reset, e.g. a restart) and a sample earlier than the
  // previous one start over from this sample: no rate for that interval, the EWMA is kept. A
  // sample at the same time as the previous one is ignored (its bytes count in the next
  // interval).
  void OnSample(Time now, int64_t cumulative_bytes);

  // The rate over the last interval; nullopt until two usable samples, and after a restart
  // until the next one.
  std::optional<DataRate> last_rate() const { return last_rate_; }
  // The EWMA of the interval rates; nullopt before the first rate.
  std::optional<DataRate> smoothed_rate() const;
  // Counter resets and time going backwards seen so far.
  int64_t restarts() const { return restarts_; }

 private:
  double time_constant_ns_;
  std::optional<Time> prev_time_;
  int64_t prev_bytes_ = 0;
  std::optional<DataRate> last_rate_;
  std::optional<double> smoothed_bps_;
  int64_t restarts_ = 0;
};

// Configuration of a LinkMonitor. Plain values; Validate() checks them.
struct LinkMonitorConfig {
  // How often the owner sends a probe and calls Sample() (10 per second, ARCHITECTURE.md).
  // LinkMonitor does not schedule anything itself.
  Duration sample_period = Milliseconds(100);
  // Loss is judged over this many probes (10 s at the default period).
  int loss_window = 100;
  // The newest probes not yet judged as lost: 300 ms at the default period, more than any RTT
  // we expect inside a region.
  int loss_grace = 3;
  // RTT min and percentile are over this many samples (6.4 s at the default period).
  int rtt_window = 64;
  // The RTT percentile reported as rtt_p95.
  double rtt_quantile = 0.95;
  // Time constant of the throughput EWMA.
  Duration rate_time_constant = Seconds(1);
  // The link's capacity, for utilisation. Zero means unknown: utilisation is then 0.
  DataRate capacity;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// What a LinkMonitor knows about its link at one instant.
struct LinkSample {
  Time at{0};
  // RTT statistics (RttEstimator); zero until the first valid reply.
  Duration rtt_smoothed{0};
  Duration rtt_min{0};
  Duration rtt_p95{0};
  // LossWindow::loss_rate(), in [0, 1].
  double loss = 0;
  // Transmit rate over the last counter interval; zero until two counter samples.
  DataRate throughput;
  // throughput / capacity (0 if the capacity is unknown).
  double utilisation = 0;
  // The queue depth given with the last counters.
  int64_t queue_bytes = 0;
  // The prober's liveness verdict (core/link_liveness.h). LinkMonitor measures and does not
  // judge: it leaves this true, and its owner sets it from the link's LinkLiveness.
  bool up = true;
};

// Everything one node measures about one directed link it sends on: probes, RTT, loss,
// throughput and queue depth. One instance per link at its sending node.
class LinkMonitor {
 public:
  // REQUIRES: config.Validate().ok().
  explicit LinkMonitor(const LinkMonitorConfig& config);

  // The link's capacity changed (a port speed change): utilisation is measured against it.
  void set_capacity(DataRate capacity) { config_.capacity = capacity; }
  // A new probe interval (the controller may change it at run time). REQUIRES: period > 0.
  void set_sample_period(Duration period) { config_.sample_period = period; }

  // Probe `seq` left at `t1` (our clock). REQUIRES: seqs increase from call to call.
  void OnProbeSent(uint64_t seq, Time t1);

  // The reply to probe `seq` arrived at `t4`, carrying `t1` echoed and the peer's `t2`, `t3`.
  // A reply for a probe in the loss window counts for loss and liveness even if its
  // timestamps are unusable; its RTT is used only if they are valid.
  // Errors: InvalidArgument if the echoed t1 differs from the one given to OnProbeSent (the
  // reply is then ignored entirely) or ComputeTwoWayDelay rejects the timestamps; NotFound for
  // a duplicate reply or one for a probe not in the window (ignored, counted by loss()).
  // `counted`, if given, is set to whether the reply counted for loss (and so for the link's
  // LinkLiveness): OK, or refused only for its timestamps.
  absl::Status OnProbeReply(uint64_t seq, Time t1, Time t2, Time t3, Time t4,
                            bool* counted = nullptr);

  // Interface counters read at `now`: cumulative bytes sent and the current queue depth.
  void OnCounters(Time now, int64_t tx_bytes, int64_t queue_bytes);

  // The link's state at `now`.
  LinkSample Sample(Time now) const;

  const LossWindow& loss() const { return loss_; }
  const RttEstimator& rtt() const { return rtt_; }
  const RateMeter& rate() const { return rate_; }
  // The clock offset of the peer from the last valid reply; zero before it.
  Duration peer_offset() const { return peer_offset_; }

 private:
  LinkMonitorConfig config_;
  LossWindow loss_;
  RttEstimator rtt_;
  RateMeter rate_;
  int64_t queue_bytes_ = 0;
  Duration peer_offset_{0};
};

}  // namespace dar

#endif  // DAR_CORE_TELEMETRY_H_
