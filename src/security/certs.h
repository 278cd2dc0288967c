// Certificates for DAR's mutual TLS: an EC P-256 CA, and certificates it issues to the
// controller, nodes and operators, each naming its holder by one URI SAN (identity.h).
//
// Two levels:
// - Building blocks on OpenSSL 3 objects: generate a key, create a self-signed CA, issue a
//   certificate, convert to and from PEM, read SANs. Validity is always given explicitly
//   (not_before, not_after), so that tests can make expired certificates.
// - A certificate directory, as `darctl certs init|issue` manages it:
//     ca.crt, ca.key                     the CA (its URI SAN is "spiffe://<trust-domain>")
//     ca.crl                             the certificates it revoked (security/revocation.h)
//     controller.crt, controller.key     spiffe://<domain>/controller
//     node-<id>.crt, node-<id>.key       spiffe://<domain>/node/<id>
//     admin-<name>.crt, admin-<name>.key spiffe://<domain>/admin/<name>
//   Keys are written with mode 0600, certificates 0644, each file atomically (a temporary file
//   renamed into place). Existing files are never replaced unless `overwrite` is set.
//
// Keys and serial numbers come from OpenSSL's CSPRNG, not from DAR's seeded random source:
// they must be unpredictable. Functions are thread-safe; objects are not shared.
#ifndef DAR_SECURITY_CERTS_H_
#define DAR_SECURITY_CERTS_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "security/identity.h"

namespace dar::security {

struct EvpPkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, EvpPkeyDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

// What goes into a certificate besides its key and issuer.
struct CertificateSpec {
  // Subject CN; may be empty (the subject is then empty and the SAN extension critical).
  // At most 64 characters.
  std::string common_name;
  // Subject alternative names. `ip_sans` are IPv4 or IPv6 literals.
  std::vector<std::string> uri_sans;
  std::vector<std::string> dns_sans;
  std::vector<std::string> ip_sans;
  // Validity. REQUIRES: not_before < not_after.
  absl::Time not_before;
  absl::Time not_after;
};

// The text of this thread's OpenSSL error queue ("a; b"), which is emptied; "unknown error"
// if it was empty.
std::string DrainOpenSslErrors();

// A new EC P-256 key pair. Errors: Internal (OpenSSL failed).
absl::StatusOr<EvpPkeyPtr> GenerateP256Key();

// A self-signed CA certificate for `key`: CA:TRUE with path length 0, keyCertSign and cRLSign,
// subject key id, SHA-256 ECDSA signature, a random 127-bit serial.
// Errors: InvalidArgument for a bad spec (bad SAN, validity), Internal if OpenSSL fails.
absl::StatusOr<X509Ptr> CreateCaCertificate(const CertificateSpec& spec, EVP_PKEY* key);

// A leaf certificate for `subject_key` signed by `ca_cert`/`ca_key`: CA:FALSE,
// digitalSignature, extended key usage serverAuth and clientAuth (every DAR process may both
// serve and dial), subject and authority key ids.
// Errors: InvalidArgument for a bad spec, if `ca_cert` is not a CA or `ca_key` not its key;
// Internal if OpenSSL fails.
absl::StatusOr<X509Ptr> IssueCertificate(const CertificateSpec& spec, EVP_PKEY* subject_key,
                                         X509* ca_cert, EVP_PKEY* ca_key);

// PEM encodings: "CERTIFICATE", and an unencrypted PKCS#8 "PRIVATE KEY".
absl::StatusOr<std::string> CertificateToPem(X509* cert);
absl::StatusOr<std::string> PrivateKeyToPem(EVP_PKEY* key);

// Every certificate in `pem`, in order. `where` (a file name) is used in error messages.
// Errors: InvalidArgument if `pem` holds no certificate or a block fails to parse.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificatesPem(std::string_view pem,
                                                          std::string_view where);
// The first private key in `pem`. Errors: InvalidArgument naming `where`.
absl::StatusOr<EvpPkeyPtr> ParsePrivateKeyPem(std::string_view pem, std::string_view where);

