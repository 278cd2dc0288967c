#include "core/topology_config.h"

#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "core/registry.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace dar {
namespace {

absl::StatusOr<LinkOverride> ReadOverride(YamlReader& entry) {
  LinkOverride o;
  const YAML::Node link = entry.Raw("link");
  if (!link.IsDefined()) {  // Raw() gives an invalid node, on which DescribeYaml() would throw
    return entry.Error("link", "must be a list of two node names, got nothing");
  }
  if (!link.IsSequence() || link.size() != 2 || !link[0].IsScalar() || !link[1].IsScalar()) {
    return entry.Error("link",
                       fmt::format("must be a list of two node names, got {}", DescribeYaml(link)));
  }
  o.a = link[0].Scalar();
  o.b = link[1].Scalar();
  if (entry.Has("capacity_fraction")) {
    ASSIGN_OR_RETURN(o.capacity_fraction,
                     entry.Required<double>("capacity_fraction", Bounds::Positive()));
  }
  ASSIGN_OR_RETURN(o.down, entry.Optional<bool>("down", false));
  if (entry.Has("metric")) {
    ASSIGN_OR_RETURN(o.metric, entry.Required<double>("metric", Bounds::Positive()));
  }
  RETURN_IF_ERROR(entry.CheckNoUnknownKeys());
  return o;
}

absl::Status ApplyOverrides(YamlReader& config, Topology& topo) {
  if (!config.Has("overrides")) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<YamlReader> entries, config.RequiredMapList("overrides"));
  for (YamlReader& entry : entries) {
    ASSIGN_OR_RETURN(LinkOverride o, ReadOverride(entry));
    RETURN_IF_ERROR(entry.Error("", ApplyLinkOverrides(topo, {o})));
  }
  return absl::OkStatus();
}

absl::StatusOr<Topology> BuildTopologyOrThrow(const YAML::Node& node, const std::string& where,
                                              const std::string& base_dir) {
  const std::string path = fmt::format("{}: topology", where);
  // A null `topology:` is an error here, not an empty map.
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: must be a map, got {}", path, DescribeYaml(node)));
  }
  ASSIGN_OR_RETURN(YamlReader config, YamlReader::Create(node, path));
  ASSIGN_OR_RETURN(const std::string type, config.Required<std::string>("type"));
  const TopologyFactory* factory = Registry<TopologyFactory>::Find(type);
  if (factory == nullptr) {
    return config.Error("type", fmt::format("unknown topology type '{}' (known: {})", type,
                                            fmt::join(Registry<TopologyFactory>::Names(), ", ")));
  }
  ASSIGN_OR_RETURN(Topology topo, (*factory)(config, base_dir));
  RETURN_IF_ERROR(ApplyOverrides(config, topo));
  RETURN_IF_ERROR(config.CheckNoUnknownKeys());
  return topo;
}

}  // namespace

absl::StatusOr<LinkParams> ReadLinkParams(YamlReader& config, std::string_view key,
                                          const LinkParams& default_value) {
  if (!config.Has(key)) return default_value;
  ASSIGN_OR_RETURN(YamlReader map, config.RequiredMap(key));
  LinkParams params = default_value;
  ASSIGN_OR_RETURN(const double gbps,
                   map.Optional<double>("capacity_gbps", params.capacity.gbps(),
                                        Bounds::InRange(kMinLinkGbps, kMaxLinkGbps)));
  params.capacity = DataRate::Gbps(gbps);
  ASSIGN_OR_RETURN(params.delay, map.OptionalDuration("delay", params.delay, Bounds::Positive()));
  ASSIGN_OR_RETURN(params.queue_bytes, map.OptionalSize("queue", params.queue_bytes,
                                                        Bounds::Positive(), kMaxQueueBytes));
  RETURN_IF_ERROR(map.CheckNoUnknownKeys());
  return params;
}

absl::StatusOr<Topology> BuildTopology(const YAML::Node& node, const std::string& where,
                                       const std::string& base_dir) {
  try {
    return BuildTopologyOrThrow(node, where, base_dir);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(fmt::format("{}: topology: {}", where, e.what()));
  }
}

}  // namespace dar
