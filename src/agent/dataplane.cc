#include "agent/dataplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <set>
#include <utility>

#include "agent/qdisc_stats.h"
#include "base/status_macros.h"
#include "core/telemetry.h"
#include "fmt/format.h"
#include "net/byte_order.h"
#include "net/udp_socket.h"

namespace dar::agent {
namespace {

// epoll tags: link ports are tagged with their index, the rest with these.
constexpr uint32_t kTagTimer = 0xffff0001u;
constexpr uint32_t kTagWake = 0xffff0002u;
constexpr uint32_t kTagTun = 0xffff0003u;
constexpr uint32_t kTagNetlink = 0xffff0004u;
// A link's probe socket: this bit and the link's index.
constexpr uint32_t kTagProbeSocket = 0x40000000u;
// IFF_LOWER_UP (carrier) from <linux/if.h>, which clashes with <net/if.h>.
constexpr unsigned kIffLowerUp = 1u << 16;

// Receive batches taken from one ready socket before the others get a turn.
constexpr int kBatchesPerWake = 4;
// Datagrams handled before what they produced is sent (or written to the TUN) even in the middle
// of a batch: with GRO and TUN super-packets a batch can hold megabytes, and the next hop
// should not wait for all of it (a GSO message's worth keeps sends batched).
constexpr size_t kFlushDatagrams = 64;
// IPv4 and UDP headers around every overlay datagram on the underlay.
constexpr int64_t kUnderlayHeaderBytes = 28;
// DSCP CS1 ("lower effort", RFC 8622): bulk.
constexpr uint8_t kDscpBulk = 8;

// Whether a send's errno says the link itself is gone (its interface down or its peer
// unreachable): the link fails at once, whatever was being sent.
bool LinkDownErrno(int err) {
  return err == ENETDOWN || err == ENETUNREACH || err == EHOSTUNREACH || err == EHOSTDOWN ||
         err == EADDRNOTAVAIL;
}

Time ReadClock(clockid_t id) {
  timespec ts;
  ::clock_gettime(id, &ts);
  return Time(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
}

Time SteadyNow() { return ReadClock(CLOCK_MONOTONIC); }

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(fmt::format("data plane config: {}", what));
}

// Raises a socket buffer beyond net.core.{r,w}mem_max when allowed (CAP_NET_ADMIN); harmless
// otherwise, since SetBufferBytes has already asked for the capped size.
void ForceBufferBytes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes));
}

absl::StatusOr<std::shared_ptr<const net::OverlayKeyRing>> BuildKeyRing(
    const std::vector<KeyUpdate>& keys) {
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
  auto ring = std::make_shared<net::OverlayKeyRing>();
  for (const KeyUpdate& k : keys) RETURN_IF_ERROR(ring->Add(k.id, k.key));
  RETURN_IF_ERROR(ring->SetCurrent(active_id));
  return std::shared_ptr<const net::OverlayKeyRing>(std::move(ring));
}

}  // namespace

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
    case DropReason::kBadTag:
      return "bad_tag";
    case DropReason::kHopLimitExhausted:
      return "hop_limit_exhausted";
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
    case net::OverlayStatus::kBadTag:
      return DropReason::kBadTag;
    case net::OverlayStatus::kHopLimitExhausted:
      return DropReason::kHopLimitExhausted;
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
            BuildKeyRing(initial_keys);
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

// Ports ---------------------------------------------------------------------------------------

// One neighbour link: its socket, estimators, liveness and transmit queue.
struct Dataplane::Port {
  Port(int i, const NeighbourLinkConfig& c, net::SteeredSockets s,
       const LinkMonitorConfig& monitor_config, const LinkLivenessConfig& liveness_config,
       int queue_capacity)
      : index(i),
        config(c),
        socket(std::move(s.data)),
        probe_socket(std::move(s.control)),
        monitor(monitor_config),
        liveness(liveness_config),
        queue(static_cast<size_t>(queue_capacity)) {
    peer_address.sin_family = AF_INET;
    peer_address.sin_port = htons(c.peer.port);
    peer_address.sin_addr.s_addr = htonl(c.peer.address.value);
  }

  struct Queued {
    uint8_t* data = nullptr;  // in pool buffer `buffer`, or in a receive slot (kNoBuffer)
    uint32_t size = 0;
    uint32_t buffer = 0;
  };

  const int index;  // in ports_, and the socket's epoll tag
  const NeighbourLinkConfig config;
  unsigned ifindex = 0;  // of config.interface in this namespace; 0 if unknown
  net::UdpSocket socket;
  // Same address and port: probes and replies, steered here by the kernel on arrival (see
  // Create), sent at once, never queued behind data.
  net::UdpSocket probe_socket;
  LinkMonitor monitor;  // guarded by monitor_mu_
  LinkLiveness liveness;
  bool up_local = true;  // liveness.up(), for the chooser
  std::atomic<bool> up{true};
  uint64_t next_seq = 1;

  // Transmit queue: a ring of datagrams waiting for sendmmsg.
  std::vector<Queued> queue;
  size_t head = 0;
  size_t count = 0;
  int64_t queued_bytes = 0;
  size_t in_slots = 0;  // queued datagrams still in a receive slot (KeepQueued)
  bool dirty = false;
  bool want_writable = false;
  bool gso = true;  // send runs as UDP GSO messages (cleared if the path refuses them)
  sockaddr_in peer_address{};

  Counter tx_wire_bytes;  // datagrams plus IPv4/UDP headers
  Counter probes_answered;
  // What the link delivered, for the rate meter (Delivered). Data-plane thread only.
  int64_t delivered_bytes = 0;
  int64_t last_tx_bytes = 0;
  int64_t last_qdisc_sent = -1;  // the root qdisc's counters at the last tick; -1: none
  int64_t last_qdisc_drops = 0;

  // Adds this tick's deliveries and returns the running total. Where the interface's root
  // qdisc (a shaper the agent may not know of) holds a queue or dropped packets since the
  // last tick, it is what limits the link, and what left it is what the link delivered; what
  // the agent sent in that time overstates it (a 10 Mb/s shaper offered 20 delivers 10).
  // Otherwise what the agent sent. Per tick, not the smaller running total of the two: the
  // qdisc drains a burst over several ticks, and counts link-layer headers the agent does not.
  int64_t Delivered(const absl::StatusOr<QdiscStats>& qdisc) {
    const int64_t tx = static_cast<int64_t>(tx_wire_bytes.Get());
    int64_t sent = tx - last_tx_bytes;
    last_tx_bytes = tx;
    if (qdisc.ok() && qdisc->kind != "noqueue") {
      const bool limiting = qdisc->backlog_bytes > 0 || qdisc->drops > last_qdisc_drops;
      if (limiting && last_qdisc_sent >= 0 && qdisc->sent_bytes >= last_qdisc_sent) {
        sent = qdisc->sent_bytes - last_qdisc_sent;
      }
      last_qdisc_sent = qdisc->sent_bytes;
      last_qdisc_drops = qdisc->drops;
    } else {
      last_qdisc_sent = -1;
    }
    delivered_bytes += sent;
    return delivered_bytes;
  }

