#include "agent/relay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "core/random.h"
#include "dar/v1/agent.grpc.pb.h"
#include "fmt/format.h"
#include "grpcpp/grpcpp.h"
#include "security/revocation.h"

namespace dar::agent {

size_t NextReplica(const std::vector<std::string>& replicas, size_t current,
                   const std::string& status_message) {
  if (replicas.size() < 2) return current;
  constexpr std::string_view kHint = "the leading replica is at ";
  if (const size_t at = status_message.find(kHint); at != std::string::npos) {
    const std::string leader = status_message.substr(at + kHint.size());
    const auto it = std::find(replicas.begin(), replicas.end(), leader);
    if (it != replicas.end() && static_cast<size_t>(it - replicas.begin()) != current) {
      return static_cast<size_t>(it - replicas.begin());
    }
  }
  return (current + 1) % replicas.size();
}

bool ConnectWithin(grpc::Channel& channel, Duration timeout,
                   const std::function<bool()>& stopping) {
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::nanoseconds(timeout.count());
  while (std::chrono::system_clock::now() < deadline) {
    if (stopping()) return false;
    if (channel.WaitForConnected(std::min(
            deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100)))) {
      return true;
    }
  }
  return false;
}

namespace {

constexpr int kMaxBatchDown = 16 * 1024 * 1024;
// Members' messages waiting for the controller's stream, beyond which samples are dropped.
constexpr int kMaxWaiting = 1024;

using MemberReactor = grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>;

// Whether a member's message may wait for others: samples of links all up.
bool CanWait(const v1::AgentMessage& m) {
  if (!m.has_samples()) return false;
  return std::all_of(m.samples().samples().begin(), m.samples().samples().end(),
                     [](const v1::LinkSample& s) { return s.up(); });
}

}  // namespace

class MemberStream;

class Relay::Impl final : public v1::AgentService::CallbackService {
 public:
  Impl(const RelayOptions& options, JsonLog& log)
      : options_(options),
        log_(log),
        clock_(options.clock != nullptr ? *options.clock : RealClock::Instance()),
        rng_(options.seed) {}
  ~Impl() override;

  absl::Status Start();
  int port() const { return port_; }
  RelayStatus status() const ABSL_LOCKS_EXCLUDED(mu_);

  MemberReactor* Connect(grpc::CallbackServerContext* context) override;

  // From the members' streams.
  void OnHello(const std::shared_ptr<MemberStream>& stream, const v1::AgentMessage& hello,
               const std::string& identity, const std::string& serial) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes `m` (leaves it cleared).
  void OnMessage(uint32_t id, const MemberStream* stream, v1::AgentMessage& m)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnGone(uint32_t id, const MemberStream* stream) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Upstream = grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>;

  struct Member {
    std::shared_ptr<MemberStream> stream;
    uint64_t number = 0;  // the stream's number (RelayedAgentMessage.stream)
    v1::Hello hello;      // as it came; sent again on every new stream to the controller
    std::string identity, serial;
    uint64_t accepted = 0;  // the newest table version it accepted
  };

  void Run();
  // One stream to the controller, from connecting to its end. True if the controller sent
  // anything on it.
  bool RunStream(const std::string& target);
  // Takes the messages of `down`.
  void Deliver(v1::RelayDown& down) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a member's message (taken, or none: the member is gone) for the controller, if a
  // stream is open.
  void QueueLocked(uint32_t id, uint64_t number, v1::AgentMessage* m, bool urgent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RelayedAgentMessage HelloOf(uint32_t id, const Member& m) const;
  Duration NextBackoff(int attempt);

  const RelayOptions options_;
  JsonLog& log_;
  const Clock& clock_;
  Random rng_;  // the run thread's
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread thread_;

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Member> members_ ABSL_GUARDED_BY(mu_);
  // Members' streams without their hello yet, by when they opened (Connect).
  std::deque<std::pair<Time, std::weak_ptr<MemberStream>>> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t streams_ ABSL_GUARDED_BY(mu_) = 0;  // members' streams numbered so far
  v1::RelayUp pending_ ABSL_GUARDED_BY(mu_);
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point first_pending_ ABSL_GUARDED_BY(mu_);
  RelayStatus status_ ABSL_GUARDED_BY(mu_);
};

// One member's stream to the relay.
class MemberStream final : public MemberReactor, public std::enable_shared_from_this<MemberStream> {
 public:
  MemberStream(grpc::CallbackServerContext* context, Relay::Impl& relay)
      : relay_(relay),
        peer_(security::PeerSpiffeId(*context)),
        serial_(security::PeerCertificateSerial(*context)) {}

