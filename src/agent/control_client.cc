#include "agent/control_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/relay.h"
#include "agent/saved_keys.h"
#include "fmt/format.h"
#include "grpcpp/client_context.h"
#include "security/tls.h"
#include "wire/link_sample_wire.h"

namespace dar::agent {
namespace {

constexpr ForwardingMode kAllModes[] = {ForwardingMode::kPerFlow,   ForwardingMode::kPerFlowlet,
                                        ForwardingMode::kPerPacket, ForwardingMode::kPerPacketP2C,
                                        ForwardingMode::kDrill,     ForwardingMode::kDrillFlowlet};

std::string Endpoint(net::Ipv4Address a, uint16_t port) {
  return fmt::format("{}:{}", net::ToString(a), port);
}

}  // namespace

ControlClient::ControlClient(const AgentConfig& config, TableStore& store,
                             DataplaneControl& dataplane, JsonLog& log,
                             const ControlClientOptions& options)
    : config_(config),
      store_(store),
      dataplane_(dataplane),
      log_(log),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock::Instance()),
      rng_(options_.seed),
      forwarding_(options_.forwarding),
      probe_interval_ns_(config.probe_interval.count()),
      missed_probes_(config.missed_probes) {}

ControlClient::~ControlClient() { Stop(); }

Time ControlClient::Now() const { return clock_.Now(); }

int64_t ControlClient::UnixNow() const { return clock_.UnixNanos(); }

absl::Status ControlClient::Start() {
  MutexLock lock(&mu_);
  if (started_) return absl::FailedPreconditionError("the control client was started before");
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ControlClient::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void ControlClient::NotifyLinkChange() {
  {
    MutexLock lock(&mu_);
    link_changed_ = true;
  }
  cv_.NotifyAll();
}

ControlClientStatus ControlClient::status() const {
  MutexLock lock(&mu_);
  return status_;
}

v1::Hello ControlClient::MakeHello() const {
  v1::Hello hello;
  hello.set_node_id(config_.self_node().id);
  hello.set_node_name(config_.self_node().name);
  for (const NeighbourConfig& n : config_.neighbours) {
    v1::LinkInfo* link = hello.add_links();
    link->set_neighbor_id(n.id);
    link->set_local_address(Endpoint(n.local_address, config_.data_port));
    link->set_remote_address(Endpoint(n.peer_address, config_.data_port));
    link->set_capacity_bps(static_cast<uint64_t>(config_.links[n.link].capacity.bps()));
  }
  v1::Capabilities* caps = hello.mutable_capabilities();
  for (const ForwardingMode m : kAllModes)
    caps->add_forwarding_modes(std::string(ForwardingModeName(m)));
  caps->set_delta_tables(true);
  caps->set_compact_tables(true);
  hello.set_installed_version(store_.installed_version());
  *hello.mutable_table_status() = table_status();
  return hello;
}

v1::TableStatus ControlClient::table_status() const {
  MutexLock lock(&install_mu_);
  return table_status_;
}

void ControlClient::Maintain() {
  // Held across taking and installing, so that two threads cannot install out of order.
  MutexLock lock(&install_mu_);
  const Time now = Now();
  std::shared_ptr<const AgentTables> t = store_.TakeChange(now);
  if (t != nullptr) {
    dataplane_.InstallTables(t);
    log_.Debug("tables installed", {{"version", t->version}, {"static", t->is_static}});
  }
  // From the store, not from `t`: whoever installed the first table (the agent's main does,
  // before the client starts), this says what the data plane has.
  table_status_.set_static_table(store_.Source(now) == TableSource::kStatic);
  const uint64_t fallbacks = static_cast<uint64_t>(store_.counters().fallbacks_to_static);
  if (fallbacks != table_status_.fallbacks()) {
    table_status_.set_fallbacks(fallbacks);
    table_status_.set_last_fallback_unix_ns(UnixNow());
  }
}

bool ControlClient::SendTableStatus(Stream& stream, v1::TableStatus* sent) {
  const v1::TableStatus now = table_status();
  if (now.static_table() == sent->static_table() && now.fallbacks() == sent->fallbacks()) {
    return true;
  }
  v1::AgentMessage m;
  *m.mutable_status() = now;
  if (!Send(stream, m)) return false;
  *sent = now;
  return true;
}

bool ControlClient::WaitWithMaintenance(std::chrono::steady_clock::time_point deadline) {
  const auto tick =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.probe_interval);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    {
      MutexLock lock(&mu_);
      if (cv_.WaitUntil(&mu_, std::min(deadline, now + tick),
                        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; })) {
        return false;
      }
    }
    Maintain();
  }
  MutexLock lock(&mu_);
  return !stop_;
}

