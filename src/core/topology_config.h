// Building a Topology from the `topology:` map of a scenario file.
//
// The map's `type` selects a factory registered by name (Registry<TopologyFactory>); the
// generator files register theirs ("fat_tree", "leaf_spine", "node_link_json"). Keys common
// to every type:
//   type: <name>                                       required
//   overrides: [{link: [A, B], capacity_fraction: 0.25, down: true, metric: 3}, ...]
//                                                      optional, applied after building
// A link parameter map (host_link, fabric_link) has the keys
//   capacity_gbps (default 10), delay_us (default 1), queue_kb (default 1024; 1 kB = 1024 B).
// Errors are InvalidArgument and name the file and key path, e.g.
//   "scenario.yaml: topology.fabric_link.capacity_gbps: must be a positive number, got 'x'".
// Unknown keys are errors too.
#ifndef DAR_CORE_TOPOLOGY_CONFIG_H_
#define DAR_CORE_TOPOLOGY_CONFIG_H_

#include <functional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/topology.h"
#include "yaml-cpp/yaml.h"

namespace dar {

// A YAML map being read, with where it is for error messages. Remembers which keys were read
// so that CheckNoUnknownKeys() can reject the others. Getters named "...Or" return the default
// when the key is absent; the others fail when it is absent. Not thread-safe.
class ConfigMap {
 public:
  // `where` names the file, `path` the key path of `node` ("topology").
  ConfigMap(YAML::Node node, std::string where, std::string path);

  // The key path of `key` inside this map: "topology.k".
  std::string PathOf(const std::string& key) const;
  // InvalidArgument "<where>: <path>.<key>: <message>" (just the map's path if key is empty).
  absl::Status Error(const std::string& key, const std::string& message) const;

  bool Has(const std::string& key) const;
  // The raw value (null if absent); marks the key as read.
  YAML::Node Raw(const std::string& key);

  absl::StatusOr<std::string> String(const std::string& key);
  absl::StatusOr<int> IntAtLeast(const std::string& key, int min);
  absl::StatusOr<int> IntAtLeastOr(const std::string& key, int min, int default_value);
  absl::StatusOr<double> PositiveNumberOr(const std::string& key, double default_value);
  absl::StatusOr<bool> BoolOr(const std::string& key, bool default_value);
  // A nested map. REQUIRES of the YAML: the value is a map.
  absl::StatusOr<ConfigMap> Map(const std::string& key);
  // A link parameter map (see the file comment); `default_value` when absent.
  absl::StatusOr<LinkParams> LinkParamsOr(const std::string& key, const LinkParams& default_value);

  // An error naming the first key of this map that no getter has read.
  absl::Status CheckNoUnknownKeys() const;

 private:
  YAML::Node node_;
  std::string where_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

// Builds a topology of one type from its config map. `base_dir` is the directory relative
// file names resolve against. The factory reads its own keys; BuildTopology reads `type` and
// `overrides` and rejects keys nobody read.
using TopologyFactory =
    std::function<absl::StatusOr<Topology>(ConfigMap& config, const std::string& base_dir)>;

// Builds the topology described by `node`, the value of a scenario's `topology:` key.
// `where` names the scenario file in error messages; relative file names in the map resolve
// against `base_dir` (the scenario file's directory; empty means the working directory).
absl::StatusOr<Topology> BuildTopology(const YAML::Node& node, const std::string& where,
                                       const std::string& base_dir = "");

}  // namespace dar

#endif  // DAR_CORE_TOPOLOGY_CONFIG_H_
