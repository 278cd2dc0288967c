#include "core/config_reader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace dar {
namespace {

std::string FormatNumber(double v) { return fmt::format("{:g}", v); }

// Decodes one scalar of type T without throwing; the empty string means success, anything
// else is the problem to report.
template <typename T>
std::string DecodeScalar(const YAML::Node& value, const Bounds& bounds, T& out);

template <>
std::string DecodeScalar(const YAML::Node& value, const Bounds&, bool& out) {
  if (value.IsScalar() && YAML::convert<bool>::decode(value, out)) return "";
  return fmt::format("must be true or false, got {}", DescribeYaml(value));
}

template <>
std::string DecodeScalar(const YAML::Node& value, const Bounds&, std::string& out) {
  if (value.IsScalar()) {
    out = value.Scalar();
    return "";
  }
  return fmt::format("must be a string, got {}", DescribeYaml(value));
}

template <>
std::string DecodeScalar(const YAML::Node& value, const Bounds& bounds, double& out) {
  if (!value.IsScalar() || !YAML::convert<double>::decode(value, out)) {
    return fmt::format("must be a number, got {}", DescribeYaml(value));
  }
  return bounds.Check(out);
}

template <typename Int>
std::string DecodeInteger(const YAML::Node& value, const Bounds& bounds, Int& out) {
  if (!value.IsScalar() || !YAML::convert<Int>::decode(value, out)) {
    return fmt::format("must be an integer, got {}", DescribeYaml(value));
  }
  return bounds.Check(static_cast<double>(out));
}

template <>
std::string DecodeScalar(const YAML::Node& value, const Bounds& bounds, int& out) {
  return DecodeInteger(value, bounds, out);
}

template <>
std::string DecodeScalar(const YAML::Node& value, const Bounds& bounds, int64_t& out) {
  return DecodeInteger(value, bounds, out);
}

template <typename T>
struct IsVector : std::false_type {};
template <typename E>
struct IsVector<std::vector<E>> : std::true_type {};

}  // namespace

std::string Bounds::Check(double v) const {
  if (!std::isfinite(v)) return fmt::format("must be a finite number, got {}", FormatNumber(v));
  const bool low = min.has_value() && (min_inclusive ? v < *min : v <= *min);
  const bool high = max.has_value() && (max_inclusive ? v > *max : v >= *max);
  if (!low && !high) return "";
  std::string want;
  if (min.has_value()) want = fmt::format("{} {}", min_inclusive ? ">=" : ">", FormatNumber(*min));
  if (max.has_value()) {
    if (!want.empty()) want += " and ";
    want += fmt::format("{} {}", max_inclusive ? "<=" : "<", FormatNumber(*max));
  }
  return fmt::format("must be {}, got {}", want, FormatNumber(v));
}

absl::StatusOr<YamlReader> YamlReader::Create(const YAML::Node& node, std::string where) {
  if (node.IsDefined() && !node.IsNull() && !node.IsMap()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: must be a map, got {}", where, DescribeYaml(node)));
  }
  return YamlReader(node.IsDefined() && node.IsMap() ? node : YAML::Node(), std::move(where));
}

std::string YamlReader::Path(std::string_view key) const {
  if (where_.empty()) return std::string(key);
  if (key.empty()) return where_;
  if (where_.back() == ':') return fmt::format("{} {}", where_, key);
  return fmt::format("{}.{}", where_, key);
}

absl::Status YamlReader::Error(std::string_view key, std::string_view problem) const {
  return absl::InvalidArgumentError(fmt::format("{}: {}", Path(key), problem));
}

absl::Status YamlReader::Error(std::string_view key, const absl::Status& cause) const {
  if (cause.ok()) return cause;
  const absl::string_view message = cause.message();
  return absl::Status(cause.code(), fmt::format("{}: {}", Path(key),
                                                std::string_view(message.data(), message.size())));
}

void YamlReader::MarkKnown(std::string_view key, std::string_view display) {
  if (known_.emplace(key).second && !display.empty()) known_display_.emplace_back(display);
}

bool YamlReader::Present(std::string_view key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node& map = node_;
  return map[std::string(key)].IsDefined();
}

bool YamlReader::Has(std::string_view key) {
  MarkKnown(key, key);
  return Present(key);
}

bool YamlReader::MarkFamily(const std::vector<UnitKey>& keys, std::string_view display) {
  bool any = false;
  for (const UnitKey& k : keys) {
    MarkKnown(k.key);
    any |= Present(k.key);
  }
  if (std::find(known_display_.begin(), known_display_.end(), display) == known_display_.end()) {
    known_display_.emplace_back(display);
  }
  return any;
}

