#include "core/fallback_chain.h"

#include <fmt/format.h>

#include <cassert>

namespace dar {

FallbackChain::FallbackChain(Duration stale_after) : stale_after_(stale_after) {
  assert(stale_after > Duration::zero());
}

absl::Status FallbackChain::CheckVersion(uint64_t version) const {
  if (version_.has_value() && version <= *version_) {
    return absl::FailedPreconditionError(
        fmt::format("version {} is not newer than the installed version {}", version, *version_));
  }
  return absl::OkStatus();
}

void FallbackChain::Accept(uint64_t version, Time now) {
  assert(CheckVersion(version).ok());
  version_ = version;
  accepted_at_ = now;
  last_offer_invalid_ = false;
}

void FallbackChain::RefuseInvalid() { last_offer_invalid_ = true; }

TableSource FallbackChain::Observe(Time now) {
  const TableSource next = SourceAt(now);
  if (next == source_) return next;
  if (next == TableSource::kStatic) {
    ++counters_.fallbacks_to_static;
  } else if (source_ == TableSource::kStatic) {
    // Leaving static after a fallback is a recovery; leaving it for the first table is not.
    if (counters_.fallbacks_to_static > counters_.recoveries_from_static) {
      ++counters_.recoveries_from_static;
    }
  } else if (next == TableSource::kLastGood) {
    ++counters_.fallbacks_to_last_good;
  }
  source_ = next;
  return next;
}

TableSource FallbackChain::SourceAt(Time now) const {
  if (!version_.has_value() || now - accepted_at_ > stale_after_) return TableSource::kStatic;
  return last_offer_invalid_ ? TableSource::kLastGood : TableSource::kCurrent;
}

void FallbackChain::set_stale_after(Duration stale_after) {
  assert(stale_after > Duration::zero());
  stale_after_ = stale_after;
}

}  // namespace dar
