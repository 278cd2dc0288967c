#include "security/revocation.h"

#include <openssl/pem.h>

#include <filesystem>
#include <string>

#include "base/files.h"
#include "base/test_support.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::security {
namespace {

using ::testing::HasSubstr;

class RevocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& d : {dir_, other_}) {
      InitCertDirOptions init;
      init.dir = d;
      init.trust_domain = "example.org";
      init.not_before = now_ - absl::Hours(1);
      init.not_after = now_ + absl::Hours(1);
      ASSERT_TRUE(InitCertDir(init).ok());
      for (const char* name : {"1", "2"}) {
        IssueOptions node;
        node.dir = d;
        node.name = name;
        node.not_before = init.not_before;
        node.not_after = init.not_after;
        ASSERT_TRUE(IssueFromCertDir(node).ok());
      }
    }
  }
  std::string Serial(const std::string& cert_file) {
    return CertificateSerial(ParseCertificatesPem(*ReadFile(cert_file), cert_file)->front().get());
  }
  absl::StatusOr<RevocationList> Load() {
    return RevocationList::Load(dir_ + "/ca.crl", dir_ + "/ca.crt");
  }

  test::TempDir tmp_;
  const std::string dir_ = tmp_.File("certs");
  const std::string other_ = tmp_.File("other");
  const absl::Time now_ = absl::Now();
};

TEST_F(RevocationTest, ListsWhatWasRevokedAndNothingElse) {
  // `darctl certs init` makes an empty list; WriteCrl makes one where it is missing.
  absl::StatusOr<RevocationList> empty = Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
  std::filesystem::remove(dir_ + "/ca.crl");
  EXPECT_TRUE(absl::IsNotFound(Load().status()));
  ASSERT_TRUE(WriteCrl(dir_, now_).ok());
  empty = Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_EQ(empty->number(), 1u);
  absl::StatusOr<std::string> serial = RevokeInCertDir(dir_, dir_ + "/node-1.crt", now_);
  ASSERT_TRUE(serial.ok()) << serial.status();
  EXPECT_EQ(*serial, Serial(dir_ + "/node-1.crt"));
  absl::StatusOr<RevocationList> list = Load();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
  EXPECT_TRUE(list->Revoked(Serial(dir_ + "/node-1.crt")));
  EXPECT_FALSE(list->Revoked(Serial(dir_ + "/node-2.crt")));
  EXPECT_FALSE(list->Revoked(Serial(dir_ + "/controller.crt")));

  // A second revocation keeps the first; revoking one again changes nothing.
  ASSERT_TRUE(RevokeInCertDir(dir_, dir_ + "/node-2.crt", now_).ok());
  ASSERT_TRUE(RevokeInCertDir(dir_, dir_ + "/node-1.crt", now_ + absl::Minutes(1)).ok());
  list = Load();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(list->number(), 4u);  // each list written has the next number
  EXPECT_TRUE(list->Revoked(Serial(dir_ + "/node-1.crt")));
  EXPECT_TRUE(list->Revoked(Serial(dir_ + "/node-2.crt")));
}

TEST_F(RevocationTest, AnotherCasCertificateCannotBeRevokedHere) {
  absl::StatusOr<std::string> s = RevokeInCertDir(dir_, other_ + "/node-1.crt", now_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("was not issued by the CA"));
  EXPECT_THAT(std::string(RevokeInCertDir(dir_, dir_ + "/node-9.crt", now_).status().message()),
              HasSubstr("node-9.crt"));
}

TEST_F(RevocationTest, AForgedOrForeignListIsRefusedNamingTheFile) {
  // Another CA's list, copied in: refused, so nobody but the CA can un-revoke.
  ASSERT_TRUE(RevokeInCertDir(other_, other_ + "/node-1.crt", now_).ok());
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/ca.crl", *ReadFile(other_ + "/ca.crl"), 0644).ok());
  absl::StatusOr<RevocationList> list = Load();
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(std::string(list.status().message()), HasSubstr(dir_ + "/ca.crl"));
  // and revoking on top of it is refused too (the file is not replaced).
  EXPECT_FALSE(RevokeInCertDir(dir_, dir_ + "/node-1.crt", now_).ok());

  // The cluster's own list with the last byte of its signature changed: it still parses, and
  // does not verify.
  std::filesystem::remove(dir_ + "/ca.crl");
  ASSERT_TRUE(RevokeInCertDir(dir_, dir_ + "/node-1.crt", now_).ok());
  const std::string pem = *ReadFile(dir_ + "/ca.crl");
  BioPtr in(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509_CRL* crl = PEM_read_bio_X509_CRL(in.get(), nullptr, nullptr, nullptr);
  ASSERT_NE(crl, nullptr);
  const ASN1_BIT_STRING* sig = nullptr;
  X509_CRL_get0_signature(crl, &sig, nullptr);
  ASSERT_GT(sig->length, 8);
  const_cast<ASN1_BIT_STRING*>(sig)->data[sig->length - 1] ^= 0x01;
  BioPtr out(BIO_new(BIO_s_mem()));
  ASSERT_EQ(PEM_write_bio_X509_CRL(out.get(), crl), 1);
  X509_CRL_free(crl);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  ASSERT_TRUE(
      WriteFileAtomically(dir_ + "/ca.crl", std::string(data, static_cast<size_t>(size)), 0644)
          .ok());
  list = Load();
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(std::string(list.status().message()), HasSubstr("does not verify"));

  ASSERT_TRUE(WriteFileAtomically(dir_ + "/ca.crl", "not a list", 0644).ok());
  list = Load();
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(std::string(list.status().message()),
              HasSubstr("not a PEM certificate revocation list"));
}

}  // namespace
}  // namespace dar::security
