// libFuzzer target: any bytes as a scenario file. ParseScenario reads and checks every key,
// builds the topology, each workload and each policy's control plane, and must turn whatever
// it is given into a scenario or an error: no crash, no hang, no unbounded allocation.
// Seed corpus: scenarios/ (make fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Inside scenarios/, so that relative paths (topology files, models) resolve as a shipped
  // scenario's do.
  (void)dar::sim::ParseScenario(text, DAR_SOURCE_DIR "/scenarios/fuzz.yaml");
  return 0;
}
