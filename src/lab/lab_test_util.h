// What the lab's integration tests share: a fixture that owns one lab per test (named after the
// test process, removed by name in TearDown even when the test failed), the dar-lab binary,
// and waiting on conditions with deadlines. Test-only.
#ifndef DAR_LAB_LAB_TEST_UTIL_H_
#define DAR_LAB_LAB_TEST_UTIL_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lab/command.h"

namespace dar::lab {

// The whole file; "" if it cannot be read.
std::string ReadFile(const std::string& path);

// Checks `condition` every 10 ms until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Reaps zombies of services that were reparented to this process (a subreaper).
void ReapOrphans();

// A program of this build: <build>/src/cli/<name>.
std::string BinaryPath(const std::string& name);

class LabTest : public ::testing::Test {
 protected:
  // Skips the test unless it runs as root and namespaces can be made; names the lab
  // "<prefix><pid><tag>" (`tag` tells the labs of one test process apart) with a fresh lab dir,
  // and makes this process the subreaper of the services (they outlive `dar-lab up`).
  void Start(const std::string& prefix, char tag);
  // Removes the lab by name (Down with --name), reaps, deletes the lab dir.
  void TearDown() override;

  // Runs the dar-lab binary of this build with `args`; its exit code and output.
  CommandResult Cli(std::vector<std::string> args);

  std::string Netns(const std::string& node) const { return name_ + "-" + node; }

  // Writes <dir>/lab.yaml: the diamond A-B-D, A-C-D (links in that order: A-B, A-C, B-D, C-D)
  // with the given tbf rates ("" for none) and `services` (YAML: the `services:` block's
  // body, indented two spaces); returns its path.
  std::string WriteDiamond(const std::vector<std::string>& rates, const std::string& services);

  SubprocessRunner runner_;
  bool started_ = false;
  std::string name_;
  std::string dir_;
};

}  // namespace dar::lab

#endif  // DAR_LAB_LAB_TEST_UTIL_H_
