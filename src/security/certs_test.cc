#include "security/certs.h"

#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/files.h"
#include "base/test_support.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::security {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fixed instant, so that validity checks do not depend on the wall clock.
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

using test::TempDir;

mode_t FileMode(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

X509Ptr LoadCert(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return nullptr;
  absl::StatusOr<std::vector<X509Ptr>> certs = ParseCertificatesPem(*pem, path);
  if (!certs.ok()) return nullptr;
  return std::move(certs->front());
}

CertificateSpec Spec(std::string common_name) {
  CertificateSpec spec;
  spec.common_name = std::move(common_name);
  spec.not_before = kNow - absl::Hours(1);
  spec.not_after = kNow + absl::Hours(24);
  return spec;
}

// True if `cert` verifies against `ca` at kNow.
bool ChainsTo(X509* cert, X509* ca) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX_init(ctx, store, cert, nullptr);
  X509_STORE_CTX_set_time(ctx, 0, absl::ToTimeT(kNow));
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST(CertsTest, IssuesALeafThatChainsToTheCa) {
  absl::StatusOr<EvpPkeyPtr> ca_key = GenerateP256Key();
  ASSERT_TRUE(ca_key.ok()) << ca_key.status();
  CertificateSpec ca_spec = Spec("Test CA");
  ca_spec.uri_sans = {"spiffe://example.org"};
  absl::StatusOr<X509Ptr> ca = CreateCaCertificate(ca_spec, ca_key->get());
  ASSERT_TRUE(ca.ok()) << ca.status();
  EXPECT_EQ(X509_check_ca(ca->get()), 1);

  absl::StatusOr<EvpPkeyPtr> key = GenerateP256Key();
  ASSERT_TRUE(key.ok()) << key.status();
  CertificateSpec spec = Spec("node/n1");
  spec.uri_sans = {"spiffe://example.org/node/n1"};
  spec.dns_sans = {"localhost"};
  spec.ip_sans = {"127.0.0.1", "::1"};
  absl::StatusOr<X509Ptr> cert = IssueCertificate(spec, key->get(), ca->get(), ca_key->get());
  ASSERT_TRUE(cert.ok()) << cert.status();

  EXPECT_EQ(X509_check_ca(cert->get()), 0);
  EXPECT_EQ(X509_check_private_key(cert->get(), key->get()), 1);
  EXPECT_TRUE(ChainsTo(cert->get(), ca->get()));
  EXPECT_THAT(UriSans(cert->get()), ElementsAre("spiffe://example.org/node/n1"));
  EXPECT_THAT(DnsSans(cert->get()), ElementsAre("localhost"));
  EXPECT_EQ(X509_check_ip_asc(cert->get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert->get(), "::1", 0), 1);
  EXPECT_EQ(X509_get_extended_key_usage(cert->get()), XKU_SSL_SERVER | XKU_SSL_CLIENT);
  EXPECT_EQ(*NotBefore(cert->get()), spec.not_before);
  EXPECT_EQ(*NotAfter(cert->get()), spec.not_after);
  EXPECT_EQ(EVP_PKEY_get_bits(key->get()), 256);

  // Serial numbers are random: two certificates for the same spec differ.
  absl::StatusOr<X509Ptr> again = IssueCertificate(spec, key->get(), ca->get(), ca_key->get());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(
      ASN1_INTEGER_cmp(X509_get0_serialNumber(cert->get()), X509_get0_serialNumber(again->get())),
      0);
}

TEST(CertsTest, RejectsBadSpecs) {
  absl::StatusOr<EvpPkeyPtr> ca_key = GenerateP256Key();
  absl::StatusOr<EvpPkeyPtr> other_key = GenerateP256Key();
  ASSERT_TRUE(ca_key.ok() && other_key.ok());
  absl::StatusOr<X509Ptr> ca = CreateCaCertificate(Spec("Test CA"), ca_key->get());
  ASSERT_TRUE(ca.ok()) << ca.status();

  CertificateSpec backwards = Spec("x");
  backwards.not_after = backwards.not_before;
  EXPECT_THAT(std::string(CreateCaCertificate(backwards, ca_key->get()).status().message()),
              HasSubstr("not before not_after"));

  EXPECT_THAT(std::string(CreateCaCertificate(Spec(""), ca_key->get()).status().message()),
              HasSubstr("needs a common name"));

  CertificateSpec bad_ip = Spec("x");
  bad_ip.ip_sans = {"300.1.1.1"};
  EXPECT_THAT(
      std::string(
          IssueCertificate(bad_ip, other_key->get(), ca->get(), ca_key->get()).status().message()),
      HasSubstr("bad IP SAN '300.1.1.1'"));

  CertificateSpec bad_dns = Spec("x");
  bad_dns.dns_sans = {"a b"};
  EXPECT_EQ(IssueCertificate(bad_dns, other_key->get(), ca->get(), ca_key->get()).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_THAT(std::string(IssueCertificate(Spec("x"), other_key->get(), ca->get(), other_key->get())
                              .status()
                              .message()),
              HasSubstr("CA key does not belong"));

  absl::StatusOr<X509Ptr> leaf =
      IssueCertificate(Spec("leaf"), other_key->get(), ca->get(), ca_key->get());
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_THAT(std::string(IssueCertificate(Spec("x"), ca_key->get(), leaf->get(), other_key->get())
                              .status()
                              .message()),
              HasSubstr("not a CA certificate"));

  EXPECT_THAT(
      std::string(
          CreateCaCertificate(Spec(std::string(65, 'c')), ca_key->get()).status().message()),
      HasSubstr("longer than 64"));
}

TEST(CertsTest, PemRoundTripAndParseErrors) {
  absl::StatusOr<EvpPkeyPtr> key = GenerateP256Key();
  ASSERT_TRUE(key.ok());
  absl::StatusOr<X509Ptr> ca = CreateCaCertificate(Spec("Test CA"), key->get());
  ASSERT_TRUE(ca.ok());
  absl::StatusOr<std::string> cert_pem = CertificateToPem(ca->get());
  absl::StatusOr<std::string> key_pem = PrivateKeyToPem(key->get());
  ASSERT_TRUE(cert_pem.ok() && key_pem.ok());
  EXPECT_THAT(*key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));

  absl::StatusOr<std::vector<X509Ptr>> two = ParseCertificatesPem(*cert_pem + *cert_pem, "f");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size(), 2u);
  EXPECT_EQ(X509_cmp(two->front().get(), ca->get()), 0);
  absl::StatusOr<EvpPkeyPtr> parsed_key = ParsePrivateKeyPem(*key_pem, "k");
  ASSERT_TRUE(parsed_key.ok()) << parsed_key.status();
  EXPECT_EQ(EVP_PKEY_eq(parsed_key->get(), key->get()), 1);

  EXPECT_THAT(std::string(ParseCertificatesPem("", "empty.crt").status().message()),
              HasSubstr("empty.crt: no PEM certificate found"));
  EXPECT_THAT(std::string(ParseCertificatesPem(*key_pem, "key-as.crt").status().message()),
              HasSubstr("key-as.crt: no PEM certificate found"));
  const std::string garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  EXPECT_THAT(std::string(ParseCertificatesPem(*cert_pem + garbage, "bad.crt").status().message()),
              HasSubstr("bad.crt: bad PEM certificate #2"));
  EXPECT_THAT(std::string(ParsePrivateKeyPem(*cert_pem, "cert-as.key").status().message()),
              HasSubstr("cert-as.key: no PEM private key found"));
  BIO* bio = BIO_new(BIO_s_mem());
  static const char kPass[] = "secret";
  ASSERT_EQ(
      PEM_write_bio_PrivateKey(bio, key->get(), EVP_aes_256_cbc(),
                               reinterpret_cast<const unsigned char*>(kPass), 6, nullptr, nullptr),
      1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  const std::string encrypted(data, static_cast<size_t>(size));
  BIO_free(bio);
  EXPECT_THAT(std::string(ParsePrivateKeyPem(encrypted, "enc.key").status().message()),
              HasSubstr("enc.key: the private key is encrypted"));
  const std::string bad_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  EXPECT_THAT(std::string(ParsePrivateKeyPem(bad_key, "bad.key").status().message()),
              HasSubstr("bad.key: bad PEM private key"));
}

TEST(CertDirTest, InitWritesCaAndControllerWithModes) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  InitCertDirOptions options;
  options.dir = dir.File("pki");
  options.trust_domain = "example.org";
  options.not_before = kNow - absl::Hours(1);
  options.not_after = kNow + absl::Hours(24 * 365);
  ASSERT_TRUE(InitCertDir(options).ok());

  EXPECT_EQ(FileMode(options.dir), 0700u);
  EXPECT_EQ(FileMode(dir.File("pki/ca.key")), 0600u);
  EXPECT_EQ(FileMode(dir.File("pki/controller.key")), 0600u);
  EXPECT_EQ(FileMode(dir.File("pki/ca.crt")), 0644u);
  EXPECT_EQ(FileMode(dir.File("pki/controller.crt")), 0644u);
  EXPECT_EQ(FileMode(dir.File("pki/ca.crl")), 0644u);

  X509Ptr ca = LoadCert(dir.File("pki/ca.crt"));
  X509Ptr controller = LoadCert(dir.File("pki/controller.crt"));
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(controller, nullptr);
  EXPECT_THAT(UriSans(ca.get()), ElementsAre("spiffe://example.org"));
  EXPECT_THAT(UriSans(controller.get()), ElementsAre("spiffe://example.org/controller"));
  EXPECT_THAT(DnsSans(controller.get()), ElementsAre("localhost"));
  EXPECT_EQ(X509_check_ip_asc(controller.get(), "127.0.0.1", 0), 1);
  EXPECT_TRUE(ChainsTo(controller.get(), ca.get()));
  // No temporary files are left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(options.dir)) {
    ++entries;
  }
  EXPECT_EQ(entries, 5);
}

