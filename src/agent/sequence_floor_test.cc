#include "agent/sequence_floor.h"

#include <string>

#include "base/files.h"
#include "base/test_support.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/overlay_header.h"
#include "nlohmann/json.hpp"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'700'000'000'000'000'000;  // ns
constexpr uint64_t kNowMs = 1'700'000'000'000;

uint64_t Reserved(const std::string& dir) {
  return nlohmann::json::parse(*ReadFile(dir + "/" + kSequenceFileName))["reserved_ms"]
      .get<uint64_t>();
}

TEST(SequenceFloorTest, ARestartWithTheClockSetBackBeginsAboveEverythingSent) {
  test::TempDir dir;
  absl::StatusOr<SequenceFloor> first = SequenceFloor::Start(dir.path(), kNow);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->start_ms(), kNowMs);
  EXPECT_EQ(Reserved(dir.path()), kNowMs + SequenceFloor::kReserveMs);
  // The first run sends toward one peer until near the end of its reservation; Keep reserves
  // further ahead.
  net::OverlaySequencer sent(1, static_cast<int64_t>(first->start_ms()) * 1'000'000);
  ASSERT_TRUE(first->Keep(sent.Highest()).ok());
  EXPECT_EQ(Reserved(dir.path()), kNowMs + SequenceFloor::kReserveMs);  // far from the end
  const uint64_t late = (kNowMs + SequenceFloor::kReserveMs - 10) << 20;
  ASSERT_TRUE(first->Keep(late).ok());
  EXPECT_EQ(Reserved(dir.path()),
            kNowMs + SequenceFloor::kReserveMs - 10 + SequenceFloor::kReserveMs);

  // Restarted with the clock an hour behind: it begins above everything the first run sent.
  absl::StatusOr<SequenceFloor> again = SequenceFloor::Start(dir.path(), kNow - 3'600'000'000'000);
  ASSERT_TRUE(again.ok()) << again.status();
  net::OverlaySequencer resent(1, static_cast<int64_t>(again->start_ms()) * 1'000'000);
  EXPECT_GT(resent.Next(0), late);
  // With the clock ahead, the clock decides.
  absl::StatusOr<SequenceFloor> ahead = SequenceFloor::Start(dir.path(), kNow + 3'600'000'000'000);
  ASSERT_TRUE(ahead.ok());
  EXPECT_EQ(ahead->start_ms(), kNowMs + 3'600'000);
}

TEST(SequenceFloorTest, AMalformedFileIsRefusedAndKept) {
  test::TempDir dir;
  const std::string path = dir.File(kSequenceFileName);
  for (const char* text :
       {"[]", R"({"format": 1, "reserved_ms": 5})",
        R"({"format": "dar-agent-sequence/1", "reserved_ms": -1})",
        R"({"format": "dar-agent-sequence/1", "reserved_ms": 9007199254740993})"}) {
    ASSERT_TRUE(WriteFileAtomically(path, text, 0644).ok());
    absl::StatusOr<SequenceFloor> f = SequenceFloor::Start(dir.path(), kNow);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(path));
    EXPECT_EQ(*ReadFile(path), text);
  }
}

}  // namespace
}  // namespace dar::agent
