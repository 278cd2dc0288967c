#include "lab/lab_test_util.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/test_support.h"
#include "fmt/format.h"
#include "lab/lab.h"

namespace dar::lab {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  return test::WaitFor(condition, timeout, std::chrono::milliseconds(10));
}

std::string BinaryPath(const std::string& name) {
  return std::string(DAR_BINARY_DIR) + "/src/cli/" + name;
}

void ReapOrphans() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

void LabTest::Start(const std::string& prefix, char tag) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: creates network namespaces and veths";
  name_ = fmt::format("{}{}{}", prefix, getpid(), tag);
  dir_ = (std::filesystem::temp_directory_path() / fmt::format("dar-lab-it-{}", name_)).string();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  const std::string probe = name_ + "-probe";
  absl::StatusOr<std::string> added = runner_.Run({"ip", "netns", "add", probe});
  if (!added.ok()) {
    GTEST_SKIP() << "cannot create network namespaces here: " << added.status();
  }
  ASSERT_TRUE(runner_.Run({"ip", "netns", "del", probe}).ok());
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  started_ = true;
}

void LabTest::TearDown() {
  if (!started_) return;
  // Whatever the test left, by name: the guard that keeps a failed test from leaking.
  DownOptions down;
  down.name = name_;
  down.grace = Seconds(1);
  Lab lab(runner_, dir_);
  absl::StatusOr<DownReport> report = lab.Down(down);
  EXPECT_TRUE(report.ok()) << report.status();
  ReapOrphans();
  std::filesystem::remove_all(dir_);
}

std::string LabTest::WriteDiamond(const std::vector<std::string>& rates,
                                  const std::string& services) {
  const char* ends[4][2] = {{"A", "B"}, {"A", "C"}, {"B", "D"}, {"C", "D"}};
  std::string links;
  for (size_t i = 0; i < 4; ++i) {
    const std::string rate = i < rates.size() ? rates[i] : "";
    links += fmt::format("  - {{a: {}, b: {}{}}}\n", ends[i][0], ends[i][1],
                         rate.empty() ? "" : ", rate: " + rate);
  }
  std::string path = dir_ + "/lab.yaml";
  std::ofstream(path) << fmt::format(
      "name: {}\nnodes:\n  - {{id: 1, name: A}}\n  - {{id: 2, name: B}}\n"
      "  - {{id: 3, name: C}}\n  - {{id: 4, name: D}}\nlinks:\n{}services:\n{}",
      name_, links, services);
  return path;
}

CommandResult LabTest::Cli(std::vector<std::string> args) {
  args.insert(args.begin(), std::string(DAR_BINARY_DIR) + "/src/cli/dar-lab");
  SubprocessRunner runner(Seconds(120));
  absl::StatusOr<CommandResult> r = runner.Execute(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult{-1, "", std::string(r.status().message())};
}

}  // namespace dar::lab