  void Begin() {
    self_ = shared_from_this();
    StartRead(&in_);
  }

  void Deliver(v1::ControllerMessage m) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (finishing_) return;
    outbox_.push_back(std::move(m));
    TryWriteLocked();
  }

  void End(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    FinishLocked(std::move(status));
  }

  // Whether the stream has brought its hello (and the relay taken it).
  bool greeted() const { return greeted_.load(std::memory_order_acquire); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(grpc::Status::OK);
      return;
    }
    if (!id_) {
      grpc::Status refusal;
      if (!in_.has_hello()) {
        refusal = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "protocol error: the first message was not a hello");
      } else if (!peer_.ok() || !serial_.ok()) {
        refusal = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                               fmt::format("no usable client certificate: {}",
                                           std::string(!peer_.ok() ? peer_.status().message()
                                                                   : serial_.status().message())));
      }
      // The controller decides who the member may be; the relay refuses at once a certificate
      // that does not name the node the hello speaks for, so that nobody can displace a
      // member's stream here, even for the moment before the controller refuses.
      if (refusal.ok() && (peer_->kind != security::PeerKind::kNode ||
                           peer_->name != std::to_string(in_.hello().node_id()))) {
        refusal = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                               fmt::format("hello says node {} but the client's certificate is {}",
                                           in_.hello().node_id(), peer_->ToString()));
      }
      if (!refusal.ok()) {
        End(refusal);
        return;
      }
      id_ = in_.hello().node_id();
      greeted_.store(true, std::memory_order_release);
      relay_.OnHello(shared_from_this(), in_, peer_->ToString(), *serial_);
    } else {
      relay_.OnMessage(*id_, this, in_);
    }
    MutexLock lock(&mu_);
    if (!finishing_) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the agent failed"));
    if (!outbox_.empty()) outbox_.pop_front();
    if (finishing_) {
      if (!finished_) {
        finished_ = true;
        Finish(finish_status_);
      }
      return;
    }
    TryWriteLocked();
  }

  void OnDone() override {
    if (id_) relay_.OnGone(*id_, this);
    std::shared_ptr<MemberStream> last = std::move(self_);  // may delete this on return
  }

 private:
  void TryWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || outbox_.empty()) return;
    writing_ = true;
    StartWrite(&outbox_.front());
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    finish_status_ = std::move(status);
    if (!writing_) {
      finished_ = true;
      Finish(finish_status_);
    }
  }

  Relay::Impl& relay_;
  const absl::StatusOr<security::SpiffeId> peer_;
  const absl::StatusOr<std::string> serial_;
  v1::AgentMessage in_;         // the read path's
  std::optional<uint32_t> id_;  // the read path's, then OnDone's
  std::atomic<bool> greeted_{false};
  Mutex mu_;
  std::deque<v1::ControllerMessage> outbox_ ABSL_GUARDED_BY(mu_);  // front: being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<MemberStream> self_;
};

RelayStatus Relay::Impl::status() const {
  MutexLock lock(&mu_);
  RelayStatus s = status_;
  s.connected = connected_;
  s.members = static_cast<int>(members_.size());
  for (const auto& [opened, stream] : waiting_) {
    const std::shared_ptr<MemberStream> open = stream.lock();
    s.without_hello += open != nullptr && !open->greeted();
  }
  return s;
}