void YamlReader::Ignore(std::string_view key) { MarkKnown(key, key); }

YAML::Node YamlReader::Raw(std::string_view key) {
  MarkKnown(key, key);
  if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node& map = node_;
  // A key that is not there comes back from a const map as an invalid node, which throws on
  // anything but IsDefined(); hand out a plain undefined one instead.
  YAML::Node value = map[std::string(key)];
  if (!value.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
  return value;
}

template <typename T>
absl::StatusOr<T> YamlReader::Required(std::string_view key, const Bounds& bounds) {
  const YAML::Node value = Raw(key);
  if (!value.IsDefined()) return Error(key, "required");
  try {
    T out{};
    if constexpr (IsVector<T>::value) {
      if (!value.IsSequence()) {
        return Error(key, fmt::format("must be a list, got {}", DescribeYaml(value)));
      }
      for (size_t i = 0; i < value.size(); ++i) {
        typename T::value_type element{};
        const std::string problem = DecodeScalar(value[i], bounds, element);
        if (!problem.empty()) return Error(fmt::format("{}[{}]", key, i), problem);
        out.push_back(std::move(element));
      }
    } else {
      const std::string problem = DecodeScalar(value, bounds, out);
      if (!problem.empty()) return Error(key, problem);
    }
    return out;
  } catch (const YAML::Exception& e) {
    return Error(key, e.what());
  }
}

template <typename T>
absl::StatusOr<T> YamlReader::Optional(std::string_view key, T default_value,
                                       const Bounds& bounds) {
  if (!Has(key)) return default_value;
  return Required<T>(key, bounds);
}

template absl::StatusOr<bool> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<int> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<int64_t> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<double> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<std::string> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<std::vector<std::string>> YamlReader::Required(std::string_view,
                                                                       const Bounds&);
template absl::StatusOr<std::vector<int64_t>> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<std::vector<double>> YamlReader::Required(std::string_view, const Bounds&);
template absl::StatusOr<bool> YamlReader::Optional(std::string_view, bool, const Bounds&);
template absl::StatusOr<int> YamlReader::Optional(std::string_view, int, const Bounds&);
template absl::StatusOr<int64_t> YamlReader::Optional(std::string_view, int64_t, const Bounds&);
template absl::StatusOr<double> YamlReader::Optional(std::string_view, double, const Bounds&);
template absl::StatusOr<std::string> YamlReader::Optional(std::string_view, std::string,
                                                          const Bounds&);
template absl::StatusOr<std::vector<std::string>> YamlReader::Optional(std::string_view,
                                                                       std::vector<std::string>,
                                                                       const Bounds&);
template absl::StatusOr<std::vector<int64_t>> YamlReader::Optional(std::string_view,
                                                                   std::vector<int64_t>,
                                                                   const Bounds&);
template absl::StatusOr<std::vector<double>> YamlReader::Optional(std::string_view,
                                                                  std::vector<double>,
                                                                  const Bounds&);

absl::StatusOr<std::string> YamlReader::RequiredChoice(std::string_view key,
                                                       const std::vector<std::string>& allowed) {
  absl::StatusOr<std::string> value = Required<std::string>(key);
  if (!value.ok()) return value.status();
  for (const std::string& a : allowed) {
    if (*value == a) return value;
  }
  return Error(key, fmt::format("must be one of {}, got '{}'", fmt::join(allowed, ", "), *value));
}

absl::StatusOr<std::string> YamlReader::OptionalChoice(std::string_view key,
                                                       std::string default_value,
                                                       const std::vector<std::string>& allowed) {
  if (!Has(key)) return default_value;
  return RequiredChoice(key, allowed);
}

std::vector<YamlReader::UnitKey> YamlReader::DurationKeys(std::string_view name) {
  return {{fmt::format("{}_s", name), 1e9},
          {fmt::format("{}_ms", name), 1e6},
          {fmt::format("{}_us", name), 1e3},
          {fmt::format("{}_ns", name), 1}};
}

std::vector<YamlReader::UnitKey> YamlReader::SizeKeys(std::string_view name) {
  const std::string prefix = name.empty() ? "" : fmt::format("{}_", name);
  return {{prefix + "bytes", 1},
          {prefix + "kb", 1024.0},
          {prefix + "mb", 1024.0 * 1024},
          {prefix + "gb", 1024.0 * 1024 * 1024}};
}

absl::StatusOr<std::optional<YamlReader::UnitKey>> YamlReader::FindUnitKey(
    const std::vector<UnitKey>& keys, std::string_view display) {
  MarkFamily(keys, display);
  std::optional<UnitKey> found;
  for (const UnitKey& k : keys) {
    if (!Present(k.key)) continue;
    if (found.has_value()) {
      return Error(k.key, fmt::format("give only one of {} (also got {})", display, found->key));
    }
    found = k;
  }
  return found;
}

absl::StatusOr<double> YamlReader::ReadScaled(const UnitKey& key, const Bounds& bounds,
                                              double limit) {
  absl::StatusOr<double> v = Required<double>(key.key, bounds);
  if (!v.ok()) return v.status();
  const double scaled = *v * key.scale;
  if (std::abs(scaled) > limit) return Error(key.key, fmt::format("{} is too large", *v));
  return scaled;
}

std::vector<YamlReader::UnitKey> YamlReader::RateKeys(std::string_view name) {
  return {{fmt::format("{}_bps", name), 1},
          {fmt::format("{}_kbps", name), 1e3},
          {fmt::format("{}_mbps", name), 1e6},
          {fmt::format("{}_gbps", name), 1e9}};
}

std::string YamlReader::DurationDisplay(std::string_view name) {
  return fmt::format("{}_{{s,ms,us,ns}}", name);
}

std::string YamlReader::SizeDisplay(std::string_view name) {
  return name.empty() ? "{bytes,kb,mb,gb}" : fmt::format("{}_{{bytes,kb,mb,gb}}", name);
}

bool YamlReader::HasDuration(std::string_view name) {
  return MarkFamily(DurationKeys(name), DurationDisplay(name));
}

bool YamlReader::HasSize(std::string_view name) {
  return MarkFamily(SizeKeys(name), SizeDisplay(name));
}

absl::StatusOr<Duration> YamlReader::OptionalDuration(std::string_view name, Duration default_value,
                                                      const Bounds& bounds) {
  const std::vector<UnitKey> keys = DurationKeys(name);
  absl::StatusOr<std::optional<UnitKey>> key = FindUnitKey(keys, DurationDisplay(name));
  if (!key.ok()) return key.status();
  if (!key->has_value()) return default_value;
  absl::StatusOr<double> ns = ReadScaled(**key, bounds, 9e18);
  if (!ns.ok()) return ns.status();
  return Duration(std::llround(*ns));
}

absl::StatusOr<Duration> YamlReader::RequiredDuration(std::string_view name, const Bounds& bounds) {
  if (!HasDuration(name)) {
    return Error(fmt::format("{}_ms", name),
                 fmt::format("required (or {}_s, {}_us, {}_ns)", name, name, name));
  }
  return OptionalDuration(name, Duration(0), bounds);
}

absl::StatusOr<DataRate> YamlReader::OptionalRate(std::string_view name, DataRate default_value,
                                                  const Bounds& bounds) {
  absl::StatusOr<std::optional<UnitKey>> key =
      FindUnitKey(RateKeys(name), fmt::format("{}_{{bps,kbps,mbps,gbps}}", name));
  if (!key.ok()) return key.status();
  if (!key->has_value()) return default_value;
  absl::StatusOr<double> bps = ReadScaled(**key, bounds, 1e15);
  if (!bps.ok()) return bps.status();
  return DataRate::BitsPerSecond(std::llround(*bps));
}

absl::StatusOr<int64_t> YamlReader::OptionalSize(std::string_view name, int64_t default_value,
                                                 const Bounds& bounds, int64_t max_bytes) {
  const std::vector<UnitKey> keys = SizeKeys(name);
  absl::StatusOr<std::optional<UnitKey>> key = FindUnitKey(keys, SizeDisplay(name));
  if (!key.ok()) return key.status();
  if (!key->has_value()) return default_value;
  absl::StatusOr<double> bytes = ReadScaled(**key, bounds, 1e18);
  if (!bytes.ok()) return bytes.status();
  if (*bytes > static_cast<double>(max_bytes)) {
    return Error((*key)->key, fmt::format("{:g} is too large: at most {} bytes",
                                          *bytes / (*key)->scale, max_bytes));
  }
  return static_cast<int64_t>(std::llround(*bytes));
}

absl::StatusOr<int64_t> YamlReader::RequiredSize(std::string_view name, const Bounds& bounds,
                                                 int64_t max_bytes) {
  if (!HasSize(name)) {
    const std::vector<UnitKey> keys = SizeKeys(name);
    return Error(keys[2].key,
                 fmt::format("required (or {}, {}, {})", keys[0].key, keys[1].key, keys[3].key));
  }
  return OptionalSize(name, 0, bounds, max_bytes);
}

absl::StatusOr<NodeId> YamlReader::RequiredHost(std::string_view key, const Topology& topo) {
  absl::StatusOr<std::string> name = Required<std::string>(key);
  if (!name.ok()) return name.status();
  absl::StatusOr<NodeId> id = topo.FindNode(*name);
  if (!id.ok()) return Error(key, fmt::format("unknown node '{}'", *name));
  const Node& node = topo.node(*id);
  if (node.kind != NodeKind::kHost || node.out_links.size() != 1) {
    return Error(key, fmt::format("'{}' is not a host (a host node with one link)", *name));
  }
  return *id;
}

absl::StatusOr<std::vector<NodeId>> YamlReader::RequiredHosts(std::string_view key,
                                                              const Topology& topo) {
  absl::StatusOr<std::vector<std::string>> names = Required<std::vector<std::string>>(key);
  if (!names.ok()) return names.status();
  std::vector<NodeId> out;
  for (size_t i = 0; i < names->size(); ++i) {
    const std::string& name = (*names)[i];
    const std::string element = fmt::format("{}[{}]", key, i);
    absl::StatusOr<NodeId> id = topo.FindNode(name);
    if (!id.ok()) return Error(element, fmt::format("unknown node '{}'", name));
    const Node& node = topo.node(*id);
    if (node.kind != NodeKind::kHost || node.out_links.size() != 1) {
      return Error(element, fmt::format("'{}' is not a host (a host node with one link)", name));
    }
    if (std::find(out.begin(), out.end(), *id) != out.end()) {
      return Error(element, fmt::format("'{}' is listed twice", name));
    }
    out.push_back(*id);
  }
  return out;
}

absl::StatusOr<std::vector<NodeId>> YamlReader::OptionalHosts(std::string_view key,
                                                              const Topology& topo,
                                                              std::vector<NodeId> default_value) {
  if (!Has(key)) return default_value;
  return RequiredHosts(key, topo);
}

absl::StatusOr<YamlReader> YamlReader::RequiredMap(std::string_view key) {
  const YAML::Node value = Raw(key);
  if (!value.IsDefined()) return Error(key, "required");
  if (!value.IsMap()) return Error(key, fmt::format("must be a map, got {}", DescribeYaml(value)));
  return YamlReader(value, Path(key));
}

absl::StatusOr<YamlReader> YamlReader::OptionalMap(std::string_view key) {
  if (!Has(key)) return YamlReader(YAML::Node(), Path(key));
  return RequiredMap(key);
}

absl::StatusOr<std::vector<YamlReader>> YamlReader::RequiredMapList(std::string_view key) {
  const YAML::Node value = Raw(key);
  if (!value.IsDefined()) return Error(key, "required");
  if (!value.IsSequence()) {
    return Error(key, fmt::format("must be a list, got {}", DescribeYaml(value)));
  }
  std::vector<YamlReader> out;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string element = fmt::format("{}[{}]", key, i);
    if (!value[i].IsMap()) {
      return Error(element, fmt::format("must be a map, got {}", DescribeYaml(value[i])));
    }
    out.push_back(YamlReader(value[i], Path(element)));
  }
  return out;
}

