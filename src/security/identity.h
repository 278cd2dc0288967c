// Who a TLS peer is: DAR identities are SPIFFE IDs carried as the one URI SAN of a certificate.
//
//   spiffe://<trust-domain>/controller     the controller
//   spiffe://<trust-domain>/node/<id>      the agent and forwarder of node <id>
//   spiffe://<trust-domain>/admin/<name>   an operator tool (darctl) used by <name>
//
// The trust domain is lower-case letters, digits, '.', '-' and '_' (the SPIFFE ID spec); an id
// or name is letters, digits, '.', '-' and '_', and neither "." nor "..". Nothing here checks
// the certificate itself: gRPC has verified the chain before an AuthContext exists. Pure
// functions; thread-safe.
#ifndef DAR_SECURITY_IDENTITY_H_
#define DAR_SECURITY_IDENTITY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"

namespace dar::security {

enum class PeerKind : uint8_t {
  kController,
  kNode,
  kAdmin,
};

// "controller", "node", "admin".
std::string_view PeerKindName(PeerKind kind);

// A parsed DAR identity. `name` is empty for the controller.
struct SpiffeId {
  std::string trust_domain;
  PeerKind kind = PeerKind::kNode;
  std::string name;

  // The URI form, e.g. "spiffe://example.org/node/n7".
  std::string ToString() const;

  static SpiffeId Controller(std::string trust_domain);
  static SpiffeId Node(std::string trust_domain, std::string id);
  static SpiffeId Admin(std::string trust_domain, std::string name);

  friend bool operator==(const SpiffeId&, const SpiffeId&) = default;
};

// OK if `domain` is a valid trust domain name, else InvalidArgument saying which character or
// why. At most 255 characters.
absl::Status ValidateTrustDomain(std::string_view domain);

// OK if `name` is a valid node id or admin name (one path segment), else InvalidArgument.
absl::Status ValidateIdentityName(std::string_view name);

// OK if every field of `id` is valid (a controller has no name, the others have one).
absl::Status ValidateSpiffeId(const SpiffeId& id);

// Parses one of the three forms above. Errors: InvalidArgument naming the URI and what is
// wrong (not spiffe://, upper-case or bad characters in the trust domain, a port, user info,
// query or fragment, an unknown kind, a missing or extra path segment, longer than 2048 bytes).
absl::StatusOr<SpiffeId> ParseSpiffeId(std::string_view uri);

// The trust domain of a CA certificate's URI SAN "spiffe://<domain>" (no path), as `darctl
// certs init` writes it. Errors: InvalidArgument.
absl::StatusOr<std::string> ParseTrustDomainId(std::string_view uri);

// The identity of the authenticated peer of a connection: the single URI SAN of its
// certificate, which must parse as a SpiffeId. Reads the "peer_uri" properties gRPC 1.51 puts
// in the AuthContext for every URI SAN of a verified peer certificate.
// Errors: Unauthenticated if the peer is not authenticated (no TLS or no certificate) or its
// certificate has no URI SAN or more than one; InvalidArgument if the URI is not a DAR
// identity.
absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::AuthContext& auth);
// The same for the client of a server call (sync or callback API).
absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::ServerContextBase& context);
// The same for the server of a finished or started client call.
absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::ClientContext& context);

}  // namespace dar::security

#endif  // DAR_SECURITY_IDENTITY_H_
