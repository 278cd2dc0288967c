// Long-running processes of the namespace lab (the controller and the agents): starting them
// detached with their output in a log file, recognising them later by pid and start time, and
// stopping them.
//
// A process is started in two steps so that its pid can be recorded before it runs anything:
// SpawnHeld forks a child that waits at a gate; Release lets it exec. If the parent dies
// before Release (or drops the HeldProcess), the child sees the gate close and exits without
// running the command. Nothing here is thread-safe.
#ifndef DAR_LAB_PROCESS_H_
#define DAR_LAB_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/units.h"

namespace dar::lab {

// A process as the kernel knows it at one instant: a pid is reused, the pair is not.
struct ProcessId {
  pid_t pid = 0;
  // Field 22 of /proc/<pid>/stat (clock ticks after boot). 0 means "not known": the pid alone
  // identifies the process then.
  uint64_t start_time = 0;
};

// The start time of `pid` (ProcessId::start_time). NotFound if there is no such process.
absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid);

// True if `id` names a process that exists and has not exited (a zombie has exited).
bool IsRunning(const ProcessId& id);

// A forked child waiting at its gate to exec a command.
class HeldProcess {
 public:
  HeldProcess(HeldProcess&& other) noexcept;
  HeldProcess& operator=(HeldProcess&&) = delete;
  HeldProcess(const HeldProcess&) = delete;
  HeldProcess& operator=(const HeldProcess&) = delete;
  // Without Release: closes the gate, so the child exits without running the command, and
  // reaps it.
  ~HeldProcess();

  const ProcessId& id() const { return id_; }

  // Lets the child exec its command. The child is not waited for afterwards: it runs on after
  // this object and its creator are gone. Errors: Internal if the child is already gone.
  absl::Status Release();

 private:
  friend absl::StatusOr<HeldProcess> SpawnHeld(const std::vector<std::string>&, const std::string&);
  HeldProcess(ProcessId id, int gate) : id_(id), gate_(gate) {}

  ProcessId id_;
  int gate_ = -1;  // write end of the gate pipe; -1 once released or moved from
};

// Forks a child for `argv` (argv[0] looked up in PATH now, so a missing program fails here) in a
// session of its own, stdin from /dev/null, stdout and stderr appended to `log_path` (created
// 0644), default signal handling, no file descriptors inherited beyond 0-2. The child waits
// at its gate until Release. Errors name the command: NotFound for a missing program,
// Internal for a log that cannot be opened or a failed fork.
// REQUIRES: !argv.empty(); the calling process is single-threaded (it forks).
absl::StatusOr<HeldProcess> SpawnHeld(const std::vector<std::string>& argv,
                                      const std::string& log_path);

// Stops processes that need not be our children: SIGTERM to each running one, a wait of up to
// `grace` for all to exit, then SIGKILL to the rest and a wait of up to `kill_wait`. Waiting is
// on the processes themselves (pidfd), not a fixed sleep. A process whose start time differs
// from the recorded one is a reused pid and is left alone. Zombies count as exited.
// Errors: Internal listing the pids still running after SIGKILL, or that could not be signalled.
absl::Status StopProcesses(const std::vector<ProcessId>& processes, Duration grace,
                           Duration kill_wait);

}  // namespace dar::lab

#endif  // DAR_LAB_PROCESS_H_
