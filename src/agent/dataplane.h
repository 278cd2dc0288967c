// The agent's data plane: one thread that carries the overlay between this node's TUN device
// and its links to the neighbours, probes every neighbour, and keeps the link estimators.
//
//   TUN ──read──▶ classify (destination node, class from DSCP, flow hash) ──▶ seal ──┐
//                                                                                     ▼
//   link socket ──recvmmsg──▶ authenticate ──▶ for this node: write to the TUN    choose next
//                                         ├──▶ otherwise: hop limit - 1 ─────────▶ hop ──▶ queue
//                                         ├──▶ probe: reply at once                       │
//                                         └──▶ probe reply: estimators, liveness    sendmmsg ◀┘
//
// Every neighbour link has its own UDP socket bound to this node's end of the link, and a second
// one on the same address and port for probes and replies: the kernel steers them there on
// arrival, so that a link flooded beyond what the agent can forward still answers its probes
// (busy shows in the estimators, not as a dead link). Every probe_interval each link gets a
// four-timestamp probe; the replies feed a core LinkMonitor
// (two-way delay, loss window, RTT EWMA and P95, throughput) and a core LinkLiveness. A neighbour
// that misses `liveness.missed_probes` probes in a row, or whose socket reports the network down or
// unreachable, is down at once: the next-hop chooser skips its link, so traffic moves to the
// other next hops of the table without waiting for the controller (fast failover).
//
// Threads: the data-plane thread (Start/Stop) owns the sockets, the TUN, the buffers and the
// chooser. Everything else in the public API may be called from any thread; new tables, keys
// and forwarding settings are picked up by the data-plane thread before its next batch.
//
// Per packet nothing is allocated: datagrams live in a fixed pool of buffers, are received in
// batches (recvmmsg), encapsulated (or their hop limit decremented) in place, and sent in
// batches (sendmmsg, each run of equal-size datagrams to a neighbour as one UDP GSO message).
//
// Offloads, as a NIC driver and a real overlay (WireGuard's TUN offloads) use them, so that
// the kernel handles super-packets of up to 64 KB instead of MTU-size packets:
//   - link sockets receive with UDP GRO: a neighbour's GSO message arrives whole in one receive
//     slot, is checked, hop-limited and routed datagram by datagram in place, and goes out again
//     as GSO messages straight from the receive buffer (only what a full socket leaves queued
//     is copied into the pool);
//   - the TUN is an offload device (net/tun.h): local TCP hands the data plane 64 KB
//     super-packets, which it segments into MTU-size packets itself (net/tun_offload.h) before
//     sealing each; on the way out, in-order TCP segments of a flow from one receive batch are
//     joined into one super-packet and written with one call, and so are equal-size UDP
//     datagrams of a flow (UDP segmentation offload).
// Every datagram is still authenticated, counted and routed on its own.
#ifndef DAR_AGENT_DATAPLANE_H_
#define DAR_AGENT_DATAPLANE_H_

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "agent/agent_tables.h"
#include "base/mutex.h"
#include "core/link_liveness.h"
#include "core/next_hop_chooser.h"
#include "core/random.h"
#include "core/routing_table.h"
#include "core/telemetry.h"
#include "core/topology.h"
#include "core/units.h"
#include "net/ip_packet.h"
#include "net/overlay_header.h"
#include "net/scoped_fd.h"
#include "net/tun.h"
#include "net/tun_offload.h"
#include "net/udp_socket.h"