  const Queued& at(size_t i) const { return queue[(head + i) % queue.size()]; }
  Queued& at(size_t i) { return queue[(head + i) % queue.size()]; }
  void Push(uint8_t* data, uint32_t size, uint32_t buffer) {
    queue[(head + count) % queue.size()] = Queued{data, size, buffer};
    ++count;
    queued_bytes += size;
    if (buffer == kNoBuffer) ++in_slots;
  }
  Queued Pop() {
    const Queued q = queue[head];
    head = (head + 1) % queue.size();
    --count;
    queued_bytes -= q.size;
    if (q.buffer == kNoBuffer) --in_slots;
    return q;
  }
};

// What the next-hop chooser sees of the ports (core LocalPortState).
struct Dataplane::PortView {
  const Dataplane* dp;
  const Port* Find(LinkId link) const {
    if (link < 0 || static_cast<size_t>(link) >= dp->port_of_link_.size()) return nullptr;
    const int p = dp->port_of_link_[static_cast<size_t>(link)];
    return p < 0 ? nullptr : dp->ports_[static_cast<size_t>(p)].get();
  }
  bool forwardable(LinkId link) const {
    const Port* p = Find(link);
    return p != nullptr && p->up_local;
  }
  int64_t queued_bytes(LinkId link) const {
    const Port* p = Find(link);
    return p == nullptr ? 0 : p->queued_bytes;
  }
};

// The descriptors of one sendmmsg call: up to batch_size messages of up to kMaxGsoSegments
// datagrams each (kMaxDatagrams in all), each message with room for a UDP_SEGMENT cmsg.
struct Dataplane::TxBatch {
  static constexpr size_t kMaxDatagrams = 256;
  static constexpr size_t kMaxGsoSegments = 64;  // the kernel's UDP_MAX_SEGMENTS (at least)
  static constexpr size_t kMaxGsoBytes = 65000;  // one UDP datagram's payload before segmenting
  explicit TxBatch(size_t messages)
      : msgs(messages), controls(messages), runs(messages), iovs(kMaxDatagrams) {}
  std::vector<mmsghdr> msgs;
  std::vector<net::GsoControl> controls;
  std::vector<uint32_t> runs;  // datagrams per message
  std::vector<iovec> iovs;
};

// Dataplane -----------------------------------------------------------------------------------

Dataplane::Dataplane(const DataplaneConfig& config)
    : config_(config),
      topology_(*config.topology),
      chooser_(config.forwarding,
               Random::Hash(config.seed ^ (0x5a17ull << 32) ^ static_cast<uint64_t>(config.node))),
      rng_(Random::Hash(config.seed) ^ static_cast<uint64_t>(config.node)),
      pending_forwarding_(config.forwarding) {}

Dataplane::~Dataplane() { Stop(); }