Duration ControlClient::NextBackoff(int attempt) {
  Duration step = options_.backoff_min;
  for (int i = 0; i < attempt && step < options_.backoff_max; ++i) step *= 2;
  step = std::min(step, options_.backoff_max);
  // Uniform in [step / 2, step].
  return step / 2 + Duration(static_cast<int64_t>(rng_.Uniform() *
                                                  static_cast<double>((step - step / 2).count())));
}

void ControlClient::Run() {
  Maintain();
  int attempt = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
    }
    if (RunSession()) attempt = 0;
    const Duration wait = NextBackoff(attempt++);
    log_.Info("reconnecting to the controller",
              {{"controller", Target()}, {"in_ms", ToMillis(wait)}, {"attempt", attempt}});
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(wait);
    if (!WaitWithMaintenance(deadline)) return;
  }
}

void ControlClient::Fail(std::string error, bool answered) {
  MutexLock lock(&mu_);
  status_.last_error = std::move(error);
  status_.connected = false;
  if (answered) {
    ++status_.disconnects;
  } else {
    ++status_.connect_failures;
  }
}

bool ControlClient::RunSession() {
  security::ChannelTlsOptions tls;
  tls.files = config_.tls;
  tls.server_name = config_.controller_name;
  // The controller is who its certificate's identity says, not whichever certificate of the
  // cluster's CA lists its host name.
  tls.server_identity = config_.controller_id;
  tls.server_is_own_controller = true;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::CreateSecureChannel(Target(), tls, absl::FromUnixNanos(UnixNow()));
  if (!channel.ok()) {
    const std::string error = std::string(channel.status().message());
    log_.Error("cannot set up the channel to the controller",
               {{"controller", Target()}, {"error", error}});
    Fail(error, false);
    return false;
  }
  const Duration silence = Silence();
  // With replicas, one not connected within the silence timeout is given up for the next.
  if (config_.controllers.size() > 1 &&
      !ConnectWithin(**channel, silence, [this]() ABSL_LOCKS_EXCLUDED(mu_) {
        MutexLock lock(&mu_);
        return stop_;
      })) {
    {
      MutexLock lock(&mu_);
      if (stop_) return false;
    }
    const std::string error =
        fmt::format("{}: not connected within {:.0f} ms", Target(), ToMillis(silence));
    log_.Warn("cannot connect to the controller", {{"controller", Target()}, {"reason", error}});
    Fail(error, false);
    NextTarget(grpc::Status(grpc::StatusCode::UNAVAILABLE, error));
    return false;
  }
  std::unique_ptr<v1::AgentService::Stub> stub = v1::AgentService::NewStub(*channel);
  auto context = std::make_shared<grpc::ClientContext>();
  {
    MutexLock lock(&mu_);
    if (stop_) return false;
    context_ = context;
    reader_done_ = false;
    ++status_.streams;
  }
  answered_ = false;
  last_heard_ns_ = Now().count();
  std::unique_ptr<Stream> stream = stub->Connect(context.get());

  // A new stream reports what is sent from now on: bytes sent while disconnected are no
  // measure of one period's demand.
  sent_reported_ = dataplane_.SentBytes();
  v1::AgentMessage hello;
  *hello.mutable_hello() = MakeHello();
  v1::TableStatus status_sent = hello.hello().table_status();
  log_.Debug("hello",
             {{"controller", Target()}, {"installed_version", hello.hello().installed_version()}});
  bool healthy = Send(*stream, hello);

  std::thread reader;
  if (healthy) {
    reader = std::thread([this, &stream] {
      ReadLoop(*stream);
      {
        MutexLock lock(&mu_);
        reader_done_ = true;
      }
      cv_.NotifyAll();
    });
  }

  std::string why;
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      Duration(probe_interval_ns_.load()));
  auto next = std::chrono::steady_clock::now() + period;
  while (healthy) {
    bool early = false;
    {
      MutexLock lock(&mu_);
      cv_.WaitUntil(&mu_, next, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || reader_done_ || link_changed_;
      });
      if (stop_) {
        why = "stopped";
        break;
      }
      if (reader_done_) break;
      early = link_changed_ && std::chrono::steady_clock::now() < next;
      link_changed_ = false;
    }
    Maintain();
    if (!SendSamples(*stream) || !SendTableStatus(*stream, &status_sent)) {
      why = "cannot send samples or table status";
      break;
    }
    if (Now().count() - last_heard_ns_.load() > silence.count()) {
      why = fmt::format("the controller sent nothing for {:.0f} ms", ToMillis(silence));
      break;
    }
    if (early) continue;  // a link changed: sent now, and again on the usual tick
    next += period;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + period;
  }
  {
    MutexLock lock(&mu_);
    if (!reader_done_ || !healthy) context->TryCancel();
  }
  if (reader.joinable()) reader.join();
  const grpc::Status status = stream->Finish();
  {
    MutexLock lock(&mu_);
    context_ = nullptr;
  }
  const bool answered = answered_.load();
  if (why.empty()) {
    why = status.ok() ? "the controller closed the stream"
                      : fmt::format("{} (code {})", status.error_message(),
                                    static_cast<int>(status.error_code()));
  }
  if (why != "stopped") {
    if (answered) {
      log_.Warn("disconnected from the controller", {{"controller", Target()}, {"reason", why}});
    } else {
      log_.Warn("cannot connect to the controller", {{"controller", Target()}, {"reason", why}});
    }
  }
  Fail(why, answered);
  NextTarget(status);
  return answered;
}

