#include "security/revocation.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"

namespace dar::security {
namespace {

struct CrlDeleter {
  void operator()(X509_CRL* crl) const { X509_CRL_free(crl); }
};
struct Asn1TimeDeleter {
  void operator()(ASN1_TIME* t) const { ASN1_TIME_free(t); }
};
using CrlPtr = std::unique_ptr<X509_CRL, CrlDeleter>;
using Asn1TimePtr = std::unique_ptr<ASN1_TIME, Asn1TimeDeleter>;

// The list's cRLNumber (RFC 5280 5.2.3); 0 if it has none.
uint64_t CrlNumber(X509_CRL* crl) {
  ASN1_INTEGER* n =
      static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr));
  uint64_t v = 0;
  if (n != nullptr && ASN1_INTEGER_get_uint64(&v, n) != 1) v = 0;
  ASN1_INTEGER_free(n);
  return v;
}

std::string SerialHex(const ASN1_INTEGER* serial) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
  if (bn == nullptr) return "";
  char* hex = BN_bn2hex(bn);
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

// The CRL in `pem`, its signature checked against `ca`. `where` names the file.
absl::StatusOr<CrlPtr> ParseCrl(const std::string& pem, const std::string& where, X509* ca) {
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  CrlPtr crl(bio ? PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (crl == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("{}: not a PEM certificate revocation list: {}", where, DrainOpenSslErrors()));
  }
  if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_subject_name(ca)) != 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: issued by another CA than the cluster's", where));
  }
  EVP_PKEY* ca_key = X509_get0_pubkey(ca);
  if (ca_key == nullptr || X509_CRL_verify(crl.get(), ca_key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format(
        "{}: the signature does not verify against the CA (forged or corrupted)", where));
  }
  return crl;
}

// Lists `cert` (if not null) in <dir>/ca.crl, creating the list if missing, and signs it.
absl::Status UpdateCrl(const CertDirCa& ca, const std::string& dir, X509* cert, absl::Time now) {
  const std::string crl_path = (std::filesystem::path(dir) / kCrlFile).string();
  CrlPtr crl;
  absl::StatusOr<std::string> old = ReadFile(crl_path, kMaxConfigFileBytes);
  if (old.ok()) {
    ASSIGN_OR_RETURN(crl, ParseCrl(*old, crl_path, ca.cert.get()));
  } else if (absl::IsNotFound(old.status())) {
    crl.reset(X509_CRL_new());
    if (crl == nullptr || X509_CRL_set_version(crl.get(), X509_CRL_VERSION_2) != 1 ||
        X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(ca.cert.get())) != 1) {
      return absl::InternalError(fmt::format("making a CRL: {}", DrainOpenSslErrors()));
    }
  } else {
    return old.status();
  }
  Asn1TimePtr date(ASN1_TIME_set(nullptr, absl::ToTimeT(now)));
  if (date == nullptr || X509_CRL_set1_lastUpdate(crl.get(), date.get()) != 1) {
    return absl::InternalError(fmt::format("dating the CRL: {}", DrainOpenSslErrors()));
  }
  // Every list gets the next number, so that the controller can refuse an older one put back.
  ASN1_INTEGER* number = ASN1_INTEGER_new();
  const bool numbered =
      number != nullptr && ASN1_INTEGER_set_uint64(number, CrlNumber(crl.get()) + 1) == 1 &&
      X509_CRL_add1_ext_i2d(crl.get(), NID_crl_number, number, 0, X509V3_ADD_REPLACE) == 1;
  ASN1_INTEGER_free(number);
  if (!numbered) {
    return absl::InternalError(fmt::format("numbering the CRL: {}", DrainOpenSslErrors()));
  }
  if (cert != nullptr) {
    const std::string serial = CertificateSerial(cert);
    bool listed = false;
    STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl.get());
    for (int i = 0; revoked != nullptr && i < sk_X509_REVOKED_num(revoked); ++i) {
      listed |=
          SerialHex(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(revoked, i))) == serial;
    }
    if (!listed) {
      X509_REVOKED* entry = X509_REVOKED_new();
      if (entry == nullptr ||
          X509_REVOKED_set_serialNumber(entry, X509_get_serialNumber(cert)) != 1 ||
          X509_REVOKED_set_revocationDate(entry, date.get()) != 1 ||
          X509_CRL_add0_revoked(crl.get(), entry) != 1) {
        X509_REVOKED_free(entry);
        return absl::InternalError(
            fmt::format("listing the certificate: {}", DrainOpenSslErrors()));
      }
    }
  }
  if (X509_CRL_sort(crl.get()) != 1 || X509_CRL_sign(crl.get(), ca.key.get(), EVP_sha256()) <= 0) {
    return absl::InternalError(fmt::format("signing the CRL: {}", DrainOpenSslErrors()));
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509_CRL(bio.get(), crl.get()) != 1) {
    return absl::InternalError(fmt::format("encoding the CRL: {}", DrainOpenSslErrors()));
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return WriteFileAtomically(crl_path, std::string_view(data, static_cast<size_t>(size)), 0644);
}

}  // namespace

