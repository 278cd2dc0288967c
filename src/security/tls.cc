#include "security/tls.h"

#include <openssl/conf.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "security/certs.h"

namespace dar::security {
namespace {

// The OpenSSL configuration EnforceTls13 loads. "Protocol" sets the SSL_OP_NO_* options;
// "MinProtocol" is there for SSL_CTXs that nobody else bounds. The cipher string pins security
// level 2 (Debian's default: keys of at least 112 bits, no SHA-1 signatures), whatever a
// replaced system_default section said.
constexpr char kTls13Config[] =
    "dar_tls = dar_tls_modules\n"
    "[dar_tls_modules]\n"
    "ssl_conf = dar_ssl_conf\n"
    "[dar_ssl_conf]\n"
    "system_default = dar_tls13_only\n"
    "[dar_tls13_only]\n"
    "Protocol = -ALL, TLSv1.3\n"
    "MinProtocol = TLSv1.3\n"
    "CipherString = DEFAULT:@SECLEVEL=2\n";

constexpr uint64_t kOlderVersions =
    SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_TLSv1_2;

struct StoreDeleter {
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
};
struct StoreCtxDeleter {
  void operator()(X509_STORE_CTX* ctx) const { X509_STORE_CTX_free(ctx); }
};
struct StackDeleter {
  // Frees the stack only; its certificates are borrowed.
  void operator()(STACK_OF(X509) * stack) const { sk_X509_free(stack); }
};

// Checks that `leaf` (with the intermediates `chain[1..]`) chains to one of `cas` at `now`.
absl::Status VerifyChain(const std::vector<X509Ptr>& chain, const std::vector<X509Ptr>& cas,
                         absl::Time now, const TlsFiles& files) {
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxDeleter> verify(X509_STORE_CTX_new());
  std::unique_ptr<STACK_OF(X509), StackDeleter> untrusted(sk_X509_new_null());
  if (store == nullptr || verify == nullptr || untrusted == nullptr) {
    return absl::InternalError(fmt::format("allocating a verifier: {}", DrainOpenSslErrors()));
  }
  for (size_t i = 0; i < cas.size(); ++i) {
    if (!X509_STORE_add_cert(store.get(), cas[i].get())) {
      return absl::InvalidArgumentError(fmt::format("{}: cannot use CA certificate #{}: {}",
                                                    files.ca_file, i + 1, DrainOpenSslErrors()));
    }
  }
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted.get(), chain[i].get());
  if (!X509_STORE_CTX_init(verify.get(), store.get(), chain.front().get(), untrusted.get())) {
    return absl::InternalError(fmt::format("initialising a verifier: {}", DrainOpenSslErrors()));
  }
  X509_STORE_CTX_set_time(verify.get(), 0, absl::ToTimeT(now));
  if (X509_verify_cert(verify.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format(
        "the certificate in {} does not chain to the CA bundle {}: {}", files.cert_file,
        files.ca_file, X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get()))));
  }
  return absl::OkStatus();
}

