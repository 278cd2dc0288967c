#include "security/certs.h"

#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "security/revocation.h"

namespace dar::security {
namespace {

struct BignumDeleter {
  void operator()(BIGNUM* bn) const { BN_free(bn); }
};
struct ExtensionDeleter {
  void operator()(X509_EXTENSION* ext) const { X509_EXTENSION_free(ext); }
};
struct GeneralNamesDeleter {
  void operator()(GENERAL_NAMES* names) const { GENERAL_NAMES_free(names); }
};
using BignumPtr = std::unique_ptr<BIGNUM, BignumDeleter>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, ExtensionDeleter>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, GeneralNamesDeleter>;

constexpr mode_t kKeyMode = 0600;
constexpr mode_t kCertMode = 0644;
constexpr mode_t kDirMode = 0700;
constexpr size_t kMaxCommonName = 64;

absl::Status OpenSslError(std::string_view what) {
  return absl::InternalError(fmt::format("{}: {}", what, DrainOpenSslErrors()));
}

// A password callback that refuses: an encrypted key is an error, never a terminal prompt.
int NoPassword(char*, int, int, void*) { return -1; }

// True for an IPv4 or IPv6 literal.
bool IsIpLiteral(const std::string& host) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
  if (ip == nullptr) return false;
  ASN1_OCTET_STRING_free(ip);
  return true;
}

absl::Status ValidateDnsName(const std::string& name) {
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(fmt::format("bad DNS name '{}': empty or too long", name));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          fmt::format("bad DNS name '{}': allowed are letters, digits, '-' and '.'", name));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateUri(const std::string& uri) {
  if (uri.empty()) return absl::InvalidArgumentError("empty URI SAN");
  for (char c : uri) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          fmt::format("URI SAN '{}' has a space or a non-printable character", uri));
    }
  }
  return absl::OkStatus();
}

