#include "agent/agent_config.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <set>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "fmt/format.h"
#include "security/certs.h"
#include "security/key_ring.h"

namespace dar::agent {
namespace {

// `path` made relative to `base_dir` unless it is absolute.
std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

absl::StatusOr<net::Ipv4Address> ReadAddress(YamlReader& r, std::string_view key) {
  ASSIGN_OR_RETURN(const std::string text, r.Required<std::string>(key));
  absl::StatusOr<net::Ipv4Address> a = net::ParseIpv4Address(text);
  if (!a.ok()) return r.Error(key, fmt::format("not an IPv4 address: '{}'", text));
  return a;
}

// "a.b.c.d/len" (the /len is optional and then `default_length`).
absl::Status ReadPrefix(YamlReader& r, std::string_view key, net::Ipv4Address& address,
                        int& length) {
  ASSIGN_OR_RETURN(const std::string text, r.Required<std::string>(key));
  const size_t slash = text.find('/');
  absl::StatusOr<net::Ipv4Address> a = net::ParseIpv4Address(text.substr(0, slash));
  if (!a.ok()) return r.Error(key, fmt::format("not an IPv4 address: '{}'", text));
  address = *a;
  if (slash == std::string::npos) return absl::OkStatus();
  const std::string len = text.substr(slash + 1);
  int value = -1;
  auto [ptr, ec] = std::from_chars(len.data(), len.data() + len.size(), value);
  if (ec != std::errc() || ptr != len.data() + len.size() || value < 1 || value > 32) {
    return r.Error(key, fmt::format("bad prefix length in '{}' (1..32)", text));
  }
  length = value;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadId(YamlReader& r, std::string_view key) {
  ASSIGN_OR_RETURN(const int64_t id, r.Required<int64_t>(key, Bounds::InRange(1, 4294967295.0)));
  return static_cast<uint32_t>(id);
}

// "host:port" with a port in 1..65535.
absl::Status CheckHostPort(YamlReader& r, std::string_view key, const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return r.Error(key, fmt::format("must be host:port, got '{}'", text));
  }
  const std::string port = text.substr(colon + 1);
  int value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
    return r.Error(key, fmt::format("bad port in '{}' (1..65535)", text));
  }
  return absl::OkStatus();
}

absl::Status ReadNodes(YamlReader& top, AgentConfig& c) {
  ASSIGN_OR_RETURN(std::vector<YamlReader> entries, top.RequiredMapList("nodes"));
  if (entries.empty()) return top.Error("nodes", "must list at least this node");
  std::set<uint32_t> ids;
  std::set<std::string> names;
  std::set<uint32_t> addresses;
  for (YamlReader& e : entries) {
    AgentNodeConfig n;
    ASSIGN_OR_RETURN(n.id, ReadId(e, "id"));
    ASSIGN_OR_RETURN(n.name, e.Required<std::string>("name"));
    if (n.name.empty()) return e.Error("name", "must not be empty");
    if (e.Has("overlay")) {
      ASSIGN_OR_RETURN(n.overlay, ReadAddress(e, "overlay"));
    } else if (n.id <= 254) {
      n.overlay.value = (10u << 24) | (77u << 16) | n.id;
    } else {
      return e.Error("overlay", "required for an id above 254 (the default is 10.77.0.<id>)");
    }
    RETURN_IF_ERROR(e.CheckNoUnknownKeys());
    if (!ids.insert(n.id).second) return e.Error("id", fmt::format("duplicate id {}", n.id));
    if (!names.insert(n.name).second) {
      return e.Error("name", fmt::format("duplicate name '{}'", n.name));
    }
    if (!addresses.insert(n.overlay.value).second) {
      return e.Error("overlay", fmt::format("duplicate address {}", net::ToString(n.overlay)));
    }
    c.nodes.push_back(std::move(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeId> NodeByName(const AgentConfig& c, YamlReader& r, std::string_view key) {
  ASSIGN_OR_RETURN(const std::string name, r.Required<std::string>(key));
  for (NodeId i = 0; i < static_cast<NodeId>(c.nodes.size()); ++i) {
    if (c.nodes[i].name == name) return i;
  }
  return r.Error(key, fmt::format("unknown node '{}'", name));
}

absl::Status ReadLinks(YamlReader& top, AgentConfig& c) {
  ASSIGN_OR_RETURN(std::vector<YamlReader> entries, top.RequiredMapList("links"));
  for (YamlReader& e : entries) {
    AgentLinkConfig l;
    ASSIGN_OR_RETURN(l.a, NodeByName(c, e, "a"));
    ASSIGN_OR_RETURN(l.b, NodeByName(c, e, "b"));
    if (l.a == l.b) return e.Error("b", "a link must join two different nodes");
    ASSIGN_OR_RETURN(l.capacity, e.OptionalRate("capacity", DataRate()));
    RETURN_IF_ERROR(e.CheckNoUnknownKeys());
    c.links.push_back(l);
  }
  return absl::OkStatus();
}

absl::Status ReadNeighbours(YamlReader& top, AgentConfig& c) {
  ASSIGN_OR_RETURN(std::vector<YamlReader> entries, top.RequiredMapList("neighbours"));
  std::vector<int> neighbour_of_link(c.links.size(), -1);
  for (size_t i = 0; i < entries.size(); ++i) {
    YamlReader& e = entries[i];
    NeighbourConfig n;
    ASSIGN_OR_RETURN(n.id, ReadId(e, "id"));
    n.node = c.FindNode(n.id);
    if (n.node == kNoNode) return e.Error("id", fmt::format("no node with id {} in nodes", n.id));
    if (n.node == c.self) return e.Error("id", "is this node's own id");
    if (e.Has("name")) {
      ASSIGN_OR_RETURN(const std::string name, e.Required<std::string>("name"));
      if (name != c.nodes[n.node].name) {
        return e.Error("name", fmt::format("'{}' but node {} is named '{}'", name, n.id,
                                           c.nodes[n.node].name));
      }
    }
    ASSIGN_OR_RETURN(n.link, e.Required<int>("link", Bounds::NonNegative()));
    if (n.link >= static_cast<int>(c.links.size())) {
      return e.Error("link", fmt::format("no link {} (links has {})", n.link, c.links.size()));
    }
    const AgentLinkConfig& l = c.links[n.link];
    const bool self_is_a = l.a == c.self && l.b == n.node;
    const bool self_is_b = l.b == c.self && l.a == n.node;
    if (!self_is_a && !self_is_b) {
      return e.Error("link",
                     fmt::format("link {} joins {} and {}, not this node and {}", n.link,
                                 c.nodes[l.a].name, c.nodes[l.b].name, c.nodes[n.node].name));
    }
    if (neighbour_of_link[n.link] >= 0) {
      return e.Error(
          "link", fmt::format("link {} is also neighbours[{}]", n.link, neighbour_of_link[n.link]));
    }
    neighbour_of_link[n.link] = static_cast<int>(i);
    n.out_link = 2 * n.link + (self_is_a ? 0 : 1);
    n.in_link = 2 * n.link + (self_is_a ? 1 : 0);
    ASSIGN_OR_RETURN(n.interface, e.Required<std::string>("interface"));
    if (n.interface.empty()) return e.Error("interface", "must not be empty");
    RETURN_IF_ERROR(ReadPrefix(e, "address", n.local_address, n.prefix_length));
    ASSIGN_OR_RETURN(n.peer_interface, e.Optional<std::string>("peer_interface", ""));
    ASSIGN_OR_RETURN(n.peer_address, ReadAddress(e, "peer_address"));
    ASSIGN_OR_RETURN(const int64_t rate, e.Optional<int64_t>("rate_bps", 0, Bounds::AtLeast(1)));
    n.rate = DataRate::BitsPerSecond(rate);
    RETURN_IF_ERROR(e.CheckNoUnknownKeys());
    for (const NeighbourConfig& other : c.neighbours) {
      if (other.id == n.id) {
        return e.Error("id",
                       fmt::format("a second link to node {}: next hops are named by neighbour, so "
                                   "parallel links are not supported",
                                   n.id));
      }
    }
    c.neighbours.push_back(std::move(n));
  }
  for (size_t l = 0; l < c.links.size(); ++l) {
    if ((c.links[l].a == c.self || c.links[l].b == c.self) && neighbour_of_link[l] < 0) {
      return top.Error("neighbours",
                       fmt::format("link {} ({}-{}) of this node has no entry", l,
                                   c.nodes[c.links[l].a].name, c.nodes[c.links[l].b].name));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadTop(YamlReader& top, AgentConfig& c, const std::string& base_dir) {
  ASSIGN_OR_RETURN(c.lab, top.Optional<std::string>("lab", ""));
  ASSIGN_OR_RETURN(c.netns, top.Optional<std::string>("netns", ""));

  RETURN_IF_ERROR(ReadNodes(top, c));
  ASSIGN_OR_RETURN(YamlReader node, top.RequiredMap("node"));
  ASSIGN_OR_RETURN(const uint32_t self_id, ReadId(node, "id"));
  c.self = c.FindNode(self_id);
  if (c.self == kNoNode)
    return node.Error("id", fmt::format("no node with id {} in nodes", self_id));
  if (node.Has("name")) {
    ASSIGN_OR_RETURN(const std::string name, node.Required<std::string>("name"));
    if (name != c.nodes[c.self].name) {
      return node.Error("name", fmt::format("'{}' but node {} is named '{}' in nodes", name,
                                            self_id, c.nodes[c.self].name));
    }
  }
  RETURN_IF_ERROR(node.CheckNoUnknownKeys());
  RETURN_IF_ERROR(ReadLinks(top, c));
  RETURN_IF_ERROR(ReadNeighbours(top, c));

  ASSIGN_OR_RETURN(YamlReader management, top.OptionalMap("management"));
  ASSIGN_OR_RETURN(c.management_interface, management.Optional<std::string>("interface", ""));
  ASSIGN_OR_RETURN(c.management_address, management.Optional<std::string>("address", ""));
  ASSIGN_OR_RETURN(c.management_gateway, management.Optional<std::string>("gateway", ""));
  RETURN_IF_ERROR(management.CheckNoUnknownKeys());

  if (top.Has("controllers")) {
    if (top.Has("controller")) {
      return top.Error("controllers", "give controller (one) or controllers (replicas), not both");
    }
    ASSIGN_OR_RETURN(c.controllers, top.Required<std::vector<std::string>>("controllers"));
    if (c.controllers.empty()) return top.Error("controllers", "must list at least one host:port");
    for (const std::string& address : c.controllers) {
      RETURN_IF_ERROR(CheckHostPort(top, "controllers", address));
    }
    c.controller = c.controllers.front();
  } else {
    ASSIGN_OR_RETURN(c.controller, top.Required<std::string>("controller"));
    RETURN_IF_ERROR(CheckHostPort(top, "controller", c.controller));
    c.controllers = {c.controller};
  }
  ASSIGN_OR_RETURN(c.http, top.Optional<std::string>("http", ""));
  if (!c.http.empty()) RETURN_IF_ERROR(CheckHostPort(top, "http", c.http));
  ASSIGN_OR_RETURN(c.controller_name, top.Optional<std::string>("controller_name", ""));
  ASSIGN_OR_RETURN(const std::string controller_id, top.Optional<std::string>("controller_id", ""));
  if (!controller_id.empty()) {
    absl::StatusOr<security::SpiffeId> id = security::ParseSpiffeId(controller_id);
    if (id.ok() && id->kind != security::PeerKind::kController) {
      id = absl::InvalidArgumentError(fmt::format("{} is the identity of {}, not of a controller",
                                                  controller_id, id->ToString()));
    }
    if (!id.ok()) return top.Error("controller_id", std::string(id.status().message()));
    c.controller_id = *std::move(id);
  }

  ASSIGN_OR_RETURN(YamlReader tls, top.RequiredMap("tls"));
  ASSIGN_OR_RETURN(c.tls.cert_file, tls.Required<std::string>("cert"));
  ASSIGN_OR_RETURN(c.tls.key_file, tls.Required<std::string>("key"));
  ASSIGN_OR_RETURN(c.tls.ca_file, tls.Required<std::string>("ca"));
  RETURN_IF_ERROR(tls.CheckNoUnknownKeys());
  c.tls.cert_file = Resolve(base_dir, c.tls.cert_file);
  c.tls.key_file = Resolve(base_dir, c.tls.key_file);
  c.tls.ca_file = Resolve(base_dir, c.tls.ca_file);

  ASSIGN_OR_RETURN(c.state_dir, top.Required<std::string>("state_dir"));
  if (c.state_dir.empty()) return top.Error("state_dir", "must not be empty");
  c.state_dir = Resolve(base_dir, c.state_dir);

  ASSIGN_OR_RETURN(YamlReader overlay, top.OptionalMap("overlay"));
  ASSIGN_OR_RETURN(c.tun_name, overlay.Optional<std::string>("tun", c.tun_name));
  if (c.tun_name.empty() || c.tun_name.size() > 15) {
    return overlay.Error("tun", "must be 1 to 15 characters (an interface name)");
  }
  ASSIGN_OR_RETURN(
      c.overlay_prefix_length,
      overlay.Optional<int>("prefix_length", c.overlay_prefix_length, Bounds::InRange(1, 32)));
  ASSIGN_OR_RETURN(c.tun_mtu, overlay.Optional<int>("mtu", c.tun_mtu, Bounds::InRange(576, 65000)));
  RETURN_IF_ERROR(overlay.CheckNoUnknownKeys());

  ASSIGN_OR_RETURN(const int port,
                   top.Optional<int>("data_port", kDefaultDataPort, Bounds::InRange(1, 65535)));
  c.data_port = static_cast<uint16_t>(port);
  ASSIGN_OR_RETURN(c.probe_interval,
                   top.OptionalDuration("probe_interval", c.probe_interval, Bounds::Positive()));
  if (c.probe_interval < Milliseconds(1)) {
    return top.Error("probe_interval_ms", "must be at least 1 ms");
  }
  ASSIGN_OR_RETURN(c.missed_probes,
                   top.Optional<int>("missed_probes", c.missed_probes, Bounds::InRange(1, 1000)));
  ASSIGN_OR_RETURN(const std::string mode,
                   top.Optional<std::string>("forwarding_mode",
                                             std::string(ForwardingModeName(c.forwarding_mode))));
  absl::StatusOr<ForwardingMode> parsed_mode = ParseForwardingMode(mode);
  if (!parsed_mode.ok()) return top.Error("forwarding_mode", parsed_mode.status());
  c.forwarding_mode = *parsed_mode;
  ASSIGN_OR_RETURN(c.line_rate, top.OptionalRate("line_rate", c.line_rate));
  ASSIGN_OR_RETURN(c.hop_limit,
                   top.Optional<int>("hop_limit", c.hop_limit, Bounds::InRange(1, 255)));
  ASSIGN_OR_RETURN(c.table_stale,
                   top.OptionalDuration("table_stale", c.table_stale, Bounds::Positive()));
  if (c.table_stale <= c.probe_interval) {
    return top.Error("table_stale_ms", "must be longer than the probe interval");
  }

  if (top.Has("initial_key")) {
    ASSIGN_OR_RETURN(YamlReader key, top.RequiredMap("initial_key"));
    InitialKey k;
    ASSIGN_OR_RETURN(const int64_t id,
                     key.Required<int64_t>("id", Bounds::InRange(0, 4294967295.0)));
    k.id = static_cast<uint32_t>(id);
    ASSIGN_OR_RETURN(k.file, key.Required<std::string>("file"));
    if (k.file.empty()) return key.Error("file", "must not be empty");
    k.file = Resolve(base_dir, k.file);
    RETURN_IF_ERROR(key.CheckNoUnknownKeys());
    c.initial_key = std::move(k);
  }
  ASSIGN_OR_RETURN(c.log_level, top.OptionalChoice("log_level", c.log_level,
                                                   {"debug", "info", "warn", "error"}));
  return top.CheckNoUnknownKeys();
}

}  // namespace

NodeId AgentConfig::FindNode(uint32_t id) const {
  for (NodeId i = 0; i < static_cast<NodeId>(nodes.size()); ++i) {
    if (nodes[i].id == id) return i;
  }
  return kNoNode;
}

const NeighbourConfig* AgentConfig::FindNeighbour(uint32_t id) const {
  for (const NeighbourConfig& n : neighbours) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

namespace {

absl::StatusOr<AgentConfig> ParseAgentConfigOrThrow(const std::string& text,
                                                    const std::string& file) {
  ASSIGN_OR_RETURN(const YAML::Node root, ParseYaml(text, file));
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: must be a map of settings, got {}", file, DescribeYaml(root)));
  }
  ASSIGN_OR_RETURN(YamlReader top, YamlReader::Create(root, file + ":"));
  AgentConfig c;
  c.file = file;
  const std::string base_dir = std::filesystem::path(file).parent_path().string();
  RETURN_IF_ERROR(ReadTop(top, c, base_dir));
  return c;
}

}  // namespace

absl::StatusOr<AgentConfig> ParseAgentConfig(const std::string& text, const std::string& file) {
  return CatchYamlExceptions(file, [&] { return ParseAgentConfigOrThrow(text, file); });
}

absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, kMaxConfigFileBytes));
  return ParseAgentConfig(text, path);
}

Topology BuildAgentTopology(const AgentConfig& config) {
  Topology topo;
  for (const AgentNodeConfig& n : config.nodes) topo.AddNode(n.name, NodeKind::kSwitch);
  for (const AgentLinkConfig& l : config.links) {
    LinkParams params;
    params.capacity = l.capacity;
    params.metric = 1.0;
    topo.AddDuplexLink(l.a, l.b, params);
  }
  return topo;
}

absl::StatusOr<DataplaneConfig> MakeDataplaneConfig(const AgentConfig& config,
                                                    const Topology& topology, uint64_t seed) {
  DataplaneConfig d;
  d.node = config.self;
  d.topology = &topology;
  for (const AgentNodeConfig& n : config.nodes) {
    d.overlay_addresses.push_back(n.overlay);
    d.wire_ids.push_back(n.id);
  }
  for (const NeighbourConfig& n : config.neighbours) {
    NeighbourLinkConfig l;
    l.neighbour = n.node;
    l.link = n.out_link;
    l.local = net::Ipv4Endpoint{n.local_address, config.data_port};
    l.peer = net::Ipv4Endpoint{n.peer_address, config.data_port};
    l.interface = n.interface;
    l.capacity = config.links[n.link].capacity;
    d.neighbours.push_back(std::move(l));
  }
  d.tun.name = config.tun_name;
  d.tun.mtu = config.tun_mtu;
  d.tun.address = config.self_node().overlay;
  d.tun.prefix_length = config.overlay_prefix_length;
  d.probe_interval = config.probe_interval;
  d.liveness.missed_probes = config.missed_probes;
  d.forwarding.mode = config.forwarding_mode;
  d.forwarding.line_rate = config.line_rate;
  d.hop_limit = config.hop_limit;
  d.seed = seed;
  if (config.initial_key) {
    ASSIGN_OR_RETURN(const net::OverlayKeyBytes key,
                     security::LoadKeyFile(config.initial_key->file));
    d.initial_keys.push_back(KeyUpdate{config.initial_key->id, key, /*active=*/true});
  }
  return d;
}

}  // namespace dar::agent