absl::StatusOr<std::unique_ptr<Dataplane>> Dataplane::Create(const DataplaneConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Dataplane> dp(new Dataplane(config));
  const DataplaneConfig& c = dp->config_;

  if (!c.initial_keys.empty()) {
    ASSIGN_OR_RETURN(auto keys, BuildKeyRing(c.initial_keys));
    MutexLock lock(&dp->control_mu_);
    dp->pending_keys_ = std::move(keys);
    dp->generation_.fetch_add(1);
  }
  for (size_t i = 0; i < c.overlay_addresses.size(); ++i) {
    dp->node_of_address_[c.overlay_addresses[i].value] = static_cast<NodeId>(i);
  }
  dp->sent_to_ = std::vector<Counter>(c.overlay_addresses.size());
  if (!c.tun.name.empty()) {
    net::TunConfig tun_config = c.tun;
    tun_config.offload = c.tun_offload;
    absl::StatusOr<net::TunDevice> tun = net::TunDevice::Open(tun_config);
    if (!tun.ok()) {
      return absl::Status(tun.status().code(), fmt::format("data plane of node {}: {}", c.node,
                                                           std::string(tun.status().message())));
    }
    dp->tun_.emplace(std::move(*tun));
    if (c.tun_offload) {
      dp->tcp_coalescer_.emplace();
      dp->udp_coalescer_.emplace();
    }
  }

  LinkMonitorConfig monitor;
  monitor.sample_period = c.probe_interval;
  dp->port_of_link_.assign(static_cast<size_t>(dp->topology_.num_links()), -1);
  for (const NeighbourLinkConfig& n : c.neighbours) {
    // Probes and replies must survive a link whose data the agent cannot keep up with: busy is
    // for the estimators to see (RTT and queue rise), not a reason to call the link dead. So,
    // as a router keeps its control plane's packets out of transit queues, they get their own
    // socket on the link's address and port: the kernel steers every arriving datagram by its
    // overlay type byte, and a flood that overflows the data socket's receive queue leaves the
    // probe socket's alone. They leave from it at once, not behind the data queued here (which
    // Samples reports as queue bytes), but with the same address, route and priority, so they
    // wait in the same egress qdisc as data, where a shaped link queues: the RTT still
    // measures it. (SO_PRIORITY, or a priority band, would have let them skip that queue.)
    static_assert(static_cast<uint8_t>(net::OverlayType::kProbe) + 1 ==
                  static_cast<uint8_t>(net::OverlayType::kProbeReply));
    absl::StatusOr<net::SteeredSockets> socket =
        net::SteeredSockets::Bind(n.local, c.batch_size, net::kOverlayTypeOffset,
                                  static_cast<uint8_t>(net::OverlayType::kProbe),
                                  static_cast<uint8_t>(net::OverlayType::kProbeReply));
    if (!socket.ok()) {
      return absl::Status(
          socket.status().code(),
          fmt::format("data plane of node {}, link to node {} on {}: {}", c.node, n.neighbour,
                      n.interface, std::string(socket.status().message())));
    }
    if (c.socket_buffer_bytes > 0) {
      RETURN_IF_ERROR(socket->data.SetBufferBytes(c.socket_buffer_bytes, c.socket_buffer_bytes));
      ForceBufferBytes(socket->data.fd(), c.socket_buffer_bytes);
    }
    // Without GRO (an old kernel) datagrams simply arrive one per slot. Both sockets: the GRO
    // stage may pick either, and joins a sender's datagrams only for a socket that has it.
    if (c.udp_gro) {
      (void)socket->data.EnableGro();
      (void)socket->control.EnableGro();
    }
    monitor.capacity = n.capacity;
    const int index = static_cast<int>(dp->ports_.size());
    dp->port_of_link_[static_cast<size_t>(n.link)] = index;
    dp->ports_.push_back(
        std::make_unique<Port>(index, n, std::move(*socket), monitor, c.liveness, c.queue_packets));
    dp->ports_.back()->gso = c.udp_gso;
    if (!n.interface.empty()) dp->ports_.back()->ifindex = ::if_nametoindex(n.interface.c_str());
  }

  // Carrier: the kernel announces every interface change on rtnetlink's link group. A link
  // whose carrier drops (its far end went down, a cable was pulled) is down at once, as a
  // switch's port is, without waiting for probes to go unanswered.
  // The namespace the data plane is made in: its thread enters it (Run), wherever Start is
  // called from, so that what it asks the kernel per interface (qdisc statistics) is asked
  // where the interfaces are.
  dp->netns_fd_.Reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!dp->netns_fd_.valid()) {
    return absl::ErrnoToStatus(errno, "data plane: open /proc/thread-self/ns/net");
  }
  dp->netlink_fd_.Reset(
      ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!dp->netlink_fd_.valid()) return absl::ErrnoToStatus(errno, "data plane: netlink socket");
  sockaddr_nl groups{};
  groups.nl_family = AF_NETLINK;
  groups.nl_groups = RTMGRP_LINK;
  if (::bind(dp->netlink_fd_.get(), reinterpret_cast<const sockaddr*>(&groups), sizeof(groups)) !=
      0) {
    return absl::ErrnoToStatus(errno, "data plane: netlink bind (link group)");
  }

  dp->epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!dp->epoll_fd_.valid()) return absl::ErrnoToStatus(errno, "data plane: epoll_create1");
  dp->timer_fd_.Reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!dp->timer_fd_.valid()) return absl::ErrnoToStatus(errno, "data plane: timerfd_create");
  dp->wake_fd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!dp->wake_fd_.valid()) return absl::ErrnoToStatus(errno, "data plane: eventfd");
  const auto watch = [&](int fd, uint32_t tag) -> absl::Status {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    if (::epoll_ctl(dp->epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::ErrnoToStatus(errno, fmt::format("data plane: epoll_ctl add fd {}", fd));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(watch(dp->timer_fd_.get(), kTagTimer));
  RETURN_IF_ERROR(watch(dp->wake_fd_.get(), kTagWake));
  if (dp->tun_) RETURN_IF_ERROR(watch(dp->tun_->fd(), kTagTun));
  RETURN_IF_ERROR(watch(dp->netlink_fd_.get(), kTagNetlink));
  for (size_t i = 0; i < dp->ports_.size(); ++i) {
    RETURN_IF_ERROR(watch(dp->ports_[i]->socket.fd(), static_cast<uint32_t>(i)));
    RETURN_IF_ERROR(
        watch(dp->ports_[i]->probe_socket.fd(), kTagProbeSocket | static_cast<uint32_t>(i)));
  }

  // Buffers: every transmit queue full, plus a TUN burst (segments of a super-packet are
  // sealed in chunks of at most the buffers free) and one per link, so that nothing waits for
  // a buffer. Received datagrams stay in their receive slot unless a full socket leaves them
  // queued (KeepQueued); probes and replies are sealed on the stack (SendProbe).
  const size_t mtu = c.tun.name.empty() ? 1500 : static_cast<size_t>(c.tun.mtu);
  dp->buffer_bytes_ = std::max<size_t>(2048, (net::OverlayDatagramSize(mtu) + 63) / 64 * 64);
  const size_t buffers = dp->ports_.size() * (static_cast<size_t>(c.queue_packets) + 1) +
                         2 * static_cast<size_t>(c.batch_size) + 1;
  dp->arena_.assign(buffers * dp->buffer_bytes_, 0);
  dp->free_buffers_.reserve(buffers);
  for (size_t b = buffers; b-- > 0;) dp->free_buffers_.push_back(static_cast<uint32_t>(b));
  dp->recv_slots_.resize(static_cast<size_t>(c.batch_size));
  dp->recv_slot_bytes_ = c.udp_gro ? net::UdpSocket::kMaxGroBytes : dp->buffer_bytes_;
  dp->recv_arena_.assign(dp->recv_slots_.size() * dp->recv_slot_bytes_, 0);
  if (dp->tcp_coalescer_) dp->tun_super_.assign(net::TunDevice::kMaxSuperPacketBytes, 0);
  dp->tx_ = std::make_unique<TxBatch>(static_cast<size_t>(c.batch_size));
  dp->dirty_ports_.reserve(dp->ports_.size());
  return dp;
}

absl::Status Dataplane::Start() {
  MutexLock lock(&thread_mu_);
  if (thread_.joinable()) {
    return absl::FailedPreconditionError(
        fmt::format("data plane of node {}: already running", config_.node));
  }
  itimerspec spec{};
  const int64_t ns = config_.probe_interval.count();
  spec.it_interval.tv_sec = ns / 1000000000;
  spec.it_interval.tv_nsec = ns % 1000000000;
  spec.it_value = spec.it_interval;
  if (::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr) != 0) {
    return absl::ErrnoToStatus(errno, "data plane: timerfd_settime");
  }
  stop_.store(false);
  thread_ = std::thread([this] { Run(); });
  const std::string name = fmt::format("dar-dp{}", config_.node).substr(0, 15);
  ::pthread_setname_np(thread_.native_handle(), name.c_str());
  clockid_t clock;
  if (::pthread_getcpuclockid(thread_.native_handle(), &clock) == 0) {
    clock_id_.store(clock);
    has_clock_.store(true);
  }
  return absl::OkStatus();
}

void Dataplane::Stop() {
  MutexLock lock(&thread_mu_);
  if (!thread_.joinable()) return;
  stop_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
  itimerspec off{};
  ::timerfd_settime(timer_fd_.get(), 0, &off, nullptr);
}

void Dataplane::InstallTables(std::shared_ptr<const AgentTables> tables) {
  {
    MutexLock lock(&control_mu_);
    pending_tables_ = std::move(tables);
  }
  generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const AgentTables> Dataplane::tables() const {
  MutexLock lock(&control_mu_);
  return pending_tables_;
}

absl::Status Dataplane::SetKeys(const std::vector<KeyUpdate>& keys) {
  ASSIGN_OR_RETURN(std::shared_ptr<const net::OverlayKeyRing> ring, BuildKeyRing(keys));
  {
    MutexLock lock(&control_mu_);
    pending_keys_ = std::move(ring);
  }
  generation_.fetch_add(1, std::memory_order_release);
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));  // probes may start now
  return absl::OkStatus();
}

