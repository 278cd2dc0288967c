// RunCommand needs no privileges; the namespace helpers are exercised by tun_test.cc
// (integration, root only).
#include "net/netns.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::net {
namespace {

using ::testing::HasSubstr;

TEST(RunCommandTest, ReturnsOutput) {
  absl::StatusOr<std::string> out = RunCommand({"echo", "hello", "world"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hello world\n");
}

TEST(RunCommandTest, CapturesStderrToo) {
  absl::StatusOr<std::string> out = RunCommand({"sh", "-c", "echo out; echo err >&2"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("out\n"));
  EXPECT_THAT(*out, HasSubstr("err\n"));
}

TEST(RunCommandTest, NonZeroExitNamesTheCommandAndShowsOutput) {
  absl::StatusOr<std::string> out = RunCommand({"sh", "-c", "echo broken >&2; exit 3"});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("'sh -c 'echo broken >&2; exit 3''"));
  EXPECT_THAT(out.status().message(), HasSubstr("exited with 3"));
  EXPECT_THAT(out.status().message(), HasSubstr("broken"));
}

TEST(RunCommandTest, MissingProgram) {
  absl::StatusOr<std::string> out = RunCommand({"dar-no-such-program", "--flag"});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(out.status().message(), HasSubstr("dar-no-such-program --flag"));
}

TEST(RunCommandTest, KilledBySignal) {
  absl::StatusOr<std::string> out = RunCommand({"sh", "-c", "kill -9 $$"});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("killed by signal 9"));
}

TEST(RunCommandTest, StdinIsEmpty) {
  absl::StatusOr<std::string> out = RunCommand({"wc", "-c"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("0"));
}

TEST(RunCommandTest, EmptyCommandLine) { EXPECT_FALSE(RunCommand({}).ok()); }

}  // namespace
}  // namespace dar::net