std::string CertificateSerial(X509* cert) { return SerialHex(X509_get0_serialNumber(cert)); }

absl::StatusOr<std::string> PeerCertificateSerial(const grpc::AuthContext& auth) {
  const std::vector<grpc::string_ref> pem = auth.FindPropertyValues("x509_pem_cert");
  if (pem.size() != 1) {
    return absl::UnauthenticatedError(
        fmt::format("the peer presented {} certificates, not one", pem.size()));
  }
  absl::StatusOr<std::vector<X509Ptr>> certs =
      ParseCertificatesPem(std::string_view(pem[0].data(), pem[0].size()), "the peer");
  if (!certs.ok()) return absl::UnauthenticatedError(certs.status().message());
  return CertificateSerial(certs->front().get());
}

absl::StatusOr<std::string> PeerCertificateSerial(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return absl::UnauthenticatedError("the call has no auth context");
  return PeerCertificateSerial(*auth);
}

absl::Status WriteCrl(const std::string& dir, absl::Time now) {
  ASSIGN_OR_RETURN(const CertDirCa ca, LoadCertDirCa(dir));
  return UpdateCrl(ca, dir, nullptr, now);
}

absl::StatusOr<std::string> RevokeInCertDir(const std::string& dir, const std::string& cert_file,
                                            absl::Time now) {
  ASSIGN_OR_RETURN(const CertDirCa ca, LoadCertDirCa(dir));
  ASSIGN_OR_RETURN(const std::string cert_pem, ReadFile(cert_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> certs, ParseCertificatesPem(cert_pem, cert_file));
  X509* cert = certs.front().get();
  if (X509_check_issued(ca.cert.get(), cert) != X509_V_OK) {
    return absl::InvalidArgumentError(
        fmt::format("{} was not issued by the CA in {}", cert_file, ca.cert_path));
  }
  RETURN_IF_ERROR(UpdateCrl(ca, dir, cert, now));
  return CertificateSerial(cert);
}

absl::StatusOr<RevocationList> RevocationList::Load(const std::string& crl_file,
                                                    const std::string& ca_file) {
  ASSIGN_OR_RETURN(const std::string ca_pem, ReadFile(ca_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> cas, ParseCertificatesPem(ca_pem, ca_file));
  ASSIGN_OR_RETURN(const std::string pem, ReadFile(crl_file, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(const CrlPtr crl, ParseCrl(pem, crl_file, cas.front().get()));
  RevocationList list;
  list.number_ = CrlNumber(crl.get());
  STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl.get());
  for (int i = 0; revoked != nullptr && i < sk_X509_REVOKED_num(revoked); ++i) {
    list.serials_.insert(
        SerialHex(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(revoked, i))));
  }
  return list;
}

}  // namespace dar::security
