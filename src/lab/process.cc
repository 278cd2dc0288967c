#include "lab/process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "lab/command.h"

extern char** environ;

namespace dar::lab {
namespace {

// glibc 2.36 declares the pidfd functions without C linkage; call the kernel directly.
int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// The state letter (field 3) and start time (field 22) of /proc/<pid>/stat.
struct StatFields {
  char state = '?';
  uint64_t start_time = 0;
};

absl::StatusOr<StatFields> ReadStat(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::NotFoundError(fmt::format("no process {}", pid));
  }
  // The command name (field 2) is in parentheses and may itself contain spaces and ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) {
    return absl::InternalError(fmt::format("/proc/{}/stat: unexpected format", pid));
  }
  std::istringstream rest(line.substr(close + 1));
  StatFields f;
  rest >> f.state;
  std::string skip;
  for (int field = 4; field < 22; ++field) rest >> skip;
  rest >> f.start_time;
  if (!rest) return absl::InternalError(fmt::format("/proc/{}/stat: unexpected format", pid));
  return f;
}

// Child side of SpawnHeld, between fork and exec: only async-signal-safe calls.
[[noreturn]] void RunChild(int gate, int devnull, int log, const char* program, char* const* argv) {
  setsid();
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  if (dup2(devnull, STDIN_FILENO) < 0 || dup2(log, STDOUT_FILENO) < 0 ||
      dup2(log, STDERR_FILENO) < 0) {
    _exit(127);
  }
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  char go = 0;
  ssize_t got;
  do {
    got = read(gate, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) _exit(127);  // the parent is gone or gave up: run nothing
  execve(program, argv, environ);
  static const char kMessage[] = "dar-lab: exec failed\n";
  (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  _exit(127);
}

// An open pidfd for a process being stopped.
struct Target {
  ProcessId id;
  int pidfd = -1;
};

// Waits until every target has exited or `timeout` passed; closes and removes those that exited.
void WaitForExit(std::vector<Target>& targets, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!targets.empty()) {
    std::vector<pollfd> fds;
    fds.reserve(targets.size());
    for (const Target& t : targets) fds.push_back({t.pidfd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int n = poll(fds.data(), fds.size(), std::max<int>(0, static_cast<int>(left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    std::vector<Target> running;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (fds[i].revents != 0) {
        close(targets[i].pidfd);
      } else {
        running.push_back(targets[i]);
      }
    }
    targets = std::move(running);
    if (n == 0) return;  // timed out
  }
}

}  // namespace

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid) {
  absl::StatusOr<StatFields> f = ReadStat(pid);
  if (!f.ok()) return f.status();
  return f->start_time;
}

bool IsRunning(const ProcessId& id) {
  if (id.pid <= 0) return false;
  absl::StatusOr<StatFields> f = ReadStat(id.pid);
  if (!f.ok()) return false;
  if (id.start_time != 0 && f->start_time != id.start_time) return false;
  return f->state != 'Z' && f->state != 'X' && f->state != 'x';
}

HeldProcess::HeldProcess(HeldProcess&& other) noexcept : id_(other.id_), gate_(other.gate_) {
  other.gate_ = -1;
}

HeldProcess::~HeldProcess() {
  if (gate_ < 0) return;
  close(gate_);
  while (waitpid(id_.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

absl::Status HeldProcess::Release() {
  if (gate_ < 0) return absl::FailedPreconditionError("process already released");
  const char go = 1;
  ssize_t sent;
  do {
    sent = send(gate_, &go, 1, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  const int err = errno;
  close(gate_);
  gate_ = -1;
  if (sent != 1) {
    return absl::InternalError(
        fmt::format("process {} exited before it was started: {}", id_.pid, Errno(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<HeldProcess> SpawnHeld(const std::vector<std::string>& argv,
                                      const std::string& log_path) {
  const std::string shown = FormatCommand(argv);
  absl::StatusOr<std::string> program = FindExecutable(argv.at(0));
  if (!program.ok()) {
    return absl::NotFoundError(
        fmt::format("cannot start `{}`: {}", shown, std::string(program.status().message())));
  }
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InternalError(
        fmt::format("cannot start `{}`: log {}: {}", shown, log_path, Errno(errno)));
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int gate[2];
  if (devnull < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate) != 0) {
    const int err = errno;
    close(log);
    if (devnull >= 0) close(devnull);
    return absl::InternalError(fmt::format("cannot start `{}`: {}", shown, Errno(err)));
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    close(gate[1]);
    RunChild(gate[0], devnull, log, program->c_str(), args.data());
  }
  const int err = errno;
  close(gate[0]);
  close(log);
  close(devnull);
  if (pid < 0) {
    close(gate[1]);
    return absl::InternalError(fmt::format("cannot start `{}`: fork: {}", shown, Errno(err)));
  }
  // The child cannot have been reaped yet, so its stat is there.
  absl::StatusOr<uint64_t> start = ProcessStartTime(pid);
  HeldProcess held(ProcessId{pid, start.ok() ? *start : 0}, gate[1]);
  if (!start.ok()) return start.status();
  return held;
}

absl::Status StopProcesses(const std::vector<ProcessId>& processes, Duration grace,
                           Duration kill_wait) {
  std::map<pid_t, ProcessId> unique;
  for (const ProcessId& p : processes) {
    if (p.pid > 0) unique.emplace(p.pid, p);
  }
  std::vector<Target> targets;
  std::vector<std::string> problems;
  for (const auto& [pid, id] : unique) {
    // Open the pidfd first and check identity after: the pidfd then names the checked process.
    const int fd = PidfdOpen(pid);
    if (fd < 0) continue;  // already gone
    if (!IsRunning(id)) {
      close(fd);
      continue;
    }
    if (PidfdSendSignal(fd, SIGTERM) != 0 && errno != ESRCH) {
      problems.push_back(fmt::format("cannot signal {}: {}", pid, Errno(errno)));
      close(fd);
      continue;
    }
    targets.push_back({id, fd});
  }
  WaitForExit(targets, grace);
  for (const Target& t : targets) PidfdSendSignal(t.pidfd, SIGKILL);
  WaitForExit(targets, kill_wait);
  std::vector<pid_t> survivors;
  for (const Target& t : targets) {
    survivors.push_back(t.id.pid);
    close(t.pidfd);
  }
  if (!survivors.empty()) {
    problems.push_back(
        fmt::format("still running after SIGKILL: pid {}", fmt::join(survivors, ", ")));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InternalError(fmt::format("stopping processes: {}", fmt::join(problems, "; ")));
}

}  // namespace dar::lab