absl::Status Dataplane::SetForwarding(const ForwardingConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  {
    MutexLock lock(&control_mu_);
    pending_forwarding_ = config;
    ++forwarding_generation_;
  }
  generation_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Dataplane::SetProbeSettings(Duration interval, int missed_probes) {
  if (interval < Milliseconds(1) || interval > Seconds(60)) {
    return absl::InvalidArgumentError(
        fmt::format("probe interval {} ms: must be between 1 ms and 60 s", interval.count() / 1e6));
  }
  if (missed_probes < 1) {
    return absl::InvalidArgumentError(
        fmt::format("missed probes {}: must be at least 1", missed_probes));
  }
  {
    MutexLock lock(&control_mu_);
    pending_probe_ = {interval, missed_probes};
    ++probe_generation_;
  }
  generation_.fetch_add(1, std::memory_order_release);
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));  // re-arm the probe timer now
  return absl::OkStatus();
}

void Dataplane::SetLivenessCallback(std::function<void(NodeId neighbour, bool up)> callback) {
  {
    MutexLock lock(&control_mu_);
    pending_callback_ = std::move(callback);
  }
  generation_.fetch_add(1, std::memory_order_release);
}

std::vector<NeighbourSample> Dataplane::Samples(Time now) const {
  std::vector<NeighbourSample> out;
  out.reserve(ports_.size());
  MutexLock lock(&monitor_mu_);
  for (const auto& p : ports_) {
    NeighbourSample n;
    n.neighbour = p->config.neighbour;
    n.link = p->config.link;
    n.sample = p->monitor.Sample(now);
    n.sample.up = p->up.load(std::memory_order_relaxed);
    n.probes_sent = static_cast<uint64_t>(p->monitor.loss().sent());
    n.probes_answered = p->probes_answered.Get();
    out.push_back(n);
  }
  return out;
}

std::vector<bool> Dataplane::LinksUp() const {
  std::vector<bool> up;
  up.reserve(ports_.size());
  for (const auto& p : ports_) up.push_back(p->up.load(std::memory_order_relaxed));
  return up;
}

std::vector<uint64_t> Dataplane::SentBytesByDestination() const {
  std::vector<uint64_t> out(sent_to_.size());
  for (size_t i = 0; i < sent_to_.size(); ++i) out[i] = sent_to_[i].Get();
  return out;
}

DataplaneCounters Dataplane::counters() const {
  DataplaneCounters c;
  for (size_t i = 0; i < kDropReasons; ++i) c.drops[i] = drops_[i].Get();
  c.received = received_.Get();
  c.from_tun = from_tun_.Get();
  c.encapsulated = encapsulated_.Get();
  c.delivered = delivered_.Get();
  c.forwarded = forwarded_.Get();
  c.sent = sent_.Get();
  c.sent_bytes = sent_bytes_.Get();
  c.probes_sent = probes_sent_.Get();
  c.probe_replies_sent = probe_replies_sent_.Get();
  c.probe_replies_received = probe_replies_received_.Get();
  c.probe_replies_rejected = probe_replies_rejected_.Get();
  c.liveness_changes = liveness_changes_.Get();
  c.carrier_losses = carrier_losses_.Get();
  c.recv_errors = recv_errors_.Get();
  c.receive_batches = receive_batches_.Get();
  c.send_batches = send_batches_.Get();
  c.gso_messages = gso_messages_.Get();
  c.gro_slots = gro_slots_.Get();
  c.tun_super_reads = tun_super_reads_.Get();
  c.tun_super_writes = tun_super_writes_.Get();
  return c;
}

Duration Dataplane::thread_cpu_time() const {
  Duration total(thread_cpu_ns_.load());
  if (has_clock_.load()) {
    timespec ts;
    if (::clock_gettime(clock_id_.load(), &ts) == 0) {
      total += Duration(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
    }
  }
  return total;
}

std::vector<net::Ipv4Endpoint> Dataplane::local_endpoints() const {
  std::vector<net::Ipv4Endpoint> out;
  out.reserve(ports_.size());
  for (const auto& p : ports_) out.push_back(p->socket.local());
  return out;
}

Time Dataplane::WallNow() const {
  return config_.wall_clock ? config_.wall_clock() : ReadClock(CLOCK_REALTIME);
}

uint32_t Dataplane::TakeBuffer() {
  // The pool is sized so that this cannot fail (see Create).
  assert(!free_buffers_.empty());
  const uint32_t b = free_buffers_.back();
  free_buffers_.pop_back();
  return b;
}

void Dataplane::DropBuffer(DropReason reason, uint32_t buffer) {
  Drop(reason);
  GiveBuffer(buffer);
}

// The data-plane thread -----------------------------------------------------------------------

void Dataplane::EnterCreatorNamespace() {
  struct stat want {};
  struct stat have {};
  if (::fstat(netns_fd_.get(), &want) != 0 || ::stat("/proc/thread-self/ns/net", &have) != 0) {
    return;
  }
  if (want.st_ino == have.st_ino && want.st_dev == have.st_dev) return;
  // Needs CAP_SYS_ADMIN; without it qdisc statistics read NotFound and are not used (the
  // socket queue still is): what a data plane started from another namespace gets anyway.
  (void)::setns(netns_fd_.get(), CLONE_NEWNET);
}

void Dataplane::Run() {
  EnterCreatorNamespace();
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  while (!stop_.load(std::memory_order_relaxed)) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, kMaxEvents, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      // Cannot happen with a valid epoll descriptor; stop rather than spin.
      assert(false && "epoll_wait failed");
      break;
    }
    // Whatever was changed before these events arrived applies to them.
    ApplyControl();
    // Probes and replies first: their timestamps should not wait for a data batch. (A probe
    // socket's tag matches nothing in the second loop.)
    for (int i = 0; i < n; ++i) {
      const uint32_t tag = events[i].data.u32;
      if ((tag & ~kTagProbeSocket) < ports_.size() && (tag & kTagProbeSocket) != 0) {
        Port& port = *ports_[tag & ~kTagProbeSocket];
        ReceiveFrom(port, port.probe_socket);
      }
    }
    for (int i = 0; i < n; ++i) {
      const uint32_t tag = events[i].data.u32;
      if (tag == kTagWake) {
        uint64_t v;
        (void)!::read(wake_fd_.get(), &v, sizeof(v));
      } else if (tag == kTagTimer) {
        uint64_t expirations;
        if (::read(timer_fd_.get(), &expirations, sizeof(expirations)) > 0) OnProbeTick();
      } else if (tag == kTagTun) {
        ReadTun();
      } else if (tag == kTagNetlink) {
        ReadNetlink();
      } else if (tag < ports_.size()) {
        Port& port = *ports_[tag];
        if (events[i].events & (EPOLLIN | EPOLLERR)) ReceiveFrom(port, port.socket);
        if (events[i].events & EPOLLOUT) Flush(port);
      }
    }
    FlushDirty();
  }
  // Whatever is still queued is dropped; the buffers go back to the pool for a restart.
  for (auto& p : ports_) {
    while (p->count > 0) GiveBuffer(p->Pop().buffer);  // never a receive slot (KeepQueued)
    p->dirty = false;
    SetWritableInterest(*p, false);
  }
  dirty_ports_.clear();
  const int64_t self = ReadClock(CLOCK_THREAD_CPUTIME_ID).count();
  has_clock_.store(false);
  thread_cpu_ns_.fetch_add(self);
}

