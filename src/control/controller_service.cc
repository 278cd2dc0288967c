#include "control/controller_service.h"

#include <memory>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "fmt/format.h"
#include "security/identity.h"
#include "security/revocation.h"

namespace dar::control {
using Reactor = grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>;

// One agent's stream. Owned by itself from Connect until gRPC calls OnDone; the core may hold
// it longer (as an AgentLink), and then only finds it finished.
class AgentStream final : public Reactor,
                          public AgentLink,
                          public std::enable_shared_from_this<AgentStream> {
 public:
  AgentStream(grpc::CallbackServerContext* context, ControllerCore& core, const Clock& clock,
              JsonLog& log)
      : core_(core),
        clock_(clock),
        log_(log),
        peer_(security::PeerSpiffeId(*context)),
        serial_(security::PeerCertificateSerial(*context)),
        address_(context->peer()) {}

  void Begin() {
    self_ = shared_from_this();
    StartRead(&in_);
  }

  // Whether its hello was admitted.
  bool admitted() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return wire_id_.has_value();
  }
  // Who the client is, for refusals: its certificate's identity and its address.
  std::string who() const {
    return fmt::format("{} at {}", peer_.ok() ? peer_->ToString() : "an unidentified client",
                       address_);
  }

  void OfferSnapshot(std::shared_ptr<const RouteSnapshot> snapshot) override {
    MutexLock lock(&mu_);
    if (session_) {
      session_->SetSnapshot(std::move(snapshot));
    } else {
      pending_snapshot_ = std::move(snapshot);
    }
    TryWriteLocked();
  }

  void OfferConfig(std::shared_ptr<const v1::AgentConfig> config) override {
    MutexLock lock(&mu_);
    if (session_) {
      session_->SetConfig(std::move(config));
    } else {
      pending_config_ = std::move(config);
    }
    TryWriteLocked();
  }

  void Close(const absl::Status& status) override {
    MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(status));
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side, or the call is gone
      MutexLock lock(&mu_);
      FinishLocked(grpc::Status::OK);
      return;
    }
    const absl::Status status = Handle(in_);
    MutexLock lock(&mu_);
    if (!status.ok()) {
      FinishLocked(ToGrpcStatus(status));
      return;
    }
    if (!finishing_) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the agent failed"));
    }
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
    std::optional<uint32_t> id;
    std::string status;
    {
      MutexLock lock(&mu_);
      id = wire_id_;
      status = finish_status_.error_message();
    }
    if (id) core_.Detach(*id, this);
    log_.Debug("agent stream done", {{"node", id ? std::to_string(*id) : "?"}, {"status", status}});
    std::shared_ptr<AgentStream> last = std::move(self_);  // may delete this on return
  }

 private:
  // The node the stream was admitted for; none before its hello.
  std::optional<uint32_t> WireId() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return wire_id_;
  }

  absl::Status Handle(const v1::AgentMessage& m) {
    const std::optional<uint32_t> id = WireId();
    // Checked on every message, so that a revocation ends a stream already open. A client
    // whose certificate's serial cannot be read is refused, as the admin API refuses it.
    if (peer_.ok()) {
      absl::Status s = serial_.ok()
                           ? core_.CheckNotRevoked(*serial_, peer_->ToString())
                           : absl::UnauthenticatedError(fmt::format(
                                 "{}: {}", who(), std::string(serial_.status().message())));
      if (!s.ok()) {
        core_.OnStreamRefused(id ? "stream_refused" : "hello_refused",
                              id ? std::to_string(*id) : std::to_string(m.hello().node_id()), s);
        return s;
      }
    }
    switch (m.kind_case()) {
      case v1::AgentMessage::kHello:
        if (id) return Refuse("a second hello", id);
        return OnHello(m.hello());
      case v1::AgentMessage::kSamples: {
        if (!id) return Refuse("samples before hello", id);
        absl::Status s = core_.OnSamples(*id, m.samples());
        if (!s.ok()) core_.OnStreamRefused("samples_refused", std::to_string(*id), s);
        return s;
      }
      case v1::AgentMessage::kAck: {
        if (!id) return Refuse("an ack before hello", id);
        AckOutcome outcome;
        {
          MutexLock lock(&mu_);
          outcome = session_->OnAck(m.ack());
          TryWriteLocked();
        }
        core_.OnAck(*id, m.ack(), outcome);
        return absl::OkStatus();
      }
      case v1::AgentMessage::kStatus:
        if (!id) return Refuse("a table status before hello", id);
        core_.OnTableStatus(*id, m.status());
        return absl::OkStatus();
      case v1::AgentMessage::KIND_NOT_SET:
        break;
    }
    return Refuse("an empty message (no hello, samples, ack or table status)", id);
  }

  absl::Status Refuse(const std::string& what, std::optional<uint32_t> id) {
    absl::Status s = absl::InvalidArgumentError(
        fmt::format("protocol error: {}; an agent sends hello first, then samples and acks", what));
    core_.OnStreamRefused("stream_refused", id ? std::to_string(*id) : "", s);
    return s;
  }

  absl::Status OnHello(const v1::Hello& hello) {
    if (!peer_.ok()) {
      absl::Status s = absl::UnauthenticatedError(
          fmt::format("hello for node {}: no usable client identity: {}", hello.node_id(),
                      std::string(peer_.status().message())));
      core_.OnStreamRefused("hello_refused", std::to_string(hello.node_id()), s);
      return s;
    }
    absl::StatusOr<ControllerCore::Admission> admission =
        core_.Admit(*peer_, hello, shared_from_this());
    if (!admission.ok()) return admission.status();
    MutexLock lock(&mu_);
    wire_id_ = hello.node_id();
    session_.emplace(hello.node_id(), hello.capabilities().delta_tables(),
                     hello.installed_version(), admission->ack_timeout, admission->refresh);
    session_->set_compact_tables(hello.capabilities().compact_tables());
    // What was offered after the admission is newer than what it carried.
    session_->SetConfig(pending_config_ != nullptr ? std::move(pending_config_)
                                                   : std::move(admission->config));
    session_->SetSnapshot(std::move(admission->snapshot));
    session_->SetSnapshot(std::move(pending_snapshot_));
    TryWriteLocked();
    return absl::OkStatus();
  }

  void TryWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || !session_) return;
    if (!session_->Next(clock_.Now(), out_)) return;
    if (out_.has_table()) core_.OnTableSent(*wire_id_, out_.table());
    writing_ = true;
    StartWrite(&out_);
  }

  // Finishes now, or after the write in flight.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    finish_status_ = std::move(status);
    if (!writing_) {
      finished_ = true;
      Finish(finish_status_);
    }
  }

  ControllerCore& core_;
  const Clock& clock_;
  JsonLog& log_;
  const absl::StatusOr<security::SpiffeId> peer_;
  const absl::StatusOr<std::string> serial_;
  const std::string address_;  // the client's address, as gRPC gives it
  v1::AgentMessage in_;        // only the read path touches it

  Mutex mu_;
  std::optional<uint32_t> wire_id_ ABSL_GUARDED_BY(mu_);  // set once admitted
  std::optional<AgentSession> session_ ABSL_GUARDED_BY(mu_);
  // Offers before admission.
  std::shared_ptr<const RouteSnapshot> pending_snapshot_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::AgentConfig> pending_config_ ABSL_GUARDED_BY(mu_);
  v1::ControllerMessage out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish wanted
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // Finish called
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<AgentStream> self_;
};

grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  auto stream = std::make_shared<AgentStream>(context, core_, clock_, log_);
  stream->Begin();
  bool full = false;
  {
    MutexLock lock(&mu_);
    // The list is swept every cycle; at the limit, sweep it now of the streams admitted or
    // ended since, so that only streams still waiting count.
    if (waiting_.size() >= kMaxStreamsWithoutHello) {
      std::erase_if(waiting_, [](const auto& w) {
        const std::shared_ptr<AgentStream> s = w.second.lock();
        return s == nullptr || s->admitted();
      });
    }
    full = waiting_.size() >= kMaxStreamsWithoutHello;
    if (!full) waiting_.emplace_back(clock_.Now(), stream);
  }
  if (full) {
    const absl::Status s = absl::ResourceExhaustedError(
        fmt::format("{}: {} streams are waiting for their hello; try again later", stream->who(),
                    kMaxStreamsWithoutHello));
    core_.OnStreamRefused("stream_refused", "", s);
    stream->Close(s);
  }
  return stream.get();
}

void AgentServiceImpl::CloseSilentStreams() {
  std::vector<std::shared_ptr<AgentStream>> silent;
  {
    MutexLock lock(&mu_);
    const Time now = clock_.Now();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      std::shared_ptr<AgentStream> s = it->second.lock();
      if (s == nullptr || s->admitted()) {
        it = waiting_.erase(it);
      } else if (now - it->first >= hello_timeout_) {
        silent.push_back(std::move(s));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& s : silent) {
    const absl::Status status = absl::DeadlineExceededError(fmt::format(
        "{}: no hello within {} ms of opening the stream", s->who(), ToMillis(hello_timeout_)));
    core_.OnStreamRefused("stream_refused", "", status);
    s->Close(status);
  }
}

size_t AgentServiceImpl::streams_without_hello() const {
  MutexLock lock(&mu_);
  return waiting_.size();
}

}  // namespace dar::control
