// The data plane's insides, shared by its files (dataplane.cc: creation, the control surface,
// the loop and probing; dataplane_forward.cc: the per-packet path; dataplane_config.cc: the
// configuration and the classification of packets). Not part of the agent's API.
#ifndef DAR_AGENT_DATAPLANE_INTERNAL_H_
#define DAR_AGENT_DATAPLANE_INTERNAL_H_

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/dataplane.h"
#include "agent/qdisc_stats.h"
#include "base/mutex.h"
#include "core/telemetry.h"
#include "net/udp_socket.h"

namespace dar::agent {

// IPv4 and UDP headers around every overlay datagram on the underlay.
inline constexpr int64_t kUnderlayHeaderBytes = 28;

// Whether a send's errno says the link itself is gone (its interface down or its peer
// unreachable): the link fails at once, whatever was being sent.
inline bool LinkDownErrno(int err) {
  return err == ENETDOWN || err == ENETUNREACH || err == EHOSTUNREACH || err == EHOSTDOWN ||
         err == EADDRNOTAVAIL;
}

inline Time ReadClock(clockid_t id) {
  timespec ts;
  ::clock_gettime(id, &ts);
  return Time(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
}

inline Time SteadyNow() { return ReadClock(CLOCK_MONOTONIC); }

// The key ring of `keys` for node config.node, by NodeId (config.wire_ids): ids distinct,
// exactly one active. Pair keys of wire ids the config does not know are left out. Errors:
// InvalidArgument naming the rule broken.
absl::StatusOr<std::shared_ptr<const net::OverlayKeyRing>> BuildKeyRing(
    const std::vector<KeyUpdate>& keys, const DataplaneConfig& config);

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
  // The data-plane thread writes the monitor, Samples reads it from the caller's thread.
  mutable Mutex monitor_mu;
  LinkMonitor monitor ABSL_GUARDED_BY(monitor_mu);
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
  DataRate capacity(LinkId link) const {
    const Port* p = Find(link);
    return p == nullptr ? DataRate() : p->config.capacity;
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

}  // namespace dar::agent

#endif  // DAR_AGENT_DATAPLANE_INTERNAL_H_
