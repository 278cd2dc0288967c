// Revoking a certificate before it expires: a certificate revocation list (X.509 v2 CRL, PEM)
// signed by the cluster's CA, kept beside it as ca.crl.
//
// Why revocation, not short lifetimes with rotation. The controller is the only process that
// verifies node and admin certificates (agents and darctl verify only the controller's, by its
// identity), so a revocation list has to reach one place, not every node; revoking a node
// takes effect at the controller's next SIGHUP, for streams already open too. Short lifetimes
// would need every node's certificate renewed before it expires, so an online CA (the
// controller holding the CA key, which would make its compromise the CA's) or an operator
// job on every node, and would still leave a stolen certificate usable until it expires.
//
// `darctl certs revoke --node ID` adds the certificate in the directory to ca.crl (made on
// first use); the controller reads the file named by `tls.crl` at start and on SIGHUP, checks
// its signature against the CA, and refuses a hello, a sample or an admin call from a client
// whose certificate's serial number is listed. A list that does not verify, or an older one
// (a lower cRLNumber) than the one running, is refused with the reason, and the running one
// stays. (Across a restart of the controller an older list is not detected: keep ca.crl where
// only the operator writes.)
#ifndef DAR_SECURITY_REVOCATION_H_
#define DAR_SECURITY_REVOCATION_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"
#include "security/certs.h"

namespace dar::security {

inline constexpr std::string_view kCrlFile = "ca.crl";

// A certificate's serial number as upper-case hexadecimal without leading zeros ("0" for 0).
std::string CertificateSerial(X509* cert);

// The serial number of the authenticated peer's certificate (gRPC puts it, PEM, in the
// "x509_pem_cert" property). Errors: Unauthenticated if there is none or it does not parse.
absl::StatusOr<std::string> PeerCertificateSerial(const grpc::AuthContext& auth);
// The same for the client of a server call; Unauthenticated without an auth context.
absl::StatusOr<std::string> PeerCertificateSerial(const grpc::ServerContextBase& context);

// Creates <dir>/ca.crl listing nothing, or signs the list again with `now` as its date.
// Errors: those of LoadCertDirCa; a ca.crl that does not verify; file system errors.
absl::Status WriteCrl(const std::string& dir, absl::Time now);

// Adds the certificate in `cert_file` (issued by the CA of `dir`) to <dir>/ca.crl, creating it,
// signed again with the CA key, `now` as its date. Returns the serial. Revoking one twice
// changes nothing but the date. Errors: those of LoadCertDirCa; NotFound / InvalidArgument for
// the certificate (naming it) or one the CA did not issue; a ca.crl that does not verify
// against the CA (it is not replaced); file system errors naming the path.
absl::StatusOr<std::string> RevokeInCertDir(const std::string& dir, const std::string& cert_file,
                                            absl::Time now);

// The serial numbers a CRL lists, once its signature is checked against the CA.
class RevocationList {
 public:
  // Reads `crl_file`, verifies it was signed by the (first) certificate in `ca_file`.
  // Errors: unreadable files, PEM that is not a CRL, another issuer, a bad signature; each
  // naming the file.
  static absl::StatusOr<RevocationList> Load(const std::string& crl_file,
                                             const std::string& ca_file);

  bool Revoked(const std::string& serial) const { return serials_.contains(serial); }
  size_t size() const { return serials_.size(); }
  // Its cRLNumber: each list WriteCrl or RevokeInCertDir writes has the next (0: none). A list
  // with a lower number than the one running is an older list put back, which would take
  // revocations back: the controller refuses it.
  uint64_t number() const { return number_; }

 private:
  absl::flat_hash_set<std::string> serials_;
  uint64_t number_ = 0;
};

}  // namespace dar::security

#endif  // DAR_SECURITY_REVOCATION_H_