void Dataplane::ApplyControl() {
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (generation == applied_generation_) return;
  MutexLock lock(&control_mu_);
  active_tables_ = pending_tables_;
  active_keys_ = pending_keys_;
  active_callback_ = pending_callback_;
  if (forwarding_generation_ != applied_forwarding_generation_) {
    chooser_.set_config(pending_forwarding_);
    applied_forwarding_generation_ = forwarding_generation_;
  }
  if (probe_generation_ != applied_probe_generation_) {
    applied_probe_generation_ = probe_generation_;
    const auto [interval, missed] = pending_probe_;
    itimerspec spec{};
    spec.it_interval.tv_sec = interval.count() / 1000000000;
    spec.it_interval.tv_nsec = interval.count() % 1000000000;
    spec.it_value = spec.it_interval;
    ::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr);  // cannot fail for a valid spec
    MutexLock monitor_lock(&monitor_mu_);
    for (auto& p : ports_) {
      p->liveness.set_missed_probes(missed);
      p->monitor.set_sample_period(interval);
    }
  }
  applied_generation_ = generation;
}

void Dataplane::OnProbeTick() {
  const net::OverlayKey* key = active_keys_ ? active_keys_->current() : nullptr;
  if (key == nullptr) return;  // nothing can be sealed yet; liveness is not judged either
  const Time now = SteadyNow();
  for (auto& pp : ports_) {
    Port& p = *pp;
    const uint64_t seq = p.next_seq++;
    if (p.liveness.OnProbeSent(seq)) SetPortUp(p, p.liveness.up());
    const Time t1 = WallNow();
    int outq = 0;
    if (::ioctl(p.socket.fd(), SIOCOUTQ, &outq) != 0) outq = 0;
    // Below the socket, a shaped link queues in its interface's qdisc. The socket's own
    // datagrams there count in SIOCOUTQ too (as memory), others' only in the backlog: the
    // larger of the two, never their sum.
    const absl::StatusOr<QdiscStats> qdisc = ReadRootQdiscStats(p.ifindex);
    const int64_t below = std::max<int64_t>(outq, qdisc.ok() ? qdisc->backlog_bytes : 0);
    {
      MutexLock lock(&monitor_mu_);
      p.monitor.OnProbeSent(seq, t1);
      p.monitor.OnCounters(now, p.Delivered(qdisc), p.queued_bytes + below);
    }
    probes_sent_.Add();
    net::OverlayHeader h;
    h.type = net::OverlayType::kProbe;
    h.hop_limit = 1;
    h.source = static_cast<uint32_t>(config_.node);
    h.destination = static_cast<uint32_t>(p.config.neighbour);
    SendProbe(p, h, net::EncodeProbe(net::ProbeBody{seq, t1}), *key);
  }
}

void Dataplane::SendProbe(Port& port, const net::OverlayHeader& header,
                          absl::Span<const uint8_t> body, const net::OverlayKey& key) {
  std::array<uint8_t, 256> datagram;
  const absl::StatusOr<size_t> size = net::SealOverlay(header, body, key, absl::MakeSpan(datagram));
  assert(size.ok());
  ssize_t n;
  do {
    n = ::sendto(port.probe_socket.fd(), datagram.data(), *size, MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&port.peer_address), sizeof(port.peer_address));
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    if (LinkDownErrno(err)) {
      Drop(DropReason::kSendError);
      LinkFailed(port);
    } else {
      // EAGAIN, ENOBUFS: the probe socket's own few hundred bytes cannot fill its buffer, so
      // the qdisc refused it; that is loss, for the estimators to count.
      Drop(err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS ? DropReason::kQueueFull
                                                                 : DropReason::kSendError);
    }
    return;
  }
  sent_.Add();
  sent_bytes_.Add(*size);
  port.tx_wire_bytes.Add(*size + kUnderlayHeaderBytes);
}

