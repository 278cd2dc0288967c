#include "lab/lab_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace dar::lab {
namespace {

constexpr std::string_view kLowerDigits = "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kNameChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";

// Keys of netem features; a link giving any of them (or a unit form such as delay_ms) gets a
// clear "not supported" instead of "unknown key".
constexpr std::string_view kNetemKeys[] = {"delay",   "jitter",    "latency", "loss",
                                           "corrupt", "duplicate", "reorder"};

// The child `key` of a map node; an undefined node if `map` is not a map or has no such key.
YAML::Node Child(const YAML::Node& map, std::string_view key) {
  if (!map.IsDefined() || !map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node& m = map;
  return m[std::string(key)];
}

// Where an error about `key` of `map` is best shown: at its value if present, else at the map.
YAML::Node KeyNode(const YAML::Node& map, std::string_view key) {
  YAML::Node value = Child(map, key);
  return value.IsDefined() ? value : map;
}

// Placeholders a service template may use; agents get the node-specific ones too.
std::vector<std::string> AllowedPlaceholders(bool agent) {
  std::vector<std::string> names = {
      "lab", "lab_dir", "netns", "config", "controller_addr", "controller_ip", "controller_port"};
  if (agent) {
    names.push_back("node");
    names.push_back("node_name");
  }
  return names;
}

// `arg` with placeholders replaced; on error, sets `problem` and returns "".
std::string ExpandArg(std::string_view arg, const Placeholders& values, std::string& problem) {
  std::string out;
  for (size_t i = 0; i < arg.size(); ++i) {
    const char c = arg[i];
    if (c == '{' && i + 1 < arg.size() && arg[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < arg.size() && arg[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '}') {
      problem = fmt::format("unmatched '}}' in '{}' (write '}}}}' for a brace)", arg);
      return "";
    } else if (c == '{') {
      const size_t close = arg.find('}', i);
      if (close == std::string_view::npos) {
        problem = fmt::format("unmatched '{{' in '{}' (write '{{{{' for a brace)", arg);
        return "";
      }
      const std::string_view name = arg.substr(i + 1, close - i - 1);
      auto it = values.find(name);
      if (it == values.end()) {
        std::vector<std::string> known;
        for (const auto& [k, v] : values) known.push_back(fmt::format("{{{}}}", k));
        problem =
            fmt::format("unknown placeholder '{{{}}}' (known: {})", name, fmt::join(known, ", "));
        return "";
      }
      out += it->second;
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

// YamlLocator, plus locating unknown keys and list elements.
class Locator : public YamlLocator {
 public:
  using YamlLocator::At;
  using YamlLocator::YamlLocator;

  // CheckNoUnknownKeys of `r` (reading `map`), located at the offending key.
  absl::Status CheckKeys(const YamlReader& r, const YAML::Node& map) const {
    absl::Status s = r.CheckNoUnknownKeys();
    if (s.ok()) return s;
    if (map.IsDefined() && map.IsMap()) {
      for (const auto& entry : map) {
        if (!entry.first.IsScalar()) continue;
        const std::string expected = r.Path(entry.first.Scalar()) + ": unknown key";
        if (s.message().rfind(expected, 0) == 0) return At(entry.first, s);
      }
    }
    return At(map, s);
  }

  // RequiredMapList of `r`, with an error about an element located at that element.
  absl::StatusOr<std::vector<YamlReader>> MapList(YamlReader& r, const YAML::Node& map,
                                                  std::string_view key) const {
    absl::StatusOr<std::vector<YamlReader>> list = r.RequiredMapList(key);
    if (list.ok()) return list;
    const YAML::Node value = Child(map, key);
    if (value.IsDefined() && value.IsSequence()) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (!value[i].IsMap()) return At(value[i], list.status());
      }
    }
    return At(KeyNode(map, key), list.status());
  }

  // Rejects netem-style keys of a link with a message saying why.
  absl::Status CheckNoNetem(const YamlReader& r, const YAML::Node& map) const {
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      const std::string key = entry.first.Scalar();
      for (const std::string_view word : kNetemKeys) {
        if (key == word || key.rfind(fmt::format("{}_", word), 0) == 0) {
          return At(entry.first, r.Error(key, fmt::format("{} is not supported: the lab shapes "
                                                          "links with tc tbf only (no netem); "
                                                          "remove it",
                                                          word)));
        }
      }
    }
    return absl::OkStatus();
  }
};

absl::Status CheckName(const YamlReader& r, std::string_view key, const std::string& value,
                       std::string_view allowed, size_t max_length, std::string_view shape) {
  if (value.empty() || value.find_first_not_of(allowed) != std::string::npos) {
    return r.Error(key, fmt::format("must be {}, got '{}'", shape, value));
  }
  if (value.size() > max_length) {
    return r.Error(key, fmt::format("'{}' is {} characters, at most {} allowed", value,
                                    value.size(), max_length));
  }
  return absl::OkStatus();
}

// Parses "10.<x>.0.0/16".
absl::StatusOr<int> ParseUnderlay(const std::string& text) {
  int x = -1;
  const std::string prefix = "10.";
  const std::string suffix = ".0.0/16";
  if (text.size() > prefix.size() + suffix.size() && text.rfind(prefix, 0) == 0 &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const char* begin = text.data() + prefix.size();
    const char* end = text.data() + text.size() - suffix.size();
    auto [ptr, ec] = std::from_chars(begin, end, x);
    if (ec != std::errc() || ptr != end) x = -1;
  }
  if (x < 0 || x > 254) {
    return absl::InvalidArgumentError(fmt::format(
        "must be 10.<x>.0.0/16 with x in 0..254 (10.255 is for management), got '{}'", text));
  }
  return x;
}

absl::StatusOr<ServiceConfig> ParseService(const Locator& loc, YamlReader& services,
                                           const YAML::Node& services_node, std::string_view key,
                                           bool agent, int* port, int* replicas = nullptr) {
  const YAML::Node node = Child(services_node, key);
  ASSIGN_OR_RETURN(YamlReader r, loc.At(node, services.RequiredMap(key)));
  ServiceConfig service;
  ASSIGN_OR_RETURN(service.command, loc.At(KeyNode(node, "command"),
                                           r.Required<std::vector<std::string>>("command")));
  if (service.command.empty()) {
    return loc.At(KeyNode(node, "command"),
                  r.Error("command", "must list the program and its arguments"));
  }
  Placeholders dummy;
  for (const std::string& name : AllowedPlaceholders(agent)) dummy[name] = "x";
  for (size_t i = 0; i < service.command.size(); ++i) {
    std::string problem;
    ExpandArg(service.command[i], dummy, problem);
    if (!problem.empty()) {
      const YAML::Node command_node = Child(node, "command");
      return loc.At(command_node[i], r.Error(fmt::format("command[{}]", i), problem));
    }
  }
  if (port != nullptr) {
    ASSIGN_OR_RETURN(
        *port, loc.At(KeyNode(node, "port"),
                      r.Optional<int>("port", kDefaultControllerPort, Bounds::InRange(1, 65535))));
  }
  if (replicas != nullptr) {
    ASSIGN_OR_RETURN(*replicas, loc.At(KeyNode(node, "replicas"),
                                       r.Optional<int>("replicas", 1, Bounds::InRange(1, 5))));
    if (port != nullptr && *port + *replicas - 1 > 65535) {
      return loc.At(KeyNode(node, "port"), r.Error("port", "leaves no port for every replica"));
    }
  }
  RETURN_IF_ERROR(loc.CheckKeys(r, node));
  return service;
}

}  // namespace

absl::StatusOr<DataRate> ParseRate(std::string_view text) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
      {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12}};
  const auto bad = [&] {
    return absl::InvalidArgumentError(fmt::format(
        "must be a rate such as 100mbit (a number and one of bit, kbit, mbit, gbit, tbit, bps, "
        "kbps, mbps, gbps, tbps), got '{}'",
        text));
  };
  const size_t unit_start = text.find_first_not_of("0123456789.");
  if (unit_start == 0 || unit_start == std::string_view::npos) return bad();
  double number = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + unit_start, number);
  if (ec != std::errc() || ptr != text.data() + unit_start) return bad();
  std::string unit(text.substr(unit_start));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bps = number * scale;
    if (!(bps >= 8e3 && bps <= 1e12)) {
      return absl::InvalidArgumentError(fmt::format("rate '{}' is outside 8kbit..1tbit", text));
    }
    return DataRate::BitsPerSecond(std::llround(bps));
  }
  return bad();
}

