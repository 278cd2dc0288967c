#include "sim/scenario.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "core/topology_config.h"
#include "fmt/format.h"
#include "sim/control_plane.h"
#include "sim/workload.h"

namespace dar::sim {
namespace {

// The cable named by a two-element list of node names, as (a, b) node ids.
absl::StatusOr<std::pair<NodeId, NodeId>> ReadCable(YamlReader& r, std::string_view key,
                                                    const Topology& topo) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, r.Required<std::vector<std::string>>(key));
  if (names.size() != 2) {
    return r.Error(key, fmt::format("must name a link as [A, B], got {} names", names.size()));
  }
  NodeId ids[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<NodeId> id = topo.FindNode(names[i]);
    if (!id.ok()) return r.Error(key, fmt::format("no node named '{}'", names[i]));
    ids[i] = *id;
  }
  if (topo.FindLink(ids[0], ids[1]) == kNoLink) {
    return r.Error(key, fmt::format("no link between '{}' and '{}'", names[0], names[1]));
  }
  return std::make_pair(ids[0], ids[1]);
}

absl::StatusOr<TimedEvent> ReadEvent(YamlReader& r, const Topology& topo) {
  TimedEvent e;
  ASSIGN_OR_RETURN(e.at, r.RequiredDuration("at"));
  std::vector<std::string> kinds;
  for (const char* k :
       {"link_down", "link_up", "link_fail_silent", "link_recover_silent", "capacity", "load"}) {
    if (r.Has(k)) kinds.push_back(k);
  }
  if (kinds.size() != 1) {
    return r.Error("",
                   "an event needs exactly one of link_down, link_up, link_fail_silent, "
                   "link_recover_silent, capacity, load");
  }
  const std::string& kind = kinds[0];
  if (kind == "link_down" || kind == "link_up" || kind == "link_fail_silent" ||
      kind == "link_recover_silent") {
    e.kind = kind == "link_down"          ? TimedEvent::Kind::kLinkDown
             : kind == "link_up"          ? TimedEvent::Kind::kLinkUp
             : kind == "link_fail_silent" ? TimedEvent::Kind::kSilentFailure
                                          : TimedEvent::Kind::kSilentRecovery;
    ASSIGN_OR_RETURN(auto cable, ReadCable(r, kind, topo));
    std::tie(e.a, e.b) = cable;
    RETURN_IF_ERROR(r.CheckNoUnknownKeys());
    return e;
  }
  ASSIGN_OR_RETURN(YamlReader m, r.RequiredMap(kind));
  ASSIGN_OR_RETURN(auto cable, ReadCable(m, "link", topo));
  std::tie(e.a, e.b) = cable;
  ASSIGN_OR_RETURN(std::string direction,
                   m.OptionalChoice("direction", "both", {"both", "forward"}));
  e.both_directions = direction == "both";
  if (kind == "capacity") {
    e.kind = TimedEvent::Kind::kCapacity;
    ASSIGN_OR_RETURN(e.capacity_fraction,
                     m.Required<double>("fraction", Bounds::PositiveAtMost(1.0)));
    for (const LinkId l : {topo.FindLink(e.a, e.b), topo.FindLink(e.b, e.a)}) {
      if (l != kNoLink &&
          topo.link(l).params.capacity.Scaled(e.capacity_fraction) < kMinLinkCapacity) {
        return m.Error("fraction", fmt::format("{} leaves the link under {} b/s",
                                               e.capacity_fraction, kMinLinkCapacity.bps()));
      }
    }
  } else {
    e.kind = TimedEvent::Kind::kLoadRamp;
    ASSIGN_OR_RETURN(e.load_from, m.Optional<double>("from", 0.0, Bounds::Fraction()));
    ASSIGN_OR_RETURN(e.load_to, m.Required<double>("to", Bounds::Fraction()));
    ASSIGN_OR_RETURN(Duration ramp, m.OptionalDuration("ramp", Duration(0)));
    ASSIGN_OR_RETURN(Duration length, m.OptionalDuration("length", Seconds(3600)));
    e.until = e.at + ramp;
    e.hold = e.at + std::max(length, ramp);
  }
  RETURN_IF_ERROR(m.CheckNoUnknownKeys());
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return e;
}

// The fastest link out of any host: the rate one flow can send at (ForwardingConfig::line_rate).
DataRate HostLineRate(const Topology& topo) {
  DataRate fastest;
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    if (topo.node(n).kind != NodeKind::kHost) continue;
    for (const LinkId l : topo.node(n).out_links) {
      fastest = std::max(fastest, topo.link(l).params.capacity);
    }
  }
  return fastest;
}

// A preset named by the policy's routing: its routing and default forwarding.
void ApplyPreset(PolicySpec& p) {
  if (const PolicyPreset* preset = Registry<PolicyPreset>::Find(p.routing)) {
    p.routing = preset->routing;
    p.forwarding = preset->forwarding;
  }
}

