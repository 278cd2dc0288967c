#include "core/topology_config.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "core/topology_gen.h"

namespace dar {
namespace {

// How a YAML value reads in an error message: the scalar in quotes, or its shape.
std::string Describe(const YAML::Node& value) {
  switch (value.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", value.Scalar(), "'");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

template <typename T>
bool DecodeScalar(const YAML::Node& value, T& out) {
  return value.IsScalar() && YAML::convert<T>::decode(value, out);
}

absl::StatusOr<LinkOverride> ReadOverride(ConfigMap& entry) {
  LinkOverride o;
  const YAML::Node link = entry.Raw("link");
  if (!link.IsSequence() || link.size() != 2 || !link[0].IsScalar() || !link[1].IsScalar()) {
    return entry.Error("link",
                       absl::StrCat("must be a list of two node names, got ", Describe(link)));
  }
  o.a = link[0].Scalar();
  o.b = link[1].Scalar();
  if (entry.Has("capacity_fraction")) {
    ASSIGN_OR_RETURN(o.capacity_fraction, entry.PositiveNumberOr("capacity_fraction", 1.0));
  }
  ASSIGN_OR_RETURN(o.down, entry.BoolOr("down", false));
  if (entry.Has("metric")) {
    ASSIGN_OR_RETURN(o.metric, entry.PositiveNumberOr("metric", 1.0));
  }
  RETURN_IF_ERROR(entry.CheckNoUnknownKeys());
  return o;
}

absl::Status ApplyOverrides(ConfigMap& config, const std::string& where, Topology& topo) {
  if (!config.Has("overrides")) return absl::OkStatus();
  const YAML::Node list = config.Raw("overrides");
  if (!list.IsSequence()) {
    return config.Error("overrides", absl::StrCat("must be a list, got ", Describe(list)));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = absl::StrCat(config.PathOf("overrides"), "[", i, "]");
    if (!list[i].IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", path, ": must be a map, got ", Describe(list[i])));
    }
    ConfigMap entry(list[i], where, path);
    ASSIGN_OR_RETURN(LinkOverride o, ReadOverride(entry));
    absl::Status status = ApplyLinkOverrides(topo, {o});
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", path, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Topology> BuildTopologyOrThrow(const YAML::Node& node, const std::string& where,
                                              const std::string& base_dir) {
  ConfigMap config(node, where, "topology");
  if (!node.IsMap()) {
    return config.Error("", absl::StrCat("must be a map, got ", Describe(node)));
  }
  ASSIGN_OR_RETURN(const std::string type, config.String("type"));
  const TopologyFactory* factory = Registry<TopologyFactory>::Find(type);
  if (factory == nullptr) {
    return config.Error("type",
                        absl::StrCat("unknown topology type '", type, "' (known: ",
                                     absl::StrJoin(Registry<TopologyFactory>::Names(), ", "), ")"));
  }
  ASSIGN_OR_RETURN(Topology topo, (*factory)(config, base_dir));
  RETURN_IF_ERROR(ApplyOverrides(config, where, topo));
  RETURN_IF_ERROR(config.CheckNoUnknownKeys());
  return topo;
}

}  // namespace

ConfigMap::ConfigMap(YAML::Node node, std::string where, std::string path)
    : node_(std::move(node)), where_(std::move(where)), path_(std::move(path)) {}

std::string ConfigMap::PathOf(const std::string& key) const {
  if (key.empty()) return path_;
  if (path_.empty()) return std::string(key);
  return absl::StrCat(path_, ".", key);
}

absl::Status ConfigMap::Error(const std::string& key, const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat(where_, ": ", PathOf(key), ": ", message));
}

bool ConfigMap::Has(const std::string& key) const {
  return node_.IsMap() && node_[key].IsDefined();
}

YAML::Node ConfigMap::Raw(const std::string& key) {
  read_.emplace(key);
  if (!node_.IsMap()) return YAML::Node();
  const YAML::Node& map = node_;
  YAML::Node value = map[key];
  return value.IsDefined() ? value : YAML::Node();
}

absl::StatusOr<std::string> ConfigMap::String(const std::string& key) {
  const YAML::Node value = Raw(key);
  if (value.IsNull()) return Error(key, "is required");
  if (!value.IsScalar()) return Error(key, absl::StrCat("must be a string, got ", Describe(value)));
  return value.Scalar();
}

absl::StatusOr<int> ConfigMap::IntAtLeast(const std::string& key, int min) {
  if (!Has(key)) {
    read_.emplace(key);
    return Error(key, "is required");
  }
  return IntAtLeastOr(key, min, min);
}

absl::StatusOr<int> ConfigMap::IntAtLeastOr(const std::string& key, int min, int default_value) {
  const YAML::Node value = Raw(key);
  if (value.IsNull()) return default_value;
  int out = 0;
  if (!DecodeScalar(value, out) || out < min) {
    return Error(key, absl::StrCat("must be an integer >= ", min, ", got ", Describe(value)));
  }
  return out;
}

absl::StatusOr<double> ConfigMap::PositiveNumberOr(const std::string& key, double default_value) {
  const YAML::Node value = Raw(key);
  if (value.IsNull()) return default_value;
  double out = 0;
  if (!DecodeScalar(value, out) || !std::isfinite(out) || out <= 0) {
    return Error(key, absl::StrCat("must be a positive number, got ", Describe(value)));
  }
  return out;
}

absl::StatusOr<bool> ConfigMap::BoolOr(const std::string& key, bool default_value) {
  const YAML::Node value = Raw(key);
  if (value.IsNull()) return default_value;
  bool out = false;
  if (!DecodeScalar(value, out)) {
    return Error(key, absl::StrCat("must be true or false, got ", Describe(value)));
  }
  return out;
}

absl::StatusOr<ConfigMap> ConfigMap::Map(const std::string& key) {
  const YAML::Node value = Raw(key);
  if (!value.IsMap()) return Error(key, absl::StrCat("must be a map, got ", Describe(value)));
  return ConfigMap(value, where_, PathOf(key));
}

absl::StatusOr<LinkParams> ConfigMap::LinkParamsOr(const std::string& key,
                                                   const LinkParams& default_value) {
  if (!Has(key)) {
    read_.emplace(key);
    return default_value;
  }
  ASSIGN_OR_RETURN(ConfigMap map, Map(key));
  LinkParams params = default_value;
  ASSIGN_OR_RETURN(const double gbps,
                   map.PositiveNumberOr("capacity_gbps", params.capacity.gbps()));
  params.capacity = DataRate::Gbps(gbps);
  ASSIGN_OR_RETURN(const double delay_us,
                   map.PositiveNumberOr("delay_us", ToSeconds(params.delay) * 1e6));
  params.delay = SecondsF(delay_us * 1e-6);
  ASSIGN_OR_RETURN(
      const double queue_kb,
      map.PositiveNumberOr("queue_kb", static_cast<double>(params.queue_bytes) / 1024));
  params.queue_bytes = static_cast<int64_t>(queue_kb * 1024);
  RETURN_IF_ERROR(map.CheckNoUnknownKeys());
  return params;
}

absl::Status ConfigMap::CheckNoUnknownKeys() const {
  if (!node_.IsMap()) return absl::OkStatus();
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (!read_.contains(key)) return Error(key, "unknown key");
  }
  return absl::OkStatus();
}

absl::StatusOr<Topology> BuildTopology(const YAML::Node& node, const std::string& where,
                                       const std::string& base_dir) {
  try {
    return BuildTopologyOrThrow(node, where, base_dir);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": topology: ", e.what()));
  }
}

}  // namespace dar
