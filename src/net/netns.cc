#include "net/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "net/scoped_fd.h"

namespace dar::net {
namespace {

constexpr size_t kMaxNamespaceName = 64;

// The command line as a shell would take it back (arguments with spaces quoted).
std::string CommandLine(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    if (a.empty() || a.find_first_of(" \t'\"") != std::string::npos) {
      out += fmt::format("'{}'", a);
    } else {
      out += a;
    }
  }
  return out;
}

// Writes all of `n` bytes, retrying on EINTR; async-signal-safe.
void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads until EOF, retrying on EINTR.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

// Waits for `pid`; its raw wait status.
absl::StatusOr<int> Wait(pid_t pid, const std::string& what) {
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, 0) >= 0) return status;
    if (errno != EINTR) return absl::ErrnoToStatus(errno, fmt::format("{}: waitpid", what));
  }
}

// Reads an errno the child reported through `fd` before failing; 0 if it reported none.
int ReadChildErrno(int fd) {
  int err = 0;
  size_t got = 0;
  while (got < sizeof(err)) {
    const ssize_t r = ::read(fd, reinterpret_cast<char*>(&err) + got, sizeof(err) - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got == sizeof(err) ? err : 0;
}

absl::StatusOr<ScopedFd> OpenNamespace(const std::string& name) {
  const std::string path = "/run/netns/" + name;
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, fmt::format("network namespace {}: open {}", name, path));
  }
  return fd;
}
absl::StatusOr<ScopedFd> OpenNamespace(const NetNamespace& ns) { return OpenNamespace(ns.name()); }

// `ip [-n netns] args...`
std::vector<std::string> Ip(const std::string& netns, std::vector<std::string> args) {
  std::vector<std::string> argv = {"ip"};
  if (!netns.empty()) {
    argv.push_back("-n");
    argv.push_back(netns);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv) {
  const std::string line = CommandLine(argv);
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty command line");
  // Everything the child needs is prepared before fork: it may only make system calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("'{}': pipe", line));
  }
  ScopedFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  int err_pipe[2];  // reports an exec failure; closed by a successful exec
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("'{}': pipe", line));
  }
  ScopedFd err_read(err_pipe[0]), err_write(err_pipe[1]);

  const pid_t pid = ::fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, fmt::format("'{}': fork", line));
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::dup2(out_write.get(), STDOUT_FILENO);
    ::dup2(out_write.get(), STDERR_FILENO);
    ::execvp(args[0], args.data());
    const int err = errno;
    WriteAll(err_write.get(), &err, sizeof(err));
    ::_exit(127);
  }
  out_write.Reset();
  err_write.Reset();
  std::string output = ReadAll(out_read.get());
  const int exec_errno = ReadChildErrno(err_read.get());
  absl::StatusOr<int> status = Wait(pid, fmt::format("'{}'", line));
  if (!status.ok()) return status.status();
  if (exec_errno != 0) {
    return absl::ErrnoToStatus(exec_errno, fmt::format("'{}': cannot run {}", line, argv[0]));
  }
  if (WIFSIGNALED(*status)) {
    return absl::InternalError(
        fmt::format("'{}' was killed by signal {}; output: {}", line, WTERMSIG(*status), output));
  }
  if (WEXITSTATUS(*status) != 0) {
    return absl::InternalError(
        fmt::format("'{}' exited with {}: {}", line, WEXITSTATUS(*status), output));
  }
  return output;
}

// NetNamespace ---------------------------------------------------------------------------------

absl::StatusOr<NetNamespace> NetNamespace::Create(const std::string& name) {
  if (name.empty() || name.size() > kMaxNamespaceName || name.find('/') != std::string::npos ||
      name == "." || name == "..") {
    return absl::InvalidArgumentError(
        fmt::format("network namespace name '{}' must have 1 to {} characters and no '/'", name,
                    kMaxNamespaceName));
  }
  if (absl::StatusOr<std::string> r = RunCommand({"ip", "netns", "add", name}); !r.ok()) {
    return r.status();
  }
  NetNamespace ns(name);  // from here on, deleted on every return
  if (absl::StatusOr<std::string> r = ns.Run({"ip", "link", "set", "lo", "up"}); !r.ok()) {
    return r.status();
  }
  return ns;
}

NetNamespace::NetNamespace(NetNamespace&& other) noexcept
    : name_(std::exchange(other.name_, std::string())) {}

NetNamespace& NetNamespace::operator=(NetNamespace&& other) noexcept {
  if (this != &other) {
    (void)Delete();
    name_ = std::exchange(other.name_, std::string());
  }
  return *this;
}

NetNamespace::~NetNamespace() { (void)Delete(); }

std::string NetNamespace::path() const { return "/run/netns/" + name_; }

