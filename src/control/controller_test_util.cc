#include "control/controller_test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "security/certs.h"

namespace dar::control::testing {

absl::StatusOr<std::unique_ptr<TestPki>> TestPki::Create() {
  std::unique_ptr<TestPki> pki(new TestPki());
  if (pki->dir().empty()) return absl::InternalError("cannot create a temporary directory");
  security::InitCertDirOptions o;
  o.dir = pki->dir();
  o.trust_domain = kTestDomain;
  o.not_before = absl::Now() - absl::Hours(1);
  o.not_after = absl::Now() + absl::Hours(24);
  RETURN_IF_ERROR(security::InitCertDir(o));
  return pki;
}

absl::StatusOr<security::TlsFiles> TestPki::Files(const security::SpiffeId& id) {
  security::TlsFiles f{dir_.File(security::CertFileName(id)), dir_.File(security::KeyFileName(id)),
                       dir_.File(std::string(security::kCaCertFile))};
  if (!std::filesystem::exists(f.cert_file)) {
    security::IssueOptions o;
    o.dir = dir();
    o.kind = id.kind;
    o.name = id.name;
    o.not_before = absl::Now() - absl::Hours(1);
    o.not_after = absl::Now() + absl::Hours(24);
    ASSIGN_OR_RETURN(security::IssuedCertificate issued, security::IssueFromCertDir(o));
    (void)issued;
  }
  return f;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> TestPki::Channel(const security::SpiffeId& id,
                                                                int port) {
  ASSIGN_OR_RETURN(security::TlsFiles files, Files(id));
  security::ChannelTlsOptions options{files, "localhost"};
  return security::CreateSecureChannel(fmt::format("127.0.0.1:{}", port), options, absl::Now());
}

ControllerConfig FatTreeConfig(bool stub_hosts) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  ControllerConfig c;
  c.stub_hosts = stub_hosts;
  for (NodeId v = 0; v < topo.num_nodes(); ++v) {
    c.nodes.push_back(
        {static_cast<uint32_t>(v + 1), topo.node(v).name, fmt::format("10.77.0.{}", v + 1)});
  }
  for (const Link& l : topo.links()) {
    if (l.src < l.dst) {
      c.links.push_back(
          {c.nodes[l.src].name, c.nodes[l.dst].name, DataRate::Gbps(1), std::nullopt});
    }
  }
  return c;
}

ControllerConfig MakeTestConfig(const TestPki& pki, int nodes,
                                const std::vector<std::pair<int, int>>& links,
                                const std::string& log_file) {
  ControllerConfig c;
  c.file = "test.yaml";
  c.listen = "127.0.0.1:0";
  const security::SpiffeId controller = security::SpiffeId::Controller(kTestDomain);
  c.tls = security::TlsFiles{fmt::format("{}/{}", pki.dir(), security::CertFileName(controller)),
                             fmt::format("{}/{}", pki.dir(), security::KeyFileName(controller)),
                             fmt::format("{}/{}", pki.dir(), security::kCaCertFile)};
  c.log_file = log_file;
  c.log_level = "warn";
  c.policy.routes = DefaultControllerRoutes();
  for (int i = 0; i < nodes; ++i) {
    c.nodes.push_back(
        ControllerNodeConfig{static_cast<uint32_t>(i + 1), fmt::format("n{}", i + 1),
                             fmt::format("10.77.{}.{}", (i + 1) / 250, (i + 1) % 250 + 1)});
  }
  for (const auto& [a, b] : links) {
    c.links.push_back(
        ControllerLinkConfig{c.nodes[a].name, c.nodes[b].name, DataRate::Gbps(1), std::nullopt});
  }
  c.policy.routes.horizon_periods = HorizonPeriods(c);
  // As a configuration file without the key gets it: every node's agent can connect.
  c.max_connections = DefaultMaxConnections(nodes);
  return c;
}

std::string TestConfigYaml(const TestPki& pki, int nodes,
                           const std::vector<std::pair<int, int>>& links) {
  const ControllerConfig c = MakeTestConfig(pki, nodes, links);
  std::string out = fmt::format(
      "listen: 127.0.0.1:0\ntls: {{cert: {}, key: {}, ca: {}}}\nlog_level: warn\nnodes:\n",
      c.tls.cert_file, c.tls.key_file, c.tls.ca_file);
  for (const ControllerNodeConfig& n : c.nodes) {
    out += fmt::format("  - {{id: {}, name: {}, overlay: {}}}\n", n.id, n.name, n.overlay_address);
  }
  out += "links:\n";
  for (const ControllerLinkConfig& l : c.links) {
    out += fmt::format("  - {{a: {}, b: {}, capacity_gbps: 1}}\n", l.a, l.b);
  }
  return out;
}

TestAgent::TestAgent(const std::shared_ptr<grpc::Channel>& channel, TableHandler on_table,
                     bool keep_messages)
    : stub_(v1::AgentService::NewStub(channel)),
      on_table_(std::move(on_table)),
      keep_messages_(keep_messages) {
  stub_->async()->Connect(&context_, this);
  StartRead(&in_);
  StartCall();
}

TestAgent::~TestAgent() {
  context_.TryCancel();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_.has_value(); });
}

