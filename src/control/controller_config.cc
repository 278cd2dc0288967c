#include "control/controller_config.h"

#include <arpa/inet.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "fmt/format.h"
#include "security/certs.h"
#include "security/identity.h"

namespace dar::control {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// YamlLocator, plus finding the node an error is about (the value of a key when it is there,
// else the map holding it).
class Located : public YamlLocator {
 public:
  using YamlLocator::At;
  using YamlLocator::YamlLocator;

  // The node of `key` in `map` (or of the first key that starts with `key` followed by '_',
  // for unit families such as cycle_ms), else `map` itself.
  static YAML::Node KeyNode(const YAML::Node& map, std::string_view key) {
    if (!map.IsMap()) return map;
    // The key itself first: `nodes` is not `nodes_stale_ms`, however the map is ordered.
    for (const auto& entry : map) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) return entry.second;
    }
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      const std::string& k = entry.first.Scalar();
      if (k == key ||
          (k.size() > key.size() && k.compare(0, key.size(), key) == 0 && k[key.size()] == '_')) {
        return entry.second;
      }
    }
    return map;
  }
  template <typename T>
  absl::StatusOr<T> Key(const YAML::Node& map, std::string_view key, absl::StatusOr<T> v) const {
    return At(KeyNode(map, key), std::move(v));
  }
  absl::Status Key(const YAML::Node& map, std::string_view key, const absl::Status& s) const {
    return At(KeyNode(map, key), s);
  }
  // An error `s` of a getter of `r` over `map`, located at the value of the key it names
  // (its message starts with the key's path).
  absl::Status Locate(const YamlReader& r, const YAML::Node& map, const absl::Status& s) const {
    if (s.ok() || !map.IsMap()) return At(map, s);
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      const std::string path = r.Path(entry.first.Scalar());
      const std::string message = Msg(s);
      if (message.rfind(path, 0) != 0 || message.size() <= path.size()) continue;
      if (message[path.size()] == ':') return At(entry.second, s);
      if (message[path.size()] == '.' && entry.second.IsMap()) {
        // A key of a nested map (latency_weights.hop): at that key's value.
        for (const auto& inner : entry.second) {
          if (!inner.first.IsScalar()) continue;
          const std::string inner_path = path + "." + inner.first.Scalar();
          if (message.rfind(inner_path, 0) == 0 && message.size() > inner_path.size() &&
              message[inner_path.size()] == ':') {
            return At(
                message.find(": unknown key") == inner_path.size() ? inner.first : inner.second, s);
          }
        }
        return At(entry.second, s);
      }
    }
    return At(map, s);
  }
  // CheckNoUnknownKeys of `r` over `map`, located at the offending key.
  absl::Status CheckKeys(const YamlReader& r, const YAML::Node& map) const {
    const absl::Status s = r.CheckNoUnknownKeys();
    if (s.ok() || !map.IsMap()) return At(map, s);
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      if (Msg(s).rfind(r.Path(entry.first.Scalar()) + ": unknown key", 0) == 0) {
        return At(entry.first, s);
      }
    }
    return At(map, s);
  }
};

// "host:port" with a port in 0..65535 (0: any free port).
absl::Status CheckHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0 && colon + 1 < text.size()) {
    auto [ptr, ec] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), port);
    if (ec != std::errc() || ptr != text.data() + text.size()) port = -1;
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("must be host:port with a port in 0..65535, got '{}'", text));
  }
  return absl::OkStatus();
}

std::string Resolve(const std::string& path, const std::string& file) {
  if (path.empty() || file.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(file).parent_path() / path).lexically_normal().string();
}

