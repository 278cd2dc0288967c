// Running external commands (`ip`, `tc`) for the namespace lab: argv in, output and exit code
// out, no shell in between.
//
// CommandRunner is the lab's seam to the host: the lab builds every change to the network as a
// command and hands it to a runner, so tests can record the commands instead of running them.
#ifndef DAR_LAB_COMMAND_H_
#define DAR_LAB_COMMAND_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/units.h"

namespace dar::lab {

// pidfd_open(2). glibc 2.36 declares the pidfd functions without C linkage, so the lab calls the
// kernel directly.
int PidfdOpen(pid_t pid);

// strerror(err), for an error message.
std::string Errno(int err);

// What a finished command left behind.
struct CommandResult {
  int exit_code = 0;  // the exit status; 128 + N if killed by signal N
  std::string out;    // everything written to stdout
  std::string err;    // everything written to stderr
};

// Runs commands given as argv. Implementations may be used from one thread at a time.
class CommandRunner {
 public:
  virtual ~CommandRunner() = default;

  // Runs `argv` to completion. A nonzero exit is not an error here (see Run).
  // Errors: NotFound if argv[0] cannot be executed, DeadlineExceeded if it ran too long (it is
  // then killed), Internal for a failure of the host (pipes, fork); each names the command.
  // REQUIRES: !argv.empty().
  virtual absl::StatusOr<CommandResult> Execute(const std::vector<std::string>& argv) = 0;

  // Runs `argv` and returns its stdout. A nonzero exit becomes Internal
  // "`ip link add ...` exited with 2: <stderr>".
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv);
};

// Runs commands as child processes: argv[0] is looked up in PATH, stdin is /dev/null, stdout and
// stderr are captured (both read concurrently, so a large output cannot block the child).
class SubprocessRunner : public CommandRunner {
 public:
  // A command still running after `timeout` is killed (SIGKILL). REQUIRES: timeout > 0.
  explicit SubprocessRunner(Duration timeout = Seconds(30)) : timeout_(timeout) {}

  absl::StatusOr<CommandResult> Execute(const std::vector<std::string>& argv) override;

 private:
  Duration timeout_;
};

// argv as a person would type it: arguments joined by spaces, those with spaces, quotes or shell
// metacharacters in single quotes. For messages only; never passed to a shell.
std::string FormatCommand(const std::vector<std::string>& argv);

// The path of the executable `name` would run: `name` itself if it contains a '/', else the
// first match in $PATH, then in /usr/local/sbin, /usr/sbin and /sbin. NotFound naming `name` if
// there is none.
absl::StatusOr<std::string> FindExecutable(const std::string& name);

}  // namespace dar::lab

#endif  // DAR_LAB_COMMAND_H_
