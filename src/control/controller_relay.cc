// The controller's side of a relay's stream (AgentService.Relay, proto/dar/v1/agent.proto).
//
// Each member the relay carries is an AgentLink of the core with its own AgentSession, as a
// directly connected agent is: admitted by its hello (its certificate as the relay saw it,
// and the relay's right to carry it), sent its configuration and tables stop-and-wait. What
// differs is the transport: the members' messages come in the relay's batches, and theirs
// leave in one batch per write, at most one write outstanding, holding whatever each
// member's session has ready when the previous write completes.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "control/controller_service.h"
#include "control/controller_session.h"
#include "fmt/format.h"
#include "security/identity.h"
#include "security/revocation.h"

namespace dar::control {
namespace {

using RelayReactor = grpc::ServerBidiReactor<v1::RelayUp, v1::RelayDown>;

// A batch down stops taking members once it holds this much: a rack's full tables (a host's is
// about 140 kB at k=16) would otherwise make one message of several MB, past what a gRPC
// client takes by default, and hold every member's table until the whole batch is through.
constexpr size_t kRelayBatchBytes = size_t{512} * 1024;

class RelayStream;

// One member inside a relay's stream: what the core offers it goes to the relay.
class RelayedAgent final : public AgentLink {
 public:
  RelayedAgent(std::weak_ptr<RelayStream> relay, uint32_t id) : relay_(std::move(relay)), id_(id) {}
  void OfferSnapshot(std::shared_ptr<const RouteSnapshot> snapshot) override;
  void OfferConfig(std::shared_ptr<const v1::AgentConfig> config) override;
  void Close(const absl::Status& status) override;

 private:
  const std::weak_ptr<RelayStream> relay_;
  const uint32_t id_;
};

class RelayStream final : public RelayReactor, public std::enable_shared_from_this<RelayStream> {
 public:
  RelayStream(grpc::CallbackServerContext* context, ControllerCore& core, const Clock& clock,
              JsonLog& log)
      : core_(core),
        clock_(clock),
        log_(log),
        peer_(security::PeerSpiffeId(*context)),
        serial_(security::PeerCertificateSerial(*context)),
        address_(context->peer()) {}

  void Begin() {
    self_ = shared_from_this();
    if (absl::Status s = CheckRelay(); !s.ok()) {
      core_.OnStreamRefused("relay_refused", peer_.ok() ? peer_->name : "", s);
      MutexLock lock(&mu_);
      FinishLocked(ToGrpcStatus(s));
      return;
    }
    StartRead(&in_);
  }

  void Offer(uint32_t id, const RelayedAgent* link, std::shared_ptr<const RouteSnapshot> snapshot,
             std::shared_ptr<const v1::AgentConfig> config) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    auto it = members_.find(id);
    if (it == members_.end() || it->second.link.get() != link) return;
    Member& m = it->second;
    if (m.session) {
      if (snapshot != nullptr) m.session->SetSnapshot(std::move(snapshot));
      if (config != nullptr) m.session->SetConfig(std::move(config));
    } else {
      if (snapshot != nullptr) m.pending_snapshot = std::move(snapshot);
      if (config != nullptr) m.pending_config = std::move(config);
    }
    TryWriteLocked();
  }