MemberReactor* Relay::Impl::Connect(grpc::CallbackServerContext* context) {
  auto stream = std::make_shared<MemberStream>(context, *this);
  stream->Begin();
  // Streams still without their hello: those past the timeout are closed, and a stream past
  // the cap is refused. Judged as streams open, which is when room is needed.
  std::vector<std::shared_ptr<MemberStream>> silent;
  bool full = false;
  {
    MutexLock lock(&mu_);
    const Time now = clock_.Now();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      std::shared_ptr<MemberStream> s = it->second.lock();
      if (s == nullptr || s->greeted()) {
        it = waiting_.erase(it);
      } else if (now - it->first >= options_.hello_timeout) {
        silent.push_back(std::move(s));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    full = static_cast<int>(waiting_.size()) >= options_.max_without_hello;
    if (!full) waiting_.emplace_back(now, stream);
    status_.refused_streams += full;
    status_.silent_streams += static_cast<int64_t>(silent.size());
  }
  for (const auto& s : silent) {
    s->End(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        fmt::format("relay: no hello within {} ms of opening the stream",
                                    ToMillis(options_.hello_timeout))));
  }
  if (full) {
    stream->End(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     fmt::format("relay: {} streams are waiting for their hello; try again later",
                                 options_.max_without_hello)));
  }
  return stream.get();
}

absl::Status Relay::Impl::Start() {
  if (options_.controllers.empty()) {
    return absl::InvalidArgumentError("relay: no controller to relay to");
  }
  if (options_.hello_timeout <= Duration(0) || options_.max_without_hello < 1) {
    return absl::InvalidArgumentError(
        "relay: hello_timeout must be positive and max_without_hello at least 1");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      security::MakeServerCredentials(options_.tls, absl::FromUnixNanos(clock_.UnixNanos()));
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, *credentials, &port_);
  builder.RegisterService(this);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        fmt::format("relay: cannot listen on {} for members", options_.listen));
  }
  thread_ = std::thread([this] { Run(); });
  log_.Info("relay listening", {{"listen", options_.listen}, {"port", port_}});
  return absl::OkStatus();
}

Relay::Impl::~Impl() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  if (server_ != nullptr) {
    std::vector<std::shared_ptr<MemberStream>> open;
    {
      MutexLock lock(&mu_);
      for (auto& [id, m] : members_) open.push_back(m.stream);
    }
    for (const auto& s : open) s->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "relay stopped"));
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

v1::RelayedAgentMessage Relay::Impl::HelloOf(uint32_t id, const Member& m) const {
  v1::RelayedAgentMessage r;
  r.set_node_id(id);
  v1::Hello* h = r.mutable_message()->mutable_hello();
  *h = m.hello;
  // Tables it accepted through this relay came after its hello: versions go on above them.
  h->set_installed_version(std::max(m.hello.installed_version(), m.accepted));
  r.set_peer_identity(m.identity);
  r.set_certificate_serial(m.serial);
  r.set_stream(m.number);
  return r;
}

void Relay::Impl::QueueLocked(uint32_t id, uint64_t number, v1::AgentMessage* m, bool urgent) {
  // Samples are of the moment: while the controller's stream is down, or backed up past
  // kMaxWaiting messages, they are dropped rather than held.
  if (!connected_ ||
      (m != nullptr && m->has_samples() && pending_.messages_size() >= kMaxWaiting)) {
    ++status_.dropped_up;
    return;
  }
  if (pending_.messages_size() == 0) first_pending_ = std::chrono::steady_clock::now();
  v1::RelayedAgentMessage* r = pending_.add_messages();
  r->set_node_id(id);
  r->set_stream(number);
  if (m == nullptr) {
    r->set_ended(true);
  } else {
    r->mutable_message()->Swap(m);
  }
  urgent_ = urgent_ || urgent;
  if (urgent_ || pending_.messages_size() == 1) cv_.NotifyAll();
}

