#include "control/controller.h"

#include <chrono>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "base/version.h"
#include "control/controller_web.h"
#include "fmt/format.h"
#include "security/revocation.h"
#include "security/tls.h"

namespace dar::control {

namespace {

// The revocation list `config` names, checked against the CA in `ca_file` (the one the server
// trusts, which a reload does not change); null if it names none.
absl::StatusOr<std::shared_ptr<const security::RevocationList>> LoadRevocations(
    const ControllerConfig& config, const std::string& ca_file) {
  if (config.crl_file.empty()) return nullptr;
  absl::StatusOr<security::RevocationList> list =
      security::RevocationList::Load(config.crl_file, ca_file);
  if (!list.ok()) {
    return absl::Status(list.status().code(), fmt::format("{}: tls.crl: {}", config.file,
                                                          std::string(list.status().message())));
  }
  return std::make_shared<const security::RevocationList>(*std::move(list));
}

// The number of the newest revocation list the controller ran with, kept in its state_dir, so
// that an older list put back is refused across a restart too (on SIGHUP the running list is
// the reference as well).
constexpr char kCrlNumberFormat[] = "dar-crl-number/1";

std::string CrlNumberFile(const ControllerConfig& config) {
  return config.state_dir.empty() ? "" : config.state_dir + "/crl-number.json";
}

// Refuses `list` (null: none) if the controller ran with a newer one before. Errors name the
// configuration, both numbers and the file; and those of reading the file.
absl::Status CheckCrlNumber(const ControllerConfig& config, const security::RevocationList* list) {
  const std::string file = CrlNumberFile(config);
  if (file.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::optional<uint64_t> ran,
                   ReadCounterFile(file, kCrlNumberFormat, "number", UINT64_MAX));
  if (!ran.has_value() || (list != nullptr && list->number() >= *ran)) return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "{}: tls.crl: {} is older than the list this controller ran with (number {}, kept in "
      "{}): an older list would take revocations back; put the newer list back, or remove {} "
      "to accept this one",
      config.file,
      list == nullptr ? std::string("no list") : fmt::format("list number {}", list->number()),
      *ran, file, file));
}

