#include "lab/command.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::lab {
namespace {

using ::testing::HasSubstr;

TEST(SubprocessRunnerTest, CapturesStdoutAndStderrSeparately) {
  SubprocessRunner runner;
  absl::StatusOr<CommandResult> r = runner.Execute({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(SubprocessRunnerTest, PassesArgumentsWithoutAShell) {
  SubprocessRunner runner;
  // Through a shell, `$HOME; true` would be expanded and split; here it is one argument.
  absl::StatusOr<std::string> out = runner.Run({"printf", "%s|", "$HOME; true", "a b"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "$HOME; true|a b|");
}

TEST(SubprocessRunnerTest, RunTurnsANonzeroExitIntoAnErrorNamingTheCommand) {
  SubprocessRunner runner;
  absl::StatusOr<std::string> out = runner.Run({"sh", "-c", "echo 'no such device' >&2; exit 2"});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(out.status().message(),
            "`sh -c 'echo '\\''no such device'\\'' >&2; exit 2'` exited with 2: no such device");
}

TEST(SubprocessRunnerTest, AMissingProgramIsNotFound) {
  SubprocessRunner runner;
  absl::StatusOr<CommandResult> r = runner.Execute({"dar-no-such-program-xyz", "arg"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("cannot run `dar-no-such-program-xyz arg`"));
}

TEST(SubprocessRunnerTest, LargeOutputOnBothStreamsDoesNotBlock) {
  SubprocessRunner runner;
  // 1 MiB on each stream, far more than a pipe buffer: reading only one stream at a time would
  // deadlock.
  absl::StatusOr<CommandResult> r = runner.Execute(
      {"sh", "-c", "head -c 1048576 /dev/zero >&2 & head -c 1048576 /dev/zero; wait"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out.size(), 1048576u);
  EXPECT_EQ(r->err.size(), 1048576u);
}

TEST(SubprocessRunnerTest, ACommandThatRunsTooLongIsKilled) {
  SubprocessRunner runner(Milliseconds(200));
  absl::StatusOr<CommandResult> r = runner.Execute({"sleep", "30"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("`sleep 30` did not finish"));
}

TEST(SubprocessRunnerTest, ReportsDeathBySignal) {
  SubprocessRunner runner;
  absl::StatusOr<CommandResult> r = runner.Execute({"sh", "-c", "kill -KILL $$"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 128 + 9);
}

TEST(FormatCommandTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(FormatCommand({"ip", "-n", "lab-A", "link", "set", "lab-0a", "up"}),
            "ip -n lab-A link set lab-0a up");
  EXPECT_EQ(FormatCommand({"sh", "-c", "echo {x}; exit", ""}), "sh -c 'echo {x}; exit' ''");
  EXPECT_EQ(FormatCommand({"echo", "it's"}), "echo 'it'\\''s'");
}

TEST(FindExecutableTest, SearchesPathAndChecksExplicitPaths) {
  absl::StatusOr<std::string> sh = FindExecutable("sh");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_THAT(*sh, HasSubstr("/sh"));
  EXPECT_EQ(FindExecutable("/dev/null/x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FindExecutable("").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dar::lab