absl::Status ReadPolicy(const Located& loc, YamlReader& top, const YAML::Node& root,
                        const std::string& file, ControllerPolicy& p) {
  const YAML::Node node = Located::KeyNode(root, "policy");
  ASSIGN_OR_RETURN(YamlReader r, loc.At(node, top.OptionalMap("policy")));
  ASSIGN_OR_RETURN(
      std::string mode,
      loc.Key(node, "forwarding_mode",
              r.Optional<std::string>("forwarding_mode",
                                      std::string(ForwardingModeName(p.forwarding_mode)))));
  absl::StatusOr<ForwardingMode> parsed = ParseForwardingMode(mode);
  if (!parsed.ok()) {
    return loc.Key(node, "forwarding_mode", r.Error("forwarding_mode", parsed.status().message()));
  }
  p.forwarding_mode = *parsed;
  if (r.Has("policy_model")) {
    ASSIGN_OR_RETURN(p.policy_model,
                     loc.Key(node, "policy_model", r.Required<std::string>("policy_model")));
    if (p.policy_model.empty()) {
      return loc.Key(node, "policy_model",
                     r.Error("policy_model", "must name a model file (or leave the key out)"));
    }
    p.policy_model = Resolve(p.policy_model, file);
  }
  ASSIGN_OR_RETURN(const std::string precision,
                   loc.Key(node, "policy_precision",
                           r.OptionalChoice("policy_precision", "int8", {"int8", "float"})));
  p.policy_precision = precision == "int8" ? learn::LearnedPolicy::Precision::kInt8
                                           : learn::LearnedPolicy::Precision::kFloat;
  // The engine's keys, as the simulator reads them (core/engine_settings.h). A learned
  // policy refines the diffusion engine's weights: naming one makes diffusion the decision
  // unless `decision` says otherwise (and then it is refused).
  EngineSettings engine{.marginal = p.marginal && p.policy_model.empty(),
                        .marginal_config = p.marginal_config,
                        .routes = p.routes,
                        .cycle_threads = p.cycle_threads};
  RETURN_IF_ERROR(loc.Locate(r, node, ReadEngineSettings(r, engine)));
  if (engine.marginal && !p.policy_model.empty()) {
    return loc.Key(node, "decision",
                   r.Error("decision",
                           "policy_model refines the diffusion engine's weights: it "
                           "needs decision: diffusion"));
  }
  p.marginal = engine.marginal;
  p.marginal_config = engine.marginal_config;
  p.routes = engine.routes;
  p.cycle_threads = engine.cycle_threads;
  return loc.CheckKeys(r, node);
}

absl::StatusOr<DataRate> ReadCapacity(const Located& loc, YamlReader& r, const YAML::Node& node) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"capacity_bps", 1}, {"capacity_mbps", 1e6}, {"capacity_gbps", 1e9}};
  std::optional<std::pair<std::string_view, double>> found;
  for (const auto& unit : kUnits) {
    if (!r.Has(unit.first)) continue;
    if (found) {
      return loc.Key(node, unit.first,
                     r.Error(unit.first, fmt::format("give only one of capacity_bps, "
                                                     "capacity_mbps, capacity_gbps (also {})",
                                                     found->first)));
    }
    found = unit;
  }
  if (!found) {
    return loc.At(node, r.Error("capacity_bps", "missing (or capacity_mbps, capacity_gbps)"));
  }
  ASSIGN_OR_RETURN(
      double v, loc.Key(node, found->first, r.Required<double>(found->first, Bounds::Positive())));
  const double bps = v * found->second;
  if (!(bps >= 1000 && bps <= 1e13)) {
    return loc.Key(node, found->first,
                   r.Error(found->first, fmt::format("must be between 1 kb/s and 10 Tb/s, got "
                                                     "{} b/s",
                                                     bps)));
  }
  return DataRate::BitsPerSecond(std::llround(bps));
}

