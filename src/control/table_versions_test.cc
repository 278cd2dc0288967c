#include "control/table_versions.h"

#include <string>

#include "base/files.h"
#include "base/test_support.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar::control {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'700'000'000'123'456'789;  // ns
constexpr uint64_t kNowMs = 1'700'000'000'123;

uint64_t Reserved(const std::string& file) {
  return nlohmann::json::parse(*ReadFile(file))["reserved"].get<uint64_t>();
}

TEST(TableVersionsTest, StartFromTheClockAndGrow) {
  absl::StatusOr<TableVersions> v = TableVersions::Load("", kNow);
  ASSERT_TRUE(v.ok()) << v.status();
  absl::Status saved;
  EXPECT_EQ(v->Take(&saved), kNowMs);
  EXPECT_EQ(v->Take(&saved), kNowMs + 1);
  EXPECT_TRUE(saved.ok());
}

TEST(TableVersionsTest, ARestartBeginsAboveEveryVersionIssuedEvenIfTheClockWentBack) {
  test::TempDir dir;
  const std::string file = dir.File("state/table-versions.json");
  absl::Status saved;
  uint64_t last = 0;
  {
    TableVersions v = *TableVersions::Load(file, kNow);
    // Past one block, so that the file is written a second time.
    for (uint64_t i = 0; i < TableVersions::kBlock + 5; ++i) last = v.Take(&saved);
    ASSERT_TRUE(saved.ok()) << saved;
    EXPECT_GE(Reserved(file), last);
  }
  // The clock an hour behind: the file, not the clock, decides.
  TableVersions again = *TableVersions::Load(file, kNow - 3'600'000'000'000);
  EXPECT_GT(again.Take(&saved), last);
  // The clock ahead of the file: the clock decides.
  TableVersions later = *TableVersions::Load(file, kNow + 3'600'000'000'000);
  EXPECT_EQ(later.Take(&saved), kNowMs + 3'600'000);
}

TEST(TableVersionsTest, AClaimAboveIsAdoptedWithinTheStepAndRefusedBeyondIt) {
  test::TempDir dir;
  const std::string file = dir.File("table-versions.json");
  TableVersions v = *TableVersions::Load(file, kNow);
  absl::Status saved;
  EXPECT_EQ(v.OnClaim(0, kNow, &saved), TableVersions::Claim::kKnown);
  EXPECT_EQ(v.OnClaim(kNowMs - 1, kNow, &saved), TableVersions::Claim::kKnown);
  EXPECT_EQ(v.next(), kNowMs);

  // The clock went back with nothing persisted: an honest agent holds a newer version.
  const uint64_t held = kNowMs + 3 * TableVersions::kBlock;
  EXPECT_EQ(v.OnClaim(held, kNow, &saved), TableVersions::Claim::kAdopted);
  EXPECT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(v.Take(&saved), held + 1);
  EXPECT_GE(Reserved(file), held + 1);  // persisted before it was handed out

  // A hostile claim near the top of the range, as one that once wrapped the counter.
  const uint64_t next = v.next();
  EXPECT_EQ(v.OnClaim(~uint64_t{0} - 1, kNow, &saved), TableVersions::Claim::kRefused);
  EXPECT_EQ(v.OnClaim(kNowMs + TableVersions::kMaxClaimStep, kNow, &saved),
            TableVersions::Claim::kRefused);
  EXPECT_EQ(v.next(), next);
  EXPECT_EQ(v.OnClaim(kNowMs + TableVersions::kMaxClaimStep - 1, kNow, &saved),
            TableVersions::Claim::kAdopted);
  // Claims one after another cannot walk the counter away from the clock: the next one is
  // measured from the clock, which the counter is now far above.
  EXPECT_EQ(v.OnClaim(v.next() + TableVersions::kMaxClaimStep / 2, kNow, &saved),
            TableVersions::Claim::kRefused);
}

// A replica's versions: its term above kTermShift, so that a later leader's are above all of an
// earlier one's (and above every clock-based version), and no claim moves them.
TEST(TableVersionsTest, ATermsVersionsAreAboveEveryEarlierTerms) {
  absl::Status saved;
  TableVersions first = TableVersions::ForTerm(1);
  const uint64_t v1 = first.Take(&saved);
  EXPECT_TRUE(saved.ok());
  EXPECT_EQ(v1, (uint64_t{1} << TableVersions::kTermShift) + 1);
  EXPECT_EQ(first.Take(&saved), v1 + 1);
  EXPECT_GT(v1, static_cast<uint64_t>(kNow / 1'000'000));  // above the clock's versions
  for (int i = 0; i < 100'000; ++i) first.Take(&saved);
  TableVersions second = TableVersions::ForTerm(2);
  const uint64_t v2 = second.Take(&saved);
  EXPECT_GT(v2, first.next());
  EXPECT_EQ(TableVersions::TermOf(v2), 2u);
  EXPECT_EQ(TableVersions::TermOf(first.next()), 1u);
  EXPECT_EQ(TableVersions::TermOf(static_cast<uint64_t>(kNow / 1'000'000)), 0u);
  // An agent holding an older term's table is known; one holding this term's next (or a later
  // term's) is not adopted: the counter stays.
  EXPECT_EQ(second.OnClaim(v1, kNow, &saved), TableVersions::Claim::kKnown);
  const uint64_t next = second.next();
  EXPECT_EQ(second.OnClaim(next, kNow, &saved), TableVersions::Claim::kRefused);
  EXPECT_EQ(second.OnClaim(TableVersions::ForTerm(3).next(), kNow, &saved),
            TableVersions::Claim::kRefused);
  EXPECT_EQ(second.next(), next);
  EXPECT_LT(TableVersions::ForTerm(TableVersions::kMaxTerm).next(), uint64_t{1} << 63);
}

TEST(TableVersionsTest, AMalformedFileIsRefusedAndKept) {
  test::TempDir dir;
  const std::string file = dir.File("table-versions.json");
  for (const char* text :
       {"not json", R"({"format": "dar-table-versions/1"})", R"({"format": "x", "reserved": 5})",
        R"({"format": "dar-table-versions/1", "reserved": -5})",
        R"({"format": "dar-table-versions/1", "reserved": 18446744073709551615})"}) {
    ASSERT_TRUE(WriteFileAtomically(file, text, 0600).ok());
    absl::StatusOr<TableVersions> v = TableVersions::Load(file, kNow);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(file)) << text;
    EXPECT_EQ(*ReadFile(file), text);
  }
}

}  // namespace
}  // namespace dar::control
