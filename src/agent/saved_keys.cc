#include "agent/saved_keys.h"

#include <algorithm>
#include <filesystem>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"
#include "security/key_ring.h"

namespace dar::agent {
namespace {

constexpr char kSavedKeysFormat[] = "dar-agent-keys/1";
// Two rows of pair keys for a cluster of many thousand nodes.
constexpr size_t kMaxFileBytes = size_t{16} << 20;

std::string KeysPath(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / kKeysFileName).string();
}

}  // namespace

absl::StatusOr<std::vector<KeyUpdate>> ToKeyUpdates(
    const google::protobuf::RepeatedPtrField<v1::OverlayKey>& keys) {
  std::vector<KeyUpdate> out;
  for (const v1::OverlayKey& k : keys) {
    KeyUpdate u;
    u.id = k.key_id();
    u.active = k.active();
    u.row = k.row();
    if (!k.row()) {
      if (k.key().size() != net::kOverlayKeyBytes) {
        return absl::InvalidArgumentError(fmt::format("key {} has {} bytes, not {}", k.key_id(),
                                                      k.key().size(), net::kOverlayKeyBytes));
      }
      std::copy(k.key().begin(), k.key().end(), u.key.begin());
    } else {
      u.peers.reserve(static_cast<size_t>(k.peers_size()));
      for (const v1::PeerKey& p : k.peers()) {
        if (p.key().size() != net::kOverlayKeyBytes) {
          return absl::InvalidArgumentError(
              fmt::format("key {}: the key for node {} has {} bytes, not {}", k.key_id(),
                          p.node_id(), p.key().size(), net::kOverlayKeyBytes));
        }
        PeerKey& peer = u.peers.emplace_back();
        peer.node_id = p.node_id();
        std::copy(p.key().begin(), p.key().end(), peer.key.begin());
      }
    }
    out.push_back(std::move(u));
  }
  return out;
}

nlohmann::json KeyIds(const std::vector<KeyUpdate>& keys) {
  nlohmann::json ids = nlohmann::json::array();
  for (const KeyUpdate& k : keys) {
    ids.push_back(k.active ? fmt::format("{}*", k.id) : std::to_string(k.id));
  }
  return ids;
}

absl::Status SaveKeys(const std::string& state_dir,
                      const google::protobuf::RepeatedPtrField<v1::OverlayKey>& keys) {
  const std::string path = KeysPath(state_dir);
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("{}: cannot create {}: {}", path, state_dir, ec.message()));
  }
  const nlohmann::json j = {
      {"format", kSavedKeysFormat},
      {"keys", security::KeysToJson(std::vector<v1::OverlayKey>(keys.begin(), keys.end()))}};
  return WriteFileAtomically(path, j.dump(1) + "\n", 0600);
}

absl::StatusOr<std::vector<KeyUpdate>> LoadKeys(const std::string& state_dir) {
  const std::string path = KeysPath(state_dir);
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, kMaxFileBytes));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kSavedKeysFormat) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: not a key file (a JSON object with format \"{}\")", path, kSavedKeysFormat));
  }
  absl::StatusOr<std::vector<v1::OverlayKey>> keys =
      security::KeysFromJson(j.value("keys", nlohmann::json()));
  if (!keys.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {}", path, std::string(keys.status().message())));
  }
  google::protobuf::RepeatedPtrField<v1::OverlayKey> field(keys->begin(), keys->end());
  return ToKeyUpdates(field);
}

}  // namespace dar::agent
