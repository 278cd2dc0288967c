#include "lab/lab_files.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "base/status_macros.h"
#include "fmt/format.h"
#include "security/certs.h"
#include "security/identity.h"
#include "security/revocation.h"
#include "yaml-cpp/yaml.h"

namespace dar::lab {

std::string LabTrustDomain(const LabLayout& layout) { return layout.name + ".dar"; }

std::string LabOverlayAddress(const NodeLayout& node) { return fmt::format("10.77.0.{}", node.id); }

std::string LabControllerHttpAddr(const LabLayout& layout, int replica) {
  return fmt::format("{}:{}", layout.controller_ip, kLabControllerHttpPort + replica);
}

std::vector<std::string> LabEtcdCommand(const LabLayout& layout, const std::string& dir) {
  const std::string client = fmt::format("http://{}", kLabEtcdClient);
  const std::string peer = "http://127.0.0.1:2380";
  return {"etcd",
          "--name",
          layout.name,
          "--data-dir",
          dir + "/etcd",
          "--listen-client-urls",
          client,
          "--advertise-client-urls",
          client,
          "--listen-peer-urls",
          peer,
          "--initial-advertise-peer-urls",
          peer,
          "--initial-cluster",
          fmt::format("{}={}", layout.name, peer),
          "--heartbeat-interval",
          "50",
          "--election-timeout",
          "500"};
}

std::string LabAgentHttpAddr(const NodeLayout& node) {
  return fmt::format("{}:{}", node.mgmt_address, kLabAgentHttpPort);
}

DataRate LabLinkCapacity(const LinkLayout& link) {
  return link.rate.value_or(kLabUnlimitedCapacity);
}

DataRate LabLineRate(const LabLayout& layout) {
  DataRate fastest = DataRate::BitsPerSecond(0);
  for (const LinkLayout& l : layout.links) fastest = std::max(fastest, LabLinkCapacity(l));
  return fastest;
}

absl::Status CreateLabCredentials(const LabLayout& layout, const std::string& dir, absl::Time now) {
  const std::string certs = fmt::format("{}/{}", dir, kLabCertDir);
  const absl::Time not_before = now - absl::Hours(1);
  const absl::Time not_after = now + absl::Hours(24 * 365);
  security::InitCertDirOptions init;
  init.dir = certs;
  init.trust_domain = LabTrustDomain(layout);
  init.not_before = not_before;
  init.not_after = not_after;
  init.controller_hosts = {"localhost", "127.0.0.1", layout.controller_ip};
  init.overwrite = true;
  RETURN_IF_ERROR(security::InitCertDir(init));
  const auto issue = [&](security::PeerKind kind, const std::string& name) -> absl::Status {
    security::IssueOptions o;
    o.dir = certs;
    o.kind = kind;
    o.name = name;
    o.not_before = not_before;
    o.not_after = not_after;
    o.overwrite = true;
    return security::IssueFromCertDir(o).status();
  };
  for (const NodeLayout& n : layout.nodes) {
    RETURN_IF_ERROR(issue(security::PeerKind::kNode, std::to_string(n.id)));
  }
  RETURN_IF_ERROR(issue(security::PeerKind::kAdmin, std::string(kLabAdminName)));

  // The data-plane key agents start with: 32 random bytes as hex, readable by root only.
  unsigned char key[32];
  if (RAND_bytes(key, sizeof(key)) != 1) {
    return absl::InternalError("cannot draw the overlay key: RAND_bytes failed");
  }
  std::string hex;
  for (const unsigned char b : key) hex += fmt::format("{:02x}", b);
  OPENSSL_cleanse(key, sizeof(key));
  const std::string path = fmt::format("{}/{}", dir, kLabOverlayKeyFile);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(fmt::format("{}: cannot create: {}", tmp, strerror(errno)));
  hex += "\n";
  const bool written = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
  OPENSSL_cleanse(hex.data(), hex.size());
  if (::close(fd) != 0 || !written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(fmt::format("{}: cannot write: {}", path, strerror(errno)));
  }
  return absl::OkStatus();
}

// The `tls` map of a service with identity `id`: its files in the lab's certificate dir,
// relative to the config file (which lives in the lab dir).
static void EmitTls(const security::SpiffeId& id, YAML::Emitter& out) {
  out << YAML::Key << "tls" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "cert" << YAML::Value
      << fmt::format("{}/{}", kLabCertDir, security::CertFileName(id));
  out << YAML::Key << "key" << YAML::Value
      << fmt::format("{}/{}", kLabCertDir, security::KeyFileName(id));
  out << YAML::Key << "ca" << YAML::Value
      << fmt::format("{}/{}", kLabCertDir, security::kCaCertFile);
  // The controller is the one that verifies clients' certificates, so the one that needs the
  // revocation list (`darctl certs revoke --dir <lab>/certs`, then SIGHUP).
  if (id.kind == security::PeerKind::kController) {
    out << YAML::Key << "crl" << YAML::Value
        << fmt::format("{}/{}", kLabCertDir, security::kCrlFile);
  }
  out << YAML::EndMap;
}

// The data-plane key agents start with, which the controller's key ring starts from too.
static void EmitInitialKey(YAML::Emitter& out) {
  out << YAML::Key << "initial_key" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "id" << YAML::Value << kLabInitialKeyId;
  out << YAML::Key << "file" << YAML::Value << std::string(kLabOverlayKeyFile);
  out << YAML::EndMap;
}

// The lab's nodes (id, name, overlay address) and links (ends, capacity), as both the agents'
// and the controller's configurations carry them.
static void EmitTopology(const LabLayout& layout, YAML::Emitter& out) {
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const NodeLayout& n : layout.nodes) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "id" << YAML::Value << n.id;
    out << YAML::Key << "name" << YAML::Value << n.name;
    out << YAML::Key << "overlay" << YAML::Value << LabOverlayAddress(n);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  for (const LinkLayout& l : layout.links) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "a" << YAML::Value << layout.nodes.at(l.a.node).name;
    out << YAML::Key << "b" << YAML::Value << layout.nodes.at(l.b.node).name;
    out << YAML::Key << "capacity_bps" << YAML::Value << LabLinkCapacity(l).bps();
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

std::string NodeConfigYaml(const LabLayout& layout, int node) {
  const NodeLayout& n = layout.nodes.at(node);
  const std::string node_id = std::to_string(n.id);
  const security::SpiffeId id = security::SpiffeId::Node(LabTrustDomain(layout), node_id);
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "lab" << YAML::Value << layout.name;
  out << YAML::Key << "node" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "id"
      << YAML::Value << n.id << YAML::Key << "name" << YAML::Value << n.name << YAML::EndMap;
  out << YAML::Key << "netns" << YAML::Value << n.netns;
  if (layout.controller_replicas == 1) {
    out << YAML::Key << "controller" << YAML::Value << layout.controller_addr();
  } else {
    out << YAML::Key << "controllers" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int r = 0; r < layout.controller_replicas; ++r) out << layout.controller_addr(r);
    out << YAML::EndSeq;
  }
  out << YAML::Key << "http" << YAML::Value << LabAgentHttpAddr(n);
  out << YAML::Key << "management" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "interface" << YAML::Value << n.mgmt_ifname;
  out << YAML::Key << "address" << YAML::Value << fmt::format("{}/30", n.mgmt_address);
  out << YAML::Key << "gateway" << YAML::Value << n.ctl_address;
  out << YAML::EndMap;
  EmitTls(id, out);
  out << YAML::Key << "state_dir" << YAML::Value << fmt::format("state/{}", n.name);
  out << YAML::Key << "overlay" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "tun" << YAML::Value << "dar0";
  out << YAML::Key << "prefix_length" << YAML::Value << 16;
  out << YAML::EndMap;
  out << YAML::Key << "data_port" << YAML::Value << kLabDataPort;
  out << YAML::Key << "probe_interval_ms" << YAML::Value << 100;
  out << YAML::Key << "missed_probes" << YAML::Value << 3;
  out << YAML::Key << "forwarding_mode" << YAML::Value << "per_flowlet";
  // A node's own traffic enters through its TUN, which one flow can drive as fast as the lab's
  // fastest link: every hop is one a single flow can fill, so long flowlets spray everywhere.
  out << YAML::Key << "line_rate_bps" << YAML::Value << LabLineRate(layout).bps();
  EmitInitialKey(out);
  EmitTopology(layout, out);
  out << YAML::Key << "neighbours" << YAML::Value << YAML::BeginSeq;
  for (const LinkLayout& l : layout.links) {
    if (l.a.node != node && l.b.node != node) continue;
    const bool is_a = l.a.node == node;
    const LinkEnd& local = is_a ? l.a : l.b;
    const LinkEnd& peer = is_a ? l.b : l.a;
    const NodeLayout& p = layout.nodes.at(peer.node);
    out << YAML::BeginMap;
    out << YAML::Key << "id" << YAML::Value << p.id;
    out << YAML::Key << "name" << YAML::Value << p.name;
    out << YAML::Key << "link" << YAML::Value << l.index;
    out << YAML::Key << "interface" << YAML::Value << local.ifname;
    out << YAML::Key << "address" << YAML::Value
        << fmt::format("{}/{}", local.address, l.prefix_length);
    out << YAML::Key << "peer_interface" << YAML::Value << peer.ifname;
    out << YAML::Key << "peer_address" << YAML::Value << peer.address;
    if (l.rate) out << YAML::Key << "rate_bps" << YAML::Value << l.rate->bps();
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return fmt::format("# Written by dar-lab for node {} of lab {}.\n{}\n", n.name, layout.name,
                     out.c_str());
}

std::string ControllerConfigYaml(const LabLayout& layout, int replica) {
  const security::SpiffeId id = security::SpiffeId::Controller(LabTrustDomain(layout));
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << layout.controller_addr(replica);
  out << YAML::Key << "http" << YAML::Value << LabControllerHttpAddr(layout, replica);
  if (layout.controller_replicas > 1) {
    out << YAML::Key << "replicas" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "etcd" << YAML::Value << std::string(kLabEtcdClient);
    out << YAML::Key << "advertise" << YAML::Value << layout.controller_addr(replica);
    out << YAML::Key << "lease_ms" << YAML::Value << kLabLeaseMs;
    out << YAML::EndMap;
  }
  EmitTls(id, out);
  out << YAML::Key << "trust_domain" << YAML::Value << LabTrustDomain(layout);
  out << YAML::Key << "probe" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "interval_ms" << YAML::Value << 100;
  out << YAML::Key << "missed_probes" << YAML::Value << 3;
  out << YAML::EndMap;
  // The key ring survives a restart (dar-lab stop/start ctl), and starts as the agents' key.
  out << YAML::Key << "state_dir" << YAML::Value
      << fmt::format("state/{}", layout.controller_name(replica));
  EmitInitialKey(out);
  EmitTopology(layout, out);
  out << YAML::EndMap;
  return fmt::format("# Written by dar-lab for the {} of lab {}.\n{}\n",
                     layout.controller_replicas == 1
                         ? std::string("controller")
                         : fmt::format("controller's replica {}", layout.controller_name(replica)),
                     layout.name, out.c_str());
}

}  // namespace dar::lab
