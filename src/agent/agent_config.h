// The agent's configuration file: who this node is, the whole overlay (every node and link, for
// the static fallback table), its neighbours on the underlay, the controller, TLS files and
// local settings. dar-lab writes one per node (lab/lab_files.h NodeConfigYaml); parsed and
// validated here in one place, errors naming the file and the field ("A.yaml: neighbours[1].link:
// ...").
//
//   lab: dmd                          # optional, for people
//   node: {id: 1, name: A}            # must be one of `nodes`
//   netns: dmd-A                      # optional, for people
//   management: {interface: dmd-m1, address: 10.255.1.2/30, gateway: 10.255.1.1}  # optional,
//                                     # for people (the lab routes to the controller over it)
//   controller: 10.255.255.1:50051    # host:port of the controller, or of its replicas:
//                                     # controllers: [10.0.0.1:50051, 10.0.0.2:50051, ...]
//   http: 10.255.1.2:9091             # optional: serve /metrics and /healthz there (plain
//                                     # HTTP; port 0: any free port); default: none
//   controller_name: localhost        # optional: the name to dial it by (TLS SNI), if not
//                                     # the host above
//   controller_id: spiffe://lab.dar/controller   # optional: the identity its certificate
//                                     # must carry; default: the controller of this node's
//                                     # trust domain (no host name is checked)
//   tls: {cert: node-1.crt, key: node-1.key, ca: ca.crt}   # relative to this file
//   state_dir: state/A                # the last good table lives here; relative to this file
//   overlay: {tun: dar0, prefix_length: 16, mtu: 1400}     # optional; these are the defaults
//   data_port: 7000                   # UDP port of the overlay on every underlay address
//   probe_interval_ms: 100
//   missed_probes: 3                  # unanswered probes before a neighbour counts as down
//   forwarding_mode: per_flowlet      # per_flow | per_flowlet | per_packet | per_packet_p2c |
//                                     # drill | drill_flowlet
//   line_rate_gbps: 10                # optional: the rate one flow can send at (drill_flowlet
//                                     # balances by queues and sprays long flows only where
//                                     # that can buy something, and keeps each flowlet on one
//                                     # next hop elsewhere; a link without a capacity counts as
//                                     # worth spraying)
//   hop_limit: 64
//   table_stale_ms: 3000              # until the controller says otherwise
//   initial_key: {id: 0, file: overlay.key}   # optional: a data-plane key to use before the
//                                     # controller's; the file holds 64 hex digits
//   log_level: info                   # debug | info | warn | error
//   nodes:
//     - {id: 1, name: A, overlay: 10.77.0.1}   # overlay optional: 10.77.0.<id> for id <= 254
//   links:
//     - {a: A, b: B, capacity_mbps: 100}       # capacity optional (unknown): capacity_bps,
//                                              # _kbps, _mbps or _gbps, as the controller's
//   neighbours:                       # exactly one per link of this node
//     - {id: 2, name: B, link: 0, interface: dmd-0a, address: 10.1.0.1/30,
//        peer_interface: dmd-0b, peer_address: 10.1.0.2, rate_bps: 100000000}
//
// `link` is the index of the link in `links`; name, peer_interface and rate_bps are optional.
// Node ids are the wire ids (certificates say spiffe://<domain>/node/<id>); inside the agent a
// node is its index in `nodes` (a NodeId of BuildAgentTopology).
#ifndef DAR_AGENT_AGENT_CONFIG_H_
#define DAR_AGENT_AGENT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/dataplane.h"
#include "core/next_hop_chooser.h"
#include "core/topology.h"
#include "core/units.h"
#include "net/ip_packet.h"
#include "net/overlay_header.h"
#include "security/tls.h"

