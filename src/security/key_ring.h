// The data-plane keys the controller hands to agents (the SipHash keys of the overlay's
// authenticator, net/overlay_header.h): at most two at a time, one of them sealing.
//
// Agents learn a new key set when the controller pushes it, each a little earlier or later
// than the others; a key that sealed packets before all agents knew it would have those
// packets refused. So a rotation goes in two steps, `rollout` apart, each pushed to every
// agent (make before break):
//
//   steady {K1*}  ──rotate──▶  announced {K1*, K2}  ──rollout──▶  activated {K1, K2*}
//                                                                       │ rollout
//   steady {K2*}  ◀─────────────────────────────────────────────────────┘
//
// (* seals; the others are accepted). A rotation starts every `rotate_every` in the steady
// phase, or when asked (darctl keys rotate).
//
// The ring is kept as one document of a state store (JSON, replaced whole on every change: a
// file of mode 0600 in the state directory, or a key in etcd that a controller's replicas
// share; base/state_store.h), so a restarted controller, or the replica that takes over, hands
// out the keys the agents already use and data keeps flowing. Without a store a restart makes
// new keys, and agents refuse each other's packets until all
// have them. The first ring is the operator's initial key (the one agents start with, from
// their own config, a bootstrap key that Advance rotates away at once) or, without one, a
// random key. Agents are handed rows of pair keys derived from these secrets (RowFor), never
// the secrets. Times are wall-clock (Unix ns), since they
// outlive the process. Not thread-safe.
#ifndef DAR_SECURITY_KEY_RING_H_
#define DAR_SECURITY_KEY_RING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/state_store.h"
#include "core/units.h"
#include "dar/v1/agent.pb.h"
#include "net/overlay_header.h"
#include "nlohmann/json.hpp"

namespace dar::security {

// A 32-byte key file: 64 hexadecimal digits, whitespace ignored. Errors name the file.
absl::StatusOr<net::OverlayKeyBytes> LoadKeyFile(const std::string& path);

// A key set as JSON, [{"id": 1, "key": "<64 hex digits>", "active": true}, ...] (epoch
// secrets, as the ring file holds them) or [{"id": 1, "peers": [{"node": 2, "key": "<64 hex
// digits>"}, ...], "active": true}, ...] (an agent's row, as its saved keys hold it); and back,
// checked: one or two keys, each a secret of 32 bytes or a row of 32-byte keys, exactly one
// active, different ids. Errors name the entry ("keys[1].peers[3].key: ...").
nlohmann::json KeysToJson(const std::vector<v1::OverlayKey>& keys);
absl::StatusOr<std::vector<v1::OverlayKey>> KeysFromJson(const nlohmann::json& keys);

// The row of node `self` (a wire id) of the epoch whose secret `key` holds: the same id and
// active flag, no secret, `row` set, and a pair key (net::DerivePairKey) for every node of
// `nodes` (wire ids) other than self. What the controller sends that node's agent. A `key`
// that is not a 32-byte secret gives a row without `row` set and without keys, which agents
// refuse (fail closed).
v1::OverlayKey RowFor(const v1::OverlayKey& key, uint32_t self, absl::Span<const uint32_t> nodes);

struct KeyRingOptions {
  // Where the ring is kept, as document `name`; null: in memory only.
  std::shared_ptr<StateStore> store;
  std::string name = "overlay-keys.json";
  Duration rotate_every{0};  // 0: only when asked
  Duration rollout = Seconds(5);
  // The key agents start with (id and bytes), used when there is no ring file yet.
  std::optional<std::pair<uint32_t, net::OverlayKeyBytes>> initial;
};

enum class KeyPhase { kSteady, kAnnounced, kActivated };
const char* KeyPhaseName(KeyPhase phase);

class KeyRing {
 public:
  // Reads the ring from the store, or makes the first ring (and writes it). Errors: an
  // unreadable or malformed document (naming where it is and the problem: it is not replaced),
  // a document that cannot be written.
  static absl::StatusOr<KeyRing> Load(const KeyRingOptions& options, int64_t now_unix_ns);

  // The keys to hand out, oldest first; exactly one is active.
  const std::vector<v1::OverlayKey>& keys() const { return keys_; }
  KeyPhase phase() const { return phase_; }
  // When the current phase began.
  int64_t phase_since_unix_ns() const { return since_unix_ns_; }
  uint32_t active_id() const;

  // Starts a rotation (announces a new random key) unless one is running; returns whether it
  // started. Errors: the ring cannot be written to the store (the ring is then unchanged).
  absl::StatusOr<bool> Rotate(int64_t now_unix_ns);
  // Takes the steps that are due at `now` (a timed rotation, activation, retirement); returns
  // whether the keys changed. A steady ring still on the bootstrap key (`initial`, which every
  // agent's config file holds, so every node could derive every pair key from it), or on a key
  // of a ring file written before keys were per pair (whose secret every agent was handed),
  // starts a rotation at once. Errors as Rotate.
  absl::StatusOr<bool> Advance(int64_t now_unix_ns);

 private:
  explicit KeyRing(KeyRingOptions options) : options_(std::move(options)) {}
  absl::Status Save() const;
  // Whether the ring is steady on a key every agent could hold whole: options_.initial, or
  // one of exposed_.
  bool OnExposedKey() const;
  // Applies `change` to a copy and saves it; the ring changes only if that worked.
  template <typename F>
  absl::Status Commit(F change);

  KeyRingOptions options_;
  std::vector<v1::OverlayKey> keys_;
  KeyPhase phase_ = KeyPhase::kSteady;
  int64_t since_unix_ns_ = 0;
  // Keys whose secrets were handed to every agent: those of a ring file of the single-key
  // overlay ("dar-key-ring/1"), rotated away at once.
  std::vector<uint32_t> exposed_;
};

}  // namespace dar::security

#endif  // DAR_SECURITY_KEY_RING_H_
