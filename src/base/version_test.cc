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

// The output of a shell command and whether it exited 0.
std::pair<std::string, bool> Shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"", false};
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return {out, status == 0};
}

// The commit is the checkout's when the build ran: HEAD, or one of its ancestors when
// something was committed after the build.
TEST(VersionTest, TheCommitIsTheCheckoutsAtBuildTime) {
  const std::string commit(BuildCommit());
  const auto [top, in_git] = Shell(fmt::format(
      "git --no-optional-locks -C '{}' rev-parse --show-toplevel 2>/dev/null", DAR_SOURCE_DIR));
  if (!in_git) {
    EXPECT_EQ(commit, "unknown");  // not a git checkout
    return;
  }
  ASSERT_THAT(commit, MatchesRegex("[0-9a-f]{12}(-dirty)?"));
  const auto [head, ok] = Shell(
      fmt::format("git --no-optional-locks -C '{}' rev-parse --short=12 HEAD", DAR_SOURCE_DIR));
  ASSERT_TRUE(ok);
  if (commit.substr(0, 12) == head) return;
  EXPECT_TRUE(Shell(fmt::format("git --no-optional-locks -C '{}' merge-base --is-ancestor {} HEAD",
                                DAR_SOURCE_DIR, commit.substr(0, 12)))
                  .second)
      << "built from " << commit << ", which is not HEAD (" << head << ") nor before it";
}

}  // namespace
}  // namespace dar