std::string FormatRate(DataRate rate) {
  const int64_t bps = rate.bps();
  if (bps != 0 && bps % 1'000'000'000 == 0) return fmt::format("{}gbit", bps / 1'000'000'000);
  if (bps != 0 && bps % 1'000'000 == 0) return fmt::format("{}mbit", bps / 1'000'000);
  if (bps != 0 && bps % 1'000 == 0) return fmt::format("{}kbit", bps / 1'000);
  return fmt::format("{}bit", bps);
}

absl::StatusOr<std::vector<std::string>> ExpandCommand(const std::vector<std::string>& command,
                                                       const Placeholders& values) {
  std::vector<std::string> out;
  for (size_t i = 0; i < command.size(); ++i) {
    std::string problem;
    std::string arg = ExpandArg(command[i], values, problem);
    if (!problem.empty()) {
      return absl::InvalidArgumentError(fmt::format("command[{}]: {}", i, problem));
    }
    out.push_back(std::move(arg));
  }
  return out;
}

namespace {

absl::StatusOr<LabConfig> ParseLabConfigOrThrow(const std::string& text, const std::string& file) {
  ASSIGN_OR_RETURN(const YAML::Node root, ParseYaml(text, file));
  const Locator loc(file);
  if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
    return loc.At(root, absl::InvalidArgumentError(fmt::format(
                            "a lab file is a map (name, nodes, links, services), got {}",
                            DescribeYaml(root))));
  }
  ASSIGN_OR_RETURN(YamlReader r, YamlReader::Create(root, ""));
  LabConfig config;

