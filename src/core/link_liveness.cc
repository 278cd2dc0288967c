#include "core/link_liveness.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace dar {

absl::Status LinkLivenessConfig::Validate() const {
  if (missed_probes < 1) {
    return absl::InvalidArgumentError(fmt::format("missed_probes {} must be >= 1", missed_probes));
  }
  if (recover_replies < 1) {
    return absl::InvalidArgumentError(
        fmt::format("recover_replies {} must be >= 1", recover_replies));
  }
  return absl::OkStatus();
}

LinkLiveness::LinkLiveness(const LinkLivenessConfig& config)
    : missed_probes_(config.missed_probes), recover_replies_(config.recover_replies) {
  assert(config.Validate().ok());
}

void LinkLiveness::GoDown() {
  up_ = false;
  down_after_ = last_sent_;
  last_replied_ = last_sent_;
  streak_ = 0;
}

bool LinkLiveness::OnProbeSent(uint64_t seq) {
  bool changed = false;
  if (up_ && unanswered_ >= missed_probes_) {
    GoDown();
    changed = true;
  }
  last_sent_ = seq;
  ++unanswered_;
  return changed;
}

bool LinkLiveness::OnReply(uint64_t seq) {
  unanswered_ = 0;
  if (up_ || seq <= down_after_) return false;
  if (seq == last_replied_ + 1) {
    ++streak_;
  } else if (seq > last_replied_) {
    streak_ = 1;
  }
  last_replied_ = std::max(last_replied_, seq);
  if (streak_ < recover_replies_) return false;
  up_ = true;
  return true;
}

bool LinkLiveness::OnSendError() {
  if (!up_) {
    // Replies to what was sent before the error do not prove the link works again.
    down_after_ = last_sent_;
    last_replied_ = std::max(last_replied_, last_sent_);
    streak_ = 0;
    return false;
  }
  GoDown();
  return true;
}

bool CableUp(const CableEnd& a, const CableEnd& b, bool was_up) {
  const auto says = [](const CableEnd& e, bool state) {
    return e.exists && e.fresh && e.says_up == state;
  };
  if (says(a, true) || says(b, true)) return true;
  if (says(a, false) || says(b, false)) return false;
  // Neither end has a fresh word: up while no end has ever been heard from; as it was while
  // a heard end's node is behind.
  const auto heard = [](const CableEnd& e) { return e.exists && e.heard; };
  if (!heard(a) && !heard(b)) return true;
  if ((heard(a) && a.lagging) || (heard(b) && b.lagging)) return was_up;
  return false;
}

std::string DescribeCableEnd(const CableEnd& end) {
  if (!end.exists) return "(no reverse)";
  if (!end.heard) return "not heard from yet";
  if (!end.fresh) {
    return fmt::format("silent for {:.0f} ms{}", static_cast<double>(end.age.count()) * 1e-6,
                       end.lagging ? " (its node behind)" : "");
  }
  return end.says_up ? "up" : "says down";
}

}  // namespace dar