  // The core ends member `id`'s stream: a newer one replaced it, its node was removed, ...
  // UNAVAILABLE says this controller goes away (it stops, or no longer leads): that ends the
  // relay's stream instead, so that the relay moves on to the next replica and takes its
  // members with it, their own streams to the relay kept open.
  void CloseMember(uint32_t id, const RelayedAgent* link, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_) {
    uint64_t stream = 0;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      if (it == members_.end() || it->second.link.get() != link) return;
      if (status.code() == absl::StatusCode::kUnavailable) {
        FinishLocked(ToGrpcStatus(status));
        return;
      }
      stream = it->second.stream;
    }
    Drop(id, stream, status, /*tell_relay=*/true);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the relay closed its side, or the call is gone
      MutexLock lock(&mu_);
      FinishLocked(grpc::Status::OK);
      return;
    }
    // Checked on every batch: revoking the relay's certificate ends its stream, and so does
    // this replica no longer leading (the relay moves on with all its members, even before
    // any of them is admitted).
    absl::Status status = serial_.ok()
                              ? core_.CheckNotRevoked(*serial_, peer_->ToString())
                              : absl::UnauthenticatedError(fmt::format(
                                    "{}: {}", who(), std::string(serial_.status().message())));
    if (status.ok() && !core_.Acts()) status = absl::FailedPreconditionError(core_.NotLeading());
    for (int i = 0; status.ok() && i < in_.messages_size(); ++i) Handle(in_.messages(i));
    if (!status.ok()) core_.OnStreamRefused("relay_refused", peer_->name, status);
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
    if (!ok) FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the relay failed"));
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
    std::map<uint32_t, Member> members;
    {
      MutexLock lock(&mu_);
      members.swap(members_);
    }
    for (const auto& [id, m] : members) core_.Detach(id, m.link.get());
    log_.Debug("relay stream done", {{"relay", who()}, {"members", members.size()}});
    std::shared_ptr<RelayStream> last = std::move(self_);  // may delete this on return
  }

 private:
  struct Member {
    uint64_t stream = 0;  // which of the member's streams to the relay (RelayedAgentMessage)
    std::string identity, serial;  // of its certificate, as the relay saw it
    std::shared_ptr<RelayedAgent> link;
    std::optional<AgentSession> session;  // once admitted
    // Offers before admission.
    std::shared_ptr<const RouteSnapshot> pending_snapshot;
    std::shared_ptr<const v1::AgentConfig> pending_config;
  };

  std::string who() const {
    return fmt::format("relay {} at {}", peer_.ok() ? peer_->ToString() : "(unidentified)",
                       address_);
  }

  absl::Status CheckRelay() const {
    if (!peer_.ok()) {
      return absl::UnauthenticatedError(fmt::format("{}: no usable client identity: {}", who(),
                                                    std::string(peer_.status().message())));
    }
    if (peer_->kind != security::PeerKind::kNode) {
      return absl::PermissionDeniedError(fmt::format("{}: only a node may relay", who()));
    }
    if (std::string not_leading = core_.NotLeading(); !not_leading.empty()) {
      return absl::FailedPreconditionError(not_leading);
    }
    return absl::OkStatus();
  }

  // One member's message. A bad one ends that member's stream, not the relay's. Messages of
  // a stream the controller no longer holds (it ended the member, or a newer stream of the
  // member replaced it) are dropped: the relay hears of the end, or already has.
  void Handle(const v1::RelayedAgentMessage& r) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint32_t id = r.node_id();
    const v1::AgentMessage& m = r.message();
    std::string identity, serial;
    bool current = false;
    bool admitted = false;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      current = it != members_.end() && it->second.stream == r.stream();
      if (current) {
        identity = it->second.identity;
        serial = it->second.serial;
        admitted = it->second.session.has_value();
      }
    }
    if (r.ended()) {
      if (current) Drop(id, r.stream(), absl::OkStatus(), /*tell_relay=*/false);
      return;
    }
    if (m.has_hello()) {
      if (current) {
        Drop(id, r.stream(), Protocol(id, "a second hello"), /*tell_relay=*/true);
      } else if (absl::Status s = OnHello(r); !s.ok()) {
        Drop(id, r.stream(), s, /*tell_relay=*/true);
      }
      return;
    }
    if (!current) return;
    // Checked on every message, as for a direct agent: a revocation ends a stream already open.
    absl::Status status = core_.CheckNotRevoked(serial, identity);
    if (!status.ok()) {
      core_.OnStreamRefused("stream_refused", std::to_string(id), status);
    } else {
      switch (m.kind_case()) {
        case v1::AgentMessage::kSamples:
          if (!admitted) {
            status = Protocol(id, "samples before hello");
          } else if (status = core_.OnSamples(id, m.samples()); !status.ok()) {
            core_.OnStreamRefused("samples_refused", std::to_string(id), status);
          }
          break;
        case v1::AgentMessage::kAck:
          if (!admitted) {
            status = Protocol(id, "an ack before hello");
          } else {
            OnAck(id, r.stream(), m.ack());
          }
          break;
        case v1::AgentMessage::kStatus:
          if (!admitted) {
            status = Protocol(id, "a table status before hello");
          } else {
            core_.OnTableStatus(id, m.status());
          }
          break;
        case v1::AgentMessage::kHello:  // handled above
          break;
        case v1::AgentMessage::KIND_NOT_SET:
          status = Protocol(id, "an empty message (no hello, samples, ack or table status)");
          break;
      }
    }
    if (!status.ok()) Drop(id, r.stream(), status, /*tell_relay=*/true);
  }

  void OnAck(uint32_t id, uint64_t stream, const v1::TableAck& ack) ABSL_LOCKS_EXCLUDED(mu_) {
    AckOutcome outcome = AckOutcome::kStale;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      if (it == members_.end() || it->second.stream != stream || !it->second.session) return;
      outcome = it->second.session->OnAck(ack);
      TryWriteLocked();
    }
    core_.OnAck(id, ack, outcome);
  }

  // Forgets stream `stream` of member `id`, if it is the one held, and detaches it from the
  // core; with `tell_relay`, sends the relay an end of that stream with `status`.
  void Drop(uint32_t id, uint64_t stream, const absl::Status& status, bool tell_relay)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<AgentLink> gone;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      if (it != members_.end() && it->second.stream == stream) {
        gone = std::move(it->second.link);
        members_.erase(it);
      }
      if (tell_relay) QueueEndLocked(id, stream, status);
    }
    if (gone != nullptr) core_.Detach(id, gone.get());
  }

  absl::Status Protocol(uint32_t id, const std::string& what) {
    absl::Status s = absl::InvalidArgumentError(fmt::format(
        "protocol error: {} from node {} through {}; an agent sends hello first, then samples "
        "and acks",
        what, id, who()));
    core_.OnStreamRefused("stream_refused", std::to_string(id), s);
    return s;
  }

  // Admits a new stream of a member: a hello not of the stream held (if any), which it
  // replaces.
  absl::Status OnHello(const v1::RelayedAgentMessage& r) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint32_t id = r.node_id();
    const v1::Hello& hello = r.message().hello();
    absl::Status refusal;
    absl::StatusOr<security::SpiffeId> member = security::ParseSpiffeId(r.peer_identity());
    if (hello.node_id() != id) {
      refusal = absl::InvalidArgumentError(
          fmt::format("{} carried a hello for node {} as node {}'s", who(), hello.node_id(), id));
    } else if (!member.ok()) {
      refusal = absl::UnauthenticatedError(
          fmt::format("hello for node {} through {}: the member's identity \"{}\": {}", id, who(),
                      r.peer_identity(), std::string(member.status().message())));
    } else if (r.certificate_serial().empty()) {
      refusal = absl::UnauthenticatedError(fmt::format(
          "hello for node {} through {}: no certificate serial of the member", id, who()));
    } else if (refusal = core_.CheckRelay(*peer_, id); refusal.ok()) {
      refusal = core_.CheckNotRevoked(r.certificate_serial(), member->ToString());
    }
    if (!refusal.ok()) {
      core_.OnStreamRefused("hello_refused", std::to_string(id), refusal);
      return refusal;
    }
    auto link = std::make_shared<RelayedAgent>(weak_from_this(), id);
    std::shared_ptr<AgentLink> replaced;
    {
      MutexLock lock(&mu_);
      Member& m = members_[id];
      replaced = std::move(m.link);  // an earlier stream of the same member
      m = Member{.stream = r.stream(),
                 .identity = member->ToString(),
                 .serial = r.certificate_serial(),
                 .link = link};
    }
    if (replaced != nullptr) core_.Detach(id, replaced.get());
    absl::StatusOr<ControllerCore::Admission> admission = core_.Admit(*member, hello, link);
    if (!admission.ok()) return admission.status();  // the core recorded why
    MutexLock lock(&mu_);
    auto it = members_.find(id);
    if (it == members_.end() || it->second.link != link) return absl::OkStatus();  // ended
    Member& m = it->second;
    m.session.emplace(id, hello.capabilities().delta_tables(), hello.installed_version(),
                      admission->ack_timeout, admission->refresh);
    m.session->set_compact_tables(hello.capabilities().compact_tables());
    // What was offered after the admission is newer than what it carried.
    m.session->SetConfig(m.pending_config != nullptr ? std::move(m.pending_config)
                                                     : std::move(admission->config));
    m.session->SetSnapshot(std::move(admission->snapshot));
    m.session->SetSnapshot(std::move(m.pending_snapshot));
    TryWriteLocked();
    return absl::OkStatus();
  }

  // Tells the relay to end stream `stream` of member `id` with `status`.
  void QueueEndLocked(uint32_t id, uint64_t stream, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::RelayedControllerMessage& end = ends_.emplace_back();
    end.set_node_id(id);
    end.set_stream(stream);
    end.set_end(true);
    end.set_end_code(static_cast<int32_t>(status.code()));
    end.set_end_message(std::string(status.message()));
    TryWriteLocked();
  }

  void TryWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return;
    out_.Clear();
    for (v1::RelayedControllerMessage& end : ends_) *out_.add_messages() = std::move(end);
    ends_.clear();
    const Time now = clock_.Now();
    // A batch of about kRelayBatchBytes: what more is ready goes in the next one, which starts
    // after the last member served, so that no member waits behind the others every time.
    size_t bytes = 0;
    auto it = members_.upper_bound(last_served_);
    for (size_t n = 0; n < members_.size() && bytes < kRelayBatchBytes; ++n, ++it) {
      if (it == members_.end()) it = members_.begin();
      auto& [id, m] = *it;
      if (!m.session) continue;
      while (m.session->Next(now, next_)) {
        if (next_.has_table()) core_.OnTableSent(id, next_.table());
        v1::RelayedControllerMessage* x = out_.add_messages();
        x->set_node_id(id);
        x->set_stream(m.stream);
        x->mutable_message()->Swap(&next_);
        bytes += x->ByteSizeLong();
        last_served_ = id;
      }
    }
    if (out_.messages_size() == 0) return;
    writing_ = true;
    StartWrite(&out_);
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

  ControllerCore& core_;
  const Clock& clock_;
  JsonLog& log_;
  const absl::StatusOr<security::SpiffeId> peer_;
  const absl::StatusOr<std::string> serial_;
  const std::string address_;
  v1::RelayUp in_;  // only the read path touches it

  Mutex mu_;
  std::map<uint32_t, Member> members_ ABSL_GUARDED_BY(mu_);
  uint32_t last_served_ ABSL_GUARDED_BY(mu_) = 0;  // the member whose message went down last
  std::vector<v1::RelayedControllerMessage> ends_ ABSL_GUARDED_BY(mu_);
  v1::RelayDown out_ ABSL_GUARDED_BY(mu_);
  v1::ControllerMessage next_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<RelayStream> self_;
};

void RelayedAgent::OfferSnapshot(std::shared_ptr<const RouteSnapshot> snapshot) {
  if (auto r = relay_.lock()) r->Offer(id_, this, std::move(snapshot), nullptr);
}
void RelayedAgent::OfferConfig(std::shared_ptr<const v1::AgentConfig> config) {
  if (auto r = relay_.lock()) r->Offer(id_, this, nullptr, std::move(config));
}
void RelayedAgent::Close(const absl::Status& status) {
  if (auto r = relay_.lock()) r->CloseMember(id_, this, status);
}

}  // namespace

grpc::ServerBidiReactor<v1::RelayUp, v1::RelayDown>* AgentServiceImpl::Relay(
    grpc::CallbackServerContext* context) {
  auto stream = std::make_shared<RelayStream>(context, core_, clock_, log_);
  stream->Begin();
  return stream.get();
}

}  // namespace dar::control
