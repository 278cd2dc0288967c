// A client of the part of etcd's v3 gRPC API (proto/etcd/) that a controller's replicas use to
// agree on one leader and share its state: leases, the election service, and keys written only
// while the writer still leads. Every call is one blocking RPC with a deadline; nothing is
// retried here (Leadership decides what to do about a failure).
//
// Thread-safe: gRPC stubs may be called from several threads, and Cancel from any.
#ifndef DAR_CONTROL_ETCD_CLIENT_H_
#define DAR_CONTROL_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "core/units.h"
#include "etcd/election.grpc.pb.h"
#include "etcd/rpc.grpc.pb.h"

namespace dar::control {

struct EtcdClientOptions {
  std::string endpoint;  // host:port of an etcd member's client URL
  // Each call's deadline, but a campaign's (Campaign says).
  Duration timeout = Milliseconds(500);
  // TLS to etcd: its CA and (if etcd asks for client certificates) a client certificate and
  // key, PEM files. Empty ca_file: plaintext (etcd on loopback, or in the lab's namespace).
  std::string ca_file, cert_file, key_file;
};

// The key of a leader of an election: proof, to etcd, of who leads.
struct EtcdLeaderKey {
  std::string name;  // the election
  std::string key;   // the leader's key in etcd
  int64_t rev = 0;   // its create revision: later leaders' are higher
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // A channel to `options.endpoint`; it connects on the first call. Errors: unreadable TLS
  // files (naming them).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(const EtcdClientOptions& options);

  // A new lease of `ttl` (whole seconds, at least 1, rounded up; etcd may raise it to its
  // minimum): its id and the TTL granted.
  absl::StatusOr<std::pair<int64_t, Duration>> GrantLease(Duration ttl);
  // One keep-alive round trip: the TTL the lease has again from now. NotFound if the lease has
  // expired or was revoked.
  absl::StatusOr<Duration> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);

  // Waits up to `max_wait` until the holder of `lease` leads election `name`, offering `value`
  // (what others read as the leader's). DeadlineExceeded if it does not lead by then, Cancelled
  // after Cancel(); either way etcd withdraws the candidacy, and a new campaign queues behind
  // the candidates already waiting.
  absl::StatusOr<EtcdLeaderKey> Campaign(const std::string& name, int64_t lease,
                                         const std::string& value, Duration max_wait);
  // Cancels the Campaign under way, or the next one to start if none is (a replica stopping,
  // or its lease lost, just as its campaign begins).
  void Cancel();
  // The value the leader of `name` campaigned with, or nullopt if nobody leads.
  absl::StatusOr<std::optional<std::string>> Leader(const std::string& name);
  absl::Status Resign(const EtcdLeaderKey& leader);

  // The value of `key` and its mod revision, or nullopt if it is not there.
  struct Value {
    std::string value;
    int64_t mod_revision = 0;
  };
  absl::StatusOr<std::optional<Value>> Get(const std::string& key);
  // Puts key = value if `leader` still leads (its key is there with its revision) and, with
  // `expect`, if key's mod revision is `*expect` (0: key absent). False, with nothing written,
  // if not.
  absl::StatusOr<bool> PutIf(const EtcdLeaderKey& leader, const std::string& key,
                             const std::string& value,
                             std::optional<int64_t> expect = std::nullopt);

  const std::string& endpoint() const { return options_.endpoint; }

 private:
  explicit EtcdClient(EtcdClientOptions options) : options_(std::move(options)) {}
  // A context whose deadline is `timeout` from now.
  std::unique_ptr<grpc::ClientContext> Context(Duration timeout) const;
  // "etcd <endpoint>: <what>: <grpc message>", with the gRPC code.
  absl::Status Error(const char* what, const grpc::Status& status) const;

  EtcdClientOptions options_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  std::unique_ptr<v3electionpb::Election::Stub> election_;
  Mutex mu_;
  grpc::ClientContext* campaign_ ABSL_GUARDED_BY(mu_) = nullptr;  // the call under way
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;                   // Cancel() with no call under way
};

}  // namespace dar::control

#endif  // DAR_CONTROL_ETCD_CLIENT_H_
