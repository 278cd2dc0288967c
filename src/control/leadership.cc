#include "control/leadership.h"

#include <algorithm>
#include <charconv>

#include "fmt/format.h"

namespace dar::control {
namespace {

using std::chrono::steady_clock;

steady_clock::duration Steady(Duration d) {
  return std::chrono::duration_cast<steady_clock::duration>(std::chrono::nanoseconds(d.count()));
}
// A keep-alive every quarter of the TTL; a leader steps down a quarter of the TTL before etcd
// could expire its lease (counted from the last answered keep-alive's send time, which etcd
// received later).
Duration KeepAliveEvery(Duration ttl) { return ttl / 4; }
Duration Margin(Duration ttl) { return ttl / 4; }
// How long one campaign call waits before it is made again.
constexpr Duration kCampaignWait = Seconds(30);
constexpr Duration kRetry = Milliseconds(250);
constexpr auto kLeaderCacheFor = std::chrono::milliseconds(500);

}  // namespace

class Leadership::EtcdStateStore final : public StateStore {
 public:
  explicit EtcdStateStore(Leadership& owner) : owner_(owner) {}
  absl::StatusOr<std::optional<std::string>> Read(const std::string& name) override {
    absl::StatusOr<std::optional<EtcdClient::Value>> v = owner_.etcd_->Get(Key(name));
    if (!v.ok()) return Named(name, v.status());
    if (!v->has_value()) return std::nullopt;
    return std::optional<std::string>((*v)->value);
  }
  absl::Status Write(const std::string& name, std::string_view text) override {
    if (text.size() > kMaxDocumentBytes) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {} bytes is more than {}", Where(name), text.size(), kMaxDocumentBytes));
    }
    EtcdLeaderKey key;
    bool may_write = false;
    {
      MutexLock lock(&owner_.mu_);
      key = owner_.key_;
      // The leader, or the replica etcd just elected getting ready (it may make the first key
      // ring); etcd checks the key in any case.
      may_write = (owner_.leading_ || owner_.preparing_) &&
                  std::chrono::steady_clock::now() < owner_.valid_until_;
    }
    if (!may_write) {
      return absl::FailedPreconditionError(
          fmt::format("{}: only the leading replica writes it", Where(name)));
    }
    absl::StatusOr<bool> put = owner_.etcd_->PutIf(key, Key(name), std::string(text));
    if (!put.ok()) return Named(name, put.status());
    if (!*put) {
      return absl::FailedPreconditionError(
          fmt::format("{}: refused by etcd: this replica no longer leads", Where(name)));
    }
    return absl::OkStatus();
  }
  std::string Where(const std::string& name) const override {
    return fmt::format("etcd {} {}", owner_.etcd_->endpoint(), Key(name));
  }

 private:
  std::string Key(const std::string& name) const {
    return owner_.options_.prefix + "state/" + name;
  }
  absl::Status Named(const std::string& name, const absl::Status& s) const {
    return absl::Status(s.code(), fmt::format("{}: {}", Where(name), std::string(s.message())));
  }
  Leadership& owner_;
};

Leadership::Leadership(LeadershipOptions options, std::unique_ptr<EtcdClient> etcd, JsonLog& log,
                       Callbacks callbacks)
    : options_(std::move(options)),
      etcd_(std::move(etcd)),
      log_(log),
      callbacks_(std::move(callbacks)),
      store_(std::make_shared<EtcdStateStore>(*this)) {}

Leadership::~Leadership() { Stop(); }

void Leadership::Start() {
  keeper_ = std::thread([this] { KeepLease(); });
  campaigner_ = std::thread([this] { Campaign(); });
}

void Leadership::Stop() {
  EtcdLeaderKey key;
  int64_t lease = 0;
  bool was_leading = false;
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    was_leading = leading_;
    leading_ = false;
    key = key_;
    lease = lease_;
    lease_ = 0;
  }
  cv_.NotifyAll();
  etcd_->Cancel();
  if (keeper_.joinable()) keeper_.join();
  if (campaigner_.joinable()) campaigner_.join();
  if (was_leading) {
    if (callbacks_.lost) callbacks_.lost("stopping");
    (void)etcd_->Resign(key);  // another replica leads at once
  }
  if (lease != 0) (void)etcd_->RevokeLease(lease);
}

bool Leadership::Leading() const {
  MutexLock lock(&mu_);
  return leading_ && steady_clock::now() < valid_until_;
}

uint64_t Leadership::term() const {
  MutexLock lock(&mu_);
  return term_;
}

std::string Leadership::LeaderAddress() {
  {
    MutexLock lock(&mu_);
    if (leading_ && steady_clock::now() < valid_until_) return options_.advertise;
    if (steady_clock::now() - leader_asked_ < kLeaderCacheFor) return leader_address_;
    leader_asked_ = steady_clock::now();
  }
  absl::StatusOr<std::optional<std::string>> leader = etcd_->Leader(options_.prefix + "leader");
  MutexLock lock(&mu_);
  leader_address_ = leader.ok() && leader->has_value() ? **leader : "";
  return leader_address_;
}

bool Leadership::SleepUntil(SteadyTime until) {
  MutexLock lock(&mu_);
  cv_.WaitUntil(&mu_, until, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; });
  return !stop_;
}

void Leadership::Lose(const std::string& why) {
  bool was_leading = false;
  int64_t lease = 0;
  {
    MutexLock lock(&mu_);
    was_leading = leading_;
    leading_ = false;
    lease = lease_;
    lease_ = 0;
  }
  cv_.NotifyAll();
  etcd_->Cancel();
  if (was_leading) {
    log_.Warn("no longer the leading replica", {{"why", why}});
    if (callbacks_.lost) callbacks_.lost(why);
  }
  // If etcd still holds the lease (the keep-alives were only late), its key would lead in
  // etcd's eyes until it expires: revoked, another replica leads at once.
  if (lease != 0) (void)etcd_->RevokeLease(lease);
}