void TestAgent::Send(v1::AgentMessage message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  outbox_.push_back(std::move(message));
  if (!writing_) WriteNextLocked();
}

size_t TestAgent::unsent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outbox_.size();
}

void TestAgent::SendHello(uint32_t node_id, const std::vector<uint32_t>& neighbours,
                          bool delta_tables, uint64_t installed_version, bool compact_tables) {
  v1::AgentMessage m;
  v1::Hello* h = m.mutable_hello();
  h->set_node_id(node_id);
  h->set_node_name(fmt::format("n{}", node_id));
  for (uint32_t nb : neighbours) h->add_links()->set_neighbor_id(nb);
  h->mutable_capabilities()->add_forwarding_modes("per_flowlet");
  h->mutable_capabilities()->set_delta_tables(delta_tables);
  h->mutable_capabilities()->set_compact_tables(compact_tables);
  h->set_installed_version(installed_version);
  Send(std::move(m));
}

void TestAgent::SendAck(uint64_t version, bool accepted, const std::string& reason) {
  v1::AgentMessage m;
  m.mutable_ack()->set_version(version);
  m.mutable_ack()->set_accepted(accepted);
  m.mutable_ack()->set_reason(reason);
  Send(std::move(m));
}

void TestAgent::WriteNextLocked() {
  if (outbox_.empty()) return;
  writing_ = true;
  StartWrite(&outbox_.front());
}

void TestAgent::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.pop_front();
  writing_ = false;
  if (ok) WriteNextLocked();
}

void TestAgent::OnReadDone(bool ok) {
  if (!ok) return;
  std::optional<v1::TableAck> ack;
  if (in_.has_table() && on_table_) ack = on_table_(in_.table());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++received_;
    if (keep_messages_) messages_.push_back(in_);
  }
  cv_.notify_all();
  if (ack) {
    v1::AgentMessage m;
    *m.mutable_ack() = *ack;
    Send(std::move(m));
  }
  StartRead(&in_);
}

void TestAgent::OnDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = status;
  }
  cv_.notify_all();
}

std::optional<v1::ControllerMessage> TestAgent::WaitFor(
    const std::function<bool(const v1::ControllerMessage&)>& pred, size_t* cursor,
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<v1::ControllerMessage> found;
  cv_.wait_for(lock, timeout, [&] {
    for (; *cursor < messages_.size(); ++*cursor) {
      if (pred(messages_[*cursor])) {
        found = messages_[(*cursor)++];
        return true;
      }
    }
    return done_.has_value();
  });
  return found;
}

std::optional<grpc::Status> TestAgent::WaitDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return done_.has_value(); });
  return done_;
}

size_t TestAgent::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

absl::Status ApplyTable(const v1::RouteTable& table, uint64_t held_version, HeldRoutes& held) {
  if (table.base_version() == 0) {
    held.clear();
  } else if (table.base_version() != held_version) {
    return absl::FailedPreconditionError(fmt::format("delta v{} is against v{}, but v{} is held",
                                                     table.version(), table.base_version(),
                                                     held_version));
  }
  for (const v1::RouteKey& k : table.removed()) {
    held.erase({k.destination_id(), k.traffic_class()});
  }
  for (const v1::Route& r : table.routes()) held[{r.destination_id(), r.traffic_class()}] = r;
  return absl::OkStatus();
}

}  // namespace dar::control::testing