void Dataplane::ReceiveFrom(Port& port, net::UdpSocket& socket) {
  const size_t batch = recv_slots_.size();
  for (int round = 0; round < kBatchesPerWake; ++round) {
    for (size_t i = 0; i < batch; ++i) {
      recv_slots_[i] = net::RecvSlot(
          absl::MakeSpan(recv_arena_.data() + i * recv_slot_bytes_, recv_slot_bytes_));
    }
    absl::StatusOr<int> got = socket.RecvBatch(absl::MakeSpan(recv_slots_));
    const size_t n = got.ok() ? static_cast<size_t>(*got) : 0;
    if (!got.ok()) recv_errors_.Add();
    const Time wall_rx = n > 0 ? WallNow() : Time(0);
    const Time now = n > 0 ? SteadyNow() : Time(0);
    if (n > 0) receive_batches_.Add();
    // Datagrams are authenticated kOverlayParseBatch at a time (their tags side by side: the
    // datagrams of a GRO slot, or equal-size ones of several slots), then handled one by one in
    // order; what they produced is sent every kFlushDatagrams or so.
    std::array<uint8_t*, net::kOverlayParseBatch> data;
    std::array<size_t, net::kOverlayParseBatch> sizes;
    size_t pending = 0;
    size_t unflushed = 0;
    const auto handle_pending = [&] {
      if (pending > 0) HandleDatagrams(port, data.data(), sizes.data(), pending, wall_rx, now);
      pending = 0;
      if (unflushed >= kFlushDatagrams) {
        FlushDirty();
        FlushDelivery();
        unflushed = 0;
      }
    };
    for (size_t i = 0; i < n; ++i) {
      net::RecvSlot& slot = recv_slots_[i];
      if (slot.truncated) {
        received_.Add();
        Drop(DropReason::kTruncated);
        continue;
      }
      if (slot.segment_size > 0) gro_slots_.Add();
      net::ForEachDatagram(slot, [&](size_t offset, size_t size) {
        received_.Add();
        ++unflushed;
        // Longer than a pool buffer: the peer's MTU is larger than ours.
        if (size > buffer_bytes_) {
          Drop(DropReason::kTruncated);
          return;
        }
        data[pending] = slot.buffer.data() + offset;
        sizes[pending++] = size;
        if (pending == data.size()) handle_pending();
      });
    }
    handle_pending();
    FlushDirty();
    FlushDelivery();
    KeepQueued();
    if (n < batch) break;
  }
}

void Dataplane::HandleDatagrams(Port& in, uint8_t* const* data, const size_t* sizes, size_t n,
                                Time wall_rx, Time now) {
  // Without keys nothing authenticates: the structure is judged against an empty ring.
  static const net::OverlayKeyRing kNoKeys;
  std::array<absl::Span<const uint8_t>, net::kOverlayParseBatch> spans;
  std::array<net::OverlayStatus, net::kOverlayParseBatch> statuses;
  std::array<net::OverlayPacket, net::kOverlayParseBatch> packets;
  for (size_t i = 0; i < n; ++i) spans[i] = absl::MakeConstSpan(data[i], sizes[i]);
  net::ParseOverlayBatch(absl::MakeConstSpan(spans.data(), n),
                         active_keys_ ? *active_keys_ : kNoKeys, statuses.data(), packets.data());
  for (size_t i = 0; i < n; ++i) {
    HandleDatagram(in, data[i], sizes[i], statuses[i], packets[i], wall_rx, now);
  }
}

void Dataplane::HandleDatagram(Port& in, uint8_t* data, size_t size, net::OverlayStatus status,
                               const net::OverlayPacket& packet, Time wall_rx, Time now) {
  if (status != net::OverlayStatus::kOk) {
    Drop(DropReasonFor(status));
    return;
  }
  switch (packet.header.type) {
    case net::OverlayType::kProbe:
      HandleProbe(in, packet, wall_rx);
      return;
    case net::OverlayType::kProbeReply:
      HandleProbeReply(in, packet, wall_rx);
      return;
    case net::OverlayType::kData:
      break;
  }
  if (packet.header.destination == static_cast<uint32_t>(config_.node)) {
    Deliver(packet.payload);
    return;
  }
  Route(kNoBuffer, data, size, packet.header, /*transit=*/true, now);
}

void Dataplane::HandleProbe(Port& in, const net::OverlayPacket& packet, Time wall_rx) {
  if (packet.header.source != static_cast<uint32_t>(in.config.neighbour) ||
      packet.header.destination != static_cast<uint32_t>(config_.node)) {
    Drop(DropReason::kBadProbe);
    return;
  }
  const absl::StatusOr<net::ProbeBody> probe = net::DecodeProbe(packet.payload);
  const net::OverlayKey* key = active_keys_->current();
  if (!probe.ok() || key == nullptr) {
    Drop(probe.ok() ? DropReason::kNoKey : DropReason::kBadLength);
    return;
  }
  net::OverlayHeader h;
  h.type = net::OverlayType::kProbeReply;
  h.hop_limit = 1;
  h.source = static_cast<uint32_t>(config_.node);
  h.destination = packet.header.source;
  probe_replies_sent_.Add();
  SendProbe(
      in, h,
      net::EncodeProbeReply(net::ProbeReplyBody{probe->sequence, probe->t1, wall_rx, WallNow()}),
      *key);
}

void Dataplane::HandleProbeReply(Port& in, const net::OverlayPacket& packet, Time wall_rx) {
  if (packet.header.source != static_cast<uint32_t>(in.config.neighbour) ||
      packet.header.destination != static_cast<uint32_t>(config_.node)) {
    Drop(DropReason::kBadProbe);
    return;
  }
  const absl::StatusOr<net::ProbeReplyBody> reply = net::DecodeProbeReply(packet.payload);
  if (!reply.ok()) {
    Drop(DropReason::kBadLength);
    return;
  }
  bool counted;
  {
    MutexLock lock(&monitor_mu_);
    const std::optional<Time> sent_at = in.monitor.loss().SentAt(reply->sequence);
    const bool echo_matches = sent_at.has_value() && *sent_at == reply->t1;
    const absl::Status s =
        in.monitor.OnProbeReply(reply->sequence, reply->t1, reply->t2, reply->t3, wall_rx);
    // A reply with unusable timestamps still counts for loss and liveness; one that echoes the
    // wrong t1, a duplicate or one that is too late does not.
    counted = echo_matches && (s.ok() || absl::IsInvalidArgument(s));
    if (!s.ok()) probe_replies_rejected_.Add();
  }
  if (!counted) return;
  probe_replies_received_.Add();
  in.probes_answered.Add();
  if (in.liveness.OnReply(reply->sequence)) SetPortUp(in, in.liveness.up());
}

void Dataplane::Deliver(absl::Span<const uint8_t> payload) {
  if (!tun_) {
    Drop(DropReason::kNoTun);
    return;
  }
  if (payload.size() < net::kIpv4HeaderBytes || (payload[0] >> 4) != 4) {
    Drop(DropReason::kNotIpv4);
    return;
  }
  if (tcp_coalescer_) {
    // TCP segments and UDP datagrams of a flow wait to be written as one super-packet
    // (FlushDelivery, at the latest at the end of the receive batch); anything else goes out
    // at once, after what waits, so that the order of packets is kept.
    const auto join = [&] {
      return tcp_coalescer_->Add(payload) || (udp_coalesce_ && udp_coalescer_->Add(payload));
    };
    if (join()) return;
    FlushDelivery();
    if (join()) return;
  }
  const absl::StatusOr<bool> written = tun_->Write(payload);
  if (!written.ok() || !*written) {
    Drop(DropReason::kTunWrite);
    return;
  }
  delivered_.Add();
}