// Appends each host to the DNS or the IP SANs of `spec`, whichever it parses as.
absl::Status AddHosts(const std::vector<std::string>& hosts, CertificateSpec& spec) {
  for (const std::string& host : hosts) {
    if (IsIpLiteral(host)) {
      spec.ip_sans.push_back(host);
    } else {
      RETURN_IF_ERROR(ValidateDnsName(host));
      spec.dns_sans.push_back(host);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckValidity(absl::Time not_before, absl::Time not_after) {
  if (!(not_before < not_after)) {
    return absl::InvalidArgumentError(
        fmt::format("bad validity: not_before ({}) is not before not_after ({})",
                    FormatCertTime(not_before), FormatCertTime(not_after)));
  }
  return absl::OkStatus();
}

// The subject alternative names of `spec` (an empty list if it has none).
absl::StatusOr<GeneralNamesPtr> MakeSans(const CertificateSpec& spec) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  if (names == nullptr) return OpenSslError("allocating SANs");
  auto add_string = [&](int type, const std::string& value) -> absl::Status {
    GENERAL_NAME* name = GENERAL_NAME_new();
    ASN1_IA5STRING* text = ASN1_IA5STRING_new();
    if (name == nullptr || text == nullptr ||
        !ASN1_STRING_set(text, value.data(), static_cast<int>(value.size()))) {
      GENERAL_NAME_free(name);
      ASN1_IA5STRING_free(text);
      return OpenSslError("allocating a SAN");
    }
    GENERAL_NAME_set0_value(name, type, text);
    if (sk_GENERAL_NAME_push(names.get(), name) <= 0) {
      GENERAL_NAME_free(name);
      return OpenSslError("allocating a SAN");
    }
    return absl::OkStatus();
  };
  for (const std::string& uri : spec.uri_sans) {
    RETURN_IF_ERROR(ValidateUri(uri));
    RETURN_IF_ERROR(add_string(GEN_URI, uri));
  }
  for (const std::string& dns : spec.dns_sans) {
    RETURN_IF_ERROR(ValidateDnsName(dns));
    RETURN_IF_ERROR(add_string(GEN_DNS, dns));
  }
  for (const std::string& ip : spec.ip_sans) {
    ASN1_OCTET_STRING* address = a2i_IPADDRESS(ip.c_str());
    if (address == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(fmt::format("bad IP SAN '{}'", ip));
    }
    GENERAL_NAME* name = GENERAL_NAME_new();
    if (name == nullptr) {
      ASN1_OCTET_STRING_free(address);
      return OpenSslError("allocating a SAN");
    }
    GENERAL_NAME_set0_value(name, GEN_IPADD, address);
    if (sk_GENERAL_NAME_push(names.get(), name) <= 0) {
      GENERAL_NAME_free(name);
      return OpenSslError("allocating a SAN");
    }
  }
  return names;
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr || !X509_add_ext(cert, ext.get(), -1)) {
    return OpenSslError(fmt::format("adding extension {}={}", OBJ_nid2sn(nid), value));
  }
  return absl::OkStatus();
}

// A certificate with version, serial, validity, subject, public key and SANs set; the caller
// sets the issuer and the remaining extensions, and signs it.
absl::StatusOr<X509Ptr> StartCertificate(const CertificateSpec& spec, EVP_PKEY* key) {
  RETURN_IF_ERROR(CheckValidity(spec.not_before, spec.not_after));
  if (spec.common_name.size() > kMaxCommonName) {
    return absl::InvalidArgumentError(fmt::format("common name '{}' is longer than {} characters",
                                                  spec.common_name, kMaxCommonName));
  }
  X509Ptr cert(X509_new());
  BignumPtr serial(BN_new());
  if (cert == nullptr || serial == nullptr) return OpenSslError("allocating a certificate");
  // A positive, nonzero serial of up to 127 random bits (RFC 5280 allows 20 octets).
  do {
    if (!BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY)) {
      return OpenSslError("drawing a serial number");
    }
  } while (BN_is_zero(serial.get()));
  if (!X509_set_version(cert.get(), X509_VERSION_3) ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) ||
      !ASN1_TIME_set(X509_getm_notBefore(cert.get()), absl::ToTimeT(spec.not_before)) ||
      !ASN1_TIME_set(X509_getm_notAfter(cert.get()), absl::ToTimeT(spec.not_after)) ||
      !X509_set_pubkey(cert.get(), key)) {
    return OpenSslError("filling in a certificate");
  }
  if (!spec.common_name.empty() &&
      !X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(spec.common_name.c_str()),
                                  -1, -1, 0)) {
    return OpenSslError(fmt::format("setting the common name '{}'", spec.common_name));
  }
  ASSIGN_OR_RETURN(GeneralNamesPtr sans, MakeSans(spec));
  if (sk_GENERAL_NAME_num(sans.get()) > 0) {
    // With an empty subject the SANs are the only name, and RFC 5280 makes them critical.
    const int critical = spec.common_name.empty() ? 1 : 0;
    if (X509_add1_ext_i2d(cert.get(), NID_subject_alt_name, sans.get(), critical,
                          X509V3_ADD_DEFAULT) != 1) {
      return OpenSslError("adding the subject alternative names");
    }
  } else if (spec.common_name.empty()) {
    return absl::InvalidArgumentError("a certificate needs a common name or a SAN");
  }
  return cert;
}

absl::StatusOr<absl::Time> AsnTime(const ASN1_TIME* time, std::string_view which) {
  struct tm tm {};
  if (time == nullptr || !ASN1_TIME_to_tm(time, &tm)) {
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format("the certificate's {} is unreadable", which));
  }
  return absl::FromTimeT(timegm(&tm));
}

std::vector<std::string> SansOfType(X509* cert, int type) {
  std::vector<std::string> out;
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != type) continue;
    const ASN1_IA5STRING* text =
        type == GEN_URI ? name->d.uniformResourceIdentifier : name->d.dNSName;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                     static_cast<size_t>(ASN1_STRING_length(text)));
  }
  return out;
}