// Keeps the number of the list now running (after CheckCrlNumber passed).
absl::Status KeepCrlNumber(const ControllerConfig& config, const security::RevocationList* list) {
  const std::string file = CrlNumberFile(config);
  if (file.empty() || list == nullptr) return absl::OkStatus();
  return WriteCounterFile(file, kCrlNumberFormat, "number", list->number(), 0600);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Controller>> Controller::Start(ControllerConfig config,
                                                              const ControllerOptions& options) {
  std::unique_ptr<Controller> c(new Controller());
  c->clock_ = options.clock != nullptr ? options.clock : &RealClock::Instance();
  c->config_file_ = config.file;
  c->listen_override_ = options.listen_override;
  if (!options.listen_override.empty()) config.listen = options.listen_override;

  ASSIGN_OR_RETURN(security::TlsMaterial material,
                   security::LoadTlsMaterial(config.tls, absl::Now()));
  if (material.identity.kind != security::PeerKind::kController) {
    return absl::InvalidArgumentError(
        fmt::format("{}: tls.cert {} is the certificate of {}, not of a controller", config.file,
                    config.tls.cert_file, material.identity.ToString()));
  }
  if (config.trust_domain.empty()) {
    config.trust_domain = material.identity.trust_domain;
  } else if (config.trust_domain != material.identity.trust_domain) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: trust_domain is {} but the controller certificate {} is of {}", config.file,
        config.trust_domain, config.tls.cert_file, material.identity.trust_domain));
  }
  c->ca_file_ = config.tls.ca_file;
  c->trust_domain_ = config.trust_domain;

  ASSIGN_OR_RETURN(LogLevel level, ParseLogLevel(config.log_level));
  ASSIGN_OR_RETURN(c->log_, JsonLog::Open(config.log_file, level,
                                          [clock = c->clock_] { return clock->UnixNanos(); }));
  c->metrics_ = std::make_unique<ControllerMetrics>();
  c->metrics_->replica_leading->Set(config.replicas ? 0 : 1);
  // A replica keeps its key ring and the operator's state in etcd, shared with the others, and
  // reads them when it comes to lead (ControllerCore::Lead); until then it holds a ring in
  // memory that it never hands out.
  std::shared_ptr<StateStore> state = StateDirStore(config);
  if (config.replicas) {
    RETURN_IF_ERROR(c->StartLeadership(config));
    state = c->leadership_->store();
  }
  ASSIGN_OR_RETURN(security::KeyRing keys,
                   KeyRingFor(config, c->clock_->UnixNanos(), config.replicas ? nullptr : state));
  c->log_->Info("data-plane keys",
                {{"ring", config.replicas    ? state->Where("overlay-keys.json")
                          : state == nullptr ? std::string("in memory: a restart makes new keys")
                                             : state->Where("overlay-keys.json")},
                 {"active", keys.active_id()},
                 {"phase", security::KeyPhaseName(keys.phase())}});
  ASSIGN_OR_RETURN(TableVersions versions,
                   TableVersions::Load(config.state_dir.empty() || config.replicas
                                           ? ""
                                           : config.state_dir + "/table-versions.json",
                                       c->clock_->UnixNanos()));
  c->log_->Info("table versions", {{"next", versions.next()}});
  c->core_ = std::make_unique<ControllerCore>(config, *c->clock_, *c->log_, *c->metrics_,
                                              /*publish_thread=*/options.cycle_thread,
                                              std::move(keys), std::move(versions), state);
  if (c->leadership_ != nullptr) {
    c->core_->SetReplica({[l = c->leadership_.get()] { return l->Leading(); },
                          [l = c->leadership_.get()] { return l->LeaderAddress(); }});
  }
  // A link end newly reported down: the cycle thread runs a cycle at once (before the server
  // starts, so that no agent's samples race the setting).
  c->core_->SetEarlyCycleRequest([p = c.get()] {
    {
      MutexLock lock(&p->thread_mu_);
      p->early_ = true;
    }
    p->thread_cv_.NotifyAll();
  });
  if (!config.replicas) RETURN_IF_ERROR(c->core_->RestoreOperatorState());
  ASSIGN_OR_RETURN(std::shared_ptr<const security::RevocationList> revoked,
                   LoadRevocations(config, config.tls.ca_file));
  RETURN_IF_ERROR(CheckCrlNumber(config, revoked.get()));
  RETURN_IF_ERROR(KeepCrlNumber(config, revoked.get()));
  c->core_->SetRevocations(std::move(revoked));
  c->agent_service_ =
      std::make_unique<AgentServiceImpl>(*c->core_, *c->clock_, *c->log_, config.hello_timeout);
  c->admin_service_ = std::make_unique<AdminServiceImpl>(*c->core_, *c->log_);

  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   security::MakeServerCredentials(config.tls, absl::Now()));
  grpc::ServerBuilder builder;
  // The controller accepts connections itself and hands them to gRPC, which has no cap on
  // them (connection_limiter.h).
  c->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  absl::StatusOr<std::unique_ptr<ConnectionLimiter>> limiter = ConnectionLimiter::Listen(
      config.listen, config.max_connections,
      [acceptor = c->acceptor_.get()](int listener_fd, int fd) {
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
        p.listener_fd = listener_fd;
        p.fd = fd;
        acceptor->HandleNewConnection(&p);
      },
      [counter = c->metrics_->connections_refused] { counter->Increment(); });
  if (!limiter.ok()) {
    return absl::UnavailableError(
        fmt::format("{}: {}", config.file, std::string(limiter.status().message())));
  }
  c->limiter_ = *std::move(limiter);
  c->port_ = c->limiter_->port();
  builder.RegisterService(c->agent_service_.get());
  builder.RegisterService(c->admin_service_.get());
  // Find agents that vanished without closing their stream.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Bounds against clients that connect and then stall (gRPC's defaults hold a handshake two
  // minutes and allow any number of streams): a TLS handshake must finish within 5 s; a
  // connection carries at most 8 streams at once (an agent needs one, darctl one at a time);
  // a connection with no call for 2 minutes is closed. Streams that send no hello are closed
  // by CloseSilentStreams, and at most AgentServiceImpl::kMaxStreamsWithoutHello wait at once.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kMaxConnectionIdleMs);
  c->server_ = builder.BuildAndStart();
  if (c->server_ == nullptr) {
    return absl::UnavailableError(
        fmt::format("{}: listen {}: cannot serve gRPC there", config.file, config.listen));
  }
  c->limiter_->Start();

  const auto healthy = [core = c->core_.get()] { return core->HealthProblem(); };
  const auto ready = [core = c->core_.get()] { return core->ReadinessProblem(); };
  const auto serve = [&](std::unique_ptr<net::HttpServer>& http, const std::string& address,
                         std::function<std::string()> metrics, int threads,
                         int* port) -> absl::Status {
    if (address.empty()) return absl::OkStatus();
    // A health listener answers one request a connection: an idle keep-alive client must not
    // hold one of its few threads.
    http = std::make_unique<net::HttpServer>(threads, metrics ? 100 : 1);
    if (metrics) {
      http->GetText("/metrics", std::move(metrics), "text/plain; version=0.0.4; charset=utf-8");
      AddWebView(*http, *c->core_);
    }
    http->GetProbe("/healthz", healthy, "ok\n");
    http->GetProbe("/readyz", ready, "ready\n");
    absl::StatusOr<int> bound = http->Start(address);
    if (!bound.ok()) {
      return absl::Status(
          bound.status().code(),
          fmt::format("{}: {}", config.file, std::string(bound.status().message())));
    }
    *port = *bound;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(serve(
      c->http_, config.http,
      [m = c->metrics_.get(), core = c->core_.get()] {
        return m->Serialize(TopologyFamilies(core->ListNodes(), core->ListLinks()));
      },
      /*threads=*/8, &c->http_port_));
  RETURN_IF_ERROR(serve(c->health_http_, config.health, nullptr, /*threads=*/2, &c->health_port_));

  c->core_->RunCycle();
  c->log_->Info("controller started", {{"version", VersionLine("dar-controller")},
                                       {"config", config.file},
                                       {"listen", config.listen},
                                       {"port", c->port_},
                                       {"http_port", c->http_port_},
                                       {"health_port", c->health_port_},
                                       {"trust_domain", c->trust_domain_},
                                       {"nodes", config.nodes.size()},
                                       {"links", config.links.size()},
                                       {"cycle_ms", config.policy.cycle.count() / 1000000},
                                       {"policy", c->core_->GetPolicy().learned().active()}});
  if (options.cycle_thread) c->cycle_thread_ = std::thread([p = c.get()] { p->CycleLoop(); });
  if (c->leadership_ != nullptr) c->leadership_->Start();
  return c;
}