absl::StatusOr<std::string> NetNamespace::Run(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name_};
  full.insert(full.end(), argv.begin(), argv.end());
  return RunCommand(full);
}

absl::Status NetNamespace::Delete() {
  if (name_.empty()) return absl::OkStatus();
  const std::string name = std::exchange(name_, std::string());
  absl::StatusOr<std::string> r = RunCommand({"ip", "netns", "delete", name});
  return r.ok() ? absl::OkStatus() : r.status();
}

// Running code inside a namespace ---------------------------------------------------------------

absl::Status RunInNamespace(const std::string& name, absl::FunctionRef<absl::Status()> fn) {
  absl::StatusOr<ScopedFd> fd = OpenNamespace(name);
  if (!fd.ok()) return fd.status();
  absl::Status result;
  std::thread worker([&] {
    if (::setns(fd->get(), CLONE_NEWNET) != 0) {
      result = absl::ErrnoToStatus(errno, fmt::format("network namespace {}: setns", name));
      return;
    }
    result = fn();
  });
  worker.join();
  return result;
}

absl::Status RunInNamespace(const NetNamespace& ns, absl::FunctionRef<absl::Status()> fn) {
  return RunInNamespace(ns.name(), fn);
}

absl::StatusOr<int> RunInNamespaceProcess(const NetNamespace& ns, absl::FunctionRef<int()> fn) {
  absl::StatusOr<ScopedFd> fd = OpenNamespace(ns);
  if (!fd.ok()) return fd.status();
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("network namespace {}: pipe", ns.name()));
  }
  ScopedFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::ErrnoToStatus(errno, fmt::format("network namespace {}: fork", ns.name()));
  }
  if (pid == 0) {
    if (::setns(fd->get(), CLONE_NEWNET) != 0) {
      const int err = errno;
      WriteAll(err_write.get(), &err, sizeof(err));
      ::_exit(127);
    }
    err_write.Reset();
    ::_exit(fn() & 0xff);
  }
  err_write.Reset();
  const int setns_errno = ReadChildErrno(err_read.get());
  absl::StatusOr<int> status = Wait(pid, fmt::format("network namespace {} child", ns.name()));
  if (!status.ok()) return status.status();
  if (setns_errno != 0) {
    return absl::ErrnoToStatus(setns_errno,
                               fmt::format("network namespace {}: setns in child", ns.name()));
  }
  if (WIFSIGNALED(*status)) {
    return absl::InternalError(fmt::format("network namespace {}: child killed by signal {}",
                                           ns.name(), WTERMSIG(*status)));
  }
  return WEXITSTATUS(*status);
}

// VethPair -------------------------------------------------------------------------------------

absl::StatusOr<VethPair> VethPair::Create(const VethEnd& a, const VethEnd& b) {
  if (absl::StatusOr<std::string> r =
          RunCommand({"ip", "link", "add", a.name, "type", "veth", "peer", "name", b.name});
      !r.ok()) {
    return r.status();
  }
  VethPair pair(VethEnd{a.name, "", a.address}, VethEnd{b.name, "", b.address});
  for (VethEnd* end : {&pair.a_, &pair.b_}) {
    const std::string& target = end == &pair.a_ ? a.netns : b.netns;
    if (!target.empty()) {
      if (absl::StatusOr<std::string> r =
              RunCommand({"ip", "link", "set", "dev", end->name, "netns", target});
          !r.ok()) {
        return r.status();
      }
      end->netns = target;
    }
    if (!end->address.empty()) {
      if (absl::StatusOr<std::string> r =
              RunCommand(Ip(end->netns, {"addr", "add", end->address, "dev", end->name}));
          !r.ok()) {
        return r.status();
      }
    }
    if (absl::StatusOr<std::string> r =
            RunCommand(Ip(end->netns, {"link", "set", "dev", end->name, "up"}));
        !r.ok()) {
      return r.status();
    }
  }
  return pair;
}

VethPair::VethPair(VethPair&& other) noexcept
    : a_(std::move(other.a_)),
      b_(std::move(other.b_)),
      owned_(std::exchange(other.owned_, false)) {}

VethPair& VethPair::operator=(VethPair&& other) noexcept {
  if (this != &other) {
    Reset();
    a_ = std::move(other.a_);
    b_ = std::move(other.b_);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

VethPair::~VethPair() { Reset(); }

void VethPair::Reset() {
  if (!owned_) return;
  owned_ = false;
  // Deleting either end deletes both; the first may be gone with its namespace.
  if (RunCommand(Ip(a_.netns, {"link", "del", "dev", a_.name})).ok()) return;
  (void)RunCommand(Ip(b_.netns, {"link", "del", "dev", b_.name}));
}

}  // namespace dar::net
