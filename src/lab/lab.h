// The namespace lab: builds a network of Linux network namespaces joined by veth links from a
// lab file (lab_config.h), runs the controller and an agent per node in it, changes links while
// it runs, and removes all of it again.
//
// Everything the lab creates lives in namespaces named "<lab>-..." (one per node and "<lab>-ctl"
// for the controller), so nothing is added to the root namespace; addresses are the lab's own
// (10.<x>.<link>.0/30 underlay, 10.255.<id>.0/30 management). Links are shaped with tc tbf only.
//
// State lives in a directory (the lab dir): state.json (lab_state.h), one config file per node
// (<node>.yaml) and for the controller (controller.yaml), and the services' logs (<node>.log,
// controller.log). Every resource is recorded in state.json before it is created, so Down works
// after `up` crashed; Down also sweeps every namespace and root-namespace interface whose name
// starts with "<lab>-", so it works even without the state file.
//
// Changes to the host go through a CommandRunner (`ip`, `tc`); services are forked directly
// (process.h). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for anything but a fake runner. A Lab
// object is cheap and holds no state between calls: every call reads state.json. Two calls on
// the same lab dir must not run at the same time.
#ifndef DAR_LAB_LAB_H_
#define DAR_LAB_LAB_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/units.h"
#include "lab/command.h"
#include "lab/lab_config.h"
#include "lab/lab_state.h"

namespace dar::lab {

struct UpOptions {
  // The lab file the config came from; recorded in the state file, for people.
  std::string file;
  // Start the services of the config's `services` section; false builds only the network.
  bool start_services = true;
  // Called before each step, after the step's resources are recorded in the state file, with
  // the command about to run ("ip netns add dmd-A") or, for a service, "start agent A: <argv>".
  // For progress output; may be empty.
  std::function<void(const std::string&)> on_step;
};

struct DownOptions {
  // The lab to sweep for. Empty: the name in the state file. Needed when the state file is lost
  // or unreadable; when both exist they must agree.
  std::string name;
  // How long services get to exit after SIGTERM before SIGKILL, and to exit after SIGKILL.
  Duration grace = Seconds(5);
  Duration kill_wait = Seconds(5);
};

// What Down did.
struct DownReport {
  std::string name;  // empty if there was nothing to do
  int processes_signalled = 0;
  std::vector<std::string> namespaces_deleted;
  std::vector<std::string> interfaces_deleted;  // root-namespace leftovers
  std::string note;                             // for the user, e.g. why nothing was done
};

class Lab {
 public:
  // `dir` is the lab dir; made absolute. `runner` must outlive the Lab.
  Lab(CommandRunner& runner, const std::string& dir);

  const std::string& dir() const { return dir_; }

  // Builds the lab of `config` and starts its services; returns the state it recorded.
  // On failure everything created so far is removed again (as Down) and the error says what
  // failed. Errors: FailedPrecondition if a lab is already up in the dir or the lab's name is in
  // use (a namespace or interface with its prefix exists); NotFound for a service program
  // not in PATH (services.<role>.command[0]); the failing command's error otherwise.
  absl::StatusOr<LabState> Up(const LabConfig& config, const UpOptions& options);

  // Stops the lab's processes, deletes its namespaces and any leftover interface with its
  // prefix. Idempotent: a second call finds nothing and succeeds. The state file is kept with
  // phase "down" (so a later Down still knows the name); logs and configs are kept.
  // Errors: what could not be removed (the state file then still lists it, for a retry);
  // InvalidArgument if the state file is unreadable and no name was given.
  absl::StatusOr<DownReport> Down(const DownOptions& options);

  // Sets both ends of the link between nodes `a` and `b` (names or ids) administratively
  // up or down. Errors: FailedPrecondition if no lab is up; NotFound for an unknown node/link.
  absl::Status SetLinkUp(std::string_view a, std::string_view b, bool up);
  // Sets the tbf rate limit on both ends of the link; nullopt removes it.
  absl::Status SetRate(std::string_view a, std::string_view b, std::optional<DataRate> rate);

  // Stops the service of `who` (a node's name or id, or "ctl" for the controller): SIGTERM, then
  // SIGKILL after `grace`; a zero grace is SIGKILL at once, as a crash would. The record stays, so
  // StartService can start it again. Errors: FailedPrecondition if no lab is up or it is not
  // running; NotFound for an unknown node or a node without a service.
  absl::Status StopService(std::string_view who, Duration grace);
  // Starts the service of `who` again with the command it was started with, its output appended
  // to its log; returns its new record. Errors: FailedPrecondition if no lab is up or it still
  // runs; NotFound as StopService; the spawn's errors.
  absl::StatusOr<ProcessRecord> StartService(std::string_view who);

  // The argv that runs `command` in the namespace of `node` (a node's name or id, or "ctl" for
  // the controller's): "ip netns exec <netns> <command...>". Errors: FailedPrecondition if no
  // lab is up, NotFound for an unknown node, InvalidArgument for an empty command.
  absl::StatusOr<std::vector<std::string>> ExecArgv(std::string_view node,
                                                    const std::vector<std::string>& command) const;
  // The argv that runs `darctl` (its path) with `args` in the controller's namespace, told
  // where the controller is and which admin certificate to use through the environment
  // (DAR_CONTROLLER, DAR_TLS_DIR, DAR_ADMIN): "ip netns exec <ctl netns> env ... darctl
  // args...". Errors: FailedPrecondition if no lab is up.
  absl::StatusOr<std::vector<std::string>> CtlArgv(const std::string& darctl,
                                                   const std::vector<std::string>& args) const;

  // The state file of the dir. Errors as LoadLabState.
  absl::StatusOr<LabState> LoadState() const;

 private:
  absl::StatusOr<LabState> LoadUpState() const;
  absl::Status Save(const LabState& state) const;
  absl::Status CheckNameFree(const std::string& prefix);
  absl::Status Build(const LabConfig& config, const UpOptions& options, LabState& state);
  absl::Status SpawnService(const std::string& role, const std::string& node,
                            const std::string& netns, const std::vector<std::string>& command,
                            const UpOptions& options, LabState& state);
  // The index in state.processes of the service of `who` (see StopService).
  static absl::StatusOr<size_t> FindService(const LabState& state, std::string_view who);
  absl::Status Step(const std::vector<std::string>& argv, const UpOptions& options);
  absl::Status ApplyRate(const std::string& netns, const std::string& ifname,
                         std::optional<DataRate> rate, bool had_rate);
  absl::StatusOr<std::vector<std::string>> ListNamespaces();
  absl::StatusOr<std::vector<std::string>> ListRootInterfaces();

  CommandRunner& runner_;
  std::string dir_;
};

// The tc command that sets (replaces) a tbf rate limit on an interface of a namespace.
std::vector<std::string> TbfCommand(const std::string& netns, const std::string& ifname,
                                    DataRate rate);

// A human-readable summary: nodes with namespaces, addresses, config and log paths, links with
// their state and rate, the controller's address, and each process with whether it is running.
std::string DescribeLab(const LabState& state, const std::string& dir);

}  // namespace dar::lab

#endif  // DAR_LAB_LAB_H_