std::string YamlReader::KnownKeys() const {
  return fmt::format("{}", fmt::join(known_display_, ", "));
}

absl::Status YamlReader::CheckNoUnknownKeys() const {
  if (!node_.IsMap()) return absl::OkStatus();
  for (const auto& entry : node_) {
    const std::string key =
        entry.first.IsScalar() ? entry.first.Scalar() : DescribeYaml(entry.first);
    if (!known_.contains(key)) {
      if (known_display_.empty()) return Error(key, "unknown key (this map takes no keys)");
      return Error(key, fmt::format("unknown key (known: {})", KnownKeys()));
    }
  }
  return absl::OkStatus();
}

std::string DescribeYaml(const YAML::Node& value) {
  switch (value.Type()) {
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", value.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

absl::StatusOr<YAML::Node> ParseYaml(const std::string& text, std::string_view where) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", where, e.what()));
  }
}

absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseYaml(text, path);
}

absl::Status YamlLocator::At(const YAML::Node& node, const absl::Status& s) const {
  if (s.ok()) return s;
  const std::string msg(s.message());
  if (!node.IsDefined() || node.Mark().is_null()) {
    return absl::Status(s.code(), fmt::format("{}: {}", file_, msg));
  }
  return absl::Status(s.code(), fmt::format("{}:{}: {}", file_, node.Mark().line + 1, msg));
}

}  // namespace dar
