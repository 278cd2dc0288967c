// The controller's side of a relay's stream (AgentService.Relay, proto/dar/v1/agent.proto).
//
// Each member the relay carries is an AgentLink of the core with its own AgentSession, as a
// directly connected agent is: admitted by its hello (its certificate as the relay saw it,
// and the relay's right to carry it), sent its configuration and tables stop-and-wait. What
// differs is the transport: the members' messages come in the relay's batches, and theirs
// leave in one batch per write, at most one write outstanding, holding whatever each
// member's session has ready when the previous write completes.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "control/controller_service.h"
#include "control/controller_session.h"
#include "fmt/format.h"
#include "security/identity.h"
#include "security/revocation.h"

namespace dar::control {
namespace {

using RelayReactor = grpc::ServerBidiReactor<v1::RelayUp, v1::RelayDown>;

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
    std::shared_ptr<AgentLink> gone;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      if (it == members_.end() || it->second.link.get() != link) return;
      if (status.code() == absl::StatusCode::kUnavailable) {
        FinishLocked(ToGrpcStatus(status));
        return;
      }
      gone = EndMemberLocked(id, status);
    }
    if (gone != nullptr) core_.Detach(id, gone.get());
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the relay closed its side, or the call is gone
      MutexLock lock(&mu_);
      FinishLocked(grpc::Status::OK);
      return;
    }
    // Checked on every batch, so that revoking the relay's certificate ends its stream.
    absl::Status status = serial_.ok()
                              ? core_.CheckNotRevoked(*serial_, peer_->ToString())
                              : absl::UnauthenticatedError(fmt::format(
                                    "{}: {}", who(), std::string(serial_.status().message())));
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
    absl::flat_hash_map<uint32_t, Member> members;
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

  // One member's message. A bad one ends that member's stream, not the relay's.
  void Handle(const v1::RelayedAgentMessage& r) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint32_t id = r.node_id();
    if (r.ended()) {
      std::shared_ptr<AgentLink> gone;
      {
        MutexLock lock(&mu_);
        auto it = members_.find(id);
        if (it == members_.end()) return;
        gone = std::move(it->second.link);
        members_.erase(it);
      }
      core_.Detach(id, gone.get());
      return;
    }
    const v1::AgentMessage& m = r.message();
    bool admitted = false;
    {
      MutexLock lock(&mu_);
      auto it = members_.find(id);
      admitted = it != members_.end() && it->second.session.has_value();
    }
    absl::Status status;
    switch (m.kind_case()) {
      case v1::AgentMessage::kHello:
        status = admitted ? Protocol(id, "a second hello") : OnHello(r);
        break;
      case v1::AgentMessage::kSamples:
        if (!admitted) {
          status = Protocol(id, "samples before hello");
        } else if (status = core_.OnSamples(id, m.samples()); !status.ok()) {
          core_.OnStreamRefused("samples_refused", std::to_string(id), status);
        }
        break;
      case v1::AgentMessage::kAck: {
        if (!admitted) {
          status = Protocol(id, "an ack before hello");
          break;
        }
        AckOutcome outcome = AckOutcome::kStale;
        {
          MutexLock lock(&mu_);
          auto it = members_.find(id);
          if (it == members_.end() || !it->second.session) break;  // ended meanwhile
          outcome = it->second.session->OnAck(m.ack());
          TryWriteLocked();
        }
        core_.OnAck(id, m.ack(), outcome);
        break;
      }
      case v1::AgentMessage::kStatus:
        if (!admitted) {
          status = Protocol(id, "a table status before hello");
        } else {
          core_.OnTableStatus(id, m.status());
        }
        break;
      case v1::AgentMessage::KIND_NOT_SET:
        status = Protocol(id, "an empty message (no hello, samples, ack or table status)");
        break;
    }
    if (status.ok()) return;
    std::shared_ptr<AgentLink> gone;
    {
      MutexLock lock(&mu_);
      gone = EndMemberLocked(id, status);
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
      replaced = std::move(m.link);  // an earlier, unadmitted hello of the same member
      m = Member{.link = link};
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
    // What was offered after the admission is newer than what it carried.
    m.session->SetConfig(m.pending_config != nullptr ? std::move(m.pending_config)
                                                     : std::move(admission->config));
    m.session->SetSnapshot(std::move(admission->snapshot));
    m.session->SetSnapshot(std::move(m.pending_snapshot));
    TryWriteLocked();
    return absl::OkStatus();
  }

  // Drops member `id` and tells the relay to end its stream with `status`; returns its link,
  // for the caller to detach from the core outside the lock.
  std::shared_ptr<AgentLink> EndMemberLocked(uint32_t id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::shared_ptr<AgentLink> gone;
    if (auto it = members_.find(id); it != members_.end()) {
      gone = std::move(it->second.link);
      members_.erase(it);
    }
    v1::RelayedControllerMessage& end = ends_.emplace_back();
    end.set_node_id(id);
    end.set_end(true);
    end.set_end_code(static_cast<int32_t>(status.code()));
    end.set_end_message(std::string(status.message()));
    TryWriteLocked();
    return gone;
  }

  void TryWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return;
    out_.Clear();
    for (v1::RelayedControllerMessage& end : ends_) *out_.add_messages() = std::move(end);
    ends_.clear();
    const Time now = clock_.Now();
    for (auto& [id, m] : members_) {
      if (!m.session) continue;
      while (m.session->Next(now, next_)) {
        if (next_.has_table()) core_.OnTableSent(id, next_.table());
        v1::RelayedControllerMessage* x = out_.add_messages();
        x->set_node_id(id);
        x->mutable_message()->Swap(&next_);
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
  absl::flat_hash_map<uint32_t, Member> members_ ABSL_GUARDED_BY(mu_);
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
