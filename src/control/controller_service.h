// The agents' gRPC service (proto/dar/v1/agent.proto): one long-lived bidirectional stream
// per agent, on gRPC's callback API. Each stream is one AgentLink of the ControllerCore; a
// relay's stream carries several, one per member.
//
// A stream reads Hello first (the core checks it against the client's certificate), then
// samples and acks in any order. It writes configuration and tables from an AgentSession:
// at most one write is outstanding, and what could not be written yet is only ever the
// newest state, so a slow agent never holds up the cycle or other agents. A bad message ends
// the stream with an error status naming the problem.
#ifndef DAR_CONTROL_CONTROLLER_SERVICE_H_
#define DAR_CONTROL_CONTROLLER_SERVICE_H_

#include <deque>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "base/clock.h"
#include "base/json_log.h"
#include "base/mutex.h"
#include "control/controller_core.h"
#include "dar/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dar::control {

// absl and gRPC share the canonical status codes.
inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

class AgentStream;

class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  // Streams that have not sent their hello, at most: more are refused at once
  // (ResourceExhausted), so that streams opened and left silent cannot pile up.
  static constexpr size_t kMaxStreamsWithoutHello = 1024;

  // All three must outlive the service and every stream it opened (shut the server down
  // first). A stream without a hello after `hello_timeout` is closed by CloseSilentStreams.
  AgentServiceImpl(ControllerCore& core, const Clock& clock, JsonLog& log, Duration hello_timeout)
      : core_(core), clock_(clock), log_(log), hello_timeout_(hello_timeout) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* context) override;
  // A relay's stream (controller_relay.cc): refused at once unless the client is a node and
  // this replica leads; each member is then admitted by its own hello.
  grpc::ServerBidiReactor<v1::RelayUp, v1::RelayDown>* Relay(
      grpc::CallbackServerContext* context) override;

  // Closes (DeadlineExceeded) every stream older than the hello timeout that has not been
  // admitted; forgets those that were or have ended. Called by the controller's cycle thread.
  void CloseSilentStreams();
  // Streams opened and not yet admitted or ended, as last counted.
  size_t streams_without_hello() const;

 private:
  ControllerCore& core_;
  const Clock& clock_;
  JsonLog& log_;
  const Duration hello_timeout_;
  mutable Mutex mu_;
  // Oldest first: when each stream opened.
  std::deque<std::pair<Time, std::weak_ptr<AgentStream>>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_SERVICE_H_
