#include "security/key_ring.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"

namespace dar::security {
namespace {

constexpr char kFormat[] = "dar-key-ring/2";
// The ring of the overlay whose agents were all handed the secrets themselves (one cluster
// key): read, and its keys rotated away at once.
constexpr char kFormatHandedOut[] = "dar-key-ring/1";

std::string Hex(const std::string& bytes) {
  std::string out;
  for (const unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// 2 * kOverlayKeyBytes hexadecimal digits (whitespace skipped) as key bytes; `what` names the
// source in errors.
absl::StatusOr<net::OverlayKeyBytes> ParseHexKey(const std::string& text, const std::string& what) {
  std::string hex;
  for (const char ch : text) {
    if (std::isspace(static_cast<unsigned char>(ch))) continue;
    if (!std::isxdigit(static_cast<unsigned char>(ch))) {
      return absl::InvalidArgumentError(
          fmt::format("{}: not a hexadecimal digit: '{}'", what, std::string(1, ch)));
    }
    hex += ch;
  }
  if (hex.size() != 2 * net::kOverlayKeyBytes) {
    return absl::InvalidArgumentError(fmt::format("{}: must hold {} hexadecimal digits, has {}",
                                                  what, 2 * net::kOverlayKeyBytes, hex.size()));
  }
  net::OverlayKeyBytes key{};
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return key;
}

v1::OverlayKey MakeKey(uint32_t id, const uint8_t* bytes, bool active) {
  v1::OverlayKey k;
  k.set_key_id(id);
  k.set_key(std::string(reinterpret_cast<const char*>(bytes), net::kOverlayKeyBytes));
  k.set_active(active);
  return k;
}

v1::OverlayKey RandomKey(uint32_t id, bool active) {
  if (sodium_init() < 0) std::abort();  // cannot happen on Linux; keys must not be weak
  net::OverlayKeyBytes bytes;
  randombytes_buf(bytes.data(), bytes.size());
  return MakeKey(id, bytes.data(), active);
}

absl::StatusOr<KeyPhase> ParsePhase(const std::string& name) {
  for (const KeyPhase p : {KeyPhase::kSteady, KeyPhase::kAnnounced, KeyPhase::kActivated}) {
    if (name == KeyPhaseName(p)) return p;
  }
  return absl::InvalidArgumentError(fmt::format("unknown phase '{}'", name));
}

}  // namespace

nlohmann::json KeysToJson(const std::vector<v1::OverlayKey>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::OverlayKey& k : keys) {
    nlohmann::json j = {{"id", k.key_id()}, {"active", k.active()}};
    if (!k.row()) {
      j["key"] = Hex(k.key());
    } else {
      nlohmann::json peers = nlohmann::json::array();
      for (const v1::PeerKey& p : k.peers()) {
        peers.push_back({{"node", p.node_id()}, {"key", Hex(p.key())}});
      }
      j["peers"] = std::move(peers);
    }
    out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<std::vector<v1::OverlayKey>> KeysFromJson(const nlohmann::json& keys) {
  if (!keys.is_array() || keys.empty() || keys.size() > 2) {
    return absl::InvalidArgumentError("keys: must be a list of one or two keys");
  }
  std::vector<v1::OverlayKey> out;
  int active = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const nlohmann::json& k = keys[i];
    const bool has_key = k.is_object() && k.contains("key") && k["key"].is_string();
    const bool has_peers = k.is_object() && k.contains("peers") && k["peers"].is_array();
    if (!k.is_object() || !k.contains("id") || !k["id"].is_number_unsigned() ||
        k["id"].get<uint64_t>() > UINT32_MAX || has_key == has_peers || !k.contains("active") ||
        !k["active"].is_boolean()) {
      return absl::InvalidArgumentError(
          fmt::format("keys[{}]: needs id (0..2^32-1), active, and either key (hex) or peers", i));
    }
    const bool is_active = k["active"].get<bool>();
    active += is_active;
    if (has_key) {
      ASSIGN_OR_RETURN(const net::OverlayKeyBytes bytes,
                       ParseHexKey(k["key"].get<std::string>(), fmt::format("keys[{}].key", i)));
      out.push_back(MakeKey(k["id"].get<uint32_t>(), bytes.data(), is_active));
      continue;
    }
    v1::OverlayKey key;
    key.set_key_id(k["id"].get<uint32_t>());
    key.set_active(is_active);
    key.set_row(true);
    const nlohmann::json& peers = k["peers"];
    for (size_t p = 0; p < peers.size(); ++p) {
      const nlohmann::json& e = peers[p];
      const std::string where = fmt::format("keys[{}].peers[{}]", i, p);
      if (!e.is_object() || !e.contains("node") || !e["node"].is_number_unsigned() ||
          e["node"].get<uint64_t>() > UINT32_MAX || !e.contains("key") || !e["key"].is_string()) {
        return absl::InvalidArgumentError(
            fmt::format("{}: needs node (0..2^32-1) and key (hex)", where));
      }
      ASSIGN_OR_RETURN(const net::OverlayKeyBytes bytes,
                       ParseHexKey(e["key"].get<std::string>(), where + ".key"));
      v1::PeerKey* peer = key.add_peers();
      peer->set_node_id(e["node"].get<uint32_t>());
      peer->set_key(std::string(bytes.begin(), bytes.end()));
    }
    out.push_back(std::move(key));
  }
  if (active != 1) return absl::InvalidArgumentError("keys: exactly one key must be active");
  if (out.size() == 2 && out[0].key_id() == out[1].key_id()) {
    return absl::InvalidArgumentError("keys: the two keys have the same id");
  }
  return out;
}

v1::OverlayKey RowFor(const v1::OverlayKey& key, uint32_t self, absl::Span<const uint32_t> nodes) {
  v1::OverlayKey row;
  row.set_key_id(key.key_id());
  row.set_active(key.active());
  net::OverlayKeyBytes secret{};
  // Not a secret (the ring never holds one): a row the agent refuses, not one of zero keys.
  if (key.key().size() != secret.size()) return row;
  std::copy(key.key().begin(), key.key().end(), secret.begin());
  row.set_row(true);
  row.mutable_peers()->Reserve(static_cast<int>(nodes.size()));
  for (const uint32_t node : nodes) {
    if (node == self) continue;
    net::OverlayKeyBytes pair = net::DerivePairKey(secret, self, node);
    v1::PeerKey* p = row.add_peers();
    p->set_node_id(node);
    p->set_key(std::string(pair.begin(), pair.end()));
    sodium_memzero(pair.data(), pair.size());
  }
  sodium_memzero(secret.data(), secret.size());
  return row;
}

absl::StatusOr<net::OverlayKeyBytes> LoadKeyFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, 4096));
  return ParseHexKey(text, path);
}