  ASSIGN_OR_RETURN(config.name, loc.At(KeyNode(root, "name"), r.Required<std::string>("name")));
  if (config.name.empty() || !std::isalpha(static_cast<unsigned char>(config.name[0])) ||
      config.name.find_first_not_of(kLowerDigits) != std::string::npos) {
    return loc.At(KeyNode(root, "name"),
                  r.Error("name", fmt::format("must be a lower-case letter followed by lower-case "
                                              "letters and digits, got '{}'",
                                              config.name)));
  }
  if (config.name.size() > kMaxLabNameLength) {
    return loc.At(KeyNode(root, "name"),
                  r.Error("name", fmt::format("'{}' is {} characters, at most {}: interface "
                                              "names (<name>-<link>a) must fit in 15 characters",
                                              config.name, config.name.size(), kMaxLabNameLength)));
  }

  ASSIGN_OR_RETURN(
      const std::string underlay,
      loc.At(KeyNode(root, "underlay"), r.Optional<std::string>("underlay", "10.1.0.0/16")));
  absl::StatusOr<int> octet = ParseUnderlay(underlay);
  if (!octet.ok()) return loc.At(KeyNode(root, "underlay"), r.Error("underlay", octet.status()));
  config.underlay_octet = *octet;

  // Nodes.
  const YAML::Node nodes_node = Child(root, "nodes");
  ASSIGN_OR_RETURN(std::vector<YamlReader> nodes, loc.MapList(r, root, "nodes"));
  if (nodes.empty()) {
    return loc.At(KeyNode(root, "nodes"), r.Error("nodes", "must list at least one node"));
  }
  std::map<int, size_t> index_of_id;
  std::map<std::string, size_t> index_of_name;
  for (size_t i = 0; i < nodes.size(); ++i) {
    YamlReader& n = nodes[i];
    const YAML::Node node = nodes_node[i];
    LabNodeConfig cfg;
    ASSIGN_OR_RETURN(cfg.id,
                     loc.At(KeyNode(node, "id"), n.Required<int>("id", Bounds::InRange(1, 254))));
    ASSIGN_OR_RETURN(cfg.name, loc.At(KeyNode(node, "name"), n.Required<std::string>("name")));
    RETURN_IF_ERROR(loc.At(
        KeyNode(node, "name"),
        CheckName(n, "name", cfg.name, kNameChars, kMaxNodeNameLength, "letters, digits and '_'")));
    if (cfg.name == "ctl" || cfg.name == "controller") {
      return loc.At(KeyNode(node, "name"),
                    n.Error("name", fmt::format("'{}' is reserved for the controller", cfg.name)));
    }
    if (auto it = index_of_id.find(cfg.id); it != index_of_id.end()) {
      return loc.At(
          KeyNode(node, "id"),
          n.Error("id", fmt::format("{} is already the id of nodes[{}]", cfg.id, it->second)));
    }
    if (auto it = index_of_name.find(cfg.name); it != index_of_name.end()) {
      return loc.At(KeyNode(node, "name"),
                    n.Error("name", fmt::format("'{}' is already the name of nodes[{}]", cfg.name,
                                                it->second)));
    }
    RETURN_IF_ERROR(loc.CheckKeys(n, node));
    index_of_id[cfg.id] = i;
    index_of_name[cfg.name] = i;
    config.nodes.push_back(std::move(cfg));
  }

