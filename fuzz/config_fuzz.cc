// libFuzzer target: any bytes as one of the files an operator writes or a daemon keeps. The
// first byte picks the reader, the rest is the file's text:
//   0 an agent's configuration         (agent/agent_config.h)
//   1 the controller's configuration   (control/controller_config.h)
//   2 a lab file                       (lab/lab_config.h)
//   3 a lab's state file               (lab/lab_state.h)
//   4 a node-link JSON topology        (core/topology_json.h)
// Each must turn whatever it is given into a value or an error: no crash, no hang, no
// unbounded allocation. Relative paths resolve in fuzz/corpus/config, where nothing is.
// Seed corpus: fuzz/corpus/config (the first byte of each file picks its reader).
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/agent_config.h"
#include "control/controller_config.h"
#include "core/topology_json.h"
#include "lab/lab_config.h"
#include "lab/lab_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string file = DAR_SOURCE_DIR "/fuzz/corpus/config/fuzz.yaml";
  switch (data[0] % 5) {
    case 0:
      (void)dar::agent::ParseAgentConfig(text, file);
      break;
    case 1:
      (void)dar::control::ParseControllerConfig(text, file);
      break;
    case 2:
      (void)dar::lab::ParseLabConfig(text, file);
      break;
    case 3:
      (void)dar::lab::ParseLabState(text, file);
      break;
    default:
      (void)dar::ParseNodeLinkJson(text, file, dar::JsonImportOptions());
      break;
  }
  return 0;
}