// Reads the policy keys common to all control planes: name, routing (a preset's routing
// replaces it, and its forwarding is the default) and forwarding.
absl::Status ReadPolicyKeys(YamlReader& r, PolicySpec& p) {
  ASSIGN_OR_RETURN(p.name, r.Required<std::string>("name"));
  ASSIGN_OR_RETURN(p.routing, r.Optional<std::string>("routing", p.name));
  ApplyPreset(p);
  ASSIGN_OR_RETURN(
      std::string mode,
      r.Optional<std::string>("forwarding", std::string(ForwardingModeName(p.forwarding.mode))));
  absl::StatusOr<ForwardingMode> parsed = ParseForwardingMode(mode);
  if (!parsed.ok()) return r.Error("forwarding", parsed.status().message());
  p.forwarding.mode = *parsed;
  ASSIGN_OR_RETURN(p.forwarding.flowlet_gap,
                   r.OptionalDuration("flowlet_gap", p.forwarding.flowlet_gap, Bounds::Positive()));
  ASSIGN_OR_RETURN(
      p.forwarding.queue_bias_bytes,
      r.OptionalSize("queue_bias", p.forwarding.queue_bias_bytes, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(
      p.forwarding.drill_samples,
      r.Optional<int>("drill_samples", p.forwarding.drill_samples, Bounds::InRange(1, 16)));
  ASSIGN_OR_RETURN(
      p.forwarding.drill_memory,
      r.Optional<int>("drill_memory", p.forwarding.drill_memory, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(p.forwarding.reroute_threshold_bytes,
                   r.OptionalSize("reroute_threshold", p.forwarding.reroute_threshold_bytes,
                                  Bounds::NonNegative()));
  ASSIGN_OR_RETURN(
      p.forwarding.sticky_packets,
      r.Optional<int>("sticky_packets", p.forwarding.sticky_packets, Bounds::InRange(0, 1 << 30)));
  ASSIGN_OR_RETURN(p.forwarding.bulk_sticky_packets,
                   r.Optional<int>("bulk_sticky_packets", p.forwarding.bulk_sticky_packets,
                                   Bounds::InRange(0, 1 << 30)));
  ASSIGN_OR_RETURN(p.forwarding.spray_long_flows,
                   r.Optional<bool>("spray_long_flows", p.forwarding.spray_long_flows));
  ASSIGN_OR_RETURN(p.forwarding.line_rate, r.OptionalRate("line_rate", p.forwarding.line_rate));
  return absl::OkStatus();
}

absl::StatusOr<PolicySpec> ReadPolicy(const YAML::Node& node, const std::string& where) {
  PolicySpec p;
  if (node.IsScalar()) {
    p.name = node.as<std::string>();
    p.routing = p.name;
    ApplyPreset(p);
    return p;
  }
  p.block = node;
  ASSIGN_OR_RETURN(YamlReader r, YamlReader::Create(node, where));
  RETURN_IF_ERROR(ReadPolicyKeys(r, p));
  return p;
}

absl::Status ReadNetwork(YamlReader& r, NetworkConfig& n) {
  ASSIGN_OR_RETURN(n.ecn_threshold_bytes,
                   r.OptionalSize("ecn_threshold", n.ecn_threshold_bytes, Bounds::NonNegative()));
  ASSIGN_OR_RETURN(n.host_queue_bytes, r.OptionalSize("host_queue", n.host_queue_bytes,
                                                      Bounds::Positive(), kMaxQueueBytes));
  ASSIGN_OR_RETURN(int hop_limit,
                   r.Optional<int>("hop_limit", n.initial_hop_limit, Bounds::InRange(1, 255)));
  n.initial_hop_limit = static_cast<uint8_t>(hop_limit);
  return r.CheckNoUnknownKeys();
}

absl::Status ReadTransport(YamlReader& r, TransportConfig& t) {
  ASSIGN_OR_RETURN(int64_t mss, r.OptionalSize("mss", t.mss, Bounds::InRange(64, 65536)));
  t.mss = static_cast<int32_t>(mss);
  ASSIGN_OR_RETURN(int64_t header,
                   r.OptionalSize("header", t.header_bytes, Bounds::InRange(0, 1024)));
  t.header_bytes = static_cast<int32_t>(header);
  ASSIGN_OR_RETURN(int64_t ack, r.OptionalSize("ack", t.ack_bytes, Bounds::InRange(1, 1024)));
  t.ack_bytes = static_cast<int32_t>(ack);
  ASSIGN_OR_RETURN(t.initial_window,
                   r.Optional<int>("initial_window", t.initial_window, Bounds::AtLeast(1)));
  ASSIGN_OR_RETURN(t.dctcp_g, r.Optional<double>("dctcp_g", t.dctcp_g, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(
      t.dctcp_initial_alpha,
      r.Optional<double>("dctcp_initial_alpha", t.dctcp_initial_alpha, Bounds::InRange(0, 1)));
  ASSIGN_OR_RETURN(t.rehash_on_timeout, r.Optional<bool>("rehash_on_timeout", t.rehash_on_timeout));
  ASSIGN_OR_RETURN(t.reorder_window_min,
                   r.OptionalDuration("reorder_window_min", t.reorder_window_min));
  ASSIGN_OR_RETURN(t.initial_rto,
                   r.OptionalDuration("initial_rto", t.initial_rto, Bounds::Positive()));
  ASSIGN_OR_RETURN(t.min_rto, r.OptionalDuration("min_rto", t.min_rto, Bounds::Positive()));
  ASSIGN_OR_RETURN(t.max_rto, r.OptionalDuration("max_rto", t.max_rto, Bounds::Positive()));
  if (t.max_rto < t.min_rto) return r.Error("max_rto", "must not be below min_rto");
  return r.CheckNoUnknownKeys();
}

}  // namespace

absl::StatusOr<ControlPlanePtr> CreatePolicyControlPlane(const PolicySpec& policy,
                                                         const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, YamlReader::Create(policy.block, ctx.where));
  PolicySpec scratch;
  if (policy.block.IsMap()) RETURN_IF_ERROR(ReadPolicyKeys(r, scratch));
  ASSIGN_OR_RETURN(ControlPlanePtr cp, CreateControlPlane(policy.routing, r, ctx));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return cp;
}

namespace {

absl::StatusOr<Scenario> ParseScenarioOrThrow(const std::string& yaml_text,
                                              const std::string& path) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, path));
  if (!root.IsMap()) return absl::InvalidArgumentError(fmt::format("{}: must be a map", path));
  Scenario s;
  s.path = path;
  s.base_dir = std::filesystem::path(path).parent_path().string();
  ASSIGN_OR_RETURN(YamlReader r, YamlReader::Create(root, path + ":"));
  ASSIGN_OR_RETURN(s.name,
                   r.Optional<std::string>("name", std::filesystem::path(path).stem().string()));
  ASSIGN_OR_RETURN(s.description, r.Optional<std::string>("description", ""));
  ASSIGN_OR_RETURN(int64_t seed, r.Optional<int64_t>("seed", 1, Bounds::NonNegative()));
  s.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(s.duration, r.RequiredDuration("duration", Bounds::Positive()));
  ASSIGN_OR_RETURN(s.drain_limit, r.OptionalDuration("drain_limit", s.drain_limit));
  for (const auto& [key, d] : {std::pair{"duration", s.duration}, {"drain_limit", s.drain_limit}}) {
    if (d > kMaxScenarioDuration) {
      return r.Error(fmt::format("{}_{{s,ms,us,ns}}", key),
                     fmt::format("{:g} s is too long: at most {:g} s", ToSeconds(d),
                                 ToSeconds(kMaxScenarioDuration)));
    }
  }

  if (!r.Has("topology")) return r.Error("topology", "is required");
  ASSIGN_OR_RETURN(s.topology, BuildTopology(r.Raw("topology"), path, s.base_dir));

  ASSIGN_OR_RETURN(YamlReader network, r.OptionalMap("network"));
  RETURN_IF_ERROR(ReadNetwork(network, s.network));
  ASSIGN_OR_RETURN(YamlReader transport, r.OptionalMap("transport"));
  RETURN_IF_ERROR(ReadTransport(transport, s.transport));

  s.workloads = r.Raw("workloads");
  if (!s.workloads.IsSequence() || s.workloads.size() == 0) {
    return r.Error("workloads", "must be a non-empty list of workloads");
  }
  // Build each workload once now, so a bad block fails here and not mid-run.
  for (size_t i = 0; i < s.workloads.size(); ++i) {
    ConfigContext ctx{fmt::format("{}: workloads[{}]", path, i), s.base_dir, &s.topology};
    ASSIGN_OR_RETURN(WorkloadPtr w, CreateWorkload(s.workloads[i], ctx));
  }

  if (r.Has("events")) {
    ASSIGN_OR_RETURN(std::vector<YamlReader> events, r.RequiredMapList("events"));
    for (YamlReader& e : events) {
      ASSIGN_OR_RETURN(TimedEvent ev, ReadEvent(e, s.topology));
      s.events.push_back(ev);
    }
  }

  const YAML::Node policies = r.Raw("policies");
  if (!policies.IsSequence() || policies.size() == 0) {
    return r.Error("policies", "must be a non-empty list (e.g. [static, ecmp])");
  }
  std::set<std::string> names;
  const DataRate host_line_rate = HostLineRate(s.topology);
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string where = fmt::format("{}: policies[{}]", path, i);
    ASSIGN_OR_RETURN(PolicySpec p, ReadPolicy(policies[i], where));
    if (!names.insert(p.name).second) {
      return absl::InvalidArgumentError(
          fmt::format("{}.name: policy '{}' is listed twice", where, p.name));
    }
    ConfigContext ctx{where, s.base_dir, &s.topology};
    ASSIGN_OR_RETURN(ControlPlanePtr cp, CreatePolicyControlPlane(p, ctx));
    if (p.forwarding.line_rate.is_zero()) p.forwarding.line_rate = host_line_rate;
    s.policies.push_back(std::move(p));
  }
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return s;
}

}  // namespace

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text, const std::string& path) {
  return CatchYamlExceptions(path, [&] { return ParseScenarioOrThrow(yaml_text, path); });
}

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseScenario(text, path);
}

}  // namespace dar::sim