const char* KeyPhaseName(KeyPhase phase) {
  switch (phase) {
    case KeyPhase::kSteady:
      return "steady";
    case KeyPhase::kAnnounced:
      return "announced";
    case KeyPhase::kActivated:
      return "activated";
  }
  return "?";
}

absl::StatusOr<KeyRing> KeyRing::Load(const KeyRingOptions& options, int64_t now_unix_ns) {
  KeyRing ring(options);
  if (options.store != nullptr) {
    absl::StatusOr<std::optional<std::string>> text = options.store->Read(options.name);
    if (!text.ok()) return text.status();
    if (text->has_value()) {
      const auto bad = [&](const std::string& why) {
        return absl::InvalidArgumentError(
            fmt::format("key ring {}: {} (fix or remove the file; removing it makes new keys, "
                        "and agents refuse each other's packets until all have them)",
                        options.store->Where(options.name), why));
      };
      const nlohmann::json j = nlohmann::json::parse(**text, nullptr, false);
      if (!j.is_object()) return bad("not a JSON object");
      const std::string format =
          j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
      if (format != kFormat && format != kFormatHandedOut) {
        return bad(
            fmt::format("format is not \"{}\" (nor \"{}\", read too)", kFormat, kFormatHandedOut));
      }
      absl::StatusOr<KeyPhase> phase = ParsePhase(
          j.contains("phase") && j["phase"].is_string() ? j["phase"].get<std::string>() : "");
      if (!phase.ok()) return bad(std::string(phase.status().message()));
      ring.phase_ = *phase;
      if (!j.contains("since_unix_ns") || !j["since_unix_ns"].is_number_integer()) {
        return bad("since_unix_ns: must be an integer");
      }
      ring.since_unix_ns_ = j["since_unix_ns"].get<int64_t>();
      absl::StatusOr<std::vector<v1::OverlayKey>> keys =
          KeysFromJson(j.value("keys", nlohmann::json()));
      if (!keys.ok()) return bad(std::string(keys.status().message()));
      for (const v1::OverlayKey& k : *keys) {
        if (k.row()) return bad(fmt::format("key {} is a node's row, not a secret", k.key_id()));
      }
      ring.keys_ = *std::move(keys);
      if ((ring.phase_ == KeyPhase::kSteady) != (ring.keys_.size() == 1)) {
        return bad(fmt::format("phase {} does not fit {} keys", KeyPhaseName(ring.phase_),
                               ring.keys_.size()));
      }
      if (format == kFormatHandedOut) {
        for (const v1::OverlayKey& k : ring.keys_) ring.exposed_.push_back(k.key_id());
      } else if (j.contains("exposed")) {
        if (!j["exposed"].is_array()) return bad("exposed: must be a list of key ids");
        for (const nlohmann::json& id : j["exposed"]) {
          if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) {
            return bad("exposed: must be a list of key ids");
          }
          ring.exposed_.push_back(id.get<uint32_t>());
        }
      }
      return ring;
    }
  }
  ring.keys_.push_back(options.initial
                           ? MakeKey(options.initial->first, options.initial->second.data(), true)
                           : RandomKey(1, true));
  ring.phase_ = KeyPhase::kSteady;
  ring.since_unix_ns_ = now_unix_ns;
  RETURN_IF_ERROR(ring.Save());
  return ring;
}

