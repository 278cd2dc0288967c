// The data plane's configuration and the classification of packets: drop reasons, the traffic
// class of a TOS byte, the ingress check, DataplaneConfig::Validate.
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>

#include <cassert>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "agent/dataplane.h"
#include "agent/dataplane_internal.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "net/byte_order.h"

namespace dar::agent {
namespace {

// DSCP CS1 ("lower effort", RFC 8622): bulk.
constexpr uint8_t kDscpBulk = 8;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(fmt::format("data plane config: {}", what));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const net::OverlayKeyRing>> BuildKeyRing(
    const std::vector<KeyUpdate>& keys, const DataplaneConfig& config) {
  if (keys.empty()) return absl::InvalidArgumentError("data-plane keys: the key set is empty");
  if (keys.size() > static_cast<size_t>(net::OverlayKeyRing::kMaxKeys)) {
    return absl::InvalidArgumentError(fmt::format("data-plane keys: {} keys, at most {} allowed",
                                                  keys.size(), net::OverlayKeyRing::kMaxKeys));
  }
  std::set<uint32_t> ids;
  int active = 0;
  uint32_t active_id = 0;
  for (const KeyUpdate& k : keys) {
    if (!ids.insert(k.id).second) {
      return absl::InvalidArgumentError(
          fmt::format("data-plane keys: key id {} appears twice", k.id));
    }
    if (k.active) {
      ++active;
      active_id = k.id;
    }
  }
  if (active != 1) {
    return absl::InvalidArgumentError(
        fmt::format("data-plane keys: {} keys are active, exactly one must be", active));
  }
  const size_t nodes = config.overlay_addresses.size();
  std::vector<uint32_t> wire_ids = config.wire_ids;
  if (wire_ids.empty()) {
    for (size_t n = 0; n < nodes; ++n) wire_ids.push_back(static_cast<uint32_t>(n));
  }
  absl::flat_hash_map<uint32_t, uint32_t> index_of;
  for (size_t n = 0; n < wire_ids.size(); ++n) index_of[wire_ids[n]] = static_cast<uint32_t>(n);
  const auto self = static_cast<uint32_t>(config.node);
  auto ring = std::make_shared<net::OverlayKeyRing>();
  for (const KeyUpdate& k : keys) {
    std::vector<net::OverlayPairKey> row;
    if (!k.row) {
      if (self < wire_ids.size()) row = net::PairKeysFromSecret(k.key, wire_ids, self);
    } else {
      // A row from the controller: the keys of nodes this agent does not know are of no use.
      row.reserve(k.peers.size());
      for (const PeerKey& p : k.peers) {
        const auto it = index_of.find(p.node_id);
        if (it != index_of.end() && it->second != self) row.push_back({it->second, p.key});
      }
    }
    absl::Status s = ring->Add(k.id, row);
    sodium_memzero(row.data(), row.size() * sizeof(row[0]));
    RETURN_IF_ERROR(s);
  }
  RETURN_IF_ERROR(ring->SetCurrent(active_id));
  return std::shared_ptr<const net::OverlayKeyRing>(std::move(ring));
}

// Free functions ------------------------------------------------------------------------------

std::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kTooShort:
      return "too_short";
    case DropReason::kBadVersion:
      return "bad_version";
    case DropReason::kUnknownType:
      return "unknown_type";
    case DropReason::kBadTrafficClass:
      return "bad_traffic_class";
    case DropReason::kBadLength:
      return "bad_length";
    case DropReason::kUnknownKeyId:
      return "unknown_key_id";
    case DropReason::kBadHopTag:
      return "bad_hop_tag";
    case DropReason::kBadTag:
      return "bad_tag";
    case DropReason::kHopLimitExhausted:
      return "hop_limit_exhausted";
    case DropReason::kReplayed:
      return "replayed";
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kBadProbe:
      return "bad_probe";
    case DropReason::kNoKey:
      return "no_key";
    case DropReason::kNoRoute:
      return "no_route";
    case DropReason::kNotIpv4:
      return "not_ipv4";
    case DropReason::kUnknownDestination:
      return "unknown_destination";
    case DropReason::kLocalDestination:
      return "local_destination";
    case DropReason::kNoTun:
      return "no_tun";
    case DropReason::kTunWrite:
      return "tun_write";
    case DropReason::kQueueFull:
      return "queue_full";
    case DropReason::kSendError:
      return "send_error";
    case DropReason::kBadOffload:
      return "bad_offload";
    case DropReason::kCount:
      break;
  }
  return "?";
}

