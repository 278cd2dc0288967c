// The controller daemon's runtime: the gRPC server (agents and admin on one port, mutual TLS
// 1.3), the HTTP server for /metrics and /healthz, the structured log, and the decision cycle
// on its own thread every cycle period of the policy. dar_controller_main.cc is only flags
// and signals around this class.
//
// Thread-safe: Reload, RunCycleNow and the accessors may be called from any thread.
#ifndef DAR_CONTROL_CONTROLLER_H_
#define DAR_CONTROL_CONTROLLER_H_

#include <memory>
#include <mutex>  // std::once_flag
#include <thread>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/json_log.h"
#include "base/mutex.h"
#include "control/admin_service.h"
#include "control/connection_limiter.h"
#include "control/controller_config.h"
#include "control/controller_core.h"
#include "control/controller_metrics.h"
#include "control/controller_service.h"
#include "control/leadership.h"
#include "grpcpp/grpcpp.h"
#include "net/http_server.h"

namespace dar::control {

struct ControllerOptions {
  // Run the decision cycle on its own thread, and offer its tables to the streams from
  // another (ControllerCore's publish thread). Tests that drive cycles with RunCycleNow() turn
  // it off: the tables are then offered before RunCycleNow returns.
  bool cycle_thread = true;
  // The clock; the real one if null. Must outlive the controller. (The cycle thread paces
  // itself on the steady clock whatever this is.)
  const Clock* clock = nullptr;
  // Replaces the configuration's listen address, at start and on every reload (a command
  // line flag).
  std::string listen_override;
};

class Controller {
 public:
  // What one client may hold of the gRPC server (Start explains).
  static constexpr int kHandshakeTimeoutMs = 5'000;
  static constexpr int kMaxStreamsPerConnection = 8;
  static constexpr int kMaxConnectionIdleMs = 120'000;

  // Checks the TLS files (valid now, a controller certificate; its trust domain is the
  // configuration's unless that names one, which must then match), opens the log, binds the
  // gRPC and HTTP addresses (port 0: any free port), runs a first cycle and starts the cycle
  // thread. Errors name what failed: a TLS file, the log file, an address.
  static absl::StatusOr<std::unique_ptr<Controller>> Start(ControllerConfig config,
                                                           const ControllerOptions& options = {});
  ~Controller();  // Shutdown()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Stops the cycle thread, then closes every stream and the servers. Idempotent.
  void Shutdown();

  // Re-reads the configuration file and applies it. A file that does not load or validate, or
  // whose learned-policy model is refused (ControllerCore::Reload), is refused: the error is
  // logged, recorded as a "config_refused" event and returned, and the running configuration
  // (with its model, if one runs) stays.
  absl::Status Reload();
  // The same with configuration text instead of the file (`file` names it in errors).
  absl::Status ReloadFromText(const std::string& text, const std::string& file);

  // Runs one decision cycle now, on the caller's thread.
  CycleReport RunCycleNow() { return core_->RunCycle(); }

  int port() const { return port_; }                // the gRPC port bound
  int http_port() const { return http_port_; }      // 0 without HTTP
  int health_port() const { return health_port_; }  // 0 without a health listener
  const std::string& trust_domain() const { return trust_domain_; }
  ControllerCore& core() { return *core_; }
  const AgentServiceImpl& agent_service() const { return *agent_service_; }
  ControllerMetrics& metrics() { return *metrics_; }
  JsonLog& log() { return *log_; }

 private:
  Controller() = default;
  absl::Status Apply(absl::StatusOr<ControllerConfig> next);
  // Makes leadership_ for the configuration's `replicas` (started once the core runs).
  absl::Status StartLeadership(const ControllerConfig& config);
  void CycleLoop();

  const Clock* clock_ = nullptr;
  std::string config_file_;
  std::string listen_override_;
  std::string trust_domain_;
  std::string ca_file_;  // the CA the server trusts (tls.ca at start)
  std::unique_ptr<JsonLog> log_;
  std::unique_ptr<ControllerMetrics> metrics_;
  std::unique_ptr<Leadership> leadership_;  // null: a single controller
  std::unique_ptr<ControllerCore> core_;
  std::unique_ptr<AgentServiceImpl> agent_service_;
  std::unique_ptr<AdminServiceImpl> admin_service_;
  // Declared before server_, which is destroyed first.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<ConnectionLimiter> limiter_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<net::HttpServer> http_;         // /metrics, /healthz, /readyz
  std::unique_ptr<net::HttpServer> health_http_;  // /healthz and /readyz only
  int port_ = 0;
  int http_port_ = 0;
  int health_port_ = 0;

  Mutex thread_mu_;
  CondVar thread_cv_;
  bool stopping_ ABSL_GUARDED_BY(thread_mu_) = false;
  // The configuration changed: a cycle now, then the (new) period.
  bool wake_ ABSL_GUARDED_BY(thread_mu_) = false;
  // A link end was newly reported down (SetEarlyCycleRequest).
  bool early_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread cycle_thread_;
  std::once_flag shutdown_once_;
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_H_
