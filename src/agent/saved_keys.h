// The data-plane keys an agent was handed last (its row of pair keys for each epoch), kept on
// disk next to its last good table, so that a restarted agent seals and checks packets with
// the cluster's current keys before it reaches the controller. Without them it would start on
// the bootstrap key of its config file, which the controller rotates away at its start: an
// agent restarted while the controller is down would refuse its neighbours' packets and they
// its own.
//
// <state_dir>/overlay-keys.json: {"format": "dar-agent-keys/1", "keys": [{"id", "peers":
// [{"node", "key" (64 hex digits)}], "active"}]} (security::KeysToJson), mode 0600 like a TLS
// key, replaced atomically.
#ifndef DAR_AGENT_SAVED_KEYS_H_
#define DAR_AGENT_SAVED_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/dataplane.h"
#include "dar/v1/agent.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "nlohmann/json.hpp"

namespace dar::agent {

inline constexpr char kKeysFileName[] = "overlay-keys.json";

// The controller's keys as the data plane takes them. InvalidArgument for a key that is not
// 32 bytes ("key 7 has 5 bytes, not 32", "key 7: the key for node 3 has 5 bytes, not 32").
absl::StatusOr<std::vector<KeyUpdate>> ToKeyUpdates(
    const google::protobuf::RepeatedPtrField<v1::OverlayKey>& keys);

// The key ids for a log line, never the key bytes: ["1", "2*"] (* marks the active one).
nlohmann::json KeyIds(const std::vector<KeyUpdate>& keys);

// Writes `keys` to <state_dir>/overlay-keys.json (creating the directory). Errors name the
// file and the failing step.
absl::Status SaveKeys(const std::string& state_dir,
                      const google::protobuf::RepeatedPtrField<v1::OverlayKey>& keys);

// Reads them back. NotFound without a file; InvalidArgument naming the file and the problem
// for one that is not a valid key set (it is then not used).
absl::StatusOr<std::vector<KeyUpdate>> LoadKeys(const std::string& state_dir);

}  // namespace dar::agent

#endif  // DAR_AGENT_SAVED_KEYS_H_