Duration ControlClient::Silence() const {
  if (config_.controllers.size() < 2) return options_.silence_timeout;
  return std::clamp(store_.stale_after() / 3,
                    std::min(options_.replica_silence_timeout, options_.silence_timeout),
                    options_.silence_timeout);
}

void ControlClient::NextTarget(const grpc::Status& status) {
  target_ = NextReplica(config_.controllers, target_, status.error_message());
}

bool ControlClient::Send(Stream& stream, const v1::AgentMessage& message) {
  MutexLock lock(&write_mu_);
  return stream.Write(message);
}

bool ControlClient::SendSamples(Stream& stream) {
  const std::vector<NeighbourSample> samples = dataplane_.Samples(Now());
  if (samples.empty()) return true;
  const int64_t unix_now = UnixNow();
  v1::AgentMessage m;
  v1::LinkSamples* out = m.mutable_samples();
  for (const NeighbourSample& s : samples) {
    if (s.neighbour < 0 || s.neighbour >= static_cast<NodeId>(config_.nodes.size())) continue;
    v1::LinkSample* x = out->add_samples();
    x->set_neighbor_id(config_.nodes[s.neighbour].id);
    x->set_time_unix_ns(unix_now);
    wire::ToWire(s.sample, x);
    x->set_probes_sent(s.probes_sent);
    x->set_probes_answered(s.probes_answered);
  }
  // What the node sent per destination since the last samples (the run thread's alone).
  const std::vector<uint64_t> sent = dataplane_.SentBytes();
  sent_reported_.resize(sent.size(), 0);
  for (size_t d = 0; d < sent.size() && d < config_.nodes.size(); ++d) {
    if (sent[d] <= sent_reported_[d]) continue;
    v1::SentBytes* x = out->add_sent();
    x->set_destination_id(config_.nodes[d].id);
    x->set_bytes(sent[d] - sent_reported_[d]);
  }
  if (!Send(stream, m)) return false;
  sent_reported_ = sent;
  MutexLock lock(&mu_);
  ++status_.samples_sent;
  return true;
}

void ControlClient::ReadLoop(Stream& stream) {
  v1::ControllerMessage message;
  while (stream.Read(&message)) {
    last_heard_ns_ = Now().count();
    if (!answered_.exchange(true)) {
      {
        MutexLock lock(&mu_);
        status_.connected = true;
      }
      log_.Info("connected to the controller",
                {{"controller", Target()}, {"installed_version", store_.installed_version()}});
    }
    switch (message.kind_case()) {
      case v1::ControllerMessage::kConfig:
        HandleConfig(message.config());
        break;
      case v1::ControllerMessage::kTable:
        HandleTable(stream, message.table());
        break;
      case v1::ControllerMessage::KIND_NOT_SET:
        log_.Warn("a message from the controller without content: ignored");
        break;
    }
  }
}