uint32_t KeyRing::active_id() const {
  for (const v1::OverlayKey& k : keys_) {
    if (k.active()) return k.key_id();
  }
  return 0;
}

absl::Status KeyRing::Save() const {
  if (options_.store == nullptr) return absl::OkStatus();
  nlohmann::json j;
  j["format"] = kFormat;
  j["phase"] = KeyPhaseName(phase_);
  j["since_unix_ns"] = since_unix_ns_;
  j["keys"] = KeysToJson(keys_);
  if (!exposed_.empty()) j["exposed"] = exposed_;
  absl::Status s = options_.store->Write(options_.name, j.dump(1) + "\n");
  if (s.ok()) return s;
  return absl::Status(s.code(), fmt::format("key ring: {}", std::string(s.message())));
}

template <typename F>
absl::Status KeyRing::Commit(F change) {
  KeyRing next = *this;
  change(next);
  RETURN_IF_ERROR(next.Save());
  *this = std::move(next);
  return absl::OkStatus();
}

bool KeyRing::OnExposedKey() const {
  if (keys_.empty()) return false;
  const v1::OverlayKey& front = keys_.front();
  if (std::find(exposed_.begin(), exposed_.end(), front.key_id()) != exposed_.end()) return true;
  if (!options_.initial) return false;
  const net::OverlayKeyBytes& initial = options_.initial->second;
  return front.key().size() == initial.size() &&
         std::memcmp(front.key().data(), initial.data(), initial.size()) == 0;
}

absl::StatusOr<bool> KeyRing::Rotate(int64_t now_unix_ns) {
  if (phase_ != KeyPhase::kSteady) return false;
  RETURN_IF_ERROR(Commit([&](KeyRing& r) {
    r.keys_.push_back(RandomKey(r.keys_.front().key_id() + 1, /*active=*/false));
    r.phase_ = KeyPhase::kAnnounced;
    r.since_unix_ns_ = now_unix_ns;
  }));
  return true;
}

absl::StatusOr<bool> KeyRing::Advance(int64_t now_unix_ns) {
  const int64_t elapsed = now_unix_ns - since_unix_ns_;
  switch (phase_) {
    case KeyPhase::kSteady:
      if (OnExposedKey()) return Rotate(now_unix_ns);
      if (options_.rotate_every <= Duration(0) || elapsed < options_.rotate_every.count()) {
        return false;
      }
      return Rotate(now_unix_ns);
    case KeyPhase::kAnnounced:
      if (elapsed < options_.rollout.count()) return false;
      RETURN_IF_ERROR(Commit([&](KeyRing& r) {
        r.keys_[0].set_active(false);
        r.keys_[1].set_active(true);
        r.phase_ = KeyPhase::kActivated;
        r.since_unix_ns_ = now_unix_ns;
      }));
      return true;
    case KeyPhase::kActivated:
      if (elapsed < options_.rollout.count()) return false;
      RETURN_IF_ERROR(Commit([&](KeyRing& r) {
        r.keys_.erase(r.keys_.begin());
        r.phase_ = KeyPhase::kSteady;
        r.since_unix_ns_ = now_unix_ns;
      }));
      return true;
  }
  return false;
}

}  // namespace dar::security
