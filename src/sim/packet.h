// Simulated packets and the pool they live in.
//
// Packets are recycled through a PacketPool, so the data path allocates nothing once the pool
// has grown to the peak number of packets alive. A PacketPtr owns one packet and returns it to
// its pool when dropped. Only headers are modelled; `size_bytes` is the size on the wire.
#ifndef DAR_SIM_PACKET_H_
#define DAR_SIM_PACKET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/topology.h"
#include "core/units.h"

namespace dar::sim {

enum class PacketKind : uint8_t {
  kData,    // a transport data segment
  kAck,     // a transport acknowledgement of one data segment
  kFiller,  // background load on one link; consumed at the link's far end
  kProbe,   // a link probe (four-timestamp); answered by the link's far end
  kProbeReply,
};

class PacketPool;

// The header a fabric load balancer (sim/network.h, FabricBalancer) adds to a packet, modelled
// on CONGA's overlay header (Alizadeh et al., SIGCOMM 2014): the path the source switch chose,
// the largest congestion metric seen along it, and one piggybacked feedback entry.
struct BalancerHeader {
  bool valid = false;  // set by the source switch's balancer
  uint8_t path = 0;    // the source switch's choice (an uplink index)
  uint8_t ce = 0;      // the path's congestion so far (max over the links crossed)
  bool feedback_valid = false;
  uint8_t feedback_path = 0;    // for the receiving switch: congestion of its path ...
  uint8_t feedback_metric = 0;  // ... toward this packet's source switch
};

struct Packet {
  PacketKind kind = PacketKind::kData;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  bool ecn_capable = false;
  bool ce = false;         // congestion experienced (set by a queue)
  bool ece = false;        // ACK: the acknowledged segment carried CE
  bool duplicate = false;  // ACK: the receiver already had this segment
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  uint64_t flow_id = 0;
  // The label the switches' per-flow hash covers beside the flow (an IPv6 flow label); a
  // host repaths a flow by changing it (PLB). 0 for a flow never repathed.
  uint32_t path_label = 0;
  uint32_t seq = 0;           // segment number (ACK: the segment acknowledged)
  int32_t size_bytes = 0;     // on the wire, headers included
  int32_t payload_bytes = 0;  // data segments only
  Time sent_time{0};          // sender's transmit time; echoed in the ACK (probe: t1)
  Time peer_received{0};      // probe reply: t2, when the probe reached the peer
  Time peer_sent{0};          // probe reply: t3, when the peer sent the reply
  BalancerHeader lb;
  PacketPool* pool = nullptr;
};

struct PacketDeleter {
  void operator()(Packet* p) const;
};
using PacketPtr = std::unique_ptr<Packet, PacketDeleter>;

// A free list of packets. Not thread-safe. Must outlive every packet it handed out.
class PacketPool {
 public:
  PacketPool() = default;
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  // A packet with default fields.
  PacketPtr Allocate() {
    if (free_.empty()) Grow();
    Packet* p = free_.back();
    free_.pop_back();
    *p = Packet();
    p->pool = this;
    ++live_;
    return PacketPtr(p);
  }
  // Packets handed out and not yet returned.
  int64_t live() const { return live_; }

 private:
  friend struct PacketDeleter;
  void Release(Packet* p) {
    free_.push_back(p);
    --live_;
  }
  void Grow() {
    constexpr size_t kChunk = 4096;
    chunks_.push_back(std::make_unique<Packet[]>(kChunk));
    for (size_t i = 0; i < kChunk; ++i) free_.push_back(&chunks_.back()[kChunk - 1 - i]);
  }

  std::vector<std::unique_ptr<Packet[]>> chunks_;
  std::vector<Packet*> free_;
  int64_t live_ = 0;
};

inline void PacketDeleter::operator()(Packet* p) const { p->pool->Release(p); }

}  // namespace dar::sim

#endif  // DAR_SIM_PACKET_H_