namespace dar::agent {

// Why the data plane dropped a packet; one counter per reason (DataplaneCounters::drops).
enum class DropReason : uint8_t {
  // A datagram from a link that ParseOverlay (or ForwardOverlay) refused, same meaning.
  kTooShort,
  kBadVersion,
  kUnknownType,
  kBadTrafficClass,
  kBadLength,
  kUnknownKeyId,
  kBadHopTag,
  kBadTag,
  kHopLimitExhausted,
  kReplayed,   // addressed to this node, with a sequence number it has seen (or too old)
  kTruncated,  // a datagram longer than the receive buffer (the peer's MTU is larger)
  kBadProbe,   // a probe or reply whose source or destination node does not fit its link
  kNoKey,      // nothing to seal with: no key has been set yet
  kNoRoute,    // no table, no row for the destination, or none of its next hops forwardable
  kNotIpv4,    // from the TUN: not an IPv4 packet; for the TUN: the payload is not IPv4
  kUnknownDestination,  // from the TUN: the destination address is no overlay node's
  kLocalDestination,    // from the TUN: addressed to this node's own overlay address
  kNoTun,      // addressed to this node, which has no TUN device (a transit-only data plane)
  kTunWrite,   // the TUN device did not take the packet (full, or it refused it)
  kQueueFull,  // the link's transmit queue was full
  kSendError,  // the kernel refused the datagram (e.g. the link's interface is down)
  // From the TUN: a packet the kernel left for the data plane to finish (segment, checksum)
  // that it cannot: not TCP/IPv4 segmentation, lengths or offsets that do not fit, segments
  // larger than the TUN's MTU.
  kBadOffload,
  kCount
};
inline constexpr size_t kDropReasons = static_cast<size_t>(DropReason::kCount);

// A short snake_case name ("bad_tag", "no_route", ...) for metrics and logs.
std::string_view DropReasonName(DropReason reason);
// The drop reason for a datagram ParseOverlay or ForwardOverlay refused.
// REQUIRES: status is neither kOk nor kCount.
DropReason DropReasonFor(net::OverlayStatus status);

// The traffic class of an IPv4 packet from its type-of-service byte: DSCP CS1 (8, "lower
// effort") is bulk, every other code point latency. The ECN bits are ignored.
net::TrafficClass TrafficClassFromTos(uint8_t tos);

// What the data plane reads of a packet that arrives from the TUN device.
struct IngressPacket {
  net::Ipv4Address destination;
  net::TrafficClass traffic_class = net::TrafficClass::kLatency;
  uint32_t flow_hash = 0;  // net::FlowHash of the packet
};
// Fills `*out` and returns true for an IPv4 packet of at least a header's length whose header
// length and total length fit `packet`; false otherwise (the packet is dropped as kNotIpv4).
// Never reads outside `packet`; no allocation.
bool ClassifyIngress(absl::Span<const uint8_t> packet, IngressPacket* out);

// A pair key of this node's row: the one it shares with the node of wire id `node_id`.
struct PeerKey {
  uint32_t node_id = 0;
  net::OverlayKeyBytes key{};
};

// A data-plane key epoch `id` (net/overlay_header.h), and whether new packets are sealed with
// it (the others are still accepted, for rotation). Either this node's row of pair keys
// (`row` set, `peers`: what the controller hands each agent in AgentConfig.keys), or the
// epoch's secret `key`, from which the node derives its row itself: the bootstrap key of the
// agent's config file, which every node holds until the controller rotates it away.
struct KeyUpdate {
  uint32_t id = 0;
  net::OverlayKeyBytes key{};
  bool active = false;
  bool row = false;
  std::vector<PeerKey> peers;
};

// One link from this node to a neighbour, over the underlay.
struct NeighbourLinkConfig {
  NodeId neighbour = kNoNode;
  // The link this node -> neighbour in the data plane's topology: what the tables name.
  LinkId link = kNoLink;
  // The socket is bound here (this node's address on the link; port 7000 by default, 0 picks
  // a free port) and sends to `peer`, the neighbour's socket on the same link.
  net::Ipv4Endpoint local;
  net::Ipv4Endpoint peer;
  // The underlay interface of this end; for messages only.
  std::string interface;
  // For utilisation; zero = unknown (utilisation is then reported as 0).
  DataRate capacity;
};

// Everything a Dataplane is built from. Plain values; Validate() checks them.
struct DataplaneConfig {
  // This node, a NodeId of `topology`.
  NodeId node = kNoNode;
  // Every node of the lab and every link, both directions: NextHop.link and
  // NeighbourLinkConfig.link are its LinkIds. Must outlive the Dataplane.
  const Topology* topology = nullptr;
  // Each node's overlay address (the address of its TUN), indexed by NodeId; one per node of
  // the topology, all different.
  std::vector<net::Ipv4Address> overlay_addresses;
  // Each node's wire id (what certificates and the controller name it by, and what pair keys
  // are derived from and named by), indexed by NodeId; all different. Empty: a node's wire id
  // is its NodeId.
  std::vector<uint32_t> wire_ids;
  // This node's links; at most one entry per LinkId.
  std::vector<NeighbourLinkConfig> neighbours;
  // The TUN device (name, mtu, this node's overlay address and prefix). An empty name means no
  // TUN: a transit-only data plane, which forwards and probes but delivers nothing locally.
  // Every agent of an overlay must use the same MTU.
  net::TunConfig tun;
  // Probes per link: one every probe_interval. When a neighbour is down, and up again:
  // core/link_liveness.h.
  Duration probe_interval = Milliseconds(100);
  LinkLivenessConfig liveness;
  // How traffic is spread over a table's next hops; changed later with SetForwarding.
  ForwardingConfig forwarding;
  // The hop limit of packets entering the overlay here (1..255).
  int hop_limit = 64;
  // Keys to start with (optional: AgentConfig brings them later through SetKeys). When not
  // empty, exactly one must be active. Until a key is set nothing is sent, probes included.
  std::vector<KeyUpdate> initial_keys;
  // Sequence numbers (net::OverlaySequencer) start from this time in milliseconds if the wall
  // clock is behind it (agent/sequence_floor.h): a node restarted with its clock set back
  // still begins above what its peers accepted before. 0: the clock alone.
  uint64_t sequence_floor_ms = 0;
  // Datagrams per recvmmsg / sendmmsg and packets per TUN read burst (1..1024). With udp_gro a
  // receive slot holds up to 64 KB (batch_size * 64 KB of receive buffer).
  int batch_size = 32;
  // Datagrams waiting to be sent per link before new ones are dropped (kQueueFull).
  int queue_packets = 256;
  // SO_RCVBUF / SO_SNDBUF of every link socket (raised beyond the sysctl cap when running
  // with CAP_NET_ADMIN); 0 keeps the kernel's default.
  int socket_buffer_bytes = 4 << 20;
  // Send each run of equal-size datagrams queued for a link as one UDP GSO message
  // (UDP_SEGMENT): one trip through the kernel's stack instead of one per datagram. A link
  // whose path refuses it falls back to a message per datagram.
  bool udp_gso = true;
  // Receive with UDP GRO on every link socket (UdpSocket::EnableGro): what a neighbour sent as
  // one GSO message is received as one. A kernel without it receives datagram by datagram.
  bool udp_gro = true;
  // Open the TUN as an offload device (TunConfig::offload; tun.offload is ignored): TCP
  // super-packets from local applications, joined TCP segments toward them.
  bool tun_offload = true;
  // Seeds the chooser's hash salt and its random draws (logged by the caller).
  uint64_t seed = 1;
  // The clock of probe timestamps (t1..t4 of the four-timestamp method). Default:
  // CLOCK_REALTIME, so that the peer offset is meaningful.
  std::function<Time()> wall_clock;

