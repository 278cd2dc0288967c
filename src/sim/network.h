// The simulated network: an output port per directed link (drop-tail queue in bytes with an
// optional ECN threshold, serialisation at the link's capacity, then propagation delay), and a
// forwarder at every node that picks among the installed routing table's next hops with the
// same NextHopChooser (core/next_hop_chooser.h) as the agents' data plane.
//
// Packet life: Send() at the source node -> forwarded hop by hop -> delivered to the receive
// handler at the destination, or dropped (queue full, link down, hop limit, no route), which
// is reported to the drop handler. Every data or ACK packet ends in exactly one of the two.
//
// Single-threaded; driven by the EventLoop it was built with.
#ifndef DAR_SIM_NETWORK_H_
#define DAR_SIM_NETWORK_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "core/next_hop_chooser.h"
#include "core/random.h"
#include "core/routing_table.h"
#include "core/topology.h"
#include "sim/event_loop.h"
#include "sim/packet.h"
#include "sim/ring_buffer.h"

namespace dar::sim {

struct NetworkConfig {
  // Queue depth (bytes) above which ECN-capable packets are marked on enqueue; 0 = no marking.
  int64_t ecn_threshold_bytes = 0;
  // Queue capacity of host NICs; hosts are paced by their transport, so this rarely fills.
  int64_t host_queue_bytes = 16 << 20;
  uint8_t initial_hop_limit = 64;
};

enum class DropReason : uint8_t {
  kQueueFull,
  kLinkDown,
  kHopLimit,
  kNoRoute,
  kSilentFailure,  // lost on a link that fails without losing carrier
  kCount
};
std::string_view DropReasonName(DropReason r);

// Counters of one directed link.
struct LinkCounters {
  int64_t tx_packets = 0;
  int64_t tx_bytes = 0;
  int64_t drops = 0;
  int64_t ecn_marks = 0;
  int64_t max_queue_bytes = 0;
};

// A fabric load balancer that runs in the switches beside the routing tables, as CONGA does:
// it may take over the next-hop choice of a packet, sees every packet a port starts to send,
// and every packet that reaches the switch its destination hangs off. Packets carry its
// header fields (Packet::lb). Installed by a control plane (Network::set_balancer).
// Called on the network's thread, on the per-packet path.
class FabricBalancer {
 public:
  virtual ~FabricBalancer() = default;
  // The link `p` leaves `node` on, among `hops` (the routing table's next hops there, at
  // least two), or kNoLink to leave the choice to the node's NextHopChooser.
  virtual LinkId Choose(NodeId node, Packet& p, absl::Span<const NextHop> hops, Time now) = 0;
  // `p` starts serialisation on `link`.
  virtual void OnTransmit(LinkId link, Packet& p, Time now) = 0;
  // `p` reached `node`, the switch its destination host hangs off, before its last hop.
  virtual void OnLastSwitch(NodeId node, Packet& p, Time now) = 0;
};

class Network {
 public:
  using ReceiveHandler = std::function<void(PacketPtr)>;
  using DropHandler = std::function<void(const Packet&, DropReason)>;
  // Called when a host's NIC queue drops to at most one packet; the transport refills it.
  using NicReadyHandler = std::function<void(NodeId host)>;
  // Receives link probes and probe replies at the far end of the link they crossed.
  using ProbeHandler = std::function<void(NodeId at, LinkId in_link, PacketPtr p)>;
  // Sees every packet a node sends (Send), data and acknowledgements alike, before it is
  // forwarded: what an agent counts of the traffic its node originates.
  using SendObserver = std::function<void(NodeId node, const Packet& p)>;

  // Traffic classes with tables of their own (Packet::traffic_class indexes them).
  static constexpr int kClasses = 8;
  static constexpr int kAllClasses = -1;

  Network(EventLoop& loop, Random& rng, const Topology& topology, const NetworkConfig& config);
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
  ~Network();

  const Topology& topology() const { return topology_; }
  EventLoop& loop() { return loop_; }
  PacketPool& pool() { return pool_; }