  // Links.
  if (r.Has("links")) {
    const YAML::Node links_node = Child(root, "links");
    ASSIGN_OR_RETURN(std::vector<YamlReader> links, loc.MapList(r, root, "links"));
    if (links.size() > kMaxLinks) {
      return loc.At(links_node[kMaxLinks],
                    r.Error("links", fmt::format("{} links, at most {} (one 10.<x>.<i>.0/30 each)",
                                                 links.size(), kMaxLinks)));
    }
    std::map<std::pair<std::string, std::string>, size_t> index_of_pair;
    for (size_t i = 0; i < links.size(); ++i) {
      YamlReader& l = links[i];
      const YAML::Node link = links_node[i];
      RETURN_IF_ERROR(loc.CheckNoNetem(l, link));
      LabLinkConfig cfg;
      for (const char* end : {"a", "b"}) {
        ASSIGN_OR_RETURN(std::string name,
                         loc.At(KeyNode(link, end), l.Required<std::string>(end)));
        if (!index_of_name.contains(name)) {
          std::vector<std::string> known;
          for (const LabNodeConfig& n : config.nodes) known.push_back(n.name);
          return loc.At(KeyNode(link, end),
                        l.Error(end, fmt::format("unknown node '{}' (nodes: {})", name,
                                                 fmt::join(known, ", "))));
        }
        (std::string_view(end) == "a" ? cfg.a : cfg.b) = std::move(name);
      }
      if (cfg.a == cfg.b) {
        return loc.At(KeyNode(link, "b"),
                      l.Error("b", fmt::format("a link from '{}' to itself", cfg.a)));
      }
      const auto pair = std::minmax(cfg.a, cfg.b);
      if (auto it = index_of_pair.find(pair); it != index_of_pair.end()) {
        return loc.At(link, l.Error("", fmt::format("{}-{} is already links[{}]; parallel links "
                                                    "are not supported",
                                                    cfg.a, cfg.b, it->second)));
      }
      index_of_pair[pair] = i;
      if (l.Has("rate")) {
        ASSIGN_OR_RETURN(const std::string rate,
                         loc.At(KeyNode(link, "rate"), l.Required<std::string>("rate")));
        absl::StatusOr<DataRate> parsed = ParseRate(rate);
        if (!parsed.ok()) return loc.At(KeyNode(link, "rate"), l.Error("rate", parsed.status()));
        cfg.rate = *parsed;
      }
      RETURN_IF_ERROR(loc.CheckKeys(l, link));
      config.links.push_back(std::move(cfg));
    }
  }