  // OK, or InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// What the data plane measures about one neighbour link (LinkSample in agent.proto).
struct NeighbourSample {
  NodeId neighbour = kNoNode;
  LinkId link = kNoLink;
  // What the port's LinkMonitor measured at the `now` given to Samples(), with `up` the
  // port's LinkLiveness (or carrier) verdict. Its throughput is what was delivered on the
  // link: overlay datagrams with IPv4 and UDP headers sent, or, while the interface's root
  // qdisc (a shaper) holds a queue or drops, what left that qdisc. Its queue is the data
  // plane's own plus the larger of the socket's send queue and the interface's qdisc backlog
  // (where a shaped link queues; qdisc_stats.h).
  LinkSample sample;
  uint64_t probes_sent = 0;
  uint64_t probes_answered = 0;
};

// The data plane's event counters, each once: X(name, what it counts). The list generates the
// snapshot's fields (DataplaneCounters), the live counters the data-plane thread adds to, the
// copy between them and the names they are exported under (DataplaneCounters::ForEach), as
// Envoy's stats macros do.
#define DAR_DATAPLANE_COUNTERS(X)                                                         \
  X(received, "datagrams received on the links (valid or not)")                           \
  X(from_tun, "packets read from the TUN device (a super-packet counts once)")            \
  X(encapsulated, "packets from the TUN sent into the overlay (each segment)")            \
  X(delivered, "data packets for this node written to the TUN (each one joined)")         \
  X(forwarded, "data packets passed on toward another node")                              \
  X(sent, "datagrams the kernel took (data and probes)")                                  \
  X(sent_bytes, "overlay bytes of the datagrams the kernel took")                         \
  X(probes_sent, "probes sent on the links")                                              \
  X(probe_replies_sent, "probe replies sent")                                             \
  X(probe_replies_received, "probe replies counted by the estimators")                    \
  X(probe_replies_rejected, "probe replies refused: duplicate, too late, unusable times") \
  X(liveness_changes, "a neighbour link went down or came back up")                       \
  X(carrier_losses, "a link's interface lost carrier (rtnetlink)")                        \
  X(recv_errors, "recvmmsg or TUN read failed")                                           \
  X(receive_batches, "recvmmsg calls that returned datagrams")                            \
  X(send_batches, "sendmmsg calls that sent datagrams")                                   \
  X(gso_messages, "messages of 2 or more datagrams (UDP GSO) sent")                       \
  X(gro_slots, "received slots that held 2 or more datagrams (GRO)")                      \
  X(tun_super_reads, "TCP super-packets read from the TUN and segmented")                 \
  X(tun_super_writes, "super-packets of 2 or more segments written to the TUN")

// Event counts since Create. A snapshot: each value is read atomically, the set is not.
struct DataplaneCounters {
  std::array<uint64_t, kDropReasons> drops{};
#define DAR_DATAPLANE_COUNTER_FIELD(name, help) uint64_t name = 0;
  DAR_DATAPLANE_COUNTERS(DAR_DATAPLANE_COUNTER_FIELD)
#undef DAR_DATAPLANE_COUNTER_FIELD

