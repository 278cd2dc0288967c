#include "sim/plb.h"

#include "base/status_macros.h"

namespace dar::sim {

absl::StatusOr<PlbConfig> ReadPlbConfig(YamlReader& r) {
  PlbConfig c;
  ASSIGN_OR_RETURN(c.congested_fraction,
                   r.Optional<double>("congested_fraction", c.congested_fraction,
                                      Bounds{0.0, false, 1.0, true}));
  ASSIGN_OR_RETURN(c.rehash_rounds,
                   r.Optional<int>("rehash_rounds", c.rehash_rounds, Bounds::InRange(1, 1000)));
  ASSIGN_OR_RETURN(c.idle_rehash_rounds, r.Optional<int>("idle_rehash_rounds", c.idle_rehash_rounds,
                                                         Bounds::InRange(0, 1000)));
  ASSIGN_OR_RETURN(c.suspend_after_rto,
                   r.OptionalDuration("suspend_after_rto", c.suspend_after_rto));
  return c;
}

bool PlbState::OnRoundEnd(const PlbConfig& config, int64_t delivered, int64_t marked,
                          bool in_flight, Time now) {
  if (delivered <= 0) return false;
  if (static_cast<double>(marked) < config.congested_fraction * static_cast<double>(delivered)) {
    congested_rounds_ = 0;
  } else if (congested_rounds_ < config.rehash_rounds) {
    ++congested_rounds_;
  }
  const bool idle =
      config.idle_rehash_rounds > 0 && !in_flight && congested_rounds_ >= config.idle_rehash_rounds;
  const bool forced = congested_rounds_ >= config.rehash_rounds;
  if (!idle && !forced) return false;
  if (now < paused_until_) return false;
  congested_rounds_ = 0;
  return true;
}

void PlbState::OnTimeout(const PlbConfig& config, Time now, double u) {
  const double pause = static_cast<double>(config.suspend_after_rto.count());
  paused_until_ = now + Duration(static_cast<int64_t>(pause * (1 + u)));
  congested_rounds_ = 0;
}

}  // namespace dar::sim