namespace dar::agent {

inline constexpr int kDefaultDataPort = 7000;

struct AgentNodeConfig {
  uint32_t id = 0;  // > 0
  std::string name;
  net::Ipv4Address overlay;
};

struct AgentLinkConfig {
  NodeId a = kNoNode;  // indices into AgentConfig::nodes
  NodeId b = kNoNode;
  DataRate capacity;  // zero: unknown
};

// One link of this node, seen from this end.
struct NeighbourConfig {
  uint32_t id = 0;            // the neighbour's wire id
  NodeId node = kNoNode;      // its index in AgentConfig::nodes
  int link = 0;               // index into AgentConfig::links
  LinkId out_link = kNoLink;  // this node -> neighbour in BuildAgentTopology
  LinkId in_link = kNoLink;   // neighbour -> this node
  std::string interface;      // this end's underlay interface
  net::Ipv4Address local_address;
  int prefix_length = 30;
  std::string peer_interface;  // may be empty
  net::Ipv4Address peer_address;
  DataRate rate;  // the underlay's rate limit; zero: none
};

// A data-plane key from a file, used until the controller sends its own.
struct InitialKey {
  uint32_t id = 0;
  std::string file;  // absolute or relative to the working directory (resolved on parse)
};

struct AgentConfig {
  std::string file;  // where it was read from
  std::string lab;
  NodeId self = kNoNode;  // index into nodes
  std::string netns;
  std::string management_interface;
  std::string management_address;
  std::string management_gateway;
  std::string controller;  // host:port (the first of `controllers`)
  // Every replica of the controller (`controllers: [...]` in the file), or just `controller`:
  // the agent streams to the one that leads (agent/control_client.h).
  std::vector<std::string> controllers;
  std::string controller_name;  // empty: the host of `controller`
  std::string http;             // host:port for /metrics and /healthz; empty: none
  // The controller's identity; none: the controller of the trust domain of `tls.cert_file`.
  std::optional<security::SpiffeId> controller_id;
  security::TlsFiles tls;
  std::string state_dir;
  std::string tun_name = "dar0";
  int overlay_prefix_length = 16;
  int tun_mtu = 1400;
  uint16_t data_port = kDefaultDataPort;
  Duration probe_interval = Milliseconds(100);
  int missed_probes = 3;
  ForwardingMode forwarding_mode = ForwardingMode::kPerFlowlet;
  DataRate line_rate;  // ForwardingConfig::line_rate; zero: unknown
  int hop_limit = 64;
  Duration table_stale = Seconds(3);
  std::optional<InitialKey> initial_key;
  std::string log_level = "info";
  std::vector<AgentNodeConfig> nodes;
  std::vector<AgentLinkConfig> links;
  std::vector<NeighbourConfig> neighbours;  // in the order of `links`

  const AgentNodeConfig& self_node() const { return nodes[self]; }
  // The index of the node with wire id `id`, or kNoNode.
  NodeId FindNode(uint32_t id) const;
  // The neighbour with wire id `id`, or null.
  const NeighbourConfig* FindNeighbour(uint32_t id) const;
};

// Parses configuration text; `file` names it in errors and anchors the relative paths (its
// directory). Errors: InvalidArgument "<file>: <field>: <problem>".
absl::StatusOr<AgentConfig> ParseAgentConfig(const std::string& text, const std::string& file);
// Reads and parses a file. Errors also: NotFound etc. naming the path.
absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path);

// The overlay as a Topology: node i is config.nodes[i] (a switch: router and endpoint), link i
// of the config is the directed links 2i (a -> b) and 2i+1 (b -> a), metric 1, capacity as
// configured (zero when unknown).
Topology BuildAgentTopology(const AgentConfig& config);

// The data plane's configuration: this node in `topology` (BuildAgentTopology(config), which
// must outlive the data plane), every node's overlay address, a link per neighbour (this end's
// and the peer's underlay address, both on data_port), the TUN, probing, forwarding and hop
// limit, and the initial key (read from its file, active) if configured. `seed` seeds the
// data plane's chooser. Errors: the key file's, naming it.
absl::StatusOr<DataplaneConfig> MakeDataplaneConfig(const AgentConfig& config,
                                                    const Topology& topology, uint64_t seed);

}  // namespace dar::agent

#endif  // DAR_AGENT_AGENT_CONFIG_H_
