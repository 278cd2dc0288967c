// The agent's side of the control stream: one long-lived bidirectional gRPC stream to the
// controller over mutual TLS 1.3 (proto/dar/v1/agent.proto).
//
//   up:   Hello (node, links, capabilities, installed table version), then the data plane's
//         link samples every probe interval, and an ack for every table (accepted, or refused
//         with the reason);
//   down: AgentConfig (keys and forwarding mode to the data plane, the staleness timeout to
//         the table store) and RouteTables (to the table store; what it serves goes to the
//         data plane before the ack is sent).
//
// The client runs on its own thread (and a reader thread while a stream is open). When the
// stream fails, or the controller has sent nothing for `silence_timeout`, it reconnects with a
// fresh channel after an exponential backoff with jitter (backoff_min doubling up to
// backoff_max; each wait drawn uniformly from the upper half of the step). The backoff starts
// over after a stream on which the controller answered. The loop also keeps the data plane's
// table current while disconnected: every probe interval it installs what the table store
// serves (e.g. the static table once the controller's goes stale). Which table that is goes up
// in the Hello and as a TableStatus whenever it changes, so that the controller hears of a
// fallback to static, also of one made while the agent could not reach it.
//
// With several replicas of the controller (AgentConfig::controllers), a stream goes to one at a
// time: after it ends, or is refused by a replica that does not lead, the next goes to the
// replica the refusal names as leading, else to the next in the list.
#ifndef DAR_AGENT_CONTROL_CLIENT_H_
#define DAR_AGENT_CONTROL_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "agent/agent_config.h"
#include "agent/agent_tables.h"
#include "agent/dataplane.h"
#include "agent/table_store.h"
#include "base/clock.h"
#include "base/json_log.h"
#include "base/mutex.h"
#include "core/next_hop_chooser.h"
#include "core/random.h"
#include "core/units.h"
#include "dar/v1/agent.grpc.pb.h"

namespace dar::agent {

// What the control client needs of the data plane. DataplaneBridge forwards to a Dataplane;
// tests plug in a fake. Implementations must be thread-safe.
class DataplaneControl {
 public:
  virtual ~DataplaneControl() = default;
  virtual std::vector<NeighbourSample> Samples(Time now) = 0;
  virtual absl::Status SetKeys(const std::vector<KeyUpdate>& keys) = 0;
  virtual absl::Status SetForwarding(const ForwardingConfig& config) = 0;
  virtual absl::Status SetProbeSettings(Duration interval, int missed_probes) = 0;
  virtual void InstallTables(std::shared_ptr<const AgentTables> tables) = 0;
  // Bytes sent from the TUN per destination node since the start (by NodeId); empty: not
  // counted (Dataplane::SentBytesByDestination).
  virtual std::vector<uint64_t> SentBytes() { return {}; }
};

class DataplaneBridge final : public DataplaneControl {
 public:
  // `dataplane` must outlive the bridge.
  explicit DataplaneBridge(Dataplane& dataplane) : dataplane_(dataplane) {}
  std::vector<NeighbourSample> Samples(Time now) override { return dataplane_.Samples(now); }
  std::vector<uint64_t> SentBytes() override { return dataplane_.SentBytesByDestination(); }
  absl::Status SetKeys(const std::vector<KeyUpdate>& keys) override {
    return dataplane_.SetKeys(keys);
  }
  absl::Status SetForwarding(const ForwardingConfig& config) override {
    return dataplane_.SetForwarding(config);
  }
  absl::Status SetProbeSettings(Duration interval, int missed_probes) override {
    return dataplane_.SetProbeSettings(interval, missed_probes);
  }
  void InstallTables(std::shared_ptr<const AgentTables> tables) override {
    dataplane_.InstallTables(std::move(tables));
  }