absl::Status ReadNodes(const Located& loc, YamlReader& top, const YAML::Node& root,
                       ControllerConfig& c) {
  const YAML::Node list = Located::KeyNode(root, "nodes");
  ASSIGN_OR_RETURN(std::vector<YamlReader> nodes, loc.At(list, top.RequiredMapList("nodes")));
  if (nodes.empty()) return loc.At(list, top.Error("nodes", "must list at least one node"));
  std::map<uint32_t, size_t> ids;
  std::map<std::string, size_t> names, overlays;
  for (size_t i = 0; i < nodes.size(); ++i) {
    YamlReader& r = nodes[i];
    const YAML::Node node = list[i];
    ControllerNodeConfig n;
    ASSIGN_OR_RETURN(
        int64_t id,
        loc.Key(node, "id", r.Required<int64_t>("id", Bounds::InRange(1, 4294967295.0))));
    n.id = static_cast<uint32_t>(id);
    ASSIGN_OR_RETURN(n.name, loc.Key(node, "name", r.Required<std::string>("name")));
    if (absl::Status s = security::ValidateIdentityName(n.name); !s.ok()) {
      return loc.Key(node, "name", r.Error("name", s.message()));
    }
    ASSIGN_OR_RETURN(n.overlay_address,
                     loc.Key(node, "overlay", r.Required<std::string>("overlay")));
    in_addr addr;
    if (inet_pton(AF_INET, n.overlay_address.c_str(), &addr) != 1) {
      return loc.Key(node, "overlay",
                     r.Error("overlay", fmt::format("must be an IPv4 address such as 10.77.0.1, "
                                                    "got '{}'",
                                                    n.overlay_address)));
    }
    if (auto [it, fresh] = ids.emplace(n.id, i); !fresh) {
      return loc.Key(
          node, "id",
          r.Error("id", fmt::format("{} is also the id of nodes[{}]", n.id, it->second)));
    }
    if (auto [it, fresh] = names.emplace(n.name, i); !fresh) {
      return loc.Key(node, "name",
                     r.Error("name", fmt::format("'{}' is also the name of "
                                                 "nodes[{}]",
                                                 n.name, it->second)));
    }
    if (auto [it, fresh] = overlays.emplace(n.overlay_address, i); !fresh) {
      return loc.Key(node, "overlay",
                     r.Error("overlay", fmt::format("{} is also the overlay "
                                                    "address of nodes[{}]",
                                                    n.overlay_address, it->second)));
    }
    RETURN_IF_ERROR(loc.CheckKeys(r, node));
    c.nodes.push_back(std::move(n));
  }
  return absl::OkStatus();
}

absl::Status ReadLinks(const Located& loc, YamlReader& top, const YAML::Node& root,
                       ControllerConfig& c) {
  const YAML::Node list = Located::KeyNode(root, "links");
  ASSIGN_OR_RETURN(std::vector<YamlReader> links, loc.At(list, top.RequiredMapList("links")));
  std::set<std::string> names;
  for (const ControllerNodeConfig& n : c.nodes) names.insert(n.name);
  std::map<std::pair<std::string, std::string>, size_t> cables;
  for (size_t i = 0; i < links.size(); ++i) {
    YamlReader& r = links[i];
    const YAML::Node node = list[i];
    ControllerLinkConfig l;
    ASSIGN_OR_RETURN(l.a, loc.Key(node, "a", r.Required<std::string>("a")));
    ASSIGN_OR_RETURN(l.b, loc.Key(node, "b", r.Required<std::string>("b")));
    for (const auto& [key, name] : {std::pair{"a", &l.a}, std::pair{"b", &l.b}}) {
      if (!names.contains(*name)) {
        return loc.Key(node, key, r.Error(key, fmt::format("unknown node '{}'", *name)));
      }
    }
    if (l.a == l.b) {
      return loc.Key(node, "b",
                     r.Error("b", fmt::format("a link joins two different nodes, "
                                              "got '{}' twice",
                                              l.a)));
    }
    const auto cable = std::minmax(l.a, l.b);
    if (auto [it, fresh] = cables.emplace(std::pair(cable.first, cable.second), i); !fresh) {
      return loc.At(node,
                    r.Error("b", fmt::format("{}-{} is also links[{}]", l.a, l.b, it->second)));
    }
    ASSIGN_OR_RETURN(l.capacity, ReadCapacity(loc, r, node));
    if (r.HasDuration("delay")) {
      ASSIGN_OR_RETURN(l.delay,
                       loc.Key(node, "delay", r.RequiredDuration("delay", Bounds::Positive())));
    }
    RETURN_IF_ERROR(loc.CheckKeys(r, node));
    c.links.push_back(std::move(l));
  }
  return absl::OkStatus();
}

}  // namespace

