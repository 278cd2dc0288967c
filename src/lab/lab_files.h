// What a lab writes into its dir for the services besides state.json (lab.h): the
// credentials (a CA and every party's certificate, the first data-plane key) and the config
// file of each node's agent and of the controller, with the addresses and names they share.
#ifndef DAR_LAB_LAB_FILES_H_
#define DAR_LAB_LAB_FILES_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/units.h"
#include "lab/lab_state.h"

namespace dar::lab {

// Credentials and files of a lab dir besides state.json: certificates in <dir>/certs (the layout
// of security/certs.h: a CA, the controller's, node-<id> for every node, admin-admin for darctl),
// the data-plane key agents start with (<dir>/overlay.key, 64 hex digits, mode 0600), the
// agents' state dirs (<dir>/state/<node name>, made by the agents).
inline constexpr std::string_view kLabCertDir = "certs";
inline constexpr std::string_view kLabAdminName = "admin";
inline constexpr std::string_view kLabOverlayKeyFile = "overlay.key";
// The id of that key (the controller starts with it too, and rotates to new ones).
inline constexpr int kLabInitialKeyId = 0;
inline constexpr int kLabDataPort = 7000;
// What a link without a rate limit is configured as (a veth is much faster than anything the
// lab sends).
inline constexpr DataRate kLabUnlimitedCapacity = DataRate::Gbps(10);

// The lab's trust domain: "<lab name>.dar".
std::string LabTrustDomain(const LabLayout& layout);
// A node's overlay (TUN) address: 10.77.0.<id> (a /16).
std::string LabOverlayAddress(const NodeLayout& node);
// Where the controller serves /metrics, /healthz and /readyz: its address in its namespace,
// port 9090 (replica r: 9090 + r).
inline constexpr int kLabControllerHttpPort = 9090;
std::string LabControllerHttpAddr(const LabLayout& layout, int replica = 0);
// The etcd of a lab with replicas, in the controller's namespace: client and peer URLs on its
// loopback, data in <dir>/etcd. Heartbeat 50 ms and election timeout 500 ms, so that it grants
// the replicas' leases of one second (kLabLeaseMs).
inline constexpr std::string_view kLabEtcdClient = "127.0.0.1:2379";
inline constexpr int kLabLeaseMs = 1000;
std::vector<std::string> LabEtcdCommand(const LabLayout& layout, const std::string& dir);
// Where a node's agent serves /metrics and /healthz: its management address, port 9091 (the
// controller's namespace reaches it, as a Prometheus there would).
inline constexpr int kLabAgentHttpPort = 9091;
std::string LabAgentHttpAddr(const NodeLayout& node);

// The capacity both ends are told: the rate limit, or kLabUnlimitedCapacity.
DataRate LabLinkCapacity(const LinkLayout& link);

// The line rate each agent is told: the fastest link's capacity, since a node's own traffic comes
// from its TUN and a single flow can fill any of its links.
DataRate LabLineRate(const LabLayout& layout);

// Creates the CA, the controller's, every node's and the admin's certificates, valid from an
// hour before `now` for a year, and a fresh overlay key in `dir`; replaces earlier ones.
// Errors: those of security::InitCertDir / IssueFromCertDir, Internal for the key file.
absl::Status CreateLabCredentials(const LabLayout& layout, const std::string& dir, absl::Time now);

// The config file a node's agent gets ({config}; agent/agent_config.h reads it): its id and
// name, namespace, the controller's address, its HTTP address, its management link, TLS files,
// state dir, probe and forwarding settings, the initial key, every node and link of the lab (for
// the static table), and its neighbours with link index, local interface and address, the peer's
// address and interface, and the rate limit. Paths are relative to the lab dir (where it is
// written).
std::string NodeConfigYaml(const LabLayout& layout, int node);
// The config file the controller (replica `replica`) gets (control/controller_config.h reads
// it): its listen address, its HTTP address, TLS files and trust domain, probe settings, the
// nodes and the links; with replicas, the etcd and where agents reach it.
std::string ControllerConfigYaml(const LabLayout& layout, int replica = 0);

}  // namespace dar::lab

#endif  // DAR_LAB_LAB_FILES_H_