void Dataplane::FlushDelivery() {
  const auto flush = [&](auto& coalescer) {
    if (coalescer.empty()) return;
    const int segments = coalescer.segments();
    net::OffloadInfo info;
    const absl::Span<const uint8_t> packet = coalescer.Take(&info);
    const absl::StatusOr<bool> written = tun_->Write(packet, info);
    if (!written.ok() || !*written) {
      drops_[static_cast<size_t>(DropReason::kTunWrite)].Add(static_cast<uint64_t>(segments));
      // A kernel without UDP segmentation offload for TUN writes (before 6.2) refuses them:
      // this batch is lost, and from now on datagrams are written one by one.
      if (!written.ok() && info.gso == net::OffloadInfo::Gso::kUdp) udp_coalesce_ = false;
      return;
    }
    delivered_.Add(static_cast<uint64_t>(segments));
    if (segments > 1) tun_super_writes_.Add();
  };
  if (!tcp_coalescer_) return;
  flush(*tcp_coalescer_);
  flush(*udp_coalescer_);
}

void Dataplane::ReadTun() {
  const size_t room = buffer_bytes_ - net::kOverlayOverheadBytes;
  const Time now = SteadyNow();
  for (size_t i = 0; i < recv_slots_.size(); ++i) {
    const uint32_t b = TakeBuffer();
    uint8_t* inner = BufferData(b) + net::kOverlayHeaderBytes;
    net::OffloadInfo info;
    // An offload device's packet fills the pool buffer and spills into tun_super_ past the
    // same number of bytes, so that a super-packet is whole there after one short copy.
    const absl::StatusOr<size_t> n =
        tun_->offload()
            ? tun_->Read(absl::MakeSpan(inner, room),
                         absl::MakeSpan(tun_super_).subspan(std::min(room, tun_super_.size())),
                         &info)
            : tun_->Read(absl::MakeSpan(inner, room));
    if (!n.ok() || *n == 0) {
      if (!n.ok()) recv_errors_.Add();
      GiveBuffer(b);
      break;
    }
    from_tun_.Add();
    if (info.gso == net::OffloadInfo::Gso::kNone) {
      if (*n > room || !net::CompleteChecksum(absl::MakeSpan(inner, *n), info)) {
        DropBuffer(DropReason::kBadOffload, b);
        continue;
      }
      const size_t size = *n;
      EncapsulateBatch(&b, &size, 1, now);
      continue;
    }
    // A super-packet: segment it into pool buffers, each sealed and routed on its own.
    std::memcpy(tun_super_.data(), inner, std::min(*n, room));
    GiveBuffer(b);
    const absl::StatusOr<net::TcpSuperPacket> sp =
        net::ParseTcpSuperPacket(absl::MakeConstSpan(tun_super_.data(), *n), info);
    if (!sp.ok() || sp->max_segment_bytes() > room) {
      Drop(DropReason::kBadOffload);
      continue;
    }
    tun_super_reads_.Add();
    // Sealed in chunks, their tags side by side; a chunk takes at most the buffers free (the
    // pool keeps at least one free for every packet in flight, see Create).
    std::array<uint32_t, net::kOverlayParseBatch> segments;
    std::array<size_t, net::kOverlayParseBatch> sizes;
    for (int s = 0; s < sp->segments;) {
      const size_t chunk = std::min({segments.size(), static_cast<size_t>(sp->segments - s),
                                     std::max<size_t>(free_buffers_.size(), 1)});
      for (size_t k = 0; k < chunk; ++k, ++s) {
        segments[k] = TakeBuffer();
        sizes[k] = net::WriteTcpSegment(
            *sp, s, absl::MakeSpan(BufferData(segments[k]) + net::kOverlayHeaderBytes, room));
      }
      EncapsulateBatch(segments.data(), sizes.data(), chunk, now);
    }
    // A super-packet is a GSO message's worth already: send it before reading the next.
    FlushDirty();
  }
  FlushDirty();
}

void Dataplane::EncapsulateBatch(const uint32_t* buffers, const size_t* sizes, size_t n, Time now) {
  const net::OverlayKey* key = active_keys_ ? active_keys_->current() : nullptr;
  std::array<uint32_t, net::kOverlayParseBatch> kept;
  std::array<uint8_t*, net::kOverlayParseBatch> data;
  std::array<size_t, net::kOverlayParseBatch> sealed;
  std::array<net::OverlayHeader, net::kOverlayParseBatch> headers;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = buffers[i];
    const absl::Span<const uint8_t> packet(BufferData(b) + net::kOverlayHeaderBytes, sizes[i]);
    IngressPacket in;
    if (!ClassifyIngress(packet, &in)) {
      DropBuffer(DropReason::kNotIpv4, b);
      continue;
    }
    const auto it = node_of_address_.find(in.destination.value);
    if (it == node_of_address_.end()) {
      DropBuffer(DropReason::kUnknownDestination, b);
      continue;
    }
    if (it->second == config_.node) {
      DropBuffer(DropReason::kLocalDestination, b);
      continue;
    }
    if (key == nullptr) {
      DropBuffer(DropReason::kNoKey, b);
      continue;
    }
    net::OverlayHeader& h = headers[m];
    h = net::OverlayHeader{};
    h.type = net::OverlayType::kData;
    h.traffic_class = in.traffic_class;
    h.hop_limit = static_cast<uint8_t>(config_.hop_limit);
    h.source = static_cast<uint32_t>(config_.node);
    h.destination = static_cast<uint32_t>(it->second);
    h.flow_hash = in.flow_hash;
    sent_to_[static_cast<size_t>(it->second)].Add(sizes[i]);
    const absl::StatusOr<size_t> size =
        net::SealOverlayHeader(h, packet, *key, absl::MakeSpan(BufferData(b), buffer_bytes_));
    assert(size.ok());
    kept[m] = b;
    data[m] = BufferData(b);
    sealed[m++] = *size;
  }
  if (m == 0) return;
  net::TagSealedOverlays(*key, data.data(), sealed.data(), m);
  for (size_t j = 0; j < m; ++j) {
    encapsulated_.Add();
    Route(kept[j], data[j], sealed[j], headers[j], /*transit=*/false, now);
  }
}

