// libFuzzer target: the files DAR's daemons keep and read back after a restart, and the
// learned policy's model. The first byte picks the reader, the rest is the file, written to a
// scratch directory and read back as the daemon reads it:
//   0 an agent's saved tables          (agent/table_store.h, <state_dir>/tables.bin), read by
//                                       node B of the diamond in fuzz/corpus/config/agent.yaml
//   1 an agent's saved keys            (agent/saved_keys.h)
//   2 a learned policy's model         (learn/policy_model.h)
//   3 the controller's key ring        (security/key_ring.h)
//   4 the controller's table versions  (control/table_versions.h)
//   5 an agent's sequence floor        (agent/sequence_floor.h)
// Each must turn whatever it holds into a value or an error: no crash, no hang, no unbounded
// allocation. Seed corpus: fuzz/corpus/state (the first byte of each file picks its reader).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "agent/agent_config.h"
#include "agent/saved_keys.h"
#include "agent/sequence_floor.h"
#include "agent/table_store.h"
#include "base/files.h"
#include "base/json_log.h"
#include "base/state_store.h"
#include "control/table_versions.h"
#include "learn/policy_model.h"
#include "security/key_ring.h"

namespace {

// Node B of a diamond, as dar-lab writes it; its state directory is the scratch directory.
constexpr char kNodeB[] = R"(node: {id: 2, name: B}
controller: 10.255.255.1:50051
tls: {cert: node-2.crt, key: node-2.key, ca: ca.crt}
state_dir: STATE
nodes:
  - {id: 1, name: A, overlay: 10.77.0.1}
  - {id: 2, name: B, overlay: 10.77.0.2}
  - {id: 3, name: C, overlay: 10.77.0.3}
  - {id: 4, name: D, overlay: 10.77.0.4}
links:
  - {a: A, b: B}
  - {a: A, b: C}
  - {a: B, b: D}
  - {a: C, b: D}
neighbours:
  - {id: 1, link: 0, interface: b-a, address: 10.1.0.2/30, peer_address: 10.1.0.1}
  - {id: 4, link: 2, interface: b-d, address: 10.1.2.1/30, peer_address: 10.1.2.2}
)";

struct Fixture {
  Fixture() {
    char tmpl[] = "/tmp/dar-state-fuzz-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::string text = kNodeB;
    text.replace(text.find("STATE"), 5, dir);
    config = *dar::agent::ParseAgentConfig(text, "fuzz.yaml");
    topology = dar::agent::BuildAgentTopology(config);
    log = std::make_unique<dar::JsonLog>([](std::string_view) {}, dar::LogLevel::kError);
    store = std::make_unique<dar::agent::TableStore>(config, topology, dar::Seconds(3), log.get());
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
  dar::agent::AgentConfig config;
  dar::Topology topology;
  std::unique_ptr<dar::JsonLog> log;
  std::unique_ptr<dar::agent::TableStore> store;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = new Fixture();  // for the whole run; its directory goes with /tmp
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto write = [&](const std::string& name) {
    const std::string path = f->dir + "/" + name;
    (void)dar::WriteFileAtomically(path, body, 0600);
    return path;
  };
  switch (data[0] % 6) {
    case 0:
      write(std::filesystem::path(f->store->file_path()).filename().string());
      (void)f->store->LoadFromDisk(dar::Time(0));
      break;
    case 1:
      write(dar::agent::kKeysFileName);
      (void)dar::agent::LoadKeys(f->dir);
      break;
    case 2:
      (void)dar::learn::LoadPolicyModel(write("model.json"));
      break;
    case 3: {
      dar::security::KeyRingOptions o;
      o.store = std::make_shared<dar::DirectoryStateStore>(f->dir);
      write(o.name);
      (void)dar::security::KeyRing::Load(o, 1'700'000'000'000'000'000);
      break;
    }
    case 4:
      (void)dar::control::TableVersions::Load(write("table-versions.json"),
                                              1'700'000'000'000'000'000);
      break;
    default:
      write(dar::agent::kSequenceFileName);
      (void)dar::agent::SequenceFloor::Start(f->dir, 1'700'000'000'000'000'000);
      break;
  }
  return 0;
}
