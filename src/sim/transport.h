// A reliable message transport for simulated hosts (model: docs/transport.md).
//
// Each message is one flow: segments of at most `mss` payload bytes, each acknowledged by its
// own ACK, so the receiver takes segments in any order and per-packet spraying costs no
// spurious retransmissions. Loss is inferred RACK-style (a segment sent well before one that
// was acknowledged) with a retransmission timeout as the backstop. The window follows DCTCP as
// Linux runs it: slow start, additive increase, and on the first ECN echo of a window of data
// sent a cut by alpha/2 (alpha: the moving average of the marked fraction, one update per
// window of data sent); a loss halves it, a timeout resets it.
//
// Hosts pace onto their NIC: a host keeps at most one segment queued behind the one being
// serialised and serves its flows round-robin, so its own NIC never drops.
//
// Single-threaded; owns the Network's receive, drop and NIC-ready handlers.
#ifndef DAR_SIM_TRANSPORT_H_
#define DAR_SIM_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/units.h"
#include "sim/network.h"
#include "sim/plb.h"

namespace dar::sim {

struct TransportConfig {
  int32_t mss = 1460;           // payload bytes per segment
  int32_t header_bytes = 40;    // added to every data segment
  int32_t ack_bytes = 64;       // size of an ACK on the wire
  int32_t initial_window = 10;  // segments
  double dctcp_g = 1.0 / 16;    // DCTCP's gain for the marked-fraction average
  // DCTCP's alpha when a message starts: 1, as Linux's dctcp_alpha_on_init, so the first
  // ECN echo halves the window.
  double dctcp_initial_alpha = 1.0;
  // Reordering a loss detector tolerates: a segment counts as lost once a segment sent after
  // it was acknowledged and a reordering window has passed on top of the RTT. The window is
  // max(reorder_window_min, min_rtt/4) x k, where k doubles (up to 64) with every spurious
  // retransmission (after RACK, RFC 8985 §6.2, which grows it in steps of min_rtt/4). The
  // floor covers the queueing-delay spread between sprayed paths in a data centre.
  Duration reorder_window_min = Microseconds(50);
  Duration initial_rto = Milliseconds(10);
  Duration min_rto = Milliseconds(1);
  Duration max_rto = Seconds(2);
  // A retransmission timeout gives the flow a new path label, so the switches' per-flow hash
  // moves it (Linux's net.core.txrehash with IPv6 flow labels). Off by default, as with
  // 5-tuple hashing; PLB (EnablePlb) turns it on.
  bool rehash_on_timeout = false;
};

// What a message's sender learns when the receiver holds the whole message.
struct MessageResult {
  uint64_t id = 0;
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  int64_t bytes = 0;
  uint8_t traffic_class = 0;
  Time start{0};
  Time finish{0};  // the last byte reached the receiver
  Duration duration() const { return finish - start; }
};

// Per-transport totals. Data segments: sent = delivered + dropped once the network is idle.
struct TransportCounters {
  int64_t messages_started = 0;
  int64_t messages_completed = 0;
  int64_t data_sent = 0;  // data segments put into the network, retransmissions included
  int64_t data_delivered = 0;
  int64_t data_dropped = 0;
  int64_t acks_sent = 0;
  int64_t acks_delivered = 0;
  int64_t acks_dropped = 0;
  int64_t retransmissions = 0;
  int64_t timeouts = 0;
  int64_t spurious_retransmissions = 0;  // a retransmitted segment the receiver already had
  int64_t repaths = 0;                   // new path labels: PLB's and rehash_on_timeout's
  int64_t ecn_cuts = 0;                  // window cuts on an ECN echo (at most one per window)
  int64_t loss_cuts = 0;        // window halvings on a detected loss (at most one per window)
  int64_t cwnd_undos = 0;       // cuts undone because their loss proved spurious (once per cut)
  int64_t bytes_delivered = 0;  // unique payload bytes
};

// Per-message packet accounting, kept after completion for conservation checks, and the
// sender's congestion-control milestones.
struct FlowCounters {
  int64_t sent = 0;
  int64_t delivered = 0;
  int64_t dropped = 0;
  Time first_ece{-1};        // the first ACK echoing a CE mark arrived (-1: none did)
  Time slow_start_exit{-1};  // the window left slow start: ssthresh first set (-1: never)
};

class Transport {
 public:
  using DoneCallback = std::function<void(const MessageResult&)>;

  // Takes over `net`'s handlers. `net` must outlive the transport.
  Transport(Network& net, const TransportConfig& config);
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport();

  // Starts sending `bytes` from host `src` to host `dst`; `on_done` runs when the receiver has
  // every byte. Returns the message id (dense, from 0).
  // REQUIRES: bytes > 0; src and dst are hosts with exactly one link, src != dst.
  uint64_t Send(NodeId src, NodeId dst, int64_t bytes, uint8_t traffic_class, DoneCallback on_done);

  // Hosts run PLB (sim/plb.h) on every flow from now on: at the end of each DCTCP observation
  // window, and on a retransmission timeout (which repaths at once, as rehash_on_timeout, and
  // pauses PLB).
  void EnablePlb(const PlbConfig& config) {
    plb_ = config;
    config_.rehash_on_timeout = true;
  }

  const TransportCounters& counters() const { return counters_; }
  const FlowCounters& flow_counters(uint64_t id) const { return flow_counters_[id]; }
  uint64_t num_messages() const { return flow_counters_.size(); }
  // Messages not yet fully received.
  int64_t active() const { return counters_.messages_started - counters_.messages_completed; }
  const TransportConfig& config() const { return config_; }

 private:
  struct Flow;
  struct HostState;

  void OnReceive(PacketPtr p);
  void OnDrop(const Packet& p, DropReason r);
  void OnData(PacketPtr p);
  void OnAck(const Packet& p);
  void DetectLosses(Flow& f);
  void OnTimeout(Flow& f);
  void Repath(Flow& f);
  void ArmRto(Flow& f);
  void MakeReady(Flow& f);
  void Pump(NodeId host);
  bool SendOne(Flow& f);
  void FinishSender(Flow& f);
  Duration Rto(const Flow& f) const;
  // Sets the slow-start threshold (recording when the flow first leaves slow start).
  void SetSsthresh(Flow& f, double ssthresh);
  // Starts a window reduction: no further cut (ECN or loss of data sent before now) and no
  // growth until every segment sent so far is acknowledged.
  void EnterCwr(Flow& f);

  Network& net_;
  TransportConfig config_;
  std::vector<std::unique_ptr<Flow>> flows_;  // by id; null once both ends are done
  std::vector<FlowCounters> flow_counters_;
  std::vector<HostState> hosts_;  // by node id
  TransportCounters counters_;
  std::optional<PlbConfig> plb_;
};

}  // namespace dar::sim

#endif  // DAR_SIM_TRANSPORT_H_
