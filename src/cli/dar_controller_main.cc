// dar-controller: the DAR controller daemon. main() parses flags, loads the configuration,
// starts control::Controller and turns signals into actions: SIGHUP reloads the
// configuration file (a bad one is refused and the running one stays), SIGINT and SIGTERM
// stop the daemon.
//
//   dar-controller --config controller.yaml [--listen 127.0.0.1:50051]
//   dar-controller --check-config controller.yaml      exit 0 if valid, else 1 with the error
//
// --check-config also loads the learned policy's model (policy.policy_model) and refuses a bad
// one; the daemon would start with it refused, running the analytic engine.
#include <signal.h>
#include <sys/resource.h>

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/version.h"
#include "control/controller.h"
#include "control/controller_config.h"
#include "fmt/format.h"
#include "security/tls.h"

namespace dar::cli {
namespace {

// The configuration at `path`, the TLS files and the learned-policy model it names, checked as
// Start would (except that Start runs the analytic engine on a refused model).
int CheckConfig(const std::string& path) {
  absl::StatusOr<control::ControllerConfig> config = control::LoadControllerConfig(path);
  if (!config.ok()) {
    std::cerr << "dar-controller: " << config.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<security::TlsMaterial> tls = security::LoadTlsMaterial(config->tls, absl::Now());
  if (!tls.ok()) {
    std::cerr << "dar-controller: " << path << ": tls: " << tls.status().message() << "\n";
    return 1;
  }
  if (tls->identity.kind != security::PeerKind::kController) {
    std::cerr << fmt::format(
        "dar-controller: {}: tls.cert {} is the certificate of {}, not of a "
        "controller\n",
        path, config->tls.cert_file, tls->identity.ToString());
    return 1;
  }
  if (!config->trust_domain.empty() && config->trust_domain != tls->identity.trust_domain) {
    std::cerr << fmt::format("dar-controller: {}: trust_domain {} but the certificate is of {}\n",
                             path, config->trust_domain, tls->identity.trust_domain);
    return 1;
  }
  std::string policy = "analytic policy";
  if (!config->policy.policy_model.empty()) {
    absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> learned =
        control::LoadLearnedPolicy(*config);
    if (!learned.ok()) {
      std::cerr << "dar-controller: " << learned.status().message() << "\n";
      return 1;
    }
    policy = "learned policy: " + (*learned)->Describe();
  }
  std::cout << fmt::format("{}: OK ({} nodes, {} links, trust domain {}, {})\n", path,
                           config->nodes.size(), config->links.size(), tls->identity.trust_domain,
                           policy);
  return 0;
}

int Run(const std::string& path, const std::string& listen) {
  absl::StatusOr<control::ControllerConfig> config = control::LoadControllerConfig(path);
  if (!config.ok()) {
    std::cerr << "dar-controller: " << config.status().message() << "\n";
    return 1;
  }
  // Signals are taken synchronously by this thread; every thread started later inherits the
  // mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  control::ControllerOptions options;
  options.listen_override = listen;
  absl::StatusOr<std::unique_ptr<control::Controller>> controller =
      control::Controller::Start(*std::move(config), options);
  if (!controller.ok()) {
    std::cerr << "dar-controller: " << controller.status().message() << "\n";
    return 1;
  }
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      (*controller)->Reload().IgnoreError();  // logged, and an event, by Reload
      continue;
    }
    (*controller)->log().Info("stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
    break;
  }
  (*controller)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace dar::cli

int main(int argc, char** argv) {
  // gRPC's mutexes are absl's; their cycle detection costs CPU the cycle needs.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::Status s = dar::security::EnforceTls13(); !s.ok()) {
    std::cerr << "dar-controller: " << s.message() << "\n";
    return 1;
  }
  CLI::App app("dar-controller: computes DAR's routing tables and pushes them to the agents");
  app.set_version_flag("--version", dar::VersionLine("dar-controller"));
  std::string config;
  std::string check;
  std::string listen;
  app.add_option("--config", config, "Configuration file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--check-config", check, "Validate this configuration file and exit");
  app.add_option("--listen", listen, "Override the configuration's listen address (host:port)");
  CLI11_PARSE(app, argc, argv);
  if (!check.empty()) return dar::cli::CheckConfig(check);
  if (config.empty()) {
    std::cerr << "dar-controller: --config FILE is required (or --check-config FILE)\n";
    return 1;
  }
  // Every connection holds a descriptor, a stalled one until the handshake timeout
  // (Controller::kHandshakeTimeoutMs): as many as the hard limit allows, not the soft 1,024 a
  // service is often started with, so that a burst of stalled clients cannot lock others out.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  return dar::cli::Run(config, listen);
}