 private:
  Dataplane& dataplane_;
};

struct ControlClientOptions {
  // Reconnection backoff. REQUIRES: 0 < backoff_min <= backoff_max. The longest wait is a
  // small part of the tables' staleness timeout (3 s by default): an agent is back within half
  // a second of a restarted controller, so a controller away for up to about 2 s finds its
  // agents still on its predecessor's tables, not fallen back to static. (A connection
  // attempt a second or two from every agent is nothing for a controller to refuse.)
  Duration backoff_min = Milliseconds(100);
  Duration backoff_max = Milliseconds(500);
  // A stream on which the controller sends nothing for this long is given up (the controller
  // sends a table every cycle that changes this node's rows, and a refresh at least every
  // sixth of table_stale_ms: 500 ms by default). REQUIRES: > 0.
  Duration silence_timeout = Seconds(15);
  // With several replicas (AgentConfig::controllers), a stream silent for a third of the
  // tables' staleness timeout, but at least this long (and at most silence_timeout), is given
  // up for the next replica: a leader that was paused, or lost its lease, sends nothing, and
  // another may lead already. (The controller sends tables every cycle, and a staleness
  // timeout shorter than a few cycles would make agents fall back anyway.) REQUIRES: > 0.
  Duration replica_silence_timeout = Seconds(1);
  // The forwarding settings the data plane started with; AgentConfig changes only the mode.
  ForwardingConfig forwarding;
  // Seeds the backoff jitter.
  uint64_t seed = 1;
  // The clock of every decision the client makes on time: the table store's staleness, the
  // samples' `now`, the silence timeout (monotonic); the samples' and fallbacks' stamps and
  // certificate validity (Unix). The real one if null; must outlive the client. (The client's
  // thread paces its waits on the steady clock whatever this is.)
  const Clock* clock = nullptr;
};

// What the client has done since Start. A snapshot.
struct ControlClientStatus {
  bool connected = false;        // a stream is open and the controller has answered on it
  int64_t streams = 0;           // streams opened (Hello sent)
  int64_t connect_failures = 0;  // attempts that failed before the controller answered
  int64_t disconnects = 0;       // streams that ended after the controller answered
  int64_t configs = 0;
  int64_t tables_accepted = 0;
  int64_t tables_refused = 0;
  int64_t samples_sent = 0;  // LinkSamples messages
  std::string last_error;    // why the last stream ended or failed; empty before any
};

class ControlClient {
 public:
  // `config`, `store`, `dataplane` and `log` must outlive the client.
  ControlClient(const AgentConfig& config, TableStore& store, DataplaneControl& dataplane,
                JsonLog& log, const ControlClientOptions& options);
  // Stops the client.
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Starts the client's thread. FailedPrecondition if it has been started before.
  absl::Status Start();
  // Closes the stream and joins the threads. Idempotent.
  void Stop();

  ControlClientStatus status() const;

  // A neighbour link went down or came back up (the data plane's liveness callback): the
  // samples go to the controller at once instead of at the next probe interval, so that it
  // moves routes off a failed link within milliseconds. Thread-safe; cheap.
  void NotifyLinkChange();

  // The Hello this agent sends now. Exposed for tests.
  v1::Hello MakeHello() const;
  // Which table the data plane forwards with, as of the last Maintain.
  v1::TableStatus table_status() const;

 private:
  using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>;

  void Run();
  // One stream, from connecting to its end. True if the controller answered on it.
  bool RunSession();
  void ReadLoop(Stream& stream);
  void HandleConfig(const v1::AgentConfig& config);
  void HandleTable(Stream& stream, const v1::RouteTable& table);
  bool Send(Stream& stream, const v1::AgentMessage& message);
  bool SendSamples(Stream& stream);
  // Installs what the table store serves now, if it changed, and notes a fallback to static.
  void Maintain();
  // Sends table_status() if it differs from `*sent` (what this stream was last told), and
  // records it there. False if the stream failed.
  bool SendTableStatus(Stream& stream, v1::TableStatus* sent);
  // Waits until `deadline` (steady std::chrono time) or Stop, running Maintain every probe
  // interval. False if stopping.
  bool WaitWithMaintenance(std::chrono::steady_clock::time_point deadline);
  Duration NextBackoff(int attempt);
  Time Now() const;
  int64_t UnixNow() const;
  void Fail(std::string error, bool answered);
  // The controller replica the next stream goes to (AgentConfig::controllers).
  const std::string& Target() const {
    return config_.controllers.empty() ? config_.controller : config_.controllers[target_];
  }
  // After a stream ended with `status`: the replica it names as leading, if it is one of ours
  // and not this one; else the next one. One controller: stays.
  void NextTarget(const grpc::Status& status);
  // How long a stream may stay silent (ControlClientOptions::replica_silence_timeout).
  Duration Silence() const;

  const AgentConfig& config_;
  TableStore& store_;
  DataplaneControl& dataplane_;
  JsonLog& log_;
  ControlClientOptions options_;
  const Clock& clock_;           // options_.clock, or the real one
  Random rng_;                   // the run thread's
  size_t target_ = 0;            // the run thread's: index into config_.controllers
  ForwardingConfig forwarding_;  // the reader thread's
  // The probe settings in force (config file, then the controller's); the interval also paces
  // the samples (read when a stream starts).
  std::atomic<int64_t> probe_interval_ns_;
  int missed_probes_;  // the reader thread's

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  // NotifyLinkChange since the last samples went out.
  bool link_changed_ ABSL_GUARDED_BY(mu_) = false;
  // Of the open stream, for Stop.
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  ControlClientStatus status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  std::vector<uint64_t> sent_reported_;  // SentBytes() as of the last samples sent

  Mutex write_mu_;            // one writer at a time on the stream
  mutable Mutex install_mu_;  // Maintain, and the table status it keeps
  v1::TableStatus table_status_ ABSL_GUARDED_BY(install_mu_);
  std::atomic<int64_t> last_heard_ns_{0};  // steady time of the last message received
  std::atomic<bool> answered_{false};      // on the current stream
};

}  // namespace dar::agent

#endif  // DAR_AGENT_CONTROL_CLIENT_H_