absl::Status EnsureDirectory(const std::string& dir) {
  std::error_code error;
  if (std::filesystem::is_directory(dir, error)) return absl::OkStatus();
  if (!std::filesystem::create_directories(dir, error)) {
    return absl::InternalError(
        fmt::format("cannot create directory '{}': {}", dir, error.message()));
  }
  if (chmod(dir.c_str(), kDirMode) != 0) return ErrnoStatus(errno, "cannot chmod", dir);
  return absl::OkStatus();
}

absl::Status RefuseExisting(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::error_code error;
    if (std::filesystem::exists(path, error)) {
      return absl::AlreadyExistsError(
          fmt::format("'{}' exists; remove it or pass --force to replace it", path));
    }
  }
  return absl::OkStatus();
}

std::string JoinPath(const std::string& dir, std::string_view name) {
  return (std::filesystem::path(dir) / name).string();
}

// Generates a key, issues a certificate for `id` and writes both into `dir`.
absl::Status IssueAndWrite(const std::string& dir, const SpiffeId& id,
                           const std::vector<std::string>& hosts, absl::Time not_before,
                           absl::Time not_after, X509* ca_cert, EVP_PKEY* ca_key, bool overwrite) {
  CertificateSpec spec;
  // "controller", "node/<id>", "admin/<name>"; left out if too long (the URI SAN names it).
  const std::string common_name = id.kind == PeerKind::kController
                                      ? "controller"
                                      : fmt::format("{}/{}", PeerKindName(id.kind), id.name);
  spec.common_name = common_name.size() <= kMaxCommonName ? common_name : "";
  spec.uri_sans = {id.ToString()};
  RETURN_IF_ERROR(AddHosts(hosts, spec));
  spec.not_before = not_before;
  spec.not_after = not_after;
  ASSIGN_OR_RETURN(EvpPkeyPtr key, GenerateP256Key());
  ASSIGN_OR_RETURN(X509Ptr cert, IssueCertificate(spec, key.get(), ca_cert, ca_key));
  ASSIGN_OR_RETURN(std::string key_pem, PrivateKeyToPem(key.get()));
  ASSIGN_OR_RETURN(std::string cert_pem, CertificateToPem(cert.get()));
  RETURN_IF_ERROR(
      WriteFileAtomically(JoinPath(dir, KeyFileName(id)), key_pem, kKeyMode, overwrite));
  return WriteFileAtomically(JoinPath(dir, CertFileName(id)), cert_pem, kCertMode, overwrite);
}

}  // namespace

std::string DrainOpenSslErrors() {
  std::string text;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? "unknown error" : text;
}

absl::StatusOr<EvpPkeyPtr> GenerateP256Key() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("generating an EC P-256 key");
  return key;
}

absl::StatusOr<X509Ptr> CreateCaCertificate(const CertificateSpec& spec, EVP_PKEY* key) {
  if (spec.common_name.empty()) {
    return absl::InvalidArgumentError("a CA certificate needs a common name (its issuer name)");
  }
  ASSIGN_OR_RETURN(X509Ptr cert, StartCertificate(spec, key));
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()))) {
    return OpenSslError("setting the issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key, EVP_sha256()) <= 0) return OpenSslError("signing the CA");
  return cert;
}

absl::StatusOr<X509Ptr> IssueCertificate(const CertificateSpec& spec, EVP_PKEY* subject_key,
                                         X509* ca_cert, EVP_PKEY* ca_key) {
  if (X509_check_ca(ca_cert) != 1) {
    return absl::InvalidArgumentError("the issuer certificate is not a CA certificate");
  }
  if (X509_check_private_key(ca_cert, ca_key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key does not belong to the CA certificate");
  }
  ASSIGN_OR_RETURN(X509Ptr cert, StartCertificate(spec, subject_key));
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert))) {
    return OpenSslError("setting the issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca_cert, cert.get(), nullptr, nullptr, 0);
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth,clientAuth"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), ca_key, EVP_sha256()) <= 0) {
    return OpenSslError("signing the certificate");
  }
  return cert;
}

