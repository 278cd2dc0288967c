#include "lab/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "base/test_support.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::lab {
namespace {

using ::testing::HasSubstr;

using test::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `condition` until it holds or 10 s pass.
bool WaitFor(const std::function<bool()>& condition) {
  return test::WaitFor(condition, std::chrono::seconds(10));
}

// Reaps our child `pid` and returns its wait status.
int Reap(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(SpawnHeldTest, RunsTheCommandOnlyAfterReleaseWithOutputInTheLog) {
  TempDir dir("release");
  const std::string log = dir.File("out.log");
  const std::string marker = dir.File("ran");
  absl::StatusOr<HeldProcess> p = SpawnHeld(
      {"sh", "-c", fmt::format("echo to-stdout; echo to-stderr >&2; touch {}", marker)}, log);
  ASSERT_TRUE(p.ok()) << p.status();
  const ProcessId id = p->id();
  EXPECT_GT(id.pid, 0);
  EXPECT_NE(id.start_time, 0u);
  EXPECT_TRUE(IsRunning(id));  // held at the gate
  EXPECT_FALSE(std::filesystem::exists(marker));
  ASSERT_TRUE(p->Release().ok());
  const int status = Reap(id.pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_EQ(ReadFile(log), "to-stdout\nto-stderr\n");
}

TEST(SpawnHeldTest, DroppingAHeldProcessRunsNothing) {
  TempDir dir("drop");
  const std::string marker = dir.File("ran");
  pid_t pid = 0;
  {
    absl::StatusOr<HeldProcess> p = SpawnHeld({"touch", marker}, dir.File("out.log"));
    ASSERT_TRUE(p.ok()) << p.status();
    pid = p->id().pid;
  }  // closes the gate and reaps the child
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);  // already reaped
  EXPECT_EQ(errno, ECHILD);
}

TEST(SpawnHeldTest, TheChildHasItsOwnSessionAndDefaultSignals) {
  TempDir dir("session");
  const std::string log = dir.File("out.log");
  // SIGTERM ignored here must not be inherited: the service must stop on SIGTERM.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old {};
  sigaction(SIGTERM, &ignore, &old);
  absl::StatusOr<HeldProcess> p =
      SpawnHeld({"sh", "-c", "cut -d' ' -f6 /proc/$$/stat; exec sleep 100"}, log);
  sigaction(SIGTERM, &old, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  const ProcessId id = p->id();
  ASSERT_TRUE(p->Release().ok());
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(log).empty(); }));
  EXPECT_EQ(std::stoi(ReadFile(log)), id.pid);  // session leader
  ASSERT_TRUE(StopProcesses({id}, Seconds(10), Seconds(10)).ok());
  const int status = Reap(id.pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(SpawnHeldTest, AMissingProgramFailsBeforeForking) {
  TempDir dir("missing");
  absl::StatusOr<HeldProcess> p = SpawnHeld({"dar-no-such-program-xyz"}, dir.File("out.log"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("dar-no-such-program-xyz"));
}

TEST(SpawnHeldTest, AnUnwritableLogIsAnError) {
  absl::StatusOr<HeldProcess> p = SpawnHeld({"true"}, "/nonexistent-dir/x.log");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("/nonexistent-dir/x.log"));
}

TEST(StopProcessesTest, KillsWhatIgnoresSigterm) {
  TempDir dir("kill");
  const std::string log = dir.File("out.log");
  absl::StatusOr<HeldProcess> p =
      SpawnHeld({"sh", "-c", "trap '' TERM; echo ready; exec sleep 100"}, log);
  ASSERT_TRUE(p.ok()) << p.status();
  const ProcessId id = p->id();
  ASSERT_TRUE(p->Release().ok());
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log) == "ready\n"; }));
  ASSERT_TRUE(StopProcesses({id}, Milliseconds(100), Seconds(10)).ok());
  EXPECT_FALSE(IsRunning(id));
  const int status = Reap(id.pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(StopProcessesTest, LeavesAReusedPidAlone) {
  TempDir dir("reused");
  absl::StatusOr<HeldProcess> p = SpawnHeld({"sleep", "100"}, dir.File("out.log"));
  ASSERT_TRUE(p.ok()) << p.status();
  const ProcessId id = p->id();
  ASSERT_TRUE(p->Release().ok());
  // The same pid with another start time is another process as far as the record goes.
  const ProcessId stale{id.pid, id.start_time + 1};
  EXPECT_FALSE(IsRunning(stale));
  ASSERT_TRUE(StopProcesses({stale}, Milliseconds(100), Milliseconds(100)).ok());
  EXPECT_TRUE(IsRunning(id));
  ASSERT_TRUE(StopProcesses({id, id}, Seconds(10), Seconds(10)).ok());
  EXPECT_FALSE(IsRunning(id));
  Reap(id.pid);
}

TEST(StopProcessesTest, GoneProcessesAreFine) {
  EXPECT_TRUE(StopProcesses({}, Seconds(1), Seconds(1)).ok());
  // Pid 0 and a pid beyond pid_max name nothing.
  EXPECT_TRUE(StopProcesses({{0, 0}, {1 << 30, 0}}, Seconds(1), Seconds(1)).ok());
}

TEST(ProcessStartTimeTest, KnowsOurselvesAndNotTheMissing) {
  absl::StatusOr<uint64_t> self = ProcessStartTime(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_GT(*self, 0u);
  EXPECT_TRUE(IsRunning({getpid(), *self}));
  EXPECT_EQ(ProcessStartTime(1 << 30).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dar::lab