absl::Status Controller::StartLeadership(const ControllerConfig& config) {
  const ControllerConfig::Replicas& r = *config.replicas;
  EtcdClientOptions etcd;
  etcd.endpoint = r.etcd;
  etcd.ca_file = r.etcd_ca;
  etcd.cert_file = r.etcd_cert;
  etcd.key_file = r.etcd_key;
  // A call must not outlast the part of the lease a leader keeps in reserve.
  etcd.timeout = std::min<Duration>(Milliseconds(500), r.lease / 4);
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(etcd);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        fmt::format("{}: replicas.etcd_tls: {}", config.file,
                                    std::string(client.status().message())));
  }
  LeadershipOptions options;
  options.prefix = r.prefix.empty() ? fmt::format("/dar/{}/", trust_domain_) : r.prefix;
  options.advertise = r.advertise;
  options.lease_ttl = r.lease;
  Leadership::Callbacks callbacks;
  callbacks.elected = [this](uint64_t term) -> absl::Status {
    // Without the shared key ring and drains it must not lead: agents would get other keys.
    RETURN_IF_ERROR(core_->Lead(term));
    metrics_->replica_term->Set(static_cast<double>(term));
    return absl::OkStatus();
  };
  callbacks.leading = [this] {
    metrics_->replica_leading->Set(1);
    {
      MutexLock lock(&thread_mu_);
      wake_ = true;  // the first tables of the term at once
    }
    thread_cv_.NotifyAll();
  };
  callbacks.lost = [this](const std::string& why) {
    metrics_->replica_leading->Set(0);
    core_->StepDown(why);
  };
  leadership_ =
      std::make_unique<Leadership>(std::move(options), *std::move(client), *log_, callbacks);
  log_->Info("replica",
             {{"etcd", r.etcd}, {"advertise", r.advertise}, {"lease_ms", ToMillis(r.lease)}});
  return absl::OkStatus();
}

Controller::~Controller() { Shutdown(); }

void Controller::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      MutexLock lock(&thread_mu_);
      stopping_ = true;
    }
    thread_cv_.NotifyAll();
    // A leader resigns first: another replica leads at once, not a lease later.
    if (leadership_ != nullptr) leadership_->Stop();
    if (cycle_thread_.joinable()) cycle_thread_.join();
    if (limiter_ != nullptr) limiter_->Stop();  // no new connections
    if (core_ != nullptr) core_->CloseAll(absl::UnavailableError("the controller is stopping"));
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
    if (http_ != nullptr) http_->Stop();
    if (health_http_ != nullptr) health_http_->Stop();
    if (log_ != nullptr) log_->Info("controller stopped");
  });
}