absl::StatusOr<std::string> CertificateToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || !PEM_write_bio_X509(bio.get(), cert)) {
    return OpenSslError("encoding a certificate");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> PrivateKeyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      !PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) {
    return OpenSslError("encoding a private key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::vector<X509Ptr>> ParseCertificatesPem(std::string_view pem,
                                                          std::string_view where) {
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("reading PEM");
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr)) {
    certs.emplace_back(cert);
  }
  // The loop ends with "no start line" at the end of the input; anything else is a bad block.
  const unsigned long last = ERR_peek_last_error();
  if (last != 0 &&
      !(ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE)) {
    return absl::InvalidArgumentError(fmt::format("{}: bad PEM certificate #{}: {}", where,
                                                  certs.size() + 1, DrainOpenSslErrors()));
  }
  ERR_clear_error();
  if (certs.empty()) {
    return absl::InvalidArgumentError(fmt::format("{}: no PEM certificate found", where));
  }
  return certs;
}

absl::StatusOr<EvpPkeyPtr> ParsePrivateKeyPem(std::string_view pem, std::string_view where) {
  // OpenSSL 3's decoders report a missing or encrypted key as "unsupported"; say which.
  if (pem.find("PRIVATE KEY-----") == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("{}: no PEM private key found", where));
  }
  if (pem.find("ENCRYPTED") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the private key is encrypted; DAR needs an unencrypted key", where));
  }
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("reading PEM");
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("{}: bad PEM private key: {}", where, DrainOpenSslErrors()));
  }
  return key;
}

std::string FormatCertTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

std::vector<std::string> UriSans(X509* cert) { return SansOfType(cert, GEN_URI); }
std::vector<std::string> DnsSans(X509* cert) { return SansOfType(cert, GEN_DNS); }

absl::StatusOr<absl::Time> NotBefore(X509* cert) {
  return AsnTime(X509_get0_notBefore(cert), "notBefore");
}
absl::StatusOr<absl::Time> NotAfter(X509* cert) {
  return AsnTime(X509_get0_notAfter(cert), "notAfter");
}

std::string CertFileName(const SpiffeId& id) {
  if (id.kind == PeerKind::kController) return "controller.crt";
  return fmt::format("{}-{}.crt", PeerKindName(id.kind), id.name);
}

std::string KeyFileName(const SpiffeId& id) {
  if (id.kind == PeerKind::kController) return "controller.key";
  return fmt::format("{}-{}.key", PeerKindName(id.kind), id.name);
}

absl::Status InitCertDir(const InitCertDirOptions& options) {
  RETURN_IF_ERROR(ValidateTrustDomain(options.trust_domain));
  RETURN_IF_ERROR(CheckValidity(options.not_before, options.not_after));
  CertificateSpec probe;
  RETURN_IF_ERROR(AddHosts(options.controller_hosts, probe));
  const SpiffeId controller = SpiffeId::Controller(options.trust_domain);
  if (!options.overwrite) {
    RETURN_IF_ERROR(RefuseExisting(
        {JoinPath(options.dir, kCaCertFile), JoinPath(options.dir, kCaKeyFile),
         JoinPath(options.dir, CertFileName(controller)),
         JoinPath(options.dir, KeyFileName(controller)), JoinPath(options.dir, kCrlFile)}));
  }
  RETURN_IF_ERROR(EnsureDirectory(options.dir));
  // The old CA's revocation list means nothing to the new one.
  std::error_code ec;
  std::filesystem::remove(JoinPath(options.dir, kCrlFile), ec);

  CertificateSpec ca_spec;
  const std::string ca_name = fmt::format("DAR CA {}", options.trust_domain);
  ca_spec.common_name = ca_name.size() <= kMaxCommonName ? ca_name : "DAR CA";
  ca_spec.uri_sans = {fmt::format("spiffe://{}", options.trust_domain)};
  ca_spec.not_before = options.not_before;
  ca_spec.not_after = options.not_after;
  ASSIGN_OR_RETURN(EvpPkeyPtr ca_key, GenerateP256Key());
  ASSIGN_OR_RETURN(X509Ptr ca_cert, CreateCaCertificate(ca_spec, ca_key.get()));
  ASSIGN_OR_RETURN(std::string ca_key_pem, PrivateKeyToPem(ca_key.get()));
  ASSIGN_OR_RETURN(std::string ca_cert_pem, CertificateToPem(ca_cert.get()));
  RETURN_IF_ERROR(WriteFileAtomically(JoinPath(options.dir, kCaKeyFile), ca_key_pem, kKeyMode,
                                      options.overwrite));
  RETURN_IF_ERROR(WriteFileAtomically(JoinPath(options.dir, kCaCertFile), ca_cert_pem, kCertMode,
                                      options.overwrite));
  RETURN_IF_ERROR(IssueAndWrite(options.dir, controller, options.controller_hosts,
                                options.not_before, options.not_after, ca_cert.get(), ca_key.get(),
                                options.overwrite));
  return WriteCrl(options.dir, options.not_before);
}

