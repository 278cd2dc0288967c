// Test code: running this build's binaries as a shell would, for the command-line tests.
#ifndef DAR_CLI_CLI_TEST_UTIL_H_
#define DAR_CLI_CLI_TEST_UTIL_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "fmt/format.h"

namespace dar::cli {

struct BinaryResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// One of this build's binaries (src/cli/<binary>) with `args`, as a shell runs it.
inline BinaryResult RunBinary(const std::string& binary, const std::string& args) {
  const std::string cmd = fmt::format("{}/src/cli/{} {} 2>&1", DAR_BINARY_DIR, binary, args);
  BinaryResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline BinaryResult RunDarSim(const std::string& args) { return RunBinary("dar-sim", args); }

}  // namespace dar::cli

#endif  // DAR_CLI_CLI_TEST_UTIL_H_
