#include "wire/link_sample_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace dar::wire {
namespace {

constexpr double kMaxRttMs = 1e6;
constexpr int64_t kMaxBaseRttNs = int64_t{1000} * 1000 * 1000 * 1000;  // 1000 s

absl::Status OutOfRange(std::string_view field, int index, uint32_t node, uint32_t neighbour,
                        std::string_view bounds, std::string_view got) {
  return absl::InvalidArgumentError(
      fmt::format("samples[{}].{} from node {} (link to node {}): must be in {}, got {}", index,
                  field, node, neighbour, bounds, got));
}

absl::Status CheckRange(double v, double lo, double hi, std::string_view field, int index,
                        uint32_t node, uint32_t neighbour) {
  if (std::isfinite(v) && v >= lo && v <= hi) return absl::OkStatus();
  return OutOfRange(field, index, node, neighbour, fmt::format("[{}, {}]", lo, hi),
                    fmt::format("{}", v));
}

}  // namespace

void ToWire(const LinkSample& sample, v1::LinkSample* out) {
  out->set_up(sample.up);
  out->set_rtt_ms(ToMillis(sample.rtt_smoothed));
  out->set_rtt_p95_ms(ToMillis(sample.rtt_p95));
  out->set_rtt_min_ns(sample.rtt_min.count());
  out->set_loss(sample.loss);
  out->set_tx_bps(static_cast<double>(sample.throughput.bps()));
  out->set_utilisation(sample.utilisation);
  out->set_queue_bytes(sample.queue_bytes);
}

absl::Status CheckWireSample(const v1::LinkSample& s, int index, uint32_t node) {
  const uint32_t nb = s.neighbor_id();
  if (absl::Status st = CheckRange(s.rtt_ms(), 0, kMaxRttMs, "rtt_ms", index, node, nb); !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckRange(s.rtt_p95_ms(), 0, kMaxRttMs, "rtt_p95_ms", index, node, nb);
      !st.ok()) {
    return st;
  }
  if (s.rtt_min_ns() < 0 || s.rtt_min_ns() > kMaxBaseRttNs) {
    return OutOfRange("rtt_min_ns", index, node, nb, fmt::format("[0, {}]", kMaxBaseRttNs),
                      fmt::format("{}", s.rtt_min_ns()));
  }
  if (absl::Status st = CheckRange(s.loss(), 0, 1, "loss", index, node, nb); !st.ok()) return st;
  if (absl::Status st = CheckRange(s.tx_bps(), 0, 1e15, "tx_bps", index, node, nb); !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckRange(s.utilisation(), 0, 100, "utilisation", index, node, nb);
      !st.ok()) {
    return st;
  }
  if (s.queue_bytes() < 0) {
    return absl::InvalidArgumentError(
        fmt::format("samples[{}].queue_bytes from node {} (link to node {}): must be >= 0, got {}",
                    index, node, nb, s.queue_bytes()));
  }
  return absl::OkStatus();
}

LinkSample FromWire(const v1::LinkSample& s, DataRate capacity, Time received) {
  LinkSample x;
  x.at = received;
  x.rtt_smoothed = Duration(std::llround(s.rtt_ms() * 1e6));
  x.rtt_p95 = Duration(std::llround(s.rtt_p95_ms() * 1e6));
  x.rtt_min = Duration(s.rtt_min_ns());
  x.loss = s.loss();
  x.throughput = DataRate::BitsPerSecond(std::llround(s.tx_bps()));
  double u = s.utilisation();
  if (u == 0 && s.tx_bps() > 0 && !capacity.is_zero()) {
    u = s.tx_bps() / static_cast<double>(capacity.bps());
  }
  x.utilisation = std::clamp(u, 0.0, 1.0);
  x.queue_bytes = s.queue_bytes();
  x.up = s.up();
  return x;
}

}  // namespace dar::wire
