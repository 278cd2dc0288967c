// Mutual TLS 1.3 for every gRPC connection of a DAR process: server and channel credentials
// from PEM files, and the process-wide switch that makes TLS 1.3 the only version.
//
// Why EnforceTls13 works. gRPC 1.51 (Debian) links the system OpenSSL 3 and offers no public
// C++ setting for the TLS version; its TSI layer calls SSL_CTX_set_min_proto_version(TLS 1.2)
// and SSL_CTX_set_max_proto_version(TLS 1.3) on every SSL_CTX it makes, which overrides a
// `MinProtocol` from an OpenSSL configuration. But OpenSSL also applies the "system_default"
// section of its ssl_conf module inside SSL_CTX_new, and a `Protocol = -ALL, TLSv1.3` command
// there sets the options SSL_OP_NO_TLSv1 ... SSL_OP_NO_TLSv1_2. Those options are separate from
// the min/max bounds: gRPC only ever adds options (libgrpc imports SSL_CTX_set_options but
// neither SSL_CTX_clear_options nor SSL_clear_options), and OpenSSL's version negotiation
// refuses a version whose SSL_OP_NO_* option is set, whatever the bounds say. Our servers
// therefore fail a TLS 1.2 ClientHello ("unsupported protocol"; gRPC closes the connection
// without flushing the alert, so the client sees EOF), and our clients offer only TLS 1.3.
//
// EnforceTls13 installs such a configuration in-process, from memory (no file, no environment
// variable): it first lets OpenSSL load its default configuration (so that a later implicit load
// cannot replace ours), then loads a "system_default" section with the TLS 1.3-only protocol
// list and security level 2, and finally checks on a fresh SSL_CTX that the options are in
// effect. tls_test.cc proves it end to end: a raw OpenSSL TLS 1.2 client with a valid
// certificate is refused by our gRPC server, the same client at TLS 1.3 gets through, and the
// TLS 1.2 client does complete a handshake with a plain TLS 1.2 server. No internal gRPC symbol
// is used.
//
// Scope and caveats: the setting is process-wide and applies to every SSL_CTX created after the
// call (any other TLS in the process, e.g. an HTTPS client, is TLS 1.3-only too); an SSL_CTX
// created before it is unaffected. Call it first thing in main(), before any thread or gRPC
// object exists. The credential builders below call it too, so a process that only uses them
// is covered either way.
#ifndef DAR_SECURITY_TLS_H_
#define DAR_SECURITY_TLS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "security/identity.h"

namespace dar::security {

// Makes TLS 1.3 the only TLS version of this process, as explained above. Idempotent and
// thread-safe: the first call does the work, later calls return its result.
// Errors: Internal if OpenSSL rejects the configuration, FailedPrecondition if a fresh
// SSL_CTX does not carry the expected options.
absl::Status EnforceTls13();

// The PEM files a process presents and trusts.
struct TlsFiles {
  // Own certificate; it may be followed by intermediate CA certificates.
  std::string cert_file;
  // Own private key, unencrypted.
  std::string key_file;
  // CA bundle: a peer's certificate must chain to one of these.
  std::string ca_file;
};

// The contents of TlsFiles, checked by LoadTlsMaterial.
struct TlsMaterial {
  std::string cert_chain_pem;
  std::string key_pem;
  std::string ca_pem;
  // Own identity, from the certificate's URI SAN.
  SpiffeId identity;
  absl::Time not_after;
};

// Reads and checks the files: each exists and parses; the key belongs to the certificate;
// the certificate is valid at `now` and chains to the CA bundle at `now`; it carries exactly
// one URI SAN that is a DAR identity. Errors name the file: NotFound / PermissionDenied for an
// unreadable file, InvalidArgument for bad PEM, a key that does not match, a certificate that
// does not chain to the bundle or has no DAR identity, FailedPrecondition for a certificate
// that has expired or is not yet valid at `now`.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files, absl::Time now);

// Server credentials for mutual TLS 1.3: presents the own certificate, requires a client
// certificate and verifies it against the CA bundle (a client without one, with one from
// another CA, or with an expired one fails the handshake). Calls EnforceTls13.
// Errors: those of EnforceTls13 and LoadTlsMaterial.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, absl::Time now);

// How a client dials a DAR server.
struct ChannelTlsOptions {
  TlsFiles files;
  // The DNS name (or IP literal) the server's certificate must carry, checked instead of the
  // host of the target; e.g. "localhost" (a DNS SAN of the controller made by `darctl certs
  // init`) when dialling the controller by an address its certificate does not list. Empty:
  // the target's host is checked.
  std::string server_name;
  // The identity the server's certificate must carry as its only URI SAN (e.g. the
  // controller's, SpiffeId::Controller), checked during the handshake instead of the host
  // name: any certificate of the cluster's CA may list a host name, but only the controller's
  // carries the controller's identity. None: the host name is checked (server_name), unless
  // `server_is_own_controller`.
  std::optional<SpiffeId> server_identity;
  // Without a server_identity: the server must be the controller of the client's own trust
  // domain (SpiffeId::Controller of the domain of the client's certificate).
  bool server_is_own_controller = false;
};

// What grpc::CreateCustomChannel needs: credentials and the arguments that carry the server
// name override.
struct ChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments arguments;
};

// Channel credentials for mutual TLS 1.3: presents the own certificate and verifies the
// server's against the CA bundle and the server identity (or, without one, the server name).
// Calls EnforceTls13.
// Errors: those of EnforceTls13 and LoadTlsMaterial.
absl::StatusOr<ChannelSecurity> MakeChannelSecurity(const ChannelTlsOptions& options,
                                                    absl::Time now);

// A channel to `target` ("host:port") with MakeChannelSecurity. Connects lazily.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(const std::string& target,
                                                                   const ChannelTlsOptions& options,
                                                                   absl::Time now);

}  // namespace dar::security

#endif  // DAR_SECURITY_TLS_H_