  // Calls fn(name, help, value) for each counter of the list, in its order (not the drops).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
#define DAR_DATAPLANE_COUNTER_VISIT(name, help) \
  fn(std::string_view(#name), std::string_view(help), name);
    DAR_DATAPLANE_COUNTERS(DAR_DATAPLANE_COUNTER_VISIT)
#undef DAR_DATAPLANE_COUNTER_VISIT
  }

  uint64_t dropped(DropReason r) const { return drops[static_cast<size_t>(r)]; }
  uint64_t total_dropped() const;
};

// This node's rows of `tables` as AgentTables, the same for both traffic classes (e.g. the
// static hop-count table of core's ComputeStaticTables, as a fallback or in tests).
std::shared_ptr<const AgentTables> AgentTablesFromRouting(const RoutingTables& tables, NodeId node,
                                                          bool is_static);

class Dataplane {
 public:
  // Opens the TUN device and binds a socket per link, in the calling thread's network
  // namespace (they stay there whichever thread uses them later). Does not start the thread.
  // Errors: InvalidArgument from Validate(); the failing step otherwise (TUN open, bind of a
  // link's socket naming its interface and address, epoll/timerfd/eventfd creation).
  static absl::StatusOr<std::unique_ptr<Dataplane>> Create(const DataplaneConfig& config);

  // Stops the thread if it runs.
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // Starts the data-plane thread. FailedPrecondition if it runs already. After Stop() it may
  // be started again (probe sequence numbers continue).
  absl::Status Start();
  // Stops the thread and waits for it; queued datagrams are dropped. No-op when stopped.
  void Stop();

  // Forwards with `tables` from the next batch on (an atomic swap; the data plane keeps its
  // reference until the next swap). Null: forward nothing (every packet is kNoRoute).
  // Checking versions is the caller's business. Thread-safe.
  void InstallTables(std::shared_ptr<const AgentTables> tables);
  // The tables last installed (possibly not picked up by the thread yet).
  std::shared_ptr<const AgentTables> tables() const;

  // Replaces the whole key set: `keys` are accepted, the active one seals.
  // Errors (nothing changes): InvalidArgument if `keys` is empty, more than
  // net::OverlayKeyRing::kMaxKeys, repeats an id, or does not have exactly one active key.
  // Thread-safe.
  absl::Status SetKeys(const std::vector<KeyUpdate>& keys);

  // Changes the forwarding mode and its parameters (forgetting every flowlet).
  // InvalidArgument (nothing changes) if !config.Validate().ok(). Thread-safe.
  absl::Status SetForwarding(const ForwardingConfig& config);
  // New probe settings from the next probe on: the interval, and the missed probes that take a
  // link down. Errors: InvalidArgument for an interval outside 1 ms..60 s or missed < 1.
  // Thread-safe.
  absl::Status SetProbeSettings(Duration interval, int missed_probes);

  // Called on the data-plane thread whenever a neighbour link goes down or comes back up (one
  // call per link, so a neighbour with two links may be reported twice). It must return
  // quickly and must not call Stop(); other methods are fine. Replaces the previous callback;
  // null removes it. Thread-safe.
  void SetLivenessCallback(std::function<void(NodeId neighbour, bool up)> callback);

  // One sample per neighbour link, in the order of DataplaneConfig::neighbours, stamped `now`.
  // Thread-safe.
  std::vector<NeighbourSample> Samples(Time now) const;

  // Whether the chooser may use each link now, in the order of DataplaneConfig::neighbours.
  // Thread-safe.
  std::vector<bool> LinksUp() const;

  DataplaneCounters counters() const;

