// Building a Topology from the `topology:` map of a scenario file.
//
// The map's `type` selects a factory registered by name (Registry<TopologyFactory>); the
// generator files register theirs ("fat_tree", "leaf_spine", "node_link_json"). Keys common
// to every type:
//   type: <name>                                       required
//   overrides: [{link: [A, B], capacity_fraction: 0.25, down: true, metric: 3}, ...]
//                                                      optional, applied after building
// A link parameter map (host_link, fabric_link) has the keys
//   capacity_gbps (default 10), delay_us (default 1), queue_kb (default 1024; 1 kB = 1024 B);
// the delay and queue may also be given in other units (delay_ms, queue_mb, ...; see
// core/config_reader.h).
// The map is read with a YamlReader, so errors are InvalidArgument and name the file and key
// path, e.g. "scenario.yaml: topology.fabric_link.capacity_gbps: must be > 0, got -1".
// Unknown keys are errors too.
#ifndef DAR_CORE_TOPOLOGY_CONFIG_H_
#define DAR_CORE_TOPOLOGY_CONFIG_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/topology.h"
#include "yaml-cpp/yaml.h"

namespace dar {

// Builds a topology of one type from its config map. `base_dir` is the directory relative
// file names resolve against. The factory reads its own keys; BuildTopology reads `type` and
// `overrides` and rejects keys nobody read.
using TopologyFactory =
    std::function<absl::StatusOr<Topology>(YamlReader& config, const std::string& base_dir)>;

// Builds the topology described by `node`, the value of a scenario's `topology:` key.
// `where` names the scenario file in error messages; relative file names in the map resolve
// against `base_dir` (the scenario file's directory; empty means the working directory).
absl::StatusOr<Topology> BuildTopology(const YAML::Node& node, const std::string& where,
                                       const std::string& base_dir = "");

// Reads the link parameter map `key` of `config` (see the file comment); `default_value` when
// the key is absent, and for the map's absent keys.
absl::StatusOr<LinkParams> ReadLinkParams(YamlReader& config, std::string_view key,
                                          const LinkParams& default_value);

}  // namespace dar

#endif  // DAR_CORE_TOPOLOGY_CONFIG_H_