void Dataplane::Route(uint32_t buffer, uint8_t* data, size_t size, const net::OverlayHeader& header,
                      bool transit, Time now) {
  if (!active_tables_) {
    DropBuffer(DropReason::kNoRoute, buffer);
    return;
  }
  const NodeId destination = static_cast<NodeId>(header.destination);
  const absl::Span<const NextHop> hops =
      active_tables_->Lookup(static_cast<int>(header.traffic_class), destination);
  const LinkId link = chooser_.Choose(hops, header.flow_hash, destination, now, rng_,
                                      PortView{this}, static_cast<int>(header.traffic_class));
  if (link == kNoLink) {
    DropBuffer(DropReason::kNoRoute, buffer);
    return;
  }
  if (transit) {
    const net::OverlayStatus s = net::ForwardOverlay(absl::MakeSpan(data, size));
    if (s != net::OverlayStatus::kOk) {
      DropBuffer(DropReasonFor(s), buffer);
      return;
    }
    forwarded_.Add();
  }
  Enqueue(*ports_[static_cast<size_t>(port_of_link_[static_cast<size_t>(link)])], data, size,
          buffer);
}

void Dataplane::Enqueue(Port& port, uint8_t* data, size_t size, uint32_t buffer) {
  if (port.count == port.queue.size()) Flush(port);
  if (port.count == port.queue.size()) {
    DropBuffer(DropReason::kQueueFull, buffer);
    return;
  }
  port.Push(data, static_cast<uint32_t>(size), buffer);
  if (!port.dirty) {
    port.dirty = true;
    dirty_ports_.push_back(port.index);
  }
}

void Dataplane::KeepQueued() {
  for (auto& pp : ports_) {
    Port& port = *pp;
    for (size_t i = 0; port.in_slots > 0 && i < port.count; ++i) {
      Port::Queued& q = port.at(i);
      if (q.buffer != kNoBuffer) continue;
      // The pool holds a buffer for every queue place (see Create); the size was checked
      // against buffer_bytes_ on receipt.
      const uint32_t b = TakeBuffer();
      std::memcpy(BufferData(b), q.data, q.size);
      q.data = BufferData(b);
      q.buffer = b;
      --port.in_slots;
    }
  }
}

void Dataplane::Flush(Port& port) {
  TxBatch& tx = *tx_;
  while (port.count > 0) {
    // One message per run of equal-size datagrams (a shorter one may end a run, as UDP GSO
    // allows), or per datagram without GSO.
    size_t messages = 0, datagrams = 0;
    while (datagrams < port.count && messages < tx.msgs.size() &&
           datagrams < TxBatch::kMaxDatagrams) {
      const uint32_t size = port.at(datagrams).size;
      size_t run = 1;
      if (port.gso) {
        const size_t limit =
            std::min({TxBatch::kMaxGsoSegments, TxBatch::kMaxGsoBytes / std::max<uint32_t>(size, 1),
                      TxBatch::kMaxDatagrams - datagrams, port.count - datagrams});
        while (run < limit && port.at(datagrams + run).size == size) ++run;
        if (run < limit && port.at(datagrams + run).size < size) ++run;
      }
      for (size_t k = 0; k < run; ++k) {
        const Port::Queued& q = port.at(datagrams + k);
        tx.iovs[datagrams + k] = iovec{q.data, q.size};
      }
      msghdr& h = tx.msgs[messages].msg_hdr;
      h = msghdr{};
      h.msg_name = &port.peer_address;
      h.msg_namelen = sizeof(port.peer_address);
      h.msg_iov = &tx.iovs[datagrams];
      h.msg_iovlen = run;
      if (run > 1) {
        net::AttachUdpSegment(h, tx.controls[messages], static_cast<uint16_t>(size));
      }
      tx.runs[messages] = static_cast<uint32_t>(run);
      ++messages;
      datagrams += run;
    }
    int sent;
    do {
      sent = ::sendmmsg(port.socket.fd(), tx.msgs.data(), static_cast<unsigned>(messages),
                        MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
        SetWritableInterest(port, true);
        return;
      }
      if (LinkDownErrno(err)) {
        LinkFailed(port);
        return;
      }
      if (tx.runs[0] > 1) {
        // The path cannot segment (EINVAL, EIO, ...): one datagram per message from now on.
        port.gso = false;
        continue;
      }
      // The first datagram was refused.
      DropBuffer(DropReason::kSendError, port.Pop().buffer);
      continue;
    }
    for (int m = 0; m < sent; ++m) {
      if (tx.runs[m] > 1) gso_messages_.Add();
      for (uint32_t k = 0; k < tx.runs[m]; ++k) {
        const Port::Queued q = port.Pop();
        sent_.Add();
        sent_bytes_.Add(q.size);
        port.tx_wire_bytes.Add(q.size + kUnderlayHeaderBytes);
        GiveBuffer(q.buffer);
      }
    }
    send_batches_.Add();
  }
  SetWritableInterest(port, false);
}

void Dataplane::FlushDirty() {
  for (const int p : dirty_ports_) {
    Port& port = *ports_[static_cast<size_t>(p)];
    port.dirty = false;
    if (!port.want_writable) Flush(port);  // else: wait until epoll says it is writable
  }
  dirty_ports_.clear();
}

void Dataplane::SetWritableInterest(Port& port, bool want) {
  if (port.want_writable == want) return;
  port.want_writable = want;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
  ev.data.u32 = static_cast<uint32_t>(port.index);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, port.socket.fd(), &ev);
}

void Dataplane::ReadNetlink() {
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(netlink_fd_.get(), buf, sizeof(buf), 0);
    if (n <= 0) return;  // EAGAIN, or ENOBUFS after an overflow: probes still cover the links
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) continue;
      const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
      const bool carrier = h->nlmsg_type == RTM_NEWLINK && (info->ifi_flags & IFF_UP) &&
                           (info->ifi_flags & kIffLowerUp);
      if (carrier) continue;  // coming back is for the probes to confirm
      for (auto& port : ports_) {
        if (port->ifindex != 0 && port->ifindex == static_cast<unsigned>(info->ifi_index)) {
          carrier_losses_.Add();
          LinkFailed(*port);
        }
      }
    }
  }
}

void Dataplane::LinkFailed(Port& port) {
  // Everything queued would meet the same error.
  while (port.count > 0) DropBuffer(DropReason::kSendError, port.Pop().buffer);
  if (port.liveness.OnSendError()) SetPortUp(port, false);
}

void Dataplane::SetPortUp(Port& port, bool up) {
  port.up_local = up;
  port.up.store(up, std::memory_order_relaxed);
  liveness_changes_.Add();
  if (active_callback_) active_callback_(port.config.neighbour, up);
}

}  // namespace dar::agent
