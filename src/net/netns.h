// Network namespaces and veth pairs for integration tests and the namespace lab: RAII owners
// that create them with the `ip` command (iproute2) and remove them when destroyed, and ways
// to run code inside a namespace. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).
//
// Not for the data path: every call here forks a process or starts a thread.
#ifndef DAR_NET_NETNS_H_
#define DAR_NET_NETNS_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dar::net {

// Runs a program (argv[0], looked up in PATH) with stdin from /dev/null and waits for it.
// Returns what it wrote to stdout and stderr (interleaved). Errors name the command line: it
// could not be started, was killed by a signal, or exited non-zero (with its output).
// REQUIRES: !argv.empty(). Thread-safe.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv);

// A named network namespace (`ip netns add`), deleted (`ip netns delete`) by Delete() or the
// destructor. Move-only.
class NetNamespace {
 public:
  // Creates the namespace and brings its loopback up. Errors: InvalidArgument for a name
  // that is empty, too long or contains '/'; otherwise the failing command's error (e.g. the
  // name exists already).
  static absl::StatusOr<NetNamespace> Create(const std::string& name);

  NetNamespace(NetNamespace&& other) noexcept;
  NetNamespace& operator=(NetNamespace&& other) noexcept;
  ~NetNamespace();

  const std::string& name() const { return name_; }
  // The file that names it: /run/netns/<name>.
  std::string path() const;

  // Runs a command inside the namespace (`ip netns exec <name> argv...`); see RunCommand.
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv) const;

  // Deletes the namespace now; the object then owns nothing. Processes and sockets still
  // inside keep it alive (unnamed) until they end.
  absl::Status Delete();

 private:
  explicit NetNamespace(std::string name) : name_(std::move(name)) {}
  std::string name_;  // empty once deleted or moved from
};

// Runs `fn` on a new thread that has joined `ns` (setns) and waits for it; returns fn's
// status, or the error of opening or entering the namespace. Sockets and devices that fn
// opens belong to ns for good, and may be used from any thread afterwards.
absl::Status RunInNamespace(const NetNamespace& ns, absl::FunctionRef<absl::Status()> fn);
// The same for a namespace someone else made, by its name (/run/netns/<name>).
absl::Status RunInNamespace(const std::string& name, absl::FunctionRef<absl::Status()> fn);

// Runs `fn` in a child process (fork) that has joined `ns`, and waits for it; returns fn's
// return value as the child's exit code (0..255). Errors: the namespace cannot be opened,
// fork fails, the child cannot enter the namespace, or it is killed by a signal. The child is
// a copy of a possibly multithreaded process: keep `fn` to system calls and plain computation.
absl::StatusOr<int> RunInNamespaceProcess(const NetNamespace& ns, absl::FunctionRef<int()> fn);

// One end of a veth pair: its interface name, the namespace it lives in (empty: the caller's)
// and optionally an IPv4 address with prefix ("10.0.0.1/24") to give it.
struct VethEnd {
  std::string name;
  std::string netns;
  std::string address;
};

// A veth pair (`ip link add ... type veth peer ...`), both ends moved to their namespaces,
// addressed and up; deleted by the destructor (deleting one end deletes both; if a namespace
// holding an end was deleted first, the pair is gone already). Move-only.
class VethPair {
 public:
  // Errors: the failing command's; a half-built pair is deleted.
  static absl::StatusOr<VethPair> Create(const VethEnd& a, const VethEnd& b);

  VethPair(VethPair&& other) noexcept;
  VethPair& operator=(VethPair&& other) noexcept;
  ~VethPair();

  const VethEnd& a() const { return a_; }
  const VethEnd& b() const { return b_; }

 private:
  VethPair(VethEnd a, VethEnd b) : a_(std::move(a)), b_(std::move(b)), owned_(true) {}
  void Reset();

  VethEnd a_;
  VethEnd b_;
  bool owned_ = false;
};

}  // namespace dar::net

#endif  // DAR_NET_NETNS_H_
