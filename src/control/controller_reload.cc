// ControllerCore's configuration: a reload (SIGHUP) and the operator state kept across
// restarts (drains, policy overrides).
#include <algorithm>
#include <charconv>
#include <filesystem>

#include "base/files.h"
#include "base/status_macros.h"
#include "control/controller_core.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"

namespace dar::control {
namespace {

bool SameOverlay(const ControllerConfig& a, const ControllerConfig& b) {
  if (a.nodes.size() != b.nodes.size() || a.links.size() != b.links.size() ||
      a.stub_hosts != b.stub_hosts) {
    return false;
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const ControllerNodeConfig &x = a.nodes[i], &y = b.nodes[i];
    if (x.id != y.id || x.name != y.name || x.overlay_address != y.overlay_address) return false;
  }
  for (size_t i = 0; i < a.links.size(); ++i) {
    const ControllerLinkConfig &x = a.links[i], &y = b.links[i];
    if (x.a != y.a || x.b != y.b || x.capacity != y.capacity || x.delay != y.delay) return false;
  }
  return true;
}
}  // namespace

// --- Configuration ---

absl::Status ControllerCore::Reload(const ControllerConfig& config) {
  LoadedModel model =
      LoadModel(config, "the reload is refused; the running configuration and policy stay");
  if (!model.status.ok()) {
    MutexLock lock(&mu_);
    learned_.set_refusal(model.view.refusal());
    learned_.set_refused_unix_ns(model.view.refused_unix_ns());
    return model.status;
  }
  MutexLock cycle_lock(&cycle_mu_);
  std::vector<std::shared_ptr<AgentLink>> to_close, to_update;
  std::vector<uint32_t> closed_ids;
  std::shared_ptr<const v1::AgentConfig> agent_config;
  {
    MutexLock lock(&mu_);
    ControllerConfig next = config;
    std::vector<std::string> restart;
    const auto keep = [&](auto& field, const auto& running, const char* name) {
      if (field != running) {
        restart.push_back(name);
        field = running;
      }
    };
    keep(next.listen, config_.listen, "listen");
    keep(next.tls.cert_file, config_.tls.cert_file, "tls.cert");
    keep(next.tls.key_file, config_.tls.key_file, "tls.key");
    keep(next.tls.ca_file, config_.tls.ca_file, "tls.ca");
    if (next.trust_domain.empty()) next.trust_domain = config_.trust_domain;
    keep(next.trust_domain, config_.trust_domain, "trust_domain");
    keep(next.http, config_.http, "http");
    keep(next.health, config_.health, "health");
    keep(next.hello_timeout, config_.hello_timeout, "hello_timeout");
    keep(next.log_file, config_.log_file, "log");
    keep(next.replicas, config_.replicas, "replicas");
    if (absl::StatusOr<LogLevel> level = ParseLogLevel(next.log_level); level.ok()) {
      log_.set_level(*level);
    }
    const bool overlay_changed = !SameOverlay(config_, next);
    config_ = std::move(next);
    policy_ = config_.policy;
    policy_dirty_ = true;
    policy_override_.reset();
    weight_policy_ = std::move(model.policy);
    learned_ = std::move(model.view);
    metrics_.SetPolicyActive(weight_policy_ != nullptr);
    computer_->set_weight_policy(weight_policy_);
    if (overlay_changed) {
      overlay_ = MakeOverlay(config_);
      ResetComputer(clock_.Now());
      pending_.clear();
      std::fill(pending_by_node_.begin(), pending_by_node_.end(), 0);
      std::fill(pending_sent_by_node_.begin(), pending_sent_by_node_.end(), 0);
      pending_sent_.clear();
      for (auto it = drained_.begin(); it != drained_.end();) {
        const NodeId a = overlay_->FindByNameOrId(it->first);
        const NodeId b = overlay_->FindByNameOrId(it->second);
        const bool exists =
            a != kNoNode && b != kNoNode && overlay_->topology.FindLink(a, b) != kNoLink;
        it = exists ? std::next(it) : drained_.erase(it);
      }
      for (auto it = agents_.begin(); it != agents_.end();) {
        if (overlay_->Find(it->first) != kNoNode) {
          ++it;
          continue;
        }
        if (it->second.link != nullptr) {
          to_close.push_back(it->second.link);
          closed_ids.push_back(it->first);
        }
        it = agents_.erase(it);
      }
    }
    agent_config_ = BuildAgentConfigLocked();
    agent_config = agent_config_;
    to_update = ConnectedLinksLocked();
    SaveOperatorStateLocked();
    RecordEventLocked("config_reloaded", "",
                      fmt::format("{}: {} nodes, {} links{}", config_.file, config_.nodes.size(),
                                  config_.links.size(),
                                  overlay_changed ? ", new overlay (tables start over)" : ""));
    if (!restart.empty()) {
      RecordEventLocked("config_restart_needed", "",
                        fmt::format("changes to {} take effect after a restart; running values "
                                    "kept",
                                    fmt::join(restart, ", ")));
    }
    int connected = 0;
    for (const auto& [wire, a] : agents_) connected += a.link != nullptr;
    metrics_.agents_connected->Set(connected);
  }
  metrics_.config_reloads->Increment();
  for (size_t i = 0; i < to_close.size(); ++i) {
    to_close[i]->Close(absl::FailedPreconditionError(
        fmt::format("node {} was removed from the controller's configuration", closed_ids[i])));
  }
  for (const auto& link : to_update) link->OfferConfig(agent_config);
  return absl::OkStatus();
}

namespace {
constexpr char kOperatorStateFormat[] = "dar-operator-state/1";
constexpr char kOperatorStateName[] = "operator.json";
}  // namespace

void ControllerCore::SaveOperatorStateLocked() {
  if (state_ == nullptr || restoring_) return;
  nlohmann::json j;
  j["format"] = kOperatorStateFormat;
  j["drained"] = nlohmann::json::array();
  for (const auto& [a, b] : drained_) j["drained"].push_back({a, b});
  if (policy_override_) {
    std::string policy;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    o.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*policy_override_, &policy, o);
    j["policy"] = nlohmann::json::parse(policy, nullptr, false);
  } else {
    j["policy"] = nullptr;
  }
  // The newest fallback to static each agent has reported, so that a restarted controller does
  // not make events again of the ones its predecessor had (an agent's hello repeats its last).
  j["fallbacks_heard"] = nlohmann::json::object();
  for (const auto& [wire, agent] : agents_) {
    if (agent.table_status.last_fallback_unix_ns() > 0) {
      j["fallbacks_heard"][std::to_string(wire)] = agent.table_status.last_fallback_unix_ns();
    }
  }
  const absl::Status s = state_->Write(kOperatorStateName, j.dump(1) + "\n");
  if (!s.ok()) {
    RecordEventLocked(
        "state_not_saved", "",
        fmt::format("drains and policy will not survive a restart: {}", std::string(s.message())));
  }
}

