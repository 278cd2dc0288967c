// RouteComputer (core/route_computer.h): what it knows of each link. The samples it is fed
// (base RTT over a window, delivery and the capacity it shows, slowness), the operator's and
// the controller's marks (known down, drained), the forecasts, and each link's state for a
// cycle from all of them.
#include <algorithm>
#include <cmath>

#include "core/route_computer.h"

namespace dar {

void RouteComputer::WindowedMin::Update(int64_t t, Duration v, int64_t window) {
  const Entry e{t, v};
  // A new minimum, the first sample, or all three choices out of the window: start over.
  if (s_[0].v == Duration(0) || v <= s_[0].v || t - s_[2].t > window) {
    s_.fill(e);
    return;
  }
  if (v <= s_[1].v) {
    s_[2] = s_[1] = e;
  } else if (v <= s_[2].v) {
    s_[2] = e;
  }
  const int64_t dt = t - s_[0].t;
  if (dt > window) {
    // The best choice left the window: the second takes over (and the third, if the second
    // is out too; the third is in the window, checked above).
    s_[0] = s_[1];
    s_[1] = s_[2];
    s_[2] = e;
    if (t - s_[0].t > window) {
      s_[0] = s_[1];
      s_[1] = s_[2];
      s_[2] = e;
    }
  } else if (s_[1].t == s_[0].t && dt > window / 4) {
    // A quarter of the window without a better sample: take a second choice from now on.
    s_[2] = s_[1] = e;
  } else if (s_[2].t == s_[1].t && dt > window / 2) {
    s_[2] = e;
  }
}

void RouteComputer::Observe(LinkId link, const LinkSample& sample) {
  const LinkSample previous = last_[link];
  last_[link] = sample;
  ++samples_[link];
  HoltForecaster& f = forecasts_[link];
  if (config_.measured_links && f.observations() > 0 &&
      std::abs(sample.utilisation - f.Predict(1).mean) > config_.forecast_restart_step) {
    f = NewForecaster();
  }
  f.Observe(sample.utilisation);
  Duration rtt = sample.rtt_smoothed;
  if (sample.rtt_min > Duration(0) && (rtt <= Duration(0) || sample.rtt_min < rtt)) {
    rtt = sample.rtt_min;
  }
  if (rtt > Duration(0)) {
    base_rtt_[link].Update(rtt_samples_[link]++, rtt, config_.base_rtt_periods);
  }
  if (config_.measured_links) ObserveDelivery(link, previous);
}

void RouteComputer::ObserveDelivery(LinkId l, const LinkSample& previous) {
  const LinkSample& last = last_[l];
  Delivery& d = delivery_[l];
  const DataRate configured = capacity_[l];
  if (configured.is_zero()) return;
  const Duration threshold = config_.queue_limited_delay;
  const bool queued = MeasuredQueueing(l, configured) >= threshold;
  d.clear = queued ? 0 : d.clear + 1;
  // The queue is this direction's and stands now: reported by the agent, or seen in the
  // RTT while this direction carries traffic, more than the reverse (a round trip crosses
  // both; the lighter direction, e.g. a transfer's ACKs, is not the one that queues) and the
  // smoothed RTT is not falling (its memory of a queue that drained when the traffic left).
  // A queue seen in the RTT alone must also be one this direction's traffic could hold: at
  // its throughput, the extra delay is at least two full-size packets (Little's law). A probe
  // answered late by a busy CPU inflates the RTT too, and on a link carrying a trickle that
  // is no queue of its own (it would make the trickle the link's capacity).
  const LinkId r = topology_.link(l).reverse;
  const DataRate reverse = r == kNoLink ? DataRate() : last_[r].throughput;
  constexpr int64_t kLeastInferredQueueBytes = 3000;
  const bool standing =
      queued &&
      (configured.TransmitTime(last.queue_bytes) >= threshold ||
       (last.throughput.bps() > 0 && last.throughput >= reverse &&
        last.rtt_smoothed >= previous.rtt_smoothed &&
        last.throughput.BytesIn(MeasuredQueueing(l, configured)) >= kLeastInferredQueueBytes));
  d.queue_limited = standing ? d.queue_limited + 1 : 0;
  const DataRate tput = std::min(last.throughput, configured);
  const int64_t now = samples_[l];
  if (d.queue_limited > 0) {
    // Queue-limited: the link delivers what it carries. The largest such rate of the last
    // queue_limited_window samples (a sender's pause lowers one interval's rate), as BBR
    // keeps a windowed max of the delivery rate. A simple window: the best is replaced when
    // it expires, not by the next best; a new stretch starts afresh, from its first sample:
    // the samples that confirm a stretch count too, or traffic leaving a full link (its
    // smoothed RTT still rising for a sample) would leave its last trickle as the estimate.
    if (d.queue_limited == 1 || tput >= d.best || now - d.best_at > config_.queue_limited_window) {
      d.best = tput;
      d.best_at = now;
    }
    if (d.queue_limited >= config_.queue_limited_periods) {
      d.estimate = d.best;
      d.at = now;
    }
  } else if (d.clear >= 2 && tput > DeliveryCapacity(l)) {
    // More than we thought got through, and no queue built (twice: an overload shows within
    // a sample or two; the agent counts what it sends, not what the link delivers).
    d.estimate = d.best = tput;
    d.at = d.best_at = now;
  }
}

DataRate RouteComputer::DeliveryCapacity(LinkId l) const {
  const Delivery& d = delivery_[l];
  const DataRate configured = capacity_[l];
  if (!config_.measured_links || d.estimate.is_zero() || d.estimate >= configured) {
    return configured;
  }
  const double age = static_cast<double>(samples_[l] - d.at);
  const double gap = static_cast<double>(configured.bps() - d.estimate.bps()) *
                     std::exp(-age / config_.capacity_recovery_periods);
  return DataRate::BitsPerSecond(configured.bps() - static_cast<int64_t>(gap));
}

bool RouteComputer::Slow(LinkId l) const {
  return static_cast<double>(DeliveryCapacity(l).bps()) <
         config_.slow_fraction * static_cast<double>(capacity_[l].bps());
}

void RouteComputer::SetLinkParams(LinkId link, DataRate capacity, Duration propagation) {
  capacity_[link] = capacity;
  propagation_[link] = propagation;
}

void RouteComputer::SetKnownDown(LinkId link, bool down) { known_down_[link] = down; }

void RouteComputer::SetDrained(LinkId link, bool drained) { drained_[link] = drained; }

Forecast RouteComputer::ForecastOf(LinkId link) const {
  return forecasts_[link].Predict(config_.horizon_periods);
}

Duration RouteComputer::MeasuredQueueing(LinkId l, DataRate capacity) const {
  const LinkSample& last = last_[l];
  Duration queueing{0};
  if (!capacity.is_zero()) queueing = capacity.TransmitTime(last.queue_bytes);
  if (!config_.measured_links) return queueing;
  // What the round trip took beyond its base, less what the reverse direction's reported
  // queue explains, waited in this direction.
  const Duration base = base_rtt_[l].Get();
  if (base > Duration(0) && last.rtt_smoothed > base) {
    Duration reverse_queue{0};
    const LinkId r = topology_.link(l).reverse;
    if (r != kNoLink && !capacity_[r].is_zero()) {
      reverse_queue = capacity_[r].TransmitTime(last_[r].queue_bytes);
    }
    queueing = std::max(queueing, last.rtt_smoothed - base - reverse_queue);
  }
  return queueing;
}

LinkState RouteComputer::StateOf(LinkId l) const {
  LinkState s;
  s.capacity = DeliveryCapacity(l);
  s.propagation = propagation_[l];
  const LinkSample& last = last_[l];
  // Liveness is its owner's verdict (CableUp, core/link_liveness.h), not one sample's.
  s.up = !known_down_[l];
  s.loss = last.loss;
  const Forecaster& f = forecasts_[l];
  // Samples give utilisation against the configured capacity; a link found slower is that
  // much fuller.
  const double scale =
      s.capacity.is_zero() || capacity_[l].is_zero()
          ? 1.0
          : static_cast<double>(capacity_[l].bps()) / static_cast<double>(s.capacity.bps());
  const double present = last.utilisation * scale;
  const double predicted =
      (f.observations() > 0 ? f.Predict(config_.horizon_periods).mean : last.utilisation) * scale;
  // Plan for the load that is coming, but never for less than the load that is there.
  s.utilisation = std::max(present, predicted);
  s.queueing = MeasuredQueueing(l, s.capacity);
  if (!config_.measured_links) return s;
  const double queued = ToSeconds(s.queueing) / ToSeconds(config_.scales.reference_delay);
  s.measured_congestion = queued + std::clamp(s.loss, 0.0, 1.0) / config_.scales.reference_loss;
  // A standing queue means the link is full, whatever its configured capacity says (a shaper
  // below the agent). And measured, a link is at most full: overload shows as queueing and
  // loss, charged on their own, not as utilisation past max_utilisation.
  const double full = config_.scales.max_utilisation;
  const double floor = std::min(queued, 1.0) * full;
  s.present_utilisation = std::min(std::max(present, floor), full);
  s.utilisation = std::min(std::max(s.utilisation, floor), full);
  if (Slow(l)) {
    // Found slow, a link is full: it has no room for the load it was planned to carry, even
    // once that load has left it. Known, not a guess from utilisation: charged in full.
    s.present_utilisation = s.utilisation = full;
    s.measured_congestion = std::numeric_limits<double>::infinity();
  }
  return s;
}

void RouteComputer::LinkStates(std::vector<LinkState>& states, std::vector<char>& slow) const {
  const int links = topology_.num_links();
  states.resize(links);
  slow.resize(links);
  for (LinkId l = 0; l < links; ++l) {
    states[l] = StateOf(l);
    slow[l] = static_cast<char>(Slow(l));
  }
}

}  // namespace dar
