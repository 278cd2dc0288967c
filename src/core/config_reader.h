// Typed, validated reading of YAML configuration blocks: scenario files, their topology,
// network, workload and policy blocks.
//
// A YamlReader wraps one YAML map and the place it came from ("scenario.yaml: workloads[0]").
// Every getter checks type and range and fails with InvalidArgument
//   "<where>.<key>: <problem>"   e.g. "scenario.yaml: workloads[0].size_mb: must be > 0, got -1"
// The reader remembers every key a getter asked about, so a final CheckNoUnknownKeys() rejects
// typos. Nothing here throws: yaml-cpp exceptions are caught and turned into errors.
//
// Conventions shared by all configuration files:
//   - durations are numbers whose key names the unit: compute_ms, server_time_us, gap_s
//     (<name>_s, <name>_ms, <name>_us or <name>_ns; exactly one of them);
//   - sizes likewise: <name>_bytes, <name>_kb, <name>_mb or <name>_gb, in binary units
//     (1 kb = 1024 bytes, 1 mb = 1024 kb), as the topology's queue_kb;
//   - hosts are node names of the topology.
// Not thread-safe.
#ifndef DAR_CORE_CONFIG_READER_H_
#define DAR_CORE_CONFIG_READER_H_

#include <concepts>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/topology.h"
#include "core/units.h"
#include "yaml-cpp/yaml.h"

namespace dar {

// Bounds on a number read from YAML. Every number must also be finite. The default admits any
// finite number.
struct Bounds {
  std::optional<double> min;
  bool min_inclusive = true;
  std::optional<double> max;
  bool max_inclusive = true;

  static Bounds Any() { return Bounds(); }
  // > 0.
  static Bounds Positive() { return Bounds{0.0, false, std::nullopt, true}; }
  // >= 0.
  static Bounds NonNegative() { return Bounds{0.0, true, std::nullopt, true}; }
  // 0 < x <= hi.
  static Bounds PositiveAtMost(double hi) { return Bounds{0.0, false, hi, true}; }
  // >= lo.
  static Bounds AtLeast(double lo) { return Bounds{lo, true, std::nullopt, true}; }
  // lo <= x <= hi.
  static Bounds InRange(double lo, double hi) { return Bounds{lo, true, hi, true}; }
  // 0 <= x <= 1.
  static Bounds Fraction() { return InRange(0, 1); }

  // Empty if `v` is finite and within the bounds, else the problem ("must be > 0, got -1").
  std::string Check(double v) const;
};

class YamlReader {
 public:
  // A reader over `node`. A null or undefined node reads as an empty map, so an optional block
  // needs no special case; anything else that is not a map is an error naming `where`.
  // `where` is a key path ("scenario.yaml: workloads[0]") or, for a file's top-level map, the
  // file name and a colon ("scenario.yaml:").
  static absl::StatusOr<YamlReader> Create(const YAML::Node& node, std::string where);

  const std::string& where() const { return where_; }
  // "<where>.<key>"; "<where> <key>" when where() ends with ':' (a file at the top level:
  // "s.yaml: duration"); just `key` when where() is empty.
  std::string Path(std::string_view key) const;
  // InvalidArgument "<where>.<key>: <problem>".
  absl::Status Error(std::string_view key, std::string_view problem) const;
  // The same for a problem held in an absl::string_view (Debian's abseil has its own type,
  // e.g. Status::message()).
  template <typename S>
  requires std::same_as<S, absl::string_view> absl::Status Error(std::string_view key, S problem)
  const { return Error(key, std::string_view(problem.data(), problem.size())); }
  // `cause` with its message prefixed by "<where>.<key>: "; keeps its code. OK stays OK.
  absl::Status Error(std::string_view key, const absl::Status& cause) const;

  // True if the map has `key`. Marks the key as known.
  bool Has(std::string_view key);
  // Marks `key` as known without reading it (e.g. `type`, which the registry reads).
  void Ignore(std::string_view key);
  // The value of `key`, or an undefined node. Marks the key as known.
  YAML::Node Raw(std::string_view key);

  // The value of `key` as T, one of: bool, int, int64_t, double, std::string,
  // std::vector<std::string>, std::vector<int64_t>, std::vector<double>. Numbers, and the
  // elements of numeric lists, must be finite and within `bounds`. Required fails when the key
  // is absent; Optional returns `default_value` then (unchecked).
  template <typename T>
  absl::StatusOr<T> Required(std::string_view key, const Bounds& bounds = Bounds());
  template <typename T>
  absl::StatusOr<T> Optional(std::string_view key, T default_value,
                             const Bounds& bounds = Bounds());

  // A string that must be one of `allowed`.
  absl::StatusOr<std::string> RequiredChoice(std::string_view key,
                                             const std::vector<std::string>& allowed);
  absl::StatusOr<std::string> OptionalChoice(std::string_view key, std::string default_value,
                                             const std::vector<std::string>& allowed);

  // A duration given as exactly one of <name>_s, <name>_ms, <name>_us, <name>_ns. `bounds`
  // apply to the number as written (default: >= 0). Rounded to the nearest nanosecond.
  bool HasDuration(std::string_view name);
  absl::StatusOr<Duration> RequiredDuration(std::string_view name,
                                            const Bounds& bounds = Bounds::NonNegative());
  absl::StatusOr<Duration> OptionalDuration(std::string_view name, Duration default_value,
                                            const Bounds& bounds = Bounds::NonNegative());