void Relay::Impl::OnHello(const std::shared_ptr<MemberStream>& stream,
                          const v1::AgentMessage& hello, const std::string& identity,
                          const std::string& serial) {
  const uint32_t id = hello.hello().node_id();
  std::shared_ptr<MemberStream> replaced;
  {
    MutexLock lock(&mu_);
    Member& m = members_[id];
    replaced = std::move(m.stream);
    // The controller forgets the stream replaced before it hears the new one.
    if (replaced != nullptr) QueueLocked(id, m.number, nullptr, true);
    m = Member{stream,   ++streams_, hello.hello(),
               identity, serial,     hello.hello().installed_version()};
    if (connected_) {
      if (pending_.messages_size() == 0) first_pending_ = std::chrono::steady_clock::now();
      *pending_.add_messages() = HelloOf(id, m);
      urgent_ = true;
      cv_.NotifyAll();
    }
  }
  if (replaced != nullptr) {
    replaced->End(
        grpc::Status(grpc::StatusCode::ABORTED,
                     fmt::format("node {} opened a newer stream; this one is closed", id)));
  }
  log_.Debug("relay member hello", {{"node", id}, {"identity", identity}});
}

void Relay::Impl::OnMessage(uint32_t id, const MemberStream* stream, v1::AgentMessage& m) {
  MutexLock lock(&mu_);
  auto it = members_.find(id);
  if (it == members_.end() || it->second.stream.get() != stream) return;
  if (m.has_ack() && m.ack().accepted()) {
    it->second.accepted = std::max(it->second.accepted, m.ack().version());
  }
  if (m.has_status()) *it->second.hello.mutable_table_status() = m.status();
  const bool urgent = !CanWait(m);
  QueueLocked(id, it->second.number, &m, urgent);
}

void Relay::Impl::OnGone(uint32_t id, const MemberStream* stream) {
  MutexLock lock(&mu_);
  auto it = members_.find(id);
  if (it == members_.end() || it->second.stream.get() != stream) return;
  const uint64_t number = it->second.number;
  members_.erase(it);
  QueueLocked(id, number, nullptr, true);
}

void Relay::Impl::Deliver(v1::RelayDown& down) {
  std::vector<std::pair<std::shared_ptr<MemberStream>, v1::RelayedControllerMessage*>> to;
  {
    MutexLock lock(&mu_);
    ++status_.batches_down;
    status_.messages_down += down.messages_size();
    for (v1::RelayedControllerMessage& x : *down.mutable_messages()) {
      auto it = members_.find(x.node_id());
      // Gone (the controller hears of it), or meant for an earlier stream of the member.
      if (it == members_.end() || it->second.number != x.stream()) continue;
      to.emplace_back(it->second.stream, &x);
      if (x.end()) members_.erase(it);
    }
  }
  for (const auto& [stream, x] : to) {
    if (x->end()) {
      stream->End(grpc::Status(static_cast<grpc::StatusCode>(x->end_code()), x->end_message()));
    } else {
      stream->Deliver(std::move(*x->mutable_message()));
    }
  }
}

Duration Relay::Impl::NextBackoff(int attempt) {
  Duration step = options_.backoff_min;
  for (int i = 0; i < attempt && step < options_.backoff_max; ++i) step *= 2;
  step = std::min(step, options_.backoff_max);
  const double f = 0.5 + 0.5 * rng_.Uniform();
  return Duration(static_cast<int64_t>(static_cast<double>(step.count()) * f));
}

void Relay::Impl::Run() {
  size_t target = 0;
  int attempt = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
    }
    const bool answered = RunStream(options_.controllers[target]);
    std::string error;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      error = status_.last_error;
    }
    target = NextReplica(options_.controllers, target, error);
    attempt = answered ? 0 : attempt + 1;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(NextBackoff(attempt).count());
    MutexLock lock(&mu_);
    cv_.WaitUntil(&mu_, until, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; });
  }
}