  // The highest overlay sequence number sealed so far (SequenceFloor::Keep). Thread-safe.
  uint64_t HighestSequence() const { return sequencer_.Highest(); }

  // Bytes of the IP packets read from the TUN and sent into the overlay, per destination node
  // (by NodeId, one entry per node of DataplaneConfig::overlay_addresses), since the start:
  // the demand this node originates. Thread-safe.
  std::vector<uint64_t> SentBytesByDestination() const;

  // CPU time the data-plane thread has used (all runs); zero before the first Start. The
  // thread is named "dar-dp<node>" (for top, perf).
  Duration thread_cpu_time() const;

  // The address each link's socket is bound to, in the order of DataplaneConfig::neighbours
  // (useful with port 0).
  std::vector<net::Ipv4Endpoint> local_endpoints() const;

  const DataplaneConfig& config() const { return config_; }

 private:
  struct Port;
  struct PortView;
  class Counter {
   public:
    // Single writer (the data-plane thread); readers on any thread.
    void Add(uint64_t n = 1) {
      value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    uint64_t Get() const { return value_.load(std::memory_order_relaxed); }

   private:
    std::atomic<uint64_t> value_{0};
  };

  explicit Dataplane(const DataplaneConfig& config);

  // Moves the calling thread into netns_fd_'s namespace if it is in another one.
  void EnterCreatorNamespace();
  // The data-plane thread.
  void Run();
  // Picks up tables, keys, forwarding settings and the callback set since the last call.
  void ApplyControl();
  void OnProbeTick();
  // Receives from `socket`, port's data or probe socket, and handles what arrived.
  void ReceiveFrom(Port& port, net::UdpSocket& socket);
  // Seals a probe or probe reply and sends it on port's probe socket at once.
  void SendProbe(Port& port, const net::OverlayHeader& header, absl::Span<const uint8_t> body,
                 const net::OverlayKey& key);
  void ReadTun();
  // Inner packets in buffers[i] (at kOverlayHeaderBytes, sizes[i] bytes), i < n <=
  // net::kOverlayParseBatch: classify and seal each (their tags side by side,
  // net::TagSealedOverlays), then route them in order.
  void EncapsulateBatch(const uint32_t* buffers, const size_t* sizes, size_t n, Time now);
  // Datagrams data[i][0, sizes[i]) of a receive batch, i < n <= net::kOverlayParseBatch:
  // authenticates them together (net::ParseOverlayBatch), then handles each in order. Queued
  // datagrams point into the slot until KeepQueued.
  void HandleDatagrams(Port& in, uint8_t* const* data, const size_t* sizes, size_t n, Time wall_rx,
                       Time now);
  // One of them, with what ParseOverlayBatch said of it.
  void HandleDatagram(Port& in, uint8_t* data, size_t size, net::OverlayStatus status,
                      const net::OverlayPacket& packet, Time wall_rx, Time now);
  void HandleProbe(Port& in, const net::OverlayPacket& packet, Time wall_rx);
  void HandleProbeReply(Port& in, const net::OverlayPacket& packet, Time wall_rx);
  void Deliver(absl::Span<const uint8_t> payload);
  // Writes what the coalescers hold to the TUN.
  void FlushDelivery();
  // Chooses the next hop of a sealed data datagram data[0, size) and queues it; takes
  // `buffer` (kNoBuffer: data is in a receive slot). `transit`: decrement the hop limit
  // first (ForwardOverlay; the tag stays valid).
  void Route(uint32_t buffer, uint8_t* data, size_t size, const net::OverlayHeader& header,
             bool transit, Time now);
  // Queues datagram data[0, size) on `port`; takes `buffer`.
  void Enqueue(Port& port, uint8_t* data, size_t size, uint32_t buffer);
  void Flush(Port& port);
  void FlushDirty();
  // Copies the datagrams still queued in receive slots into pool buffers, before the slots are
  // reused.
  void KeepQueued();
  void SetWritableInterest(Port& port, bool want);
  void LinkFailed(Port& port);
  // Drains rtnetlink: a link whose interface lost carrier (or was deleted) is down at once.
  void ReadNetlink();
  void SetPortUp(Port& port, bool up);
  void Drop(DropReason reason) { counters_.drops[static_cast<size_t>(reason)].Add(); }
  void DropBuffer(DropReason reason, uint32_t buffer);
  Time WallNow() const;
  // False, with the datagram counted as kReplayed, if `packet` (addressed to this node) repeats
  // a sequence number of its source and key.
  bool FirstTime(const net::OverlayPacket& packet);