  // Services.
  const YAML::Node services_node = Child(root, "services");
  ASSIGN_OR_RETURN(YamlReader services,
                   loc.At(KeyNode(root, "services"), r.OptionalMap("services")));
  if (services.Has("controller")) {
    ASSIGN_OR_RETURN(config.controller, ParseService(loc, services, services_node, "controller",
                                                     /*agent=*/false, &config.controller_port,
                                                     &config.controller_replicas));
  }
  if (services.Has("agent")) {
    ASSIGN_OR_RETURN(config.agent, ParseService(loc, services, services_node, "agent",
                                                /*agent=*/true, nullptr));
  }
  RETURN_IF_ERROR(loc.CheckKeys(services, services_node));
  RETURN_IF_ERROR(loc.CheckKeys(r, root));
  return config;
}

}  // namespace

absl::StatusOr<LabConfig> ParseLabConfig(const std::string& text, const std::string& file) {
  return CatchYamlExceptions(file, [&] { return ParseLabConfigOrThrow(text, file); });
}

absl::StatusOr<LabConfig> LoadLabConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseLabConfig(text, path);
}

std::string LabLayout::controller_addr(int replica) const {
  return fmt::format("{}:{}", controller_ip, controller_port + replica);
}

std::string LabLayout::controller_name(int replica) const {
  return controller_replicas == 1 ? std::string("controller") : fmt::format("ctl{}", replica + 1);
}

absl::StatusOr<int> LabLayout::FindNode(std::string_view name_or_id) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == name_or_id || std::to_string(nodes[i].id) == name_or_id) {
      return static_cast<int>(i);
    }
  }
  std::vector<std::string> known;
  for (const NodeLayout& n : nodes) known.push_back(fmt::format("{} ({})", n.name, n.id));
  return absl::NotFoundError(fmt::format("lab '{}' has no node '{}' (nodes: {})", name, name_or_id,
                                         fmt::join(known, ", ")));
}

absl::StatusOr<int> LabLayout::FindLink(std::string_view a, std::string_view b) const {
  ASSIGN_OR_RETURN(const int na, FindNode(a));
  ASSIGN_OR_RETURN(const int nb, FindNode(b));
  for (const LinkLayout& l : links) {
    if ((l.a.node == na && l.b.node == nb) || (l.a.node == nb && l.b.node == na)) return l.index;
  }
  return absl::NotFoundError(
      fmt::format("lab '{}' has no link between {} and {}", name, nodes[na].name, nodes[nb].name));
}

LabLayout MakeLayout(const LabConfig& config) {
  LabLayout layout;
  layout.name = config.name;
  layout.ctl_netns = config.name + "-ctl";
  layout.controller_ip = "10.255.255.1";
  layout.controller_port = config.controller_port;
  layout.controller_replicas = config.controller_replicas;
  std::map<std::string, int> index_of;
  for (const LabNodeConfig& n : config.nodes) {
    NodeLayout node;
    node.id = n.id;
    node.name = n.name;
    node.netns = fmt::format("{}-{}", config.name, n.name);
    node.mgmt_ifname = fmt::format("{}-m{}", config.name, n.id);
    node.mgmt_address = fmt::format("10.255.{}.2", n.id);
    node.ctl_ifname = fmt::format("{}-c{}", config.name, n.id);
    node.ctl_address = fmt::format("10.255.{}.1", n.id);
    index_of[n.name] = static_cast<int>(layout.nodes.size());
    layout.nodes.push_back(std::move(node));
  }
  for (size_t i = 0; i < config.links.size(); ++i) {
    const LabLinkConfig& l = config.links[i];
    LinkLayout link;
    link.index = static_cast<int>(i);
    link.a = {index_of.at(l.a), fmt::format("{}-{}a", config.name, i),
              fmt::format("10.{}.{}.1", config.underlay_octet, i)};
    link.b = {index_of.at(l.b), fmt::format("{}-{}b", config.name, i),
              fmt::format("10.{}.{}.2", config.underlay_octet, i)};
    link.rate = l.rate;
    layout.links.push_back(std::move(link));
  }
  return layout;
}

}  // namespace dar::lab
