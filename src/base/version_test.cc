#include "base/version.h"

#include <cstdio>
#include <regex>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::MatchesRegex;

TEST(VersionTest, TheLineNamesTheProgramTheReleaseAndTheCommit) {
  EXPECT_THAT(std::string(Version()), MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_EQ(VersionLine("dar-sim"),
            fmt::format("dar-sim {} (commit {})", Version(), BuildCommit()));
}

// The commit is the checkout's, read when the build ran (make test builds first).
TEST(VersionTest, TheCommitIsTheCheckoutsHead) {
  const std::string commit(BuildCommit());
  FILE* git = popen(
      fmt::format("git -C '{}' rev-parse --short=12 HEAD 2>/dev/null", DAR_SOURCE_DIR).c_str(),
      "r");
  ASSERT_NE(git, nullptr);
  char buf[64] = {};
  const bool read = fgets(buf, sizeof buf, git) != nullptr;
  const int status = pclose(git);
  if (!read || status != 0) {
    EXPECT_EQ(commit, "unknown");  // not a git checkout
    return;
  }
  std::string head(buf);
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  EXPECT_THAT(commit, MatchesRegex("[0-9a-f]{12}(-dirty)?"));
  EXPECT_EQ(commit.substr(0, 12), head);
}

}  // namespace
}  // namespace dar