  // A size in bytes given as exactly one of <name>_bytes, <name>_kb, <name>_mb, <name>_gb
  // (binary units); an empty `name` means the keys bytes, kb, mb, gb. `bounds` apply to the
  // number as written (default: > 0), `max_bytes` to the size. Rounded to the nearest byte.
  static constexpr int64_t kMaxSizeBytes = int64_t{1} << 40;  // 1 TiB
  bool HasSize(std::string_view name);
  absl::StatusOr<int64_t> RequiredSize(std::string_view name,
                                       const Bounds& bounds = Bounds::Positive(),
                                       int64_t max_bytes = kMaxSizeBytes);
  absl::StatusOr<int64_t> OptionalSize(std::string_view name, int64_t default_value,
                                       const Bounds& bounds = Bounds::Positive(),
                                       int64_t max_bytes = kMaxSizeBytes);

  // A data rate given as exactly one of <name>_bps, <name>_kbps, <name>_mbps, <name>_gbps
  // (decimal units, bits per second). `bounds` apply to the number as written (default: > 0).
  // Rounded to the nearest bit per second.
  absl::StatusOr<DataRate> OptionalRate(std::string_view name, DataRate default_value,
                                        const Bounds& bounds = Bounds::Positive());

  // A host named by its node name: a node of `topo` of kind host with exactly one link (what
  // the transport can send from).
  absl::StatusOr<NodeId> RequiredHost(std::string_view key, const Topology& topo);
  // A list of distinct hosts, each as for RequiredHost. May be empty.
  absl::StatusOr<std::vector<NodeId>> RequiredHosts(std::string_view key, const Topology& topo);
  absl::StatusOr<std::vector<NodeId>> OptionalHosts(std::string_view key, const Topology& topo,
                                                    std::vector<NodeId> default_value);

  // A nested map, read with its own reader ("<where>.<key>"); the caller should call its
  // CheckNoUnknownKeys(). Required fails when absent; Optional gives an empty map then.
  absl::StatusOr<YamlReader> RequiredMap(std::string_view key);
  absl::StatusOr<YamlReader> OptionalMap(std::string_view key);
  // A list of maps, one reader per element ("<where>.<key>[i]"). May be empty.
  absl::StatusOr<std::vector<YamlReader>> RequiredMapList(std::string_view key);

  // An error naming the first key that no getter asked about, and the known keys.
  absl::Status CheckNoUnknownKeys() const;

 private:
  struct UnitKey {
    std::string key;
    double scale;  // value * scale = nanoseconds or bytes
  };

  // YAML::Node has no move constructor: a node is a handle, copied.
  YamlReader(const YAML::Node& node, std::string where) : node_(node), where_(std::move(where)) {}
  static std::vector<UnitKey> DurationKeys(std::string_view name);
  static std::vector<UnitKey> SizeKeys(std::string_view name);
  static std::string DurationDisplay(std::string_view name);
  static std::string SizeDisplay(std::string_view name);
  static std::vector<UnitKey> RateKeys(std::string_view name);
  bool Present(std::string_view key) const;
  // Marks `key` as known; `display` (if not empty) is how the known-keys list shows it.
  void MarkKnown(std::string_view key, std::string_view display = {});
  // Marks every key of a unit family as known; true if any is present.
  bool MarkFamily(const std::vector<UnitKey>& keys, std::string_view display);
  // The one unit key of `keys` present (nullopt if none), or an error if several are.
  absl::StatusOr<std::optional<UnitKey>> FindUnitKey(const std::vector<UnitKey>& keys,
                                                     std::string_view display);
  absl::StatusOr<double> ReadScaled(const UnitKey& key, const Bounds& bounds, double limit);
  std::string KnownKeys() const;

  YAML::Node node_;  // a map, or null
  std::string where_;
  std::set<std::string, std::less<>> known_;
  std::vector<std::string> known_display_;  // in the order first asked about
};

// Puts "<file>:<line>: " in front of a reader's error, the line being that of the YAML node
// the error is about ("<file>: " when the node has no position).
class YamlLocator {
 public:
  explicit YamlLocator(std::string file) : file_(std::move(file)) {}

  absl::Status At(const YAML::Node& node, const absl::Status& s) const;
  template <typename T>
  absl::StatusOr<T> At(const YAML::Node& node, absl::StatusOr<T> value) const {
    if (!value.ok()) return At(node, value.status());
    return value;
  }

 private:
  std::string file_;
};

// How a YAML value reads in an error message: the scalar in quotes, or its shape ("a list").
std::string DescribeYaml(const YAML::Node& value);

// Parses YAML text. Syntax errors become InvalidArgument "<where>: <yaml-cpp's message>".
absl::StatusOr<YAML::Node> ParseYaml(const std::string& text, std::string_view where);

// Runs `read` (a reader of the text of `file`, returning an absl::StatusOr) and turns what
// yaml-cpp throws that the reader has not foreseen into InvalidArgument "<file>: <message>":
// whatever a file holds, it never ends the program.
template <typename Read>
auto CatchYamlExceptions(const std::string& file, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(file + ": " + e.what());
  }
}
// Reads and parses a YAML file; errors name `path`.
absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path);

}  // namespace dar

#endif  // DAR_CORE_CONFIG_READER_H_