void Leadership::KeepLease() {
  std::string last_error;
  for (;;) {
    int64_t lease = 0;
    Duration ttl{0};
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      lease = lease_;
      ttl = ttl_;
    }
    const SteadyTime sent = steady_clock::now();
    if (lease == 0) {
      absl::StatusOr<std::pair<int64_t, Duration>> granted = etcd_->GrantLease(options_.lease_ttl);
      if (!granted.ok()) {
        const std::string error(granted.status().message());
        if (error != last_error) log_.Warn("etcd refuses a lease", {{"error", error}});
        last_error = error;
        if (!SleepUntil(sent + Steady(kRetry))) return;
        continue;
      }
      last_error.clear();
      bool stopping = false;
      {
        MutexLock lock(&mu_);
        stopping = stop_;
        if (!stopping) {
          lease_ = granted->first;
          ttl_ = granted->second;
          valid_until_ = sent + Steady(ttl_ - Margin(ttl_));
        }
      }
      if (stopping) {  // Stop ran meanwhile and revoked what it saw: this one too
        (void)etcd_->RevokeLease(granted->first);
        return;
      }
      cv_.NotifyAll();
      if (!SleepUntil(sent + Steady(KeepAliveEvery(granted->second)))) return;
      continue;
    }
    absl::StatusOr<Duration> left = etcd_->KeepAlive(lease);
    if (left.ok()) {
      MutexLock lock(&mu_);
      if (lease_ == lease) valid_until_ = sent + Steady(*left - Margin(*left));
    } else if (absl::IsNotFound(left.status())) {
      Lose(std::string(left.status().message()));
      continue;
    }
    bool expired = false;
    {
      MutexLock lock(&mu_);
      expired = lease_ == lease && steady_clock::now() >= valid_until_;
    }
    if (expired) {
      Lose(fmt::format(
          "the lease was not renewed in time: {}",
          left.ok() ? std::string("keep-alives came late") : std::string(left.status().message())));
      continue;
    }
    if (!SleepUntil(sent + Steady(KeepAliveEvery(ttl)))) return;
  }
}

absl::StatusOr<uint64_t> Leadership::NextTerm(const EtcdLeaderKey& key) {
  const std::string term_key = options_.prefix + "term";
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<std::optional<EtcdClient::Value>> current = etcd_->Get(term_key);
    if (!current.ok()) return current.status();
    uint64_t term = 0;
    if (current->has_value()) {
      const std::string& text = (*current)->value;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), term);
      if (ec != std::errc() || end != text.data() + text.size()) {
        return absl::DataLossError(
            fmt::format("etcd {} {}: \"{}\" is not a term", etcd_->endpoint(), term_key, text));
      }
    }
    absl::StatusOr<bool> put = etcd_->PutIf(key, term_key, std::to_string(term + 1),
                                            current->has_value() ? (*current)->mod_revision : 0);
    if (!put.ok()) return put.status();
    if (*put) return term + 1;
  }
  return absl::AbortedError("the term could not be taken: no longer the leader");
}

void Leadership::Campaign() {
  for (;;) {
    int64_t lease = 0;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (lease_ != 0 && !leading_);
      });
      if (stop_) return;
      lease = lease_;
    }
    const SteadyTime started = steady_clock::now();
    absl::StatusOr<EtcdLeaderKey> key =
        etcd_->Campaign(options_.prefix + "leader", lease, options_.advertise, kCampaignWait);
    if (!key.ok()) {
      if (!absl::IsDeadlineExceeded(key.status()) && !absl::IsCancelled(key.status())) {
        log_.Warn("campaign failed", {{"error", std::string(key.status().message())}});
        if (!SleepUntil(started + Steady(kRetry))) return;
      }
      continue;
    }
    absl::StatusOr<uint64_t> term = NextTerm(*key);
    // Ready before leading: the owner reads the shared state while nothing acts yet.
    absl::Status ready = term.status();
    if (ready.ok()) {
      MutexLock lock(&mu_);
      preparing_ = true;
      key_ = *key;
    }
    if (ready.ok() && callbacks_.elected) ready = callbacks_.elected(*term);
    {
      MutexLock lock(&mu_);
      preparing_ = false;
    }
    if (!ready.ok()) {
      log_.Warn("elected, but not ready to lead: resigned, campaigning again",
                {{"error", std::string(ready.message())}});
      (void)etcd_->Resign(*key);
      if (!SleepUntil(steady_clock::now() + Steady(kRetry))) return;
      continue;
    }
    bool lost_meanwhile = false;
    {
      MutexLock lock(&mu_);
      lost_meanwhile = stop_ || lease_ != lease || steady_clock::now() >= valid_until_;
      if (!lost_meanwhile) {
        leading_ = true;
        term_ = *term;
        key_ = *key;
      }
    }
    if (lost_meanwhile) {
      (void)etcd_->Resign(*key);
      if (callbacks_.lost) callbacks_.lost("the lease ended while getting ready to lead");
      continue;
    }
    log_.Info("leading replica",
              {{"term", *term},
               {"advertise", options_.advertise},
               {"campaign_ms",
                std::chrono::duration<double, std::milli>(steady_clock::now() - started).count()}});
    if (callbacks_.leading) callbacks_.leading();
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !leading_; });
    if (stop_) return;
  }
}

}  // namespace dar::control
