// Test support for the controller, shared by its tests and its benchmark: a temporary
// certificate directory, configurations over it, and a scripted agent (TestAgent) that speaks
// the agent protocol over a real gRPC stream.
#ifndef DAR_CONTROL_CONTROLLER_TEST_UTIL_H_
#define DAR_CONTROL_CONTROLLER_TEST_UTIL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/test_support.h"
#include "control/controller_config.h"
#include "dar/v1/admin.grpc.pb.h"
#include "dar/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "security/identity.h"
#include "security/tls.h"

namespace dar::control::testing {

inline constexpr char kTestDomain[] = "dar.test";

// A directory under /tmp removed with its contents on destruction (base/test_support.h).
using TempDir = ::dar::test::TempDir;

// The identity of node `id` in kTestDomain.
inline security::SpiffeId NodeIdentity(uint32_t id) {
  return security::SpiffeId::Node(kTestDomain, std::to_string(id));
}

// An agent's table handler (TestAgent::Options::on_table) that accepts every table.
inline std::optional<v1::TableAck> AcceptEvery(const v1::RouteTable& t) {
  v1::TableAck ack;
  ack.set_version(t.version());
  ack.set_accepted(true);
  return ack;
}

inline bool IsConfig(const v1::ControllerMessage& m) { return m.has_config(); }
inline bool IsTable(const v1::ControllerMessage& m) { return m.has_table(); }

// A CA with a controller certificate (for localhost and 127.0.0.1), in a TempDir.
class TestPki {
 public:
  // Errors: certificate creation failed.
  static absl::StatusOr<std::unique_ptr<TestPki>> Create();

  const std::string& dir() const { return dir_.path(); }
  // Issues (once) and returns the files of `id`'s certificate.
  absl::StatusOr<security::TlsFiles> Files(const security::SpiffeId& id);
  absl::StatusOr<security::TlsFiles> NodeFiles(uint32_t node_id) {
    return Files(security::SpiffeId::Node(kTestDomain, std::to_string(node_id)));
  }
  // A channel to the controller at 127.0.0.1:`port` as `id`.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(const security::SpiffeId& id, int port);

 private:
  TestPki() = default;
  TempDir dir_;
};

// A configuration of `nodes` nodes (ids 1..n, names "n1".., overlay 10.77.x.y) with the
// given links (pairs of 0-based node indices), capacity 1 Gb/s, listening on 127.0.0.1:0,
// with the PKI's controller certificate. Cycle 100 ms; no HTTP; log to `log_file` ("" =
// stderr) at warn.
ControllerConfig MakeTestConfig(const TestPki& pki, int nodes,
                                const std::vector<std::pair<int, int>>& links,
                                const std::string& log_file = "");
// The overlay of a k=4 fat-tree (16 hosts h0.., 20 switches; wire ids 1..36 in the
// generator's node order, 1 Gb/s links), hosts decided through their switch or each on its
// own. Topology and nodes only: no listening address or certificates.
ControllerConfig FatTreeConfig(bool stub_hosts);
// The same configuration as YAML text.
std::string TestConfigYaml(const TestPki& pki, int nodes,
                           const std::vector<std::pair<int, int>>& links);

// One agent's stream, driven by the test. Every message received is kept in order; tests
// wait on them with deadlines. Thread-safe.
class TestAgent final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
 public:
  // Called for each table received, on a gRPC thread; may return an ack to send.
  using TableHandler = std::function<std::optional<v1::TableAck>(const v1::RouteTable&)>;

  // Opens the stream on `channel`. Without `keep_messages` only their number is kept
  // (WaitFor then finds nothing; for long runs).
  TestAgent(const std::shared_ptr<grpc::Channel>& channel, TableHandler on_table = nullptr,
            bool keep_messages = true);
  ~TestAgent() override;  // cancels the call and waits for it to end

  void Send(v1::AgentMessage message);
  void SendHello(uint32_t node_id, const std::vector<uint32_t>& neighbours, bool delta_tables,
                 uint64_t installed_version = 0, bool compact_tables = false);
  void SendAck(uint64_t version, bool accepted, const std::string& reason = "");

  // The first message from index `*cursor` on for which `pred` holds; advances `*cursor`
  // past it. nullopt if none arrives within `timeout` (or the stream ended).
  std::optional<v1::ControllerMessage> WaitFor(
      const std::function<bool(const v1::ControllerMessage&)>& pred, size_t* cursor,
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The stream's final status, once it ended within `timeout`.
  std::optional<grpc::Status> WaitDone(
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  size_t received() const;
  // Messages given to Send and not yet written (the one being written among them).
  size_t unsent() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void WriteNextLocked();

  grpc::ClientContext context_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  TableHandler on_table_;
  const bool keep_messages_;
  v1::ControllerMessage in_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::ControllerMessage> messages_;
  size_t received_ = 0;
  std::deque<v1::AgentMessage> outbox_;  // front: being written
  bool writing_ = false;
  std::optional<grpc::Status> done_;
};

// The rows of a node's table as the agent would hold them: (destination, class) -> route.
using HeldRoutes = std::map<std::pair<uint32_t, uint32_t>, v1::Route>;
// Applies a full table or a delta to `held`. Errors: a delta whose base is not `held_version`.
absl::Status ApplyTable(const v1::RouteTable& table, uint64_t held_version, HeldRoutes& held);

}  // namespace dar::control::testing

#endif  // DAR_CONTROL_CONTROLLER_TEST_UTIL_H_