absl::Status ControllerCore::RestoreOperatorState() {
  if (state_ == nullptr) return absl::OkStatus();
  const std::string path = state_->Where(kOperatorStateName);
  absl::StatusOr<std::optional<std::string>> text = state_->Read(kOperatorStateName);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return absl::OkStatus();
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("operator state {}: {} (fix or remove it; removing it forgets the "
                    "drains and policy set with darctl)",
                    path, why));
  };
  const nlohmann::json j = nlohmann::json::parse(**text, nullptr, false);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kOperatorStateFormat) {
    return bad(fmt::format("not a JSON object with format \"{}\"", kOperatorStateFormat));
  }
  const nlohmann::json heard = j.value("fallbacks_heard", nlohmann::json::object());
  std::vector<std::pair<uint32_t, int64_t>> fallbacks_heard;
  if (!heard.is_object()) return bad("fallbacks_heard: must be an object");
  for (const auto& [key, value] : heard.items()) {
    uint32_t wire = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), wire);
    if (ec != std::errc() || end != key.data() + key.size() || !value.is_number_integer()) {
      return bad(fmt::format("fallbacks_heard.{}: must be a node id and a time in ns", key));
    }
    fallbacks_heard.emplace_back(wire, value.get<int64_t>());
  }
  const nlohmann::json drained = j.value("drained", nlohmann::json::array());
  if (!drained.is_array()) return bad("drained: must be a list of [a, b] pairs");
  for (size_t i = 0; i < drained.size(); ++i) {
    const nlohmann::json& d = drained[i];
    if (!d.is_array() || d.size() != 2 || !d[0].is_string() || !d[1].is_string()) {
      return bad(fmt::format("drained[{}]: must be a pair of node names", i));
    }
  }
  std::optional<v1::PolicySettings> policy;
  if (j.contains("policy") && !j["policy"].is_null()) {
    v1::PolicySettings p;
    if (!google::protobuf::util::JsonStringToMessage(j["policy"].dump(), &p).ok()) {
      return bad("policy: not a policy");
    }
    policy = p;
  }
  {
    MutexLock lock(&mu_);
    restoring_ = true;
  }
  for (const nlohmann::json& d : drained) {
    const absl::StatusOr<bool> r = Drain(d[0].get<std::string>(), d[1].get<std::string>(), true);
    if (!r.ok()) {
      log_.Warn("a drain kept across the restart no longer applies: skipped",
                {{"file", path}, {"error", std::string(r.status().message())}});
    }
  }
  if (policy) {
    const absl::StatusOr<v1::PolicySettings> r = SetPolicy(*policy);
    if (!r.ok()) {
      log_.Warn("the policy kept across the restart is refused: skipped",
                {{"file", path}, {"error", std::string(r.status().message())}});
    }
  }
  {
    MutexLock lock(&mu_);
    for (const auto& [wire, at] : fallbacks_heard) {
      agents_[wire].table_status.set_last_fallback_unix_ns(at);
    }
    restoring_ = false;
    SaveOperatorStateLocked();
  }
  log_.Info("operator state restored",
            {{"file", path}, {"drained", drained.size()}, {"policy", policy.has_value()}});
  return absl::OkStatus();
}

ControllerConfig ControllerCore::config() const {
  MutexLock lock(&mu_);
  return config_;
}

}  // namespace dar::control