absl::StatusOr<CertDirCa> LoadCertDirCa(const std::string& dir) {
  CertDirCa ca;
  ca.cert_path = JoinPath(dir, kCaCertFile);
  const std::string ca_key_path = JoinPath(dir, kCaKeyFile);
  absl::StatusOr<std::string> ca_cert_pem = ReadFile(ca.cert_path, kMaxConfigFileBytes);
  if (absl::IsNotFound(ca_cert_pem.status())) {
    return absl::NotFoundError(fmt::format(
        "no CA in '{}' ({} is missing); create one with `darctl certs init`", dir, ca.cert_path));
  }
  if (!ca_cert_pem.ok()) return ca_cert_pem.status();
  ASSIGN_OR_RETURN(const std::string ca_key_pem, ReadFile(ca_key_path, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(std::vector<X509Ptr> ca_certs, ParseCertificatesPem(*ca_cert_pem, ca.cert_path));
  ASSIGN_OR_RETURN(ca.key, ParsePrivateKeyPem(ca_key_pem, ca_key_path));
  ca.cert = std::move(ca_certs.front());
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        fmt::format("{} does not belong to the certificate in {}", ca_key_path, ca.cert_path));
  }
  const std::vector<std::string> uris = UriSans(ca.cert.get());
  if (uris.size() != 1) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: expected one URI SAN spiffe://<trust-domain>, found {}", ca.cert_path, uris.size()));
  }
  absl::StatusOr<std::string> domain = ParseTrustDomainId(uris[0]);
  if (!domain.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {}", ca.cert_path, std::string(domain.status().message())));
  }
  ca.trust_domain = *std::move(domain);
  return ca;
}

absl::StatusOr<IssuedCertificate> IssueFromCertDir(const IssueOptions& options) {
  RETURN_IF_ERROR(CheckValidity(options.not_before, options.not_after));
  ASSIGN_OR_RETURN(const CertDirCa ca, LoadCertDirCa(options.dir));
  X509* ca_cert = ca.cert.get();
  const SpiffeId id{ca.trust_domain, options.kind, options.name};
  RETURN_IF_ERROR(ValidateSpiffeId(id));
  if (!options.overwrite) {
    RETURN_IF_ERROR(RefuseExisting(
        {JoinPath(options.dir, CertFileName(id)), JoinPath(options.dir, KeyFileName(id))}));
  }
  // A certificate cannot outlive its CA usefully; cap it at the CA's end.
  ASSIGN_OR_RETURN(const absl::Time ca_not_after, NotAfter(ca_cert));
  // X.509 keeps whole seconds.
  const absl::Time not_after =
      absl::FromTimeT(absl::ToTimeT(std::min(options.not_after, ca_not_after)));
  RETURN_IF_ERROR(CheckValidity(options.not_before, not_after));
  RETURN_IF_ERROR(IssueAndWrite(options.dir, id, options.hosts, options.not_before, not_after,
                                ca_cert, ca.key.get(), options.overwrite));
  return IssuedCertificate{id, JoinPath(options.dir, CertFileName(id)),
                           JoinPath(options.dir, KeyFileName(id)), not_after,
                           ca_not_after < options.not_after};
}

}  // namespace dar::security
