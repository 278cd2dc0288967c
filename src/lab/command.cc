#include "lab/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "fmt/format.h"

extern char** environ;

namespace dar::lab {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

std::string Errno(int err) { return std::strerror(err); }

namespace {

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool NeedsQuotes(const std::string& arg) {
  if (arg.empty()) return true;
  for (char c : arg) {
    if (std::strchr(" \t\n'\"\\$`!*?[]{}()<>|&;#~", c) != nullptr) return true;
  }
  return false;
}

}  // namespace

std::string FormatCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& arg : argv) {
    if (!out.empty()) out += ' ';
    if (!NeedsQuotes(arg)) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  return out;
}

absl::StatusOr<std::string> FindExecutable(const std::string& name) {
  if (name.empty()) return absl::NotFoundError("empty program name");
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return absl::NotFoundError(fmt::format("'{}' is not executable: {}", name, Errno(errno)));
  }
  const char* path = std::getenv("PATH");
  // The sbin directories come last so that `ip` and `tc` are found for a user whose PATH lacks
  // them.
  const std::string dirs = fmt::format("{}:/usr/local/sbin:/usr/sbin:/sbin",
                                       path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = fmt::format("{}/{}", dir, name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return absl::NotFoundError(fmt::format("'{}' not found in PATH", name));
}

absl::StatusOr<std::string> CommandRunner::Run(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandResult> result = Execute(argv);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    std::string err = result->err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return absl::InternalError(fmt::format("`{}` exited with {}{}{}", FormatCommand(argv),
                                           result->exit_code, err.empty() ? "" : ": ", err));
  }
  return std::move(result->out);
}

absl::StatusOr<CommandResult> SubprocessRunner::Execute(const std::vector<std::string>& argv) {
  const std::string shown = FormatCommand(argv);
  absl::StatusOr<std::string> program = FindExecutable(argv.at(0));
  if (!program.ok()) {
    return absl::NotFoundError(
        fmt::format("cannot run `{}`: {}", shown, std::string(program.status().message())));
  }

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(fmt::format("cannot run `{}`: pipe: {}", shown, Errno(errno)));
  }
  Fd out_read(out_pipe[0]);
  Fd out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(fmt::format("cannot run `{}`: pipe: {}", shown, Errno(errno)));
  }
  Fd err_read(err_pipe[0]);
  Fd err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  sigset_t all_signals;
  sigfillset(&all_signals);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &all_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawn_error =
      posix_spawn(&pid, program->c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawn_error != 0) {
    return absl::NotFoundError(fmt::format("cannot run `{}`: {}", shown, Errno(spawn_error)));
  }
  out_write.Reset();
  err_write.Reset();
  Fd pidfd(PidfdOpen(pid));

  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  CommandResult result;
  std::array<Fd*, 2> readers = {&out_read, &err_read};
  std::array<std::string*, 2> sinks = {&result.out, &result.err};
  bool exited = pidfd.get() < 0;  // without a pidfd, waitpid below blocks instead
  bool timed_out = false;
  while (out_read.get() >= 0 || err_read.get() >= 0 || !exited) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    std::array<pollfd, 3> fds{};
    for (int i = 0; i < 2; ++i) fds[i] = {readers[i]->get(), POLLIN, 0};
    fds[2] = {exited ? -1 : pidfd.get(), POLLIN, 0};
    const int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
    if (n < 0 && errno != EINTR) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return absl::InternalError(fmt::format("running `{}`: poll: {}", shown, Errno(errno)));
    }
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[8192];
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        readers[i]->Reset();
      }
    }
    if (fds[2].fd >= 0 && fds[2].revents != 0) exited = true;
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return absl::DeadlineExceededError(
        fmt::format("`{}` did not finish within {} ms; killed", shown,
                    std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count()));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(fmt::format("running `{}`: waitpid: {}", shown, Errno(errno)));
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace dar::lab