bool Relay::Impl::RunStream(const std::string& target) {
  security::ChannelTlsOptions tls;
  tls.files = options_.tls;
  tls.server_name = options_.controller_name;
  tls.server_identity = options_.controller_id;
  tls.server_is_own_controller = true;
  absl::StatusOr<security::ChannelSecurity> security =
      security::MakeChannelSecurity(tls, absl::FromUnixNanos(clock_.UnixNanos()));
  if (!security.ok()) {
    MutexLock lock(&mu_);
    status_.last_error = std::string(security.status().message());
    return false;
  }
  // A batch down holds several members' messages; the controller keeps it near half a MB
  // beyond its last message, which may be a whole table (the direct limit, 4 MB).
  security->arguments.SetMaxReceiveMessageSize(kMaxBatchDown);
  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, security->credentials, security->arguments);
  const bool up =
      ConnectWithin(*channel, options_.connect_timeout, [this]() ABSL_LOCKS_EXCLUDED(mu_) {
        MutexLock lock(&mu_);
        return stop_;
      });
  if (!up) {
    MutexLock lock(&mu_);
    status_.last_error = fmt::format("{}: not connected within {:.0f} ms", target,
                                     ToMillis(options_.connect_timeout));
    return false;
  }
  std::unique_ptr<v1::AgentService::Stub> stub = v1::AgentService::NewStub(channel);
  auto context = std::make_shared<grpc::ClientContext>();
  {
    MutexLock lock(&mu_);
    if (stop_) return false;
    context_ = context;
    reader_done_ = false;
  }
  std::unique_ptr<Upstream> stream = stub->Relay(context.get());
  {
    // Every member's hello again: this stream is a new session for each.
    MutexLock lock(&mu_);
    connected_ = true;
    ++status_.streams;
    pending_.Clear();
    for (const auto& [id, m] : members_) *pending_.add_messages() = HelloOf(id, m);
    first_pending_ = std::chrono::steady_clock::now();
    urgent_ = true;
  }
  std::atomic<bool> answered{false};
  std::thread reader([&] {
    v1::RelayDown down;
    while (stream->Read(&down)) {
      answered = true;
      Deliver(down);
    }
    MutexLock lock(&mu_);
    reader_done_ = true;
    cv_.NotifyAll();
  });
  const auto window = std::chrono::nanoseconds(options_.batch_window.count());
  v1::RelayUp batch;
  while (true) {
    {
      MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || reader_done_ ||
               (pending_.messages_size() > 0 &&
                (urgent_ || std::chrono::steady_clock::now() >= first_pending_ + window));
      };
      while (!ready()) {
        if (pending_.messages_size() > 0) {
          cv_.WaitUntil(&mu_, first_pending_ + window, ready);
        } else {
          cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return stop_ || reader_done_ || pending_.messages_size() > 0;
          });
        }
      }
      if (stop_ || reader_done_) break;
      batch.Clear();
      batch.Swap(&pending_);
      urgent_ = false;
      ++status_.batches_up;
      status_.messages_up += batch.messages_size();
    }
    if (!stream->Write(batch)) break;
  }
  {
    MutexLock lock(&mu_);
    connected_ = false;
    pending_.Clear();
    // Ended by the controller: its status stands. Else ours: the reader must stop too.
    if (!reader_done_) context->TryCancel();
  }
  reader.join();
  const grpc::Status status = stream->Finish();
  MutexLock lock(&mu_);
  context_ = nullptr;
  status_.last_error = status.ok() ? "the controller ended the stream" : status.error_message();
  log_.Warn("relay stream to the controller ended",
            {{"controller", target}, {"error", status_.last_error}});
  return answered;
}

Relay::Relay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Relay::~Relay() = default;
int Relay::port() const { return impl_->port(); }
RelayStatus Relay::status() const { return impl_->status(); }

absl::StatusOr<std::unique_ptr<Relay>> Relay::Start(const RelayOptions& options, JsonLog& log) {
  auto impl = std::make_unique<Impl>(options, log);
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

}  // namespace dar::agent