RouteComputerConfig DefaultControllerRoutes() {
  RouteComputerConfig c = DeployedEngineSettings().routes;
  c.scales.reference_delay = Milliseconds(1);
  // Noisy samples move most links' costs at once; a full pass is then the cheaper one.
  c.full_above_changed_fraction = 0.25;
  // Bad news at once, good news over ~0.4 s: load that comes and goes (elastic flows, the
  // traffic the tables just moved) does not swing routes back and forth every cycle.
  c.cost_decay_periods = 4;
  // The underlay may be slower than configured (a shaper, a policer, a congested provider):
  // trust queueing, loss and delivered throughput over configured capacities.
  c.measured_links = true;
  return c;
}

namespace {

absl::StatusOr<ControllerConfig> ParseControllerConfigOrThrow(const std::string& text,
                                                              const std::string& file) {
  const Located loc(file);
  ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  if (!root.IsDefined() || root.IsNull()) {
    return absl::InvalidArgumentError(fmt::format("{}: the file is empty", file));
  }
  ASSIGN_OR_RETURN(YamlReader top, loc.At(root, YamlReader::Create(root, "")));
  ControllerConfig c;
  c.file = file;
  c.policy.routes = DefaultControllerRoutes();

  ASSIGN_OR_RETURN(c.listen, loc.Key(root, "listen", top.Required<std::string>("listen")));
  RETURN_IF_ERROR(loc.Key(root, "listen", top.Error("listen", CheckHostPort(c.listen))));

  const YAML::Node tls_node = Located::KeyNode(root, "tls");
  ASSIGN_OR_RETURN(YamlReader tls, loc.At(tls_node, top.RequiredMap("tls")));
  for (const auto& [key, field] :
       {std::pair{"cert", &c.tls.cert_file}, std::pair{"key", &c.tls.key_file},
        std::pair{"ca", &c.tls.ca_file}}) {
    ASSIGN_OR_RETURN(*field, loc.Key(tls_node, key, tls.Required<std::string>(key)));
    if (field->empty()) return loc.Key(tls_node, key, tls.Error(key, "must name a PEM file"));
    *field = Resolve(*field, file);
  }
  ASSIGN_OR_RETURN(c.crl_file, loc.Key(tls_node, "crl", tls.Optional<std::string>("crl", "")));
  if (!c.crl_file.empty()) c.crl_file = Resolve(c.crl_file, file);
  RETURN_IF_ERROR(loc.CheckKeys(tls, tls_node));

  ASSIGN_OR_RETURN(c.trust_domain,
                   loc.Key(root, "trust_domain", top.Optional<std::string>("trust_domain", "")));
  if (!c.trust_domain.empty()) {
    RETURN_IF_ERROR(
        loc.Key(root, "trust_domain",
                top.Error("trust_domain", security::ValidateTrustDomain(c.trust_domain))));
  }
  ASSIGN_OR_RETURN(c.health, loc.Key(root, "health", top.Optional<std::string>("health", "")));
  if (!c.health.empty()) {
    RETURN_IF_ERROR(loc.Key(root, "health", top.Error("health", CheckHostPort(c.health))));
  }
  ASSIGN_OR_RETURN(c.http, loc.Key(root, "http", top.Optional<std::string>("http", "")));
  if (!c.http.empty()) {
    RETURN_IF_ERROR(loc.Key(root, "http", top.Error("http", CheckHostPort(c.http))));
  }
  ASSIGN_OR_RETURN(c.log_file, loc.Key(root, "log", top.Optional<std::string>("log", "")));
  c.log_file = Resolve(c.log_file, file);
  ASSIGN_OR_RETURN(c.log_level, loc.Key(root, "log_level",
                                        top.OptionalChoice("log_level", c.log_level,
                                                           {"debug", "info", "warn", "error"})));

  ASSIGN_OR_RETURN(
      c.policy.cycle,
      loc.Key(root, "cycle", top.OptionalDuration("cycle", c.policy.cycle, Bounds::Positive())));
  if (c.policy.cycle < Milliseconds(1) || c.policy.cycle > Seconds(60)) {
    return loc.Key(root, "cycle", top.Error("cycle_ms", "must be between 1 ms and 60 s"));
  }
  ASSIGN_OR_RETURN(c.table_stale,
                   loc.Key(root, "table_stale",
                           top.OptionalDuration("table_stale", c.table_stale, Bounds::Positive())));
  ASSIGN_OR_RETURN(
      c.forecast_horizon,
      loc.Key(root, "forecast_horizon",
              top.OptionalDuration("forecast_horizon", c.forecast_horizon, Bounds::Positive())));
  ASSIGN_OR_RETURN(c.stub_hosts,
                   loc.Key(root, "stub_hosts", top.Optional<bool>("stub_hosts", c.stub_hosts)));
  ASSIGN_OR_RETURN(c.events_kept, loc.Key(root, "events_kept",
                                          top.Optional<int>("events_kept", c.events_kept,
                                                            Bounds::InRange(1, 1000000))));

  ASSIGN_OR_RETURN(c.state_dir,
                   loc.Key(root, "state_dir", top.Optional<std::string>("state_dir", "")));
  c.state_dir = Resolve(c.state_dir, file);
  const YAML::Node key_node = Located::KeyNode(root, "initial_key");
  if (top.Has("initial_key")) {
    ASSIGN_OR_RETURN(YamlReader key, loc.At(key_node, top.RequiredMap("initial_key")));
    ControllerConfig::InitialKey k;
    ASSIGN_OR_RETURN(
        const int64_t id,
        loc.Key(key_node, "id", key.Required<int64_t>("id", Bounds::InRange(0, 4294967295.0))));
    k.id = static_cast<uint32_t>(id);
    ASSIGN_OR_RETURN(k.file, loc.Key(key_node, "file", key.Required<std::string>("file")));
    if (k.file.empty()) return loc.Key(key_node, "file", key.Error("file", "must not be empty"));
    k.file = Resolve(k.file, file);
    RETURN_IF_ERROR(loc.CheckKeys(key, key_node));
    c.initial_key = std::move(k);
  }
  const YAML::Node keys_node = Located::KeyNode(root, "keys");
  ASSIGN_OR_RETURN(YamlReader keys, loc.At(keys_node, top.OptionalMap("keys")));
  ASSIGN_OR_RETURN(
      c.key_rotate_every,
      loc.Key(keys_node, "rotate_every",
              keys.OptionalDuration("rotate_every", c.key_rotate_every, Bounds::NonNegative())));
  ASSIGN_OR_RETURN(c.key_rollout,
                   loc.Key(keys_node, "rollout",
                           keys.OptionalDuration("rollout", c.key_rollout, Bounds::Positive())));
  if (c.key_rollout < Milliseconds(100)) {
    return loc.Key(keys_node, "rollout", keys.Error("rollout_ms", "must be at least 100 ms"));
  }
  if (c.key_rotate_every > Duration(0) && c.key_rotate_every < 2 * c.key_rollout) {
    return loc.Key(keys_node, "rotate_every",
                   keys.Error("rotate_every_s", "must be 0 (on request) or at least two rollouts"));
  }
  RETURN_IF_ERROR(loc.CheckKeys(keys, keys_node));

  const YAML::Node replicas_node = Located::KeyNode(root, "replicas");
  if (top.Has("replicas")) {
    ASSIGN_OR_RETURN(YamlReader r, loc.At(replicas_node, top.RequiredMap("replicas")));
    ControllerConfig::Replicas replicas;
    for (const auto& [key, field] :
         {std::pair{"etcd", &replicas.etcd}, std::pair{"advertise", &replicas.advertise}}) {
      ASSIGN_OR_RETURN(*field, loc.Key(replicas_node, key, r.Required<std::string>(key)));
      RETURN_IF_ERROR(loc.Key(replicas_node, key, r.Error(key, CheckHostPort(*field))));
    }
    ASSIGN_OR_RETURN(replicas.lease,
                     loc.Key(replicas_node, "lease",
                             r.OptionalDuration("lease", replicas.lease, Bounds::Positive())));
    if (replicas.lease < Seconds(1) || replicas.lease > Seconds(60)) {
      return loc.Key(replicas_node, "lease", r.Error("lease_ms", "must be between 1 s and 60 s"));
    }
    ASSIGN_OR_RETURN(replicas.prefix,
                     loc.Key(replicas_node, "prefix", r.Optional<std::string>("prefix", "")));
    if (!replicas.prefix.empty() &&
        (replicas.prefix.front() != '/' || replicas.prefix.back() != '/')) {
      return loc.Key(replicas_node, "prefix", r.Error("prefix", "must begin and end with '/'"));
    }
    const YAML::Node etcd_tls_node = Located::KeyNode(replicas_node, "etcd_tls");
    ASSIGN_OR_RETURN(YamlReader etcd_tls, loc.At(etcd_tls_node, r.OptionalMap("etcd_tls")));
    for (const auto& [key, field] :
         {std::pair{"ca", &replicas.etcd_ca}, std::pair{"cert", &replicas.etcd_cert},
          std::pair{"key", &replicas.etcd_key}}) {
      ASSIGN_OR_RETURN(*field,
                       loc.Key(etcd_tls_node, key, etcd_tls.Optional<std::string>(key, "")));
      if (!field->empty()) *field = Resolve(*field, file);
    }
    if (replicas.etcd_ca.empty() && !replicas.etcd_cert.empty()) {
      return loc.Key(etcd_tls_node, "ca", etcd_tls.Error("ca", "a client certificate needs a CA"));
    }
    if (replicas.etcd_cert.empty() != replicas.etcd_key.empty()) {
      return loc.Key(etcd_tls_node, "key", etcd_tls.Error("key", "cert and key go together"));
    }
    RETURN_IF_ERROR(loc.CheckKeys(etcd_tls, etcd_tls_node));
    RETURN_IF_ERROR(loc.CheckKeys(r, replicas_node));
    c.replicas = std::move(replicas);
  }

  const YAML::Node probe_node = Located::KeyNode(root, "probe");
  ASSIGN_OR_RETURN(YamlReader probe, loc.At(probe_node, top.OptionalMap("probe")));
  ASSIGN_OR_RETURN(c.probe_interval, loc.Key(probe_node, "interval",
                                             probe.OptionalDuration("interval", c.probe_interval,
                                                                    Bounds::Positive())));
  if (c.probe_interval < Milliseconds(1) || c.probe_interval > Seconds(60)) {
    return loc.Key(probe_node, "interval",
                   probe.Error("interval_ms", "must be between 1 ms and 60 s"));
  }
  ASSIGN_OR_RETURN(c.missed_probes, loc.Key(probe_node, "missed_probes",
                                            probe.Optional<int>("missed_probes", c.missed_probes,
                                                                Bounds::InRange(1, 1000))));
  RETURN_IF_ERROR(loc.CheckKeys(probe, probe_node));

  ASSIGN_OR_RETURN(
      c.sample_timeout,
      loc.Key(root, "sample_timeout",
              top.OptionalDuration("sample_timeout", 3 * c.probe_interval, Bounds::Positive())));
  ASSIGN_OR_RETURN(c.hello_timeout, loc.Key(root, "hello_timeout",
                                            top.OptionalDuration("hello_timeout", c.hello_timeout,
                                                                 Bounds::Positive())));
  if (c.hello_timeout > Seconds(600)) {
    return loc.Key(root, "hello_timeout", top.Error("hello_timeout", "must be at most 600 s"));
  }
  if (c.sample_timeout <= c.probe_interval) {
    return loc.Key(root, "sample_timeout",
                   top.Error("sample_timeout",
                             fmt::format("must be longer than the probe interval "
                                         "({} ms)",
                                         static_cast<double>(c.probe_interval.count()) / 1e6)));
  }
  if (c.table_stale <= c.policy.cycle) {
    return loc.Key(
        root, "table_stale",
        top.Error("table_stale", fmt::format("must be longer than the cycle ({} ms)",
                                             static_cast<double>(c.policy.cycle.count()) / 1e6)));
  }

  RETURN_IF_ERROR(ReadNodes(loc, top, root, c));
  const int nodes = static_cast<int>(c.nodes.size());
  ASSIGN_OR_RETURN(c.max_connections,
                   loc.Key(root, "max_connections",
                           top.Optional<int>("max_connections", DefaultMaxConnections(nodes),
                                             Bounds::InRange(1, 1000000))));
  if (c.max_connections < nodes + 1) {
    return loc.Key(root, "max_connections",
                   top.Error("max_connections",
                             fmt::format("must be at least {}: one for each of the {} nodes' "
                                         "agents and one for an operator",
                                         nodes + 1, nodes)));
  }
  RETURN_IF_ERROR(ReadLinks(loc, top, root, c));
  RETURN_IF_ERROR(ReadPolicy(loc, top, root, file, c.policy));
  RETURN_IF_ERROR(loc.CheckKeys(top, root));

  c.policy.routes.horizon_periods = HorizonPeriods(c);
  if (absl::Status s = c.policy.routes.Validate(); !s.ok()) {
    return loc.Key(root, "policy", top.Error("policy", s.message()));
  }
  return c;
}

}  // namespace