absl::Status LoadTls13Config() {
  // Load the default configuration now: OpenSSL loads it only once, and a later implicit load
  // would replace the ssl_conf section installed below.
  if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) {
    return absl::InternalError(
        fmt::format("EnforceTls13: initialising OpenSSL failed: {}", DrainOpenSslErrors()));
  }
  BIO* bio = BIO_new_mem_buf(kTls13Config, -1);
  CONF* conf = NCONF_new(nullptr);
  long error_line = 0;
  absl::Status status;
  if (bio == nullptr || conf == nullptr || NCONF_load_bio(conf, bio, &error_line) <= 0) {
    status = absl::InternalError(
        fmt::format("EnforceTls13: parsing the configuration failed at line {}: {}", error_line,
                    DrainOpenSslErrors()));
  } else if (CONF_modules_load(conf, "dar_tls", 0) <= 0) {
    status = absl::InternalError(
        fmt::format("EnforceTls13: loading the configuration failed: {}", DrainOpenSslErrors()));
  }
  NCONF_free(conf);
  BIO_free(bio);
  if (!status.ok()) return status;

  // Check the effect on a fresh context, as gRPC will create them.
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) {
    return absl::InternalError(
        fmt::format("EnforceTls13: SSL_CTX_new failed: {}", DrainOpenSslErrors()));
  }
  const uint64_t options = SSL_CTX_get_options(ctx);
  SSL_CTX_free(ctx);
  if ((options & kOlderVersions) != kOlderVersions || (options & SSL_OP_NO_TLSv1_3) != 0) {
    return absl::FailedPreconditionError(fmt::format(
        "EnforceTls13: a new SSL_CTX has options {:#x}, expected every version but TLS 1.3 "
        "disabled; is another ssl_conf module overriding the configuration?",
        options));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnforceTls13() {
  // Deliberately never destroyed: the result outlives every caller.
  static const absl::Status* const result = new absl::Status(LoadTls13Config());
  return *result;
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files, absl::Time now) {
  TlsMaterial material;
  ASSIGN_OR_RETURN(material.cert_chain_pem, ReadFile(files.cert_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(material.key_pem, ReadFile(files.key_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(material.ca_pem, ReadFile(files.ca_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> chain,
                   ParseCertificatesPem(material.cert_chain_pem, files.cert_file));
  ASSIGN_OR_RETURN(EvpPkeyPtr key, ParsePrivateKeyPem(material.key_pem, files.key_file));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> cas, ParseCertificatesPem(material.ca_pem, files.ca_file));
  X509* leaf = chain.front().get();

  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format(
        "the key in {} does not belong to the certificate in {}", files.key_file, files.cert_file));
  }
  ASSIGN_OR_RETURN(const absl::Time not_before, NotBefore(leaf));
  ASSIGN_OR_RETURN(material.not_after, NotAfter(leaf));
  if (now < not_before) {
    return absl::FailedPreconditionError(fmt::format("the certificate in {} is not valid before {}",
                                                     files.cert_file, FormatCertTime(not_before)));
  }
  if (now > material.not_after) {
    return absl::FailedPreconditionError(fmt::format("the certificate in {} expired at {}",
                                                     files.cert_file,
                                                     FormatCertTime(material.not_after)));
  }

  // Verify the chain as a peer will, at `now`.
  RETURN_IF_ERROR(VerifyChain(chain, cas, now, files));

  const std::vector<std::string> uris = UriSans(leaf);
  if (uris.size() != 1) {
    return absl::InvalidArgumentError(
        fmt::format("the certificate in {} has {} URI SANs; a DAR identity has exactly one",
                    files.cert_file, uris.size()));
  }
  absl::StatusOr<SpiffeId> identity = ParseSpiffeId(uris[0]);
  if (!identity.ok()) {
    return absl::InvalidArgumentError(fmt::format("the certificate in {}: {}", files.cert_file,
                                                  std::string(identity.status().message())));
  }
  material.identity = *std::move(identity);
  return material;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, absl::Time now) {
  RETURN_IF_ERROR(EnforceTls13());
  ASSIGN_OR_RETURN(TlsMaterial material, LoadTlsMaterial(files, now));
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = std::move(material.ca_pem);
  options.pem_key_cert_pairs.push_back(
      {std::move(material.key_pem), std::move(material.cert_chain_pem)});
  return grpc::SslServerCredentials(options);
}

namespace {

// Passes a server whose certificate (already verified against the CA bundle) carries exactly
// one URI SAN, the expected identity. Synchronous.
class ServerIdentityVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ServerIdentityVerifier(std::string expected) : expected_(std::move(expected)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const std::vector<grpc::string_ref> uris = request->uri_names();
    if (uris.size() == 1 && std::string_view(uris[0].data(), uris[0].size()) == expected_) {
      *sync_status = grpc::Status::OK;
    } else {
      std::string seen;
      for (const grpc::string_ref& u : uris) {
        seen += (seen.empty() ? "" : ", ") + std::string(u.data(), u.size());
      }
      *sync_status = grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          fmt::format("the server's certificate is {}, not {}",
                      seen.empty() ? std::string("without a URI SAN") : seen, expected_));
    }
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest* /*request*/) override {}

 private:
  const std::string expected_;
};

}  // namespace

absl::StatusOr<ChannelSecurity> MakeChannelSecurity(const ChannelTlsOptions& options,
                                                    absl::Time now) {
  RETURN_IF_ERROR(EnforceTls13());
  ASSIGN_OR_RETURN(TlsMaterial material, LoadTlsMaterial(options.files, now));
  std::optional<SpiffeId> server_identity = options.server_identity;
  if (!server_identity && options.server_is_own_controller) {
    server_identity = SpiffeId::Controller(material.identity.trust_domain);
  }
  if (server_identity) {
    // gRPC's TLS credentials: the same OpenSSL handshake (so TLS 1.3 only, as above) and chain
    // verification, then the identity check in place of the host name's.
    auto provider = std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
        material.ca_pem, std::vector<grpc::experimental::IdentityKeyCertPair>{
                             {material.key_pem, material.cert_chain_pem}});
    grpc::experimental::TlsChannelCredentialsOptions tls;
    tls.set_certificate_provider(std::move(provider));
    tls.watch_root_certs();
    tls.watch_identity_key_cert_pairs();
    tls.set_verify_server_certs(true);
    tls.set_check_call_host(false);
    tls.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<ServerIdentityVerifier>(
            server_identity->ToString()));
    ChannelSecurity security;
    security.credentials = grpc::experimental::TlsCredentials(tls);
    if (!options.server_name.empty()) {
      security.arguments.SetSslTargetNameOverride(options.server_name);
    }
    return security;
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = std::move(material.ca_pem);
  ssl.pem_private_key = std::move(material.key_pem);
  ssl.pem_cert_chain = std::move(material.cert_chain_pem);
  ChannelSecurity security;
  security.credentials = grpc::SslCredentials(ssl);
  if (!options.server_name.empty()) {
    security.arguments.SetSslTargetNameOverride(options.server_name);
  }
  return security;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(const std::string& target,
                                                                   const ChannelTlsOptions& options,
                                                                   absl::Time now) {
  ASSIGN_OR_RETURN(ChannelSecurity security, MakeChannelSecurity(options, now));
  return grpc::CreateCustomChannel(target, security.credentials, security.arguments);
}

}  // namespace dar::security
