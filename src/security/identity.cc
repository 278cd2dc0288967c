#include "security/identity.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "fmt/format.h"
#include "grpc/grpc_security_constants.h"

namespace dar::security {
namespace {

constexpr std::string_view kScheme = "spiffe://";
constexpr size_t kMaxUriBytes = 2048;
constexpr size_t kMaxDomainBytes = 255;

bool IsDomainChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

bool IsSegmentChar(char c) { return IsDomainChar(c) || (c >= 'A' && c <= 'Z'); }

// `text` with anything unprintable escaped, for error messages about untrusted input.
std::string Printable(std::string_view text) { return absl::CHexEscape(std::string(text)); }

absl::Status BadUri(std::string_view uri, std::string_view what) {
  return absl::InvalidArgumentError(
      fmt::format("identity '{}': {}", Printable(uri.substr(0, 128)), what));
}

// Splits "spiffe://domain/path" into its domain and path ("" or starting with '/').
absl::Status SplitUri(std::string_view uri, std::string_view& domain, std::string_view& path) {
  if (uri.size() > kMaxUriBytes) {
    return BadUri(uri, fmt::format("longer than {} bytes", kMaxUriBytes));
  }
  if (!uri.starts_with(kScheme)) return BadUri(uri, "does not start with 'spiffe://'");
  if (uri.find_first_of("?#") != std::string_view::npos) {
    return BadUri(uri, "has a query or fragment");
  }
  std::string_view rest = uri.substr(kScheme.size());
  const size_t slash = rest.find('/');
  domain = rest.substr(0, slash);
  path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (domain.find('@') != std::string_view::npos) return BadUri(uri, "has user info");
  if (domain.find(':') != std::string_view::npos) return BadUri(uri, "has a port");
  if (absl::Status status = ValidateTrustDomain(domain); !status.ok()) {
    return BadUri(uri, std::string(status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view PeerKindName(PeerKind kind) {
  switch (kind) {
    case PeerKind::kController:
      return "controller";
    case PeerKind::kNode:
      return "node";
    case PeerKind::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::string SpiffeId::ToString() const {
  if (kind == PeerKind::kController) return fmt::format("{}{}/controller", kScheme, trust_domain);
  return fmt::format("{}{}/{}/{}", kScheme, trust_domain, PeerKindName(kind), name);
}

SpiffeId SpiffeId::Controller(std::string trust_domain) {
  return SpiffeId{std::move(trust_domain), PeerKind::kController, ""};
}

SpiffeId SpiffeId::Node(std::string trust_domain, std::string id) {
  return SpiffeId{std::move(trust_domain), PeerKind::kNode, std::move(id)};
}

SpiffeId SpiffeId::Admin(std::string trust_domain, std::string name) {
  return SpiffeId{std::move(trust_domain), PeerKind::kAdmin, std::move(name)};
}

absl::Status ValidateTrustDomain(std::string_view domain) {
  if (domain.empty()) return absl::InvalidArgumentError("the trust domain is empty");
  if (domain.size() > kMaxDomainBytes) {
    return absl::InvalidArgumentError(
        fmt::format("the trust domain is longer than {} bytes", kMaxDomainBytes));
  }
  for (char c : domain) {
    if (!IsDomainChar(c)) {
      return absl::InvalidArgumentError(fmt::format(
          "the trust domain '{}' has the character '{}'; allowed are a-z, 0-9, '.', '-', '_'",
          Printable(domain), Printable(std::string_view(&c, 1))));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateIdentityName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("the name is empty");
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(fmt::format("the name '{}' is not allowed", name));
  }
  for (char c : name) {
    if (!IsSegmentChar(c)) {
      return absl::InvalidArgumentError(fmt::format(
          "the name '{}' has the character '{}'; allowed are A-Z, a-z, 0-9, '.', '-', '_'",
          Printable(name), Printable(std::string_view(&c, 1))));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSpiffeId(const SpiffeId& id) {
  if (absl::Status status = ValidateTrustDomain(id.trust_domain); !status.ok()) return status;
  if (id.kind == PeerKind::kController) {
    if (!id.name.empty()) {
      return absl::InvalidArgumentError(
          fmt::format("the controller identity has a name ('{}')", Printable(id.name)));
    }
    return absl::OkStatus();
  }
  return ValidateIdentityName(id.name);
}

absl::StatusOr<SpiffeId> ParseSpiffeId(std::string_view uri) {
  std::string_view domain;
  std::string_view path;
  if (absl::Status status = SplitUri(uri, domain, path); !status.ok()) return status;
  if (path.empty() || path == "/") {
    return BadUri(uri, "has no path (expected /controller, /node/<id> or /admin/<name>)");
  }
  std::vector<std::string_view> segments;
  for (std::string_view rest = path.substr(1);;) {
    const size_t slash = rest.find('/');
    segments.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  const std::string_view kind = segments[0];
  SpiffeId id;
  id.trust_domain = std::string(domain);
  size_t expected_segments = 2;
  if (kind == "controller") {
    id.kind = PeerKind::kController;
    expected_segments = 1;
  } else if (kind == "node") {
    id.kind = PeerKind::kNode;
  } else if (kind == "admin") {
    id.kind = PeerKind::kAdmin;
  } else {
    return BadUri(
        uri, fmt::format("unknown kind '{}' (known: controller, node, admin)", Printable(kind)));
  }
  if (segments.size() != expected_segments) {
    return BadUri(uri, expected_segments == 1
                           ? "expected nothing after /controller"
                           : fmt::format("expected exactly one segment after /{}", kind));
  }
  if (expected_segments == 2) {
    if (absl::Status status = ValidateIdentityName(segments[1]); !status.ok()) {
      return BadUri(uri, std::string(status.message()));
    }
    id.name = std::string(segments[1]);
  }
  return id;
}

absl::StatusOr<std::string> ParseTrustDomainId(std::string_view uri) {
  std::string_view domain;
  std::string_view path;
  if (absl::Status status = SplitUri(uri, domain, path); !status.ok()) return status;
  if (!path.empty()) return BadUri(uri, "a trust domain id has no path");
  return std::string(domain);
}

absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) {
    return absl::UnauthenticatedError("the peer is not authenticated (no verified certificate)");
  }
  const std::vector<grpc::string_ref> uris = auth.FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME);
  if (uris.size() != 1) {
    return absl::UnauthenticatedError(fmt::format(
        "the peer certificate has {} URI SANs; a DAR identity has exactly one", uris.size()));
  }
  return ParseSpiffeId(std::string_view(uris[0].data(), uris[0].size()));
}

absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return absl::UnauthenticatedError("the call has no security context");
  return PeerSpiffeId(*auth);
}

absl::StatusOr<SpiffeId> PeerSpiffeId(const grpc::ClientContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return absl::UnauthenticatedError("the call has no security context");
  return PeerSpiffeId(*auth);
}

}  // namespace dar::security