void ControlClient::HandleConfig(const v1::AgentConfig& c) {
  {
    MutexLock lock(&mu_);
    ++status_.configs;
  }
  nlohmann::json applied = nlohmann::json::object();
  if (c.table_stale_ms() > 0) {
    store_.set_stale_after(Milliseconds(c.table_stale_ms()));
    applied["table_stale_ms"] = c.table_stale_ms();
  }
  if (!c.forwarding_mode().empty()) {
    absl::StatusOr<ForwardingMode> mode = ParseForwardingMode(c.forwarding_mode());
    if (!mode.ok()) {
      log_.Error("config: forwarding mode not applied",
                 {{"forwarding_mode", c.forwarding_mode()},
                  {"error", std::string(mode.status().message())}});
    } else if (*mode != forwarding_.mode) {
      ForwardingConfig next = forwarding_;
      next.mode = *mode;
      if (absl::Status s = dataplane_.SetForwarding(next); !s.ok()) {
        log_.Error("config: forwarding mode not applied",
                   {{"forwarding_mode", c.forwarding_mode()}, {"error", std::string(s.message())}});
      } else {
        forwarding_ = next;
        applied["forwarding_mode"] = c.forwarding_mode();
      }
    }
  }
  if (!c.keys().empty()) {
    absl::StatusOr<std::vector<KeyUpdate>> keys = ToKeyUpdates(c.keys());
    absl::Status s = keys.ok() ? dataplane_.SetKeys(*keys) : keys.status();
    if (!s.ok()) {
      log_.Error("config: data-plane keys not applied", {{"error", std::string(s.message())}});
    } else {
      applied["keys"] = KeyIds(*keys);
      // For a restart before the controller is back (saved_keys.h).
      if (absl::Status saved = SaveKeys(config_.state_dir, c.keys()); !saved.ok()) {
        log_.Error("config: data-plane keys not saved", {{"error", std::string(saved.message())}});
      }
    }
  }
  // Probe settings: the controller's word, from the next probe on (0 keeps the current one).
  const Duration current(probe_interval_ns_.load());
  const Duration interval =
      c.probe_interval_ms() != 0 ? Milliseconds(c.probe_interval_ms()) : current;
  const int missed = c.missed_probes() != 0 ? static_cast<int>(c.missed_probes()) : missed_probes_;
  if (interval != current || missed != missed_probes_) {
    if (absl::Status s = dataplane_.SetProbeSettings(interval, missed); !s.ok()) {
      log_.Error("config: probe settings not applied", {{"error", std::string(s.message())}});
    } else {
      probe_interval_ns_.store(interval.count());
      missed_probes_ = missed;
      applied["probe_interval_ms"] = c.probe_interval_ms();
      applied["missed_probes"] = missed;
    }
  }
  for (const v1::OverlayNode& n : c.nodes()) {
    const NodeId i = config_.FindNode(n.node_id());
    if (i == kNoNode || net::ToString(config_.nodes[i].overlay) != n.overlay_address()) {
      log_.Warn("config: the controller's overlay differs from the config file",
                {{"node_id", n.node_id()}, {"overlay_address", n.overlay_address()}});
    }
  }
  log_.Info("config from the controller", applied);
}

void ControlClient::HandleTable(Stream& stream, const v1::RouteTable& table) {
  const absl::Status s = store_.Offer(table, Now());
  if (s.ok()) Maintain();  // forward with it before saying so
  v1::AgentMessage m;
  v1::TableAck* ack = m.mutable_ack();
  ack->set_version(table.version());
  ack->set_accepted(s.ok());
  if (!s.ok()) {
    ack->set_reason(std::string(s.message()));
    ack->set_compact_refused(IsCompactFormRefusal(s));
  }
  {
    MutexLock lock(&mu_);
    ++(s.ok() ? status_.tables_accepted : status_.tables_refused);
  }
  Send(stream, m);
}

}  // namespace dar::agent