TEST(CertDirTest, InitRefusesToReplaceUnlessOverwrite) {
  TempDir dir;
  InitCertDirOptions options;
  options.dir = dir.path();
  options.trust_domain = "example.org";
  options.not_before = kNow;
  options.not_after = kNow + absl::Hours(24);
  ASSERT_TRUE(InitCertDir(options).ok());
  absl::StatusOr<std::string> before = ReadFile(dir.File("ca.crt"));
  ASSERT_TRUE(before.ok());

  absl::Status again = InitCertDir(options);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr("ca.crt' exists"));
  EXPECT_EQ(*ReadFile(dir.File("ca.crt")), *before);

  options.overwrite = true;
  ASSERT_TRUE(InitCertDir(options).ok());
  EXPECT_NE(*ReadFile(dir.File("ca.crt")), *before);
  EXPECT_EQ(FileMode(dir.File("ca.key")), 0600u);
}

TEST(CertDirTest, InitRejectsBadInput) {
  TempDir dir;
  InitCertDirOptions options;
  options.dir = dir.path();
  options.trust_domain = "Example.org";
  options.not_before = kNow;
  options.not_after = kNow + absl::Hours(1);
  EXPECT_EQ(InitCertDir(options).code(), absl::StatusCode::kInvalidArgument);
  options.trust_domain = "example.org";
  options.controller_hosts = {"bad host"};
  EXPECT_THAT(std::string(InitCertDir(options).message()), HasSubstr("bad DNS name 'bad host'"));
  options.controller_hosts = {};
  options.not_after = kNow;
  EXPECT_EQ(InitCertDir(options).code(), absl::StatusCode::kInvalidArgument);
  // Nothing was written.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(CertDirTest, IssuesNodeAdminAndControllerCertificates) {
  TempDir dir;
  InitCertDirOptions init;
  init.dir = dir.path();
  init.trust_domain = "example.org";
  init.not_before = kNow - absl::Hours(1);
  init.not_after = kNow + absl::Hours(24 * 30);
  ASSERT_TRUE(InitCertDir(init).ok());
  X509Ptr ca = LoadCert(dir.File("ca.crt"));
  ASSERT_NE(ca, nullptr);

  IssueOptions node;
  node.dir = dir.path();
  node.kind = PeerKind::kNode;
  node.name = "n7";
  node.not_before = kNow - absl::Hours(1);
  node.not_after = kNow + absl::Hours(24 * 365);  // beyond the CA: capped
  absl::StatusOr<IssuedCertificate> issued = IssueFromCertDir(node);
  ASSERT_TRUE(issued.ok()) << issued.status();
  EXPECT_EQ(issued->id, SpiffeId::Node("example.org", "n7"));
  EXPECT_EQ(issued->cert_path, dir.File("node-n7.crt"));
  EXPECT_EQ(issued->key_path, dir.File("node-n7.key"));
  EXPECT_EQ(issued->not_after, init.not_after);
  EXPECT_TRUE(issued->capped_at_ca);
  EXPECT_EQ(FileMode(issued->key_path), 0600u);
  X509Ptr cert = LoadCert(issued->cert_path);
  ASSERT_NE(cert, nullptr);
  EXPECT_THAT(UriSans(cert.get()), ElementsAre("spiffe://example.org/node/n7"));
  EXPECT_THAT(DnsSans(cert.get()), ElementsAre());
  EXPECT_EQ(*NotAfter(cert.get()), init.not_after);
  EXPECT_TRUE(ChainsTo(cert.get(), ca.get()));

  IssueOptions admin = node;
  admin.not_after = kNow + absl::Hours(24);
  admin.kind = PeerKind::kAdmin;
  admin.name = "alice";
  admin.hosts = {"ops.example.org", "10.0.0.9"};
  absl::StatusOr<IssuedCertificate> issued_admin = IssueFromCertDir(admin);
  ASSERT_TRUE(issued_admin.ok()) << issued_admin.status();
  EXPECT_FALSE(issued_admin->capped_at_ca);
  X509Ptr admin_cert = LoadCert(dir.File("admin-alice.crt"));
  ASSERT_NE(admin_cert, nullptr);
  EXPECT_THAT(UriSans(admin_cert.get()), ElementsAre("spiffe://example.org/admin/alice"));
  EXPECT_THAT(DnsSans(admin_cert.get()), ElementsAre("ops.example.org"));
  EXPECT_EQ(X509_check_ip_asc(admin_cert.get(), "10.0.0.9", 0), 1);

  // The controller's certificate can be renewed; its files already exist.
  IssueOptions controller = node;
  controller.kind = PeerKind::kController;
  controller.name = "";
  EXPECT_EQ(IssueFromCertDir(controller).status().code(), absl::StatusCode::kAlreadyExists);
  controller.overwrite = true;
  absl::StatusOr<IssuedCertificate> renewed = IssueFromCertDir(controller);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->id, SpiffeId::Controller("example.org"));
}

