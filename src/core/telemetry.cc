#include "core/telemetry.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "fmt/format.h"

namespace dar {
namespace {

bool FitsInt64(__int128 v) {
  return v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max();
}

}  // namespace

absl::StatusOr<TwoWayDelay> ComputeTwoWayDelay(Time t1, Time t2, Time t3, Time t4) {
  if (t4 < t1) {
    return absl::InvalidArgumentError(
        fmt::format("probe received ({} ns) before it was sent ({} ns)", t4.count(), t1.count()));
  }
  if (t3 < t2) {
    return absl::InvalidArgumentError(
        fmt::format("peer sent the reply ({} ns) before it received the probe ({} ns)", t3.count(),
                    t2.count()));
  }
  const __int128 a = t1.count(), b = t2.count(), c = t3.count(), d = t4.count();
  const __int128 rtt = (d - a) - (c - b);
  const __int128 offset = ((b - a) + (c - d)) / 2;
  if (!FitsInt64(rtt) || !FitsInt64(offset)) {
    return absl::InvalidArgumentError("probe timestamps out of range");
  }
  if (rtt < 0) {
    return absl::InvalidArgumentError(
        fmt::format("peer hold time ({} ns) exceeds the round trip ({} ns)",
                    static_cast<int64_t>(c - b), static_cast<int64_t>(d - a)));
  }
  return TwoWayDelay{.rtt = Duration(static_cast<int64_t>(rtt)),
                     .offset = Duration(static_cast<int64_t>(offset))};
}

// LossWindow ---------------------------------------------------------------------------------

LossWindow::LossWindow(int window, int grace)
    : window_(window), grace_(grace), ring_(static_cast<size_t>(window + grace)) {
  assert(window >= 1 && grace >= 0);
}

size_t LossWindow::NewestIndex(int64_t i) const {
  const int64_t size = static_cast<int64_t>(ring_.size());
  assert(i >= 0 && i < std::min(sent_, size));
  return static_cast<size_t>((sent_ - 1 - i) % size);
}

std::optional<size_t> LossWindow::IndexOf(uint64_t seq) const {
  const int64_t size = static_cast<int64_t>(ring_.size());
  // Slots in the window hold strictly increasing seqs from the oldest (index held - 1) to the
  // newest (index 0): binary search on the age.
  int64_t lo = 0, hi = std::min(sent_, size) - 1;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const size_t index = NewestIndex(mid);
    if (ring_[index].seq == seq) return index;
    if (ring_[index].seq > seq) {
      lo = mid + 1;  // older slots have smaller seqs
    } else {
      hi = mid - 1;
    }
  }
  return std::nullopt;
}

void LossWindow::OnSent(uint64_t seq, Time sent_at) {
  if (sent_ > 0 && seq <= ring_[NewestIndex(0)].seq) {
    ++ignored_sends_;
    return;
  }
  ring_[static_cast<size_t>(sent_ % static_cast<int64_t>(ring_.size()))] =
      Slot{.seq = seq, .sent_at = sent_at, .replied = false};
  ++sent_;
  ++consecutive_missed_;
}

bool LossWindow::OnReply(uint64_t seq) {
  const std::optional<size_t> index = IndexOf(seq);
  if (!index.has_value()) {
    ++unknown_replies_;
    return false;
  }
  Slot& slot = ring_[*index];
  if (slot.replied) {
    ++duplicate_replies_;
    return false;
  }
  slot.replied = true;
  consecutive_missed_ = 0;
  return true;
}

std::optional<Time> LossWindow::SentAt(uint64_t seq) const {
  const std::optional<size_t> index = IndexOf(seq);
  if (!index.has_value()) return std::nullopt;
  return ring_[*index].sent_at;
}

int LossWindow::judged() const {
  return static_cast<int>(std::clamp<int64_t>(sent_ - grace_, 0, window_));
}

double LossWindow::loss_rate() const {
  const int n = judged();
  if (n == 0) return 0;
  int lost = 0;
  for (int i = grace_; i < grace_ + n; ++i) {
    if (!ring_[NewestIndex(i)].replied) ++lost;
  }
  return static_cast<double>(lost) / n;
}

// RttEstimator -------------------------------------------------------------------------------

RttEstimator::RttEstimator(int window, double quantile) : quantile_(quantile) {
  assert(window >= 1 && quantile > 0 && quantile <= 1);
  ring_.reserve(static_cast<size_t>(window));
  sorted_.reserve(static_cast<size_t>(window));
}

void RttEstimator::AddSample(Duration rtt) {
  if (rtt < Duration::zero()) return;
  const size_t window = ring_.capacity();
  if (ring_.size() < window) {
    ring_.push_back(rtt);
  } else {
    Duration& slot = ring_[static_cast<size_t>(count_ % static_cast<int64_t>(window))];
    sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), slot));
    slot = rtt;
  }
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), rtt), rtt);
  smoothed_ = count_ == 0 ? rtt : smoothed_ + (rtt - smoothed_) / 8;
  ++count_;
}

Duration RttEstimator::min() const { return sorted_.empty() ? Duration::zero() : sorted_[0]; }