  // Buffers. kNoBuffer stands for a datagram that lives in a receive slot.
  static constexpr uint32_t kNoBuffer = ~uint32_t{0};
  uint8_t* BufferData(uint32_t b) { return arena_.data() + static_cast<size_t>(b) * buffer_bytes_; }
  uint32_t TakeBuffer();
  void GiveBuffer(uint32_t b) {
    if (b != kNoBuffer) free_buffers_.push_back(b);
  }

  const DataplaneConfig config_;
  const Topology& topology_;
  std::optional<net::TunDevice> tun_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<int> port_of_link_;  // LinkId -> index in ports_, -1 if not this node's
  absl::flat_hash_map<uint32_t, NodeId> node_of_address_;
  net::ScopedFd epoll_fd_;
  net::ScopedFd timer_fd_;
  net::ScopedFd wake_fd_;
  net::ScopedFd netlink_fd_;  // rtnetlink link group: carrier changes
  net::ScopedFd netns_fd_;    // the network namespace Create ran in (Run enters it)

  // Owned by the data-plane thread.
  size_t buffer_bytes_ = 0;
  std::vector<uint8_t> arena_;
  std::vector<uint32_t> free_buffers_;
  std::vector<net::RecvSlot> recv_slots_;
  size_t recv_slot_bytes_ = 0;
  std::vector<uint8_t> recv_arena_;  // batch_size receive slots of recv_slot_bytes_
  // Where a TUN super-packet is put together (its first bytes land in a pool buffer).
  std::vector<uint8_t> tun_super_;
  // Offload TUN only: TCP segments and UDP datagrams for the TUN wait here to be joined.
  std::optional<net::TcpCoalescer> tcp_coalescer_;
  std::optional<net::UdpCoalescer> udp_coalescer_;
  bool udp_coalesce_ = true;  // cleared if the kernel refuses a UDP super-packet
  struct TxBatch;
  std::unique_ptr<TxBatch> tx_;  // sendmmsg descriptors
  std::vector<int> dirty_ports_;
  NextHopChooser chooser_;
  Random rng_;
  std::shared_ptr<const AgentTables> active_tables_;
  std::shared_ptr<const net::OverlayKeyRing> active_keys_;
  // Sequence numbers this node seals with, and the replay windows of what is addressed to it.
  net::OverlaySequencer sequencer_;
  net::OverlayReplayGuard replay_;
  std::function<void(NodeId, bool)> active_callback_;
  uint64_t applied_generation_ = 0;
  uint64_t applied_forwarding_generation_ = 0;
  uint64_t applied_probe_generation_ = 0;

  // Control surface: written by any thread under control_mu_, picked up by ApplyControl.
  mutable Mutex control_mu_;
  std::shared_ptr<const AgentTables> pending_tables_ ABSL_GUARDED_BY(control_mu_);
  std::shared_ptr<const net::OverlayKeyRing> pending_keys_ ABSL_GUARDED_BY(control_mu_);
  ForwardingConfig pending_forwarding_ ABSL_GUARDED_BY(control_mu_);
  uint64_t forwarding_generation_ ABSL_GUARDED_BY(control_mu_) = 0;
  std::pair<Duration, int> pending_probe_ ABSL_GUARDED_BY(control_mu_);  // interval, missed probes
  uint64_t probe_generation_ ABSL_GUARDED_BY(control_mu_) = 0;
  std::function<void(NodeId, bool)> pending_callback_ ABSL_GUARDED_BY(control_mu_);
  std::atomic<uint64_t> generation_{0};

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> thread_cpu_ns_{0};  // of finished runs
  std::atomic<bool> has_clock_{false};     // the thread runs and clock_id_ is its CPU clock
  std::atomic<clockid_t> clock_id_{0};
  mutable Mutex thread_mu_;  // Start/Stop

  // The live counters of DAR_DATAPLANE_COUNTERS and one per drop reason.
  struct LiveCounters {
    std::array<Counter, kDropReasons> drops;
#define DAR_DATAPLANE_COUNTER_LIVE(name, help) Counter name;
    DAR_DATAPLANE_COUNTERS(DAR_DATAPLANE_COUNTER_LIVE)
#undef DAR_DATAPLANE_COUNTER_LIVE
  };
  LiveCounters counters_;
  std::vector<Counter> sent_to_;  // by destination NodeId: SentBytesByDestination
};

}  // namespace dar::agent

#endif  // DAR_AGENT_DATAPLANE_H_