TEST(CertDirTest, IssueReportsABadDirectory) {
  TempDir dir;
  IssueOptions options;
  options.dir = dir.path();
  options.name = "n1";
  options.not_before = kNow;
  options.not_after = kNow + absl::Hours(1);
  absl::StatusOr<IssuedCertificate> missing = IssueFromCertDir(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir.File("ca.crt")));

  InitCertDirOptions init;
  init.dir = dir.path();
  init.trust_domain = "example.org";
  init.not_before = kNow;
  init.not_after = kNow + absl::Hours(24);
  ASSERT_TRUE(InitCertDir(init).ok());

  options.name = "bad/name";
  EXPECT_THAT(std::string(IssueFromCertDir(options).status().message()),
              HasSubstr("has the character '/'"));
  options.name = "";
  EXPECT_THAT(std::string(IssueFromCertDir(options).status().message()),
              HasSubstr("the name is empty"));

  // A CA key that is not the CA's: replace ca.key by the controller's key.
  std::filesystem::copy_file(dir.File("controller.key"), dir.File("ca.key"),
                             std::filesystem::copy_options::overwrite_existing);
  options.name = "n1";
  EXPECT_THAT(std::string(IssueFromCertDir(options).status().message()),
              HasSubstr("ca.key does not belong to the certificate in"));
}

}  // namespace
}  // namespace dar::security
