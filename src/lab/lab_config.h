// The lab file: a small YAML description of a network of namespaces for dar-lab, and the names
// and addresses derived from it.
//
//   name: dmd                  # [a-z][a-z0-9]*, at most 10 characters; prefixes every
//                              # namespace and interface the lab creates ("dmd-")
//   underlay: 10.1.0.0/16      # optional, default 10.1.0.0/16: 10.<x>.0.0/16, x in 0..254
//   nodes:
//     - {id: 1, name: A}       # id 1..254, name [A-Za-z0-9_]+ (at most 32; not ctl/controller)
//   links:
//     - {a: A, b: B, rate: 100mbit}   # rate optional: a tc rate (bit, kbit, mbit, gbit, tbit
//                                     # or bytes per second: bps, kbps, mbps, gbps)
//   services:                  # optional; both entries optional
//     controller: {command: [dar-controller, --listen, "{controller_addr}"], port: 50051}
//                              # optional: replicas: 3 (1..5): as many controllers, coordinated
//                              # through an etcd the lab starts (Debian's etcd), on ports
//                              # port, port + 1, ... ({controller_addr} is each one's own)
//     agent: {command: [dar-agent, --config, "{config}"]}
//
// Addressing (deterministic):
//   - link i (0-based, in file order) is 10.<x>.<i>.0/30: end a .1, end b .2; interfaces
//     "<name>-<i>a" in a's namespace and "<name>-<i>b" in b's. At most 256 links.
//   - the controller has its own namespace "<name>-ctl"; node n reaches it over a management
//     veth, 10.255.<id>.0/30: the controller's side .1 ("<name>-c<id>"), the node's .2
//     ("<name>-m<id>"). The controller listens on 10.255.255.1 (on its loopback), which every
//     node routes through its management link. Replicas ("ctl1", "ctl2", ...) and their etcd
//     (127.0.0.1:2379) share that namespace.
//   - node n lives in namespace "<name>-<node name>".
// All interface names fit in IFNAMSIZ (15 characters).
//
// Service command templates may use placeholders, replaced when the lab starts them:
//   {lab} {lab_dir} {netns} {config} {controller_addr} {controller_ip} {controller_port}, and
//   for agents also {node} (the id) and {node_name}. "{{" and "}}" stand for braces.
// Errors name the file, the line and the field: "lab.yaml:7: links[1].rate: ...".
#ifndef DAR_LAB_LAB_CONFIG_H_
#define DAR_LAB_LAB_CONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/units.h"

namespace dar::lab {

inline constexpr int kMaxLabNameLength = 10;
inline constexpr int kMaxNodeNameLength = 32;
inline constexpr int kMaxLinks = 256;
inline constexpr int kDefaultControllerPort = 50051;

struct LabNodeConfig {
  int id = 0;  // 1..254
  std::string name;
};

struct LabLinkConfig {
  std::string a;  // node names
  std::string b;
  std::optional<DataRate> rate;  // none: not limited
};

// A command template; see the placeholders above.
struct ServiceConfig {
  std::vector<std::string> command;  // not empty
};

// A parsed, validated lab file.
struct LabConfig {
  std::string name;
  int underlay_octet = 1;  // links use 10.<underlay_octet>.<link index>.0/30
  std::vector<LabNodeConfig> nodes;
  std::vector<LabLinkConfig> links;
  std::optional<ServiceConfig> controller;
  int controller_port = kDefaultControllerPort;
  int controller_replicas = 1;
  std::optional<ServiceConfig> agent;
};

// Parses and validates lab file text; `file` is the name errors start with.
absl::StatusOr<LabConfig> ParseLabConfig(const std::string& text, const std::string& file);
// Reads and parses a lab file.
absl::StatusOr<LabConfig> LoadLabConfig(const std::string& path);

// A tc-style rate: a number and a unit, "100mbit", "1.5gbit", "500kbit", "10mbps" (bytes per
// second); units are decimal, case-insensitive. Errors: InvalidArgument with the problem only
// (the caller says where), also for rates below 8kbit or above 1tbit.
absl::StatusOr<DataRate> ParseRate(std::string_view text);
// The shortest exact tc spelling of `rate`: "100mbit", "1500kbit", "12345bit".
std::string FormatRate(DataRate rate);

// Where the placeholders of a service command come from.
using Placeholders = std::map<std::string, std::string, std::less<>>;
// The command with every placeholder replaced. Errors: InvalidArgument
// "command[2]: unknown placeholder '{x}'" or an unmatched brace.
absl::StatusOr<std::vector<std::string>> ExpandCommand(const std::vector<std::string>& command,
                                                       const Placeholders& values);

// One end of an underlay link.
struct LinkEnd {
  int node = 0;         // index into LabLayout::nodes
  std::string ifname;   // in that node's namespace
  std::string address;  // IPv4 address, without prefix length
};

struct LinkLayout {
  int index = 0;
  LinkEnd a;
  LinkEnd b;
  int prefix_length = 30;
  std::optional<DataRate> rate;  // current rate limit on both ends; none: not limited
  bool up = true;                // current administrative state of both ends
};

struct NodeLayout {
  int id = 0;
  std::string name;
  std::string netns;
  std::string mgmt_ifname;   // the node's side of its management veth
  std::string mgmt_address;  // 10.255.<id>.2
  std::string ctl_ifname;    // the controller's side
  std::string ctl_address;   // 10.255.<id>.1
};

// Every name and address of a lab, derived from its config (MakeLayout) and kept in its state
// file, so commands after `up` do not need the lab file.
struct LabLayout {
  std::string name;
  std::string ctl_netns;
  std::string controller_ip;
  int controller_port = kDefaultControllerPort;
  int controller_replicas = 1;  // more than one: replicas coordinated through etcd
  std::vector<NodeLayout> nodes;
  std::vector<LinkLayout> links;

  // "<name>-": the start of every namespace and interface name of the lab.
  std::string prefix() const { return name + "-"; }
  // Where replica `replica` (0-based) of the controller listens.
  std::string controller_addr(int replica = 0) const;
  // The name of a replica's service, config and log: "controller" for a lone controller, else
  // "ctl1", "ctl2", ...
  std::string controller_name(int replica) const;
  // The index of the node named `name_or_id` (its name, or its id in decimal). NotFound listing
  // the nodes otherwise.
  absl::StatusOr<int> FindNode(std::string_view name_or_id) const;
  // The index of the link between the two nodes, in either order. NotFound otherwise.
  absl::StatusOr<int> FindLink(std::string_view a, std::string_view b) const;
};

// REQUIRES: `config` came from ParseLabConfig (it is valid).
LabLayout MakeLayout(const LabConfig& config);

}  // namespace dar::lab

#endif  // DAR_LAB_LAB_CONFIG_H_
