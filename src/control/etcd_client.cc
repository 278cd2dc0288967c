#include "control/etcd_client.h"

#include <chrono>
#include <cmath>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "grpcpp/grpcpp.h"

namespace dar::control {

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.ca_file, kMaxConfigFileBytes));
    if (!options.cert_file.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile(options.cert_file, kMaxConfigFileBytes));
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(options.key_file, kMaxConfigFileBytes));
    }
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Every call has a deadline well inside a lease, which is how a replica notices an etcd that
  // stopped answering (gRPC keep-alive pings would be refused: etcd allows one per 5 s). After
  // a failure, a reconnection is tried at least twice a second. (The minimum connect timeout,
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, stays at gRPC's 20 s: cut short, connections to etcd
  // never come up.)
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.endpoint, credentials, args);
  std::unique_ptr<EtcdClient> c(new EtcdClient(options));
  c->kv_ = etcdserverpb::KV::NewStub(channel);
  c->lease_ = etcdserverpb::Lease::NewStub(channel);
  c->election_ = v3electionpb::Election::NewStub(channel);
  return c;
}

std::unique_ptr<grpc::ClientContext> EtcdClient::Context(Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::nanoseconds(timeout.count()));
  return context;
}

absl::Status EtcdClient::Error(const char* what, const grpc::Status& status) const {
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      fmt::format("etcd {}: {}: {}", options_.endpoint, what, status.error_message()));
}

absl::StatusOr<std::pair<int64_t, Duration>> EtcdClient::GrantLease(Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ToSeconds(ttl)))));
  etcdserverpb::LeaseGrantResponse response;
  const grpc::Status s = lease_->LeaseGrant(Context(options_.timeout).get(), request, &response);
  if (!s.ok()) return Error("lease grant", s);
  if (!response.error().empty()) {
    return absl::UnavailableError(
        fmt::format("etcd {}: lease grant: {}", options_.endpoint, response.error()));
  }
  return std::make_pair(response.id(), Seconds(response.ttl()));
}

absl::StatusOr<Duration> EtcdClient::KeepAlive(int64_t lease) {
  std::unique_ptr<grpc::ClientContext> context = Context(options_.timeout);
  auto stream = lease_->LeaseKeepAlive(context.get());
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  const bool ok = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  const grpc::Status s = stream->Finish();
  if (!ok || !s.ok()) {
    return Error("lease keep-alive", s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                           "the stream closed without an answer")
                                            : s);
  }
  if (response.ttl() <= 0) {
    return absl::NotFoundError(
        fmt::format("etcd {}: lease {:x} has expired", options_.endpoint, lease));
  }
  return Seconds(response.ttl());
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  const grpc::Status s = lease_->LeaseRevoke(Context(options_.timeout).get(), request, &response);
  return s.ok() ? absl::OkStatus() : Error("lease revoke", s);
}

absl::StatusOr<EtcdLeaderKey> EtcdClient::Campaign(const std::string& name, int64_t lease,
                                                   const std::string& value, Duration max_wait) {
  v3electionpb::CampaignRequest request;
  request.set_name(name);
  request.set_lease(lease);
  request.set_value(value);
  v3electionpb::CampaignResponse response;
  std::unique_ptr<grpc::ClientContext> context = Context(max_wait);
  {
    MutexLock lock(&mu_);
    if (std::exchange(cancelled_, false)) {
      return absl::CancelledError(fmt::format("etcd {}: campaign: cancelled", options_.endpoint));
    }
    campaign_ = context.get();
  }
  const grpc::Status s = election_->Campaign(context.get(), request, &response);
  {
    MutexLock lock(&mu_);
    campaign_ = nullptr;
  }
  if (!s.ok()) return Error("campaign", s);
  EtcdLeaderKey key;
  key.name = response.leader().name();
  key.key = response.leader().key();
  key.rev = response.leader().rev();
  key.lease = response.leader().lease();
  return key;
}

void EtcdClient::Cancel() {
  MutexLock lock(&mu_);
  if (campaign_ != nullptr) {
    campaign_->TryCancel();
  } else {
    cancelled_ = true;
  }
}

absl::StatusOr<std::optional<std::string>> EtcdClient::Leader(const std::string& name) {
  v3electionpb::LeaderRequest request;
  request.set_name(name);
  v3electionpb::LeaderResponse response;
  const grpc::Status s = election_->Leader(Context(options_.timeout).get(), request, &response);
  // etcd answers "election: no leader" with NOT_FOUND (or UNKNOWN in older versions).
  if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
      (!s.ok() && s.error_message().find("no leader") != std::string::npos)) {
    return std::nullopt;
  }
  if (!s.ok()) return Error("leader", s);
  if (!response.has_kv()) return std::nullopt;
  return std::optional<std::string>(response.kv().value());
}

absl::Status EtcdClient::Resign(const EtcdLeaderKey& leader) {
  v3electionpb::ResignRequest request;
  request.mutable_leader()->set_name(leader.name);
  request.mutable_leader()->set_key(leader.key);
  request.mutable_leader()->set_rev(leader.rev);
  request.mutable_leader()->set_lease(leader.lease);
  v3electionpb::ResignResponse response;
  const grpc::Status s = election_->Resign(Context(options_.timeout).get(), request, &response);
  return s.ok() ? absl::OkStatus() : Error("resign", s);
}

absl::StatusOr<std::optional<EtcdClient::Value>> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  const grpc::Status s = kv_->Range(Context(options_.timeout).get(), request, &response);
  if (!s.ok()) return Error("get", s);
  if (response.kvs_size() == 0) return std::nullopt;
  return std::optional<Value>(Value{response.kvs(0).value(), response.kvs(0).mod_revision()});
}

absl::StatusOr<bool> EtcdClient::PutIf(const EtcdLeaderKey& leader, const std::string& key,
                                       const std::string& value, std::optional<int64_t> expect) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* leads = request.add_compare();
  leads->set_key(leader.key);
  leads->set_target(etcdserverpb::Compare::CREATE);
  leads->set_result(etcdserverpb::Compare::EQUAL);
  leads->set_create_revision(leader.rev);
  if (expect) {
    etcdserverpb::Compare* current = request.add_compare();
    current->set_key(key);
    current->set_target(etcdserverpb::Compare::MOD);
    current->set_result(etcdserverpb::Compare::EQUAL);
    current->set_mod_revision(*expect);
  }
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  etcdserverpb::TxnResponse response;
  const grpc::Status s = kv_->Txn(Context(options_.timeout).get(), request, &response);
  if (!s.ok()) return Error("put", s);
  return response.succeeded();
}

}  // namespace dar::control