void Controller::CycleLoop() {
  using SteadyClock = std::chrono::steady_clock;
  thread_mu_.Lock();
  SteadyClock::time_point next = SteadyClock::now();
  SteadyClock::time_point last = next - core_->cycle_period();
  while (!stopping_) {
    next += core_->cycle_period();
    const SteadyClock::time_point now = SteadyClock::now();
    if (next < now) next = now;  // after a stall, do not run cycles back to back
    thread_cv_.WaitUntil(&thread_mu_, next, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(thread_mu_) {
      return stopping_ || wake_ || early_;
    });
    if (stopping_) break;
    if (early_ && !wake_) {
      // A link went down: a cycle now, but not sooner than a fifth of a period after the last
      // one, so that a storm of failures cannot keep the cycle thread busy back to back.
      const SteadyClock::time_point earliest = last + core_->cycle_period() / 5;
      thread_cv_.WaitUntil(
          &thread_mu_, std::min(earliest, next),
          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(thread_mu_) { return stopping_ || wake_; });
      if (stopping_) break;
    }
    // Afresh from now: the period may have changed (a reload), or this cycle came early.
    if (wake_ || early_) next = SteadyClock::now();
    if (early_ && !wake_) metrics_->early_cycles->Increment();
    wake_ = false;
    early_ = false;
    last = SteadyClock::now();
    thread_mu_.Unlock();
    core_->RunCycle();
    agent_service_->CloseSilentStreams();
    thread_mu_.Lock();
  }
  thread_mu_.Unlock();
}

absl::Status Controller::Apply(absl::StatusOr<ControllerConfig> next) {
  if (next.ok() && !next->trust_domain.empty() && next->trust_domain != trust_domain_) {
    next = absl::InvalidArgumentError(
        fmt::format("{}: trust_domain {} differs from the running one ({}); that needs a restart "
                    "with matching certificates",
                    next->file, next->trust_domain, trust_domain_));
  }
  const auto refuse = [this](const absl::Status& status) {
    metrics_->config_refused->Increment();
    log_->Error("configuration refused; the running one stays",
                {{"error", std::string(status.message())}});
    core_->RecordEvent("config_refused", "", std::string(status.message()));
    return status;
  };
  if (!next.ok()) return refuse(next.status());
  next->trust_domain = trust_domain_;
  if (!listen_override_.empty()) next->listen = listen_override_;
  // So does a revocation list that does not verify: the running list stays.
  absl::StatusOr<std::shared_ptr<const security::RevocationList>> revoked =
      LoadRevocations(*next, ca_file_);
  if (!revoked.ok()) return refuse(revoked.status());
  if (const std::shared_ptr<const security::RevocationList> running = core_->revocations();
      running != nullptr && (*revoked == nullptr || (*revoked)->number() < running->number())) {
    return refuse(absl::FailedPreconditionError(fmt::format(
        "{}: tls.crl: {} is older than the list running (number {}): an older list would take "
        "revocations back; the running list stays",
        next->file,
        *revoked == nullptr ? std::string("no list")
                            : fmt::format("list number {}", (*revoked)->number()),
        running->number())));
  }
  // A refused learned-policy model refuses the whole reload: the running model stays.
  if (absl::Status s = CheckCrlNumber(*next, revoked->get()); !s.ok()) return refuse(s);
  if (absl::Status s = core_->Reload(*next); !s.ok()) return refuse(s);
  if (absl::Status s = KeepCrlNumber(*next, revoked->get()); !s.ok()) {
    log_->Error("revocation list number not kept: a restart will not know it",
                {{"error", std::string(s.message())}});
  }
  core_->SetRevocations(*std::move(revoked));
  limiter_->set_max_connections(next->max_connections);
  {
    MutexLock lock(&thread_mu_);
    wake_ = true;
  }
  thread_cv_.NotifyAll();
  return absl::OkStatus();
}

absl::Status Controller::Reload() { return Apply(LoadControllerConfig(config_file_)); }

absl::Status Controller::ReloadFromText(const std::string& text, const std::string& file) {
  return Apply(ParseControllerConfig(text, file));
}

}  // namespace dar::control