DropReason DropReasonFor(net::OverlayStatus status) {
  switch (status) {
    case net::OverlayStatus::kTooShort:
      return DropReason::kTooShort;
    case net::OverlayStatus::kBadVersion:
      return DropReason::kBadVersion;
    case net::OverlayStatus::kUnknownType:
      return DropReason::kUnknownType;
    case net::OverlayStatus::kBadTrafficClass:
      return DropReason::kBadTrafficClass;
    case net::OverlayStatus::kBadLength:
      return DropReason::kBadLength;
    case net::OverlayStatus::kUnknownKeyId:
      return DropReason::kUnknownKeyId;
    case net::OverlayStatus::kBadHopTag:
      return DropReason::kBadHopTag;
    case net::OverlayStatus::kBadTag:
      return DropReason::kBadTag;
    case net::OverlayStatus::kHopLimitExhausted:
      return DropReason::kHopLimitExhausted;
    case net::OverlayStatus::kReplayed:
      return DropReason::kReplayed;
    case net::OverlayStatus::kOk:
    case net::OverlayStatus::kCount:
      break;
  }
  assert(false && "DropReasonFor: not a drop");
  return DropReason::kBadLength;
}

net::TrafficClass TrafficClassFromTos(uint8_t tos) {
  return (tos >> 2) == kDscpBulk ? net::TrafficClass::kBulk : net::TrafficClass::kLatency;
}

bool ClassifyIngress(absl::Span<const uint8_t> packet, IngressPacket* out) {
  const size_t n = packet.size();
  if (n < net::kIpv4HeaderBytes) return false;
  const uint8_t* p = packet.data();
  if ((p[0] >> 4) != 4) return false;
  const size_t ihl = static_cast<size_t>(p[0] & 0x0f) * 4;
  const size_t total = net::Load16(p + 2);
  if (ihl < net::kIpv4HeaderBytes || ihl > n || total < ihl || total > n) return false;
  out->destination = net::Ipv4Address{net::Load32(p + 16)};
  out->traffic_class = TrafficClassFromTos(p[1]);
  out->flow_hash = net::FlowHash(packet.first(total));
  return true;
}

uint64_t DataplaneCounters::total_dropped() const {
  uint64_t sum = 0;
  for (uint64_t d : drops) sum += d;
  return sum;
}

std::shared_ptr<const AgentTables> AgentTablesFromRouting(const RoutingTables& tables, NodeId node,
                                                          bool is_static) {
  auto out = std::make_shared<AgentTables>();
  out->version = tables.version();
  out->is_static = is_static;
  for (auto& rows : out->rows) {
    rows.assign(static_cast<size_t>(tables.num_nodes()), {});
    for (NodeId d : tables.destinations()) {
      if (d == node) continue;
      const absl::Span<const NextHop> hops = tables.Lookup(node, d);
      rows[static_cast<size_t>(d)].assign(hops.begin(), hops.end());
    }
  }
  return out;
}

// DataplaneConfig -----------------------------------------------------------------------------

