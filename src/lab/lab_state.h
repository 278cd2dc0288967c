// The state file of a running lab (<lab dir>/state.json): its layout and every resource it
// created, so that later commands — and `down` after a crash — know what exists.
//
// The lab records a resource in the file before it creates it, so the file may name things that
// were never created (down must tolerate that) but never misses one that was. Saving replaces
// the file atomically (write to a temporary file, then rename), so a crash mid-save leaves the
// previous version.
#ifndef DAR_LAB_LAB_STATE_H_
#define DAR_LAB_LAB_STATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lab/lab_config.h"
#include "lab/process.h"

namespace dar::lab {

// A network interface the lab created.
struct InterfaceRecord {
  std::string netns;  // "" for the root namespace
  std::string name;
};

// A service process the lab started.
struct ProcessRecord {
  std::string role;  // "controller" or "agent"
  std::string node;  // the node's name; "" for the controller
  std::string netns;
  ProcessId id;
  std::string log;
  std::vector<std::string> argv;  // as started (after placeholder expansion)
};

enum class LabPhase {
  kCreating,  // `up` is running, or died while running
  kUp,        // `up` finished
  kDown,      // `down` removed everything; only the layout is left, for reference
};

struct LabState {
  LabPhase phase = LabPhase::kCreating;
  std::string file;  // the lab file `up` read
  LabLayout layout;
  std::vector<std::string> namespaces;
  std::vector<InterfaceRecord> interfaces;
  std::vector<ProcessRecord> processes;
};

// "<dir>/state.json".
std::string StatePath(const std::string& dir);
// "creating", "up", "down".
std::string PhaseName(LabPhase phase);

// Writes `state` to `path` atomically. Errors: Internal naming the file.
absl::Status SaveLabState(const LabState& state, const std::string& path);
// Reads a state file. Errors: NotFound if it does not exist; InvalidArgument naming the file and
// the field for anything malformed.
absl::StatusOr<LabState> LoadLabState(const std::string& path);
// The same from JSON text; `where` starts error messages.
absl::StatusOr<LabState> ParseLabState(const std::string& text, const std::string& where);
std::string SerializeLabState(const LabState& state);

}  // namespace dar::lab

#endif  // DAR_LAB_LAB_STATE_H_
