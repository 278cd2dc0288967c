// A relay: the control streams of a rack's agents carried to the controller as one
// (AgentService.Relay, proto/dar/v1/agent.proto). It runs inside the agent of the rack's
// switch (dar-agent's `relay:` setting): its members, the hosts whose one link goes to that
// switch, connect to it as they would to the controller (`relay:` in their configuration), and
// the controller holds one stream per rack instead of one per host.
//
//   members -> relay: each member's own Connect stream over mutual TLS 1.3; the relay checks
//                     the member's certificate and passes its identity and serial on with its
//                     hello, and every message after it, unchanged;
//   relay -> controller: one Relay stream, the relay's own certificate. Messages go up in
//                     batches: samples wait up to `batch_window` for others to join them, and
//                     anything else (a hello, an ack, a table status, a sample of a link down,
//                     a member gone) goes at once, with whatever waits;
//   controller -> members: each message to the member it names; an end closes that member's
//                     stream with the controller's status.
//
// The controller decides everything about a member, as for a direct agent: whether the relay
// may carry it, whether its certificate stands, its tables and their acks. A relay keeps no
// route state: when its stream to the controller fails it opens another (with backoff, to the
// replica a refusal names as leading), and sends each member's hello again, with the newest
// table version the member accepted, so that the members' streams stay open and their tables
// continue across a controller's restart or failover. What members send while no stream is
// open is dropped: samples are of the moment, and a new session starts from the hello.
#ifndef DAR_AGENT_RELAY_H_
#define DAR_AGENT_RELAY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/json_log.h"
#include "core/units.h"
#include "grpcpp/channel.h"
#include "security/identity.h"
#include "security/tls.h"

namespace dar::agent {

struct RelayOptions {
  // Where members connect: "host:port" (port 0: any free port, see Relay::port()).
  std::string listen;
  // This node's certificate: the server's to its members, the client's to the controller.
  security::TlsFiles tls;
  // The controller's replicas ("host:port"), tried in turn; at least one.
  std::vector<std::string> controllers;
  // As AgentConfig's: the TLS name to dial the controller by, and the identity its
  // certificate must carry (default: the controller of this node's trust domain).
  std::string controller_name;
  std::optional<security::SpiffeId> controller_id;
  // How long samples wait for others before going up.
  Duration batch_window = Milliseconds(10);
  // A member's stream must bring its hello within `hello_timeout` of opening, and at most
  // `max_without_hello` streams wait for theirs; one past that is refused (RESOURCE_EXHAUSTED),
  // and a silent one is closed (DEADLINE_EXCEEDED) when the next stream opens.
  Duration hello_timeout = Seconds(5);  // as the controller's hello_timeout_ms
  int max_without_hello = 64;
  // A controller not connected to within this long (TCP and TLS) is given up for the next
  // attempt.
  Duration connect_timeout = Seconds(1);
  Duration backoff_min = Milliseconds(100);
  Duration backoff_max = Milliseconds(500);
  uint64_t seed = 1;  // the backoff's jitter
  // Certificate validity and the stamps of the log; the real one if null. Must outlive it.
  const Clock* clock = nullptr;
};

// What the relay has done since it started. A snapshot.
struct RelayStatus {
  bool connected = false;  // a stream to the controller is open
  int members = 0;         // members whose streams are open
  int64_t streams = 0;     // streams opened to the controller
  int64_t batches_up = 0;  // RelayUp messages written
  int64_t messages_up = 0;
  int64_t batches_down = 0;
  int64_t messages_down = 0;
  int64_t dropped_up = 0;       // members' messages dropped while no stream was open
  int64_t silent_streams = 0;   // members' streams closed for want of a hello in time
  int64_t refused_streams = 0;  // refused: too many waiting for their hello
  int without_hello = 0;        // members' streams open and waiting for their hello
  std::string last_error;       // why the last stream to the controller ended or failed
};

class Relay {
 public:
  // Listens and starts the stream to the controller. `log` must outlive the relay.
  // Errors: bad TLS files, an address it cannot listen on, no controller.
  static absl::StatusOr<std::unique_ptr<Relay>> Start(const RelayOptions& options, JsonLog& log);
  // Stops: ends the members' streams (UNAVAILABLE) and the controller's.
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  int port() const;
  RelayStatus status() const;

  class Impl;

 private:
  explicit Relay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// After a stream to replica `current` of `replicas` ended with `status`: the replica it names
// as leading ("the leading replica is at host:port", ControllerCore::NotLeading), if that is
// another of `replicas`; else the next one. One replica: stays.
size_t NextReplica(const std::vector<std::string>& replicas, size_t current,
                   const std::string& status_message);

// Waits up to `timeout` for `channel` to connect (TCP and TLS), looking at `stopping` every
// 100 ms. False if it did not, or `stopping` said so. A frozen controller accepts the TCP
// connection and never finishes the handshake, and a stream would wait in gRPC's connect for
// 20 s; a client that gives up instead can try another replica.
bool ConnectWithin(grpc::Channel& channel, Duration timeout, const std::function<bool()>& stopping);

}  // namespace dar::agent

#endif  // DAR_AGENT_RELAY_H_