absl::StatusOr<ControllerConfig> ParseControllerConfig(const std::string& text,
                                                       const std::string& file) {
  return CatchYamlExceptions(file, [&] { return ParseControllerConfigOrThrow(text, file); });
}

absl::StatusOr<ControllerConfig> LoadControllerConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxConfigFileBytes));
  return ParseControllerConfig(text, path);
}

absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> LoadLearnedPolicy(
    const ControllerConfig& config) {
  absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> policy =
      learn::LearnedPolicy::Load(config.policy.policy_model, config.policy.policy_precision);
  if (!policy.ok()) {
    return absl::Status(policy.status().code(), fmt::format("{}: policy.policy_model: {}",
                                                            config.file, Msg(policy.status())));
  }
  return policy;
}

const char* PrecisionName(learn::LearnedPolicy::Precision precision) {
  return precision == learn::LearnedPolicy::Precision::kInt8 ? "int8" : "float";
}

Topology BuildTopology(const ControllerConfig& config) {
  Topology topo;
  std::map<std::string, NodeId, std::less<>> by_name;
  for (const ControllerNodeConfig& n : config.nodes) {
    by_name[n.name] = topo.AddNode(n.name, NodeKind::kSwitch);
  }
  for (const ControllerLinkConfig& l : config.links) {
    LinkParams p;
    p.capacity = l.capacity;
    p.delay = l.delay.value_or(Microseconds(1));
    topo.AddDuplexLink(by_name.at(l.a), by_name.at(l.b), p);
  }
  // Every node runs an agent and has an overlay address: every node is a destination, but the
  // stubs, whose switch stands for them.
  topo.set_every_node_an_endpoint(true);
  if (config.stub_hosts) {
    const std::vector<NodeId> stub_switch = StubSwitches(topo);
    for (NodeId v = 0; v < topo.num_nodes(); ++v) {
      if (stub_switch[v] != kNoNode) topo.mutable_node(v).kind = NodeKind::kHost;
    }
  }
  return topo;
}

int HorizonPeriods(const ControllerConfig& config) {
  return HorizonSteps(config.forecast_horizon, config.probe_interval);
}

}  // namespace dar::control