Duration RttEstimator::percentile() const {
  if (sorted_.empty()) return Duration::zero();
  const int64_t n = static_cast<int64_t>(sorted_.size());
  // The small epsilon keeps e.g. 0.5 * 4 at rank 2 despite rounding in quantile_ * n.
  const int64_t rank = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(quantile_ * static_cast<double>(n) - 1e-9)), 1, n);
  return sorted_[static_cast<size_t>(rank - 1)];
}

// RateMeter ----------------------------------------------------------------------------------

double Utilisation(DataRate rate, DataRate capacity) {
  if (capacity.bps() <= 0) return 0;
  return static_cast<double>(rate.bps()) / static_cast<double>(capacity.bps());
}

RateMeter::RateMeter(Duration time_constant)
    : time_constant_ns_(static_cast<double>(time_constant.count())) {
  assert(time_constant > Duration::zero());
}

void RateMeter::OnSample(Time now, int64_t cumulative_bytes) {
  if (prev_time_.has_value() && now == *prev_time_) return;
  const bool restart =
      prev_time_.has_value() && (now < *prev_time_ || cumulative_bytes < prev_bytes_);
  if (!prev_time_.has_value() || restart) {
    if (restart) ++restarts_;
    prev_time_ = now;
    prev_bytes_ = cumulative_bytes;
    last_rate_.reset();
    return;
  }
  const int64_t dt = (now - *prev_time_).count();
  const __int128 bits = static_cast<__int128>(cumulative_bytes - prev_bytes_) * 8;
  const __int128 bps = bits * 1000000000 / dt;
  last_rate_ = DataRate::BitsPerSecond(
      static_cast<int64_t>(std::min<__int128>(bps, std::numeric_limits<int64_t>::max())));
  const double rate = static_cast<double>(last_rate_->bps());
  if (!smoothed_bps_.has_value()) {
    smoothed_bps_ = rate;
  } else {
    const double w = -std::expm1(-static_cast<double>(dt) / time_constant_ns_);
    *smoothed_bps_ += w * (rate - *smoothed_bps_);
  }
  prev_time_ = now;
  prev_bytes_ = cumulative_bytes;
}

std::optional<DataRate> RateMeter::smoothed_rate() const {
  if (!smoothed_bps_.has_value()) return std::nullopt;
  return DataRate::BitsPerSecond(static_cast<int64_t>(std::llround(*smoothed_bps_)));
}

// LinkMonitor --------------------------------------------------------------------------------

absl::Status LinkMonitorConfig::Validate() const {
  if (sample_period <= Duration::zero()) {
    return absl::InvalidArgumentError("sample_period must be positive");
  }
  if (loss_window < 1) return absl::InvalidArgumentError("loss_window must be at least 1");
  if (loss_grace < 0) return absl::InvalidArgumentError("loss_grace must not be negative");
  if (rtt_window < 1) return absl::InvalidArgumentError("rtt_window must be at least 1");
  if (!(rtt_quantile > 0 && rtt_quantile <= 1)) {
    return absl::InvalidArgumentError("rtt_quantile must be in (0, 1]");
  }
  if (rate_time_constant <= Duration::zero()) {
    return absl::InvalidArgumentError("rate_time_constant must be positive");
  }
  if (capacity.bps() < 0) return absl::InvalidArgumentError("capacity must not be negative");
  return absl::OkStatus();
}

LinkMonitor::LinkMonitor(const LinkMonitorConfig& config)
    : config_(config),
      loss_(config.loss_window, config.loss_grace),
      rtt_(config.rtt_window, config.rtt_quantile),
      rate_(config.rate_time_constant) {
  assert(config.Validate().ok());
}

void LinkMonitor::OnProbeSent(uint64_t seq, Time t1) { loss_.OnSent(seq, t1); }

absl::Status LinkMonitor::OnProbeReply(uint64_t seq, Time t1, Time t2, Time t3, Time t4,
                                       bool* counted) {
  if (counted != nullptr) *counted = false;
  const std::optional<Time> sent_at = loss_.SentAt(seq);
  if (sent_at.has_value() && *sent_at != t1) {
    return absl::InvalidArgumentError(fmt::format(
        "reply to probe {} echoes t1 = {} ns, sent at {} ns", seq, t1.count(), sent_at->count()));
  }
  if (!loss_.OnReply(seq)) {
    return absl::NotFoundError(
        fmt::format("reply to probe {} is a duplicate or not in the loss window", seq));
  }
  if (counted != nullptr) *counted = true;
  absl::StatusOr<TwoWayDelay> delay = ComputeTwoWayDelay(t1, t2, t3, t4);
  if (!delay.ok()) return delay.status();
  rtt_.AddSample(delay->rtt);
  peer_offset_ = delay->offset;
  return absl::OkStatus();
}

void LinkMonitor::OnCounters(Time now, int64_t tx_bytes, int64_t queue_bytes) {
  rate_.OnSample(now, tx_bytes);
  queue_bytes_ = queue_bytes;
}

LinkSample LinkMonitor::Sample(Time now) const {
  const DataRate throughput = rate_.last_rate().value_or(DataRate());
  return LinkSample{
      .at = now,
      .rtt_smoothed = rtt_.smoothed(),
      .rtt_min = rtt_.min(),
      .rtt_p95 = rtt_.percentile(),
      .loss = loss_.loss_rate(),
      .throughput = throughput,
      .utilisation = Utilisation(throughput, config_.capacity),
      .queue_bytes = queue_bytes_,
  };
}

}  // namespace dar