  void set_receive_handler(ReceiveHandler h) { on_receive_ = std::move(h); }
  void set_drop_handler(DropHandler h) { on_drop_ = std::move(h); }
  void set_nic_ready_handler(NicReadyHandler h) { on_nic_ready_ = std::move(h); }
  void set_probe_handler(ProbeHandler h) { on_probe_ = std::move(h); }
  void set_send_observer(SendObserver o) { on_send_ = std::move(o); }
  // The forwarding mode of every forwarder (NextHopChooser); forgets their flowlets.
  // REQUIRES: f.Validate().ok().
  void set_forwarding(const ForwardingConfig& f);

  // Installs a fabric load balancer (null: none, the default). The network owns it.
  void set_balancer(std::unique_ptr<FabricBalancer> balancer) { balancer_ = std::move(balancer); }

  // Installs a table set for all forwarders, for one traffic class or all of them. Tables must
  // cover topology().Destinations().
  void InstallTables(std::shared_ptr<const RoutingTables> tables, int traffic_class = kAllClasses);
  const RoutingTables* tables(int traffic_class = 0) const { return tables_[traffic_class].get(); }
  // The same, shared: kept, it stays valid after new tables are installed (the records'
  // sampler compares consecutive ones).
  std::shared_ptr<const RoutingTables> shared_tables(int traffic_class = 0) const {
    return tables_[traffic_class];
  }

  // Sends a packet from `node` (its src); it is forwarded like any other packet there.
  void Send(NodeId node, PacketPtr p);
  // Puts a packet straight into a link's output queue (background load on that link).
  void SendOnLink(LinkId link, PacketPtr p);

  // Link state changes take effect at once at the link's own ports: packets queued on or
  // travelling over a link that goes down are lost. A forwarder stops using a down local link
  // at once (loss of carrier); remote nodes keep it until new tables arrive.
  void SetLinkUp(LinkId link, bool up);
  void SetLinkCapacity(LinkId link, DataRate capacity);
  // A gray failure: the link loses every packet it carries but keeps carrier, so nothing
  // local notices; only missed probes tell.
  void SetLinkSilentFailure(LinkId link, bool failed);
  // The forwarder at the link's tail stops (or resumes) choosing it: its own liveness verdict
  // (missed probes), taken at once, before any controller reacts.
  void SetLinkUsable(LinkId link, bool usable);
  // The topology as the network sees it now (link states and capacities included).
  const Topology& current() const { return topology_; }

  int64_t QueuedBytes(LinkId link) const;
  // Whether the forwarder at the link's tail may send on it now (up and not ruled out by its
  // own liveness check).
  bool Forwardable(LinkId link) const;
  const LinkCounters& counters(LinkId link) const;
  int64_t drops(DropReason r) const { return drops_[static_cast<int>(r)]; }
  int64_t total_drops() const;
  int64_t filler_drops() const { return filler_drops_; }
  int64_t probe_drops() const { return probe_drops_; }

 private:
  class Port;
  class PortView;

  void Receive(NodeId node, PacketPtr p, LinkId in_link);
  void Forward(NodeId node, PacketPtr p);
  void Drop(PacketPtr p, DropReason r, LinkId link);

  EventLoop& loop_;
  Random& rng_;
  Topology topology_;
  NetworkConfig config_;
  PacketPool pool_;
  std::vector<std::unique_ptr<Port>> ports_;  // by LinkId
  std::vector<NodeId> route_target_;          // by node
  std::vector<LinkId> last_hop_link_;         // by host: the link from its switch to it
  std::vector<LinkId> stub_uplink_;           // by node: a stub host's only link, or kNoLink
  std::vector<NextHopChooser> choosers_;      // by node
  std::array<std::shared_ptr<const RoutingTables>, kClasses> tables_;
  std::array<int64_t, static_cast<int>(DropReason::kCount)> drops_{};
  int64_t filler_drops_ = 0;
  int64_t probe_drops_ = 0;
  ReceiveHandler on_receive_;
  DropHandler on_drop_;
  NicReadyHandler on_nic_ready_;
  ProbeHandler on_probe_;
  SendObserver on_send_;
  std::unique_ptr<FabricBalancer> balancer_;
};

}  // namespace dar::sim

#endif  // DAR_SIM_NETWORK_H_
