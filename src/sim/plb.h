// PLB, Protective Load Balancing (Qureshi et al., "PLB: Congestion Signals are Simple and
// Effective for Network Load Balancing", SIGCOMM 2022), as Linux implements it
// (net/ipv4/tcp_plb.c, sysctls net.ipv4.tcp_plb_*): a host repaths a connection, by drawing
// a new flow label for the switches' ECMP hash, once its own ECN marks have stayed high for
// several rounds. Model: docs/baselines.md.
//
// A round is one DCTCP observation window (about an RTT). A round is congested when the
// fraction of its delivered segments that carried CE is at least `congested_fraction`; after
// `rehash_rounds` congested rounds in a row the connection repaths; with nothing in flight,
// after `idle_rehash_rounds`. A retransmission timeout (which repaths by itself, as Linux
// rethinks the hash on an RTO) pauses PLB for a random time in [suspend_after_rto, 2x).
#ifndef DAR_SIM_PLB_H_
#define DAR_SIM_PLB_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/random.h"
#include "core/units.h"

namespace dar::sim {

struct PlbConfig {
  // Linux's defaults: tcp_plb_cong_thresh 128/256, tcp_plb_rehash_rounds 12,
  // tcp_plb_idle_rehash_rounds 3, tcp_plb_suspend_rto_sec 60.
  double congested_fraction = 0.5;
  int rehash_rounds = 12;
  int idle_rehash_rounds = 3;  // 0: never repath an idle connection early
  Duration suspend_after_rto = Seconds(60);
};

// Reads congested_fraction, rehash_rounds, idle_rehash_rounds, suspend_after_rto from `r`.
absl::StatusOr<PlbConfig> ReadPlbConfig(YamlReader& r);

// The PLB state of one connection. Thread-compatible.
class PlbState {
 public:
  // Ends a round in which `delivered` segments were acknowledged, `marked` of them with CE.
  // Returns whether the connection should repath now (then the count starts again).
  // `in_flight` is whether segments are still unacknowledged.
  bool OnRoundEnd(const PlbConfig& config, int64_t delivered, int64_t marked, bool in_flight,
                  Time now);
  // A retransmission timeout at `now`: PLB pauses for suspend_after_rto · (1 + u), a random
  // time in [suspend, 2 suspend) for u uniform in [0, 1).
  void OnTimeout(const PlbConfig& config, Time now, double u);

  int congested_rounds() const { return congested_rounds_; }

 private:
  int congested_rounds_ = 0;
  Time paused_until_{0};
};

}  // namespace dar::sim

#endif  // DAR_SIM_PLB_H_