// The URI / DNS SANs of `cert`, in order (empty if it has none).
std::vector<std::string> UriSans(X509* cert);
std::vector<std::string> DnsSans(X509* cert);

// `time` as X.509 keeps it: UTC, to the second, e.g. "2027-11-30T05:34:04Z".
std::string FormatCertTime(absl::Time time);

// Validity bounds of `cert`. Errors: InvalidArgument if a time does not convert.
absl::StatusOr<absl::Time> NotBefore(X509* cert);
absl::StatusOr<absl::Time> NotAfter(X509* cert);

// The file names of an identity's certificate and key inside a certificate directory, e.g.
// "node-n7.crt" and "node-n7.key". REQUIRES: ValidateSpiffeId(id).ok().
std::string CertFileName(const SpiffeId& id);
std::string KeyFileName(const SpiffeId& id);
inline constexpr std::string_view kCaCertFile = "ca.crt";
inline constexpr std::string_view kCaKeyFile = "ca.key";

// Options of InitCertDir.
struct InitCertDirOptions {
  // Created (mode 0700) if missing.
  std::string dir;
  std::string trust_domain;
  // Validity of the CA and the controller certificate. REQUIRES: not_before < not_after.
  absl::Time not_before;
  absl::Time not_after;
  // Extra names of the controller besides its URI SAN: DNS names or IP literals, told apart by
  // parsing. The defaults let clients on the same host dial "localhost" or "127.0.0.1".
  std::vector<std::string> controller_hosts = {"localhost", "127.0.0.1"};
  // Replace existing files instead of failing.
  bool overwrite = false;
};

// Creates a CA (ca.crt, ca.key), a controller certificate signed by it and an empty revocation
// list (ca.crl, security/revocation.h) in `options.dir`.
// Errors: InvalidArgument for a bad trust domain, host or validity; AlreadyExists if one of
// the five files exists and !overwrite (nothing is written then); PermissionDenied /
// Internal for file system errors, naming the path.
absl::Status InitCertDir(const InitCertDirOptions& options);

// Options of IssueFromCertDir.
struct IssueOptions {
  std::string dir;
  // The holder: a node, an admin, or the controller (to renew its certificate; no name). The
  // trust domain is the CA's.
  PeerKind kind = PeerKind::kNode;
  std::string name;
  // Extra DNS names or IP literals, as InitCertDirOptions::controller_hosts.
  std::vector<std::string> hosts;
  // REQUIRES: not_before < not_after.
  absl::Time not_before;
  absl::Time not_after;
  bool overwrite = false;
};

// What IssueFromCertDir wrote.
struct IssuedCertificate {
  SpiffeId id;  // with the CA's trust domain
  std::string cert_path;
  std::string key_path;
  // options.not_after to the second, or the CA's notAfter if that is earlier.
  absl::Time not_after;
  bool capped_at_ca = false;
};

// The CA of a certificate directory, checked: ca.crt and ca.key parse and belong together, and
// the certificate names a trust domain. Errors: NotFound (no ca.crt: says to run `darctl certs
// init`), InvalidArgument naming the file.
struct CertDirCa {
  X509Ptr cert;
  EvpPkeyPtr key;
  std::string trust_domain;
  std::string cert_path;
};
absl::StatusOr<CertDirCa> LoadCertDirCa(const std::string& dir);

// Issues a certificate and key with the CA in `options.dir` and writes them there.
// Errors: NotFound / InvalidArgument for a missing or bad CA (naming the file), a CA key that
// does not match ca.crt or a CA without a trust-domain URI SAN; InvalidArgument for a bad
// name (a controller has none, the others need one) or host; AlreadyExists as for
// InitCertDir.
absl::StatusOr<IssuedCertificate> IssueFromCertDir(const IssueOptions& options);

}  // namespace dar::security

#endif  // DAR_SECURITY_CERTS_H_