absl::Status DataplaneConfig::Validate() const {
  if (topology == nullptr) return Invalid("topology is null");
  const int nodes = topology->num_nodes();
  if (node < 0 || node >= nodes) {
    return Invalid(fmt::format("node {} is not a node of the {}-node topology", node, nodes));
  }
  if (overlay_addresses.size() != static_cast<size_t>(nodes)) {
    return Invalid(
        fmt::format("{} overlay addresses for {} nodes", overlay_addresses.size(), nodes));
  }
  std::set<uint32_t> addresses;
  for (size_t i = 0; i < overlay_addresses.size(); ++i) {
    if (!addresses.insert(overlay_addresses[i].value).second) {
      return Invalid(fmt::format("overlay address {} of node {} is used twice",
                                 net::ToString(overlay_addresses[i]), i));
    }
  }
  if (!wire_ids.empty()) {
    if (wire_ids.size() != static_cast<size_t>(nodes)) {
      return Invalid(fmt::format("{} wire ids for {} nodes", wire_ids.size(), nodes));
    }
    std::set<uint32_t> seen;
    for (size_t i = 0; i < wire_ids.size(); ++i) {
      if (!seen.insert(wire_ids[i]).second) {
        return Invalid(fmt::format("wire id {} of node {} is used twice", wire_ids[i], i));
      }
    }
  }
  std::set<LinkId> links;
  for (size_t i = 0; i < neighbours.size(); ++i) {
    const NeighbourLinkConfig& n = neighbours[i];
    const std::string where = fmt::format("neighbours[{}] ({})", i, n.interface);
    if (n.link < 0 || n.link >= topology->num_links()) {
      return Invalid(fmt::format("{}: link {} is not a link of the topology", where, n.link));
    }
    const Link& l = topology->link(n.link);
    if (l.src != node || l.dst != n.neighbour) {
      return Invalid(fmt::format("{}: link {} goes {} -> {}, not {} -> {}", where, n.link, l.src,
                                 l.dst, node, n.neighbour));
    }
    if (!links.insert(n.link).second) {
      return Invalid(fmt::format("{}: link {} appears twice", where, n.link));
    }
    if (n.peer.port == 0) return Invalid(fmt::format("{}: peer port is 0", where));
  }
  if (!tun.name.empty()) {
    if (absl::Status s = tun.Validate(); !s.ok()) return Invalid(std::string(s.message()));
    if (!(tun.address == overlay_addresses[static_cast<size_t>(node)])) {
      return Invalid(fmt::format("tun address {} is not node {}'s overlay address {}",
                                 net::ToString(tun.address), node,
                                 net::ToString(overlay_addresses[static_cast<size_t>(node)])));
    }
    if (net::OverlayDatagramSize(static_cast<size_t>(tun.mtu)) > net::kOverlayMaxPayload) {
      return Invalid(fmt::format("tun mtu {} is too large for the overlay", tun.mtu));
    }
  }
  if (probe_interval <= Duration(0)) {
    return Invalid(fmt::format("probe_interval {} ns must be > 0", probe_interval.count()));
  }
  if (absl::Status s = liveness.Validate(); !s.ok()) return Invalid(std::string(s.message()));
  if (absl::Status s = forwarding.Validate(); !s.ok()) return Invalid(std::string(s.message()));
  if (hop_limit < 1 || hop_limit > 255) {
    return Invalid(fmt::format("hop_limit {} is outside [1, 255]", hop_limit));
  }
  if (!initial_keys.empty()) {
    if (absl::StatusOr<std::shared_ptr<const net::OverlayKeyRing>> ring =
            BuildKeyRing(initial_keys, *this);
        !ring.ok()) {
      return Invalid(fmt::format("initial_keys: {}", std::string(ring.status().message())));
    }
  }
  if (batch_size < 1 || batch_size > 1024) {
    return Invalid(fmt::format("batch_size {} is outside [1, 1024]", batch_size));
  }
  if (queue_packets < 1 || queue_packets > 65536) {
    return Invalid(fmt::format("queue_packets {} is outside [1, 65536]", queue_packets));
  }
  if (socket_buffer_bytes < 0) {
    return Invalid(fmt::format("socket_buffer_bytes {} must be >= 0", socket_buffer_bytes));
  }
  return absl::OkStatus();
}

}  // namespace dar::agent
