#include "sim/transport.h"

#include <algorithm>
#include <cassert>

namespace dar::sim {
namespace {

enum SegmentState : uint8_t { kUnsent = 0, kInFlight = 1, kAcked = 2, kLost = 3 };

}  // namespace

struct Transport::Flow {
  Flow(Transport& t, uint64_t id_in)
      : id(id_in),
        rto_timer(t.net_.loop(), [&t, this] { t.OnTimeout(*this); }),
        rack_timer(t.net_.loop(), [&t, this] { t.DetectLosses(*this); }) {}

  int32_t PayloadOf(uint32_t seq) const {
    const int64_t left = bytes - static_cast<int64_t>(seq) * mss;
    return static_cast<int32_t>(std::min<int64_t>(left, mss));
  }
  bool HasDataToSend() const { return !lost.empty() || next_new < num_segments; }

  uint64_t id;
  NodeId src = kNoNode;
  NodeId dst = kNoNode;
  int64_t bytes = 0;
  int32_t mss = 0;
  uint8_t traffic_class = 0;
  Time start{0};
  DoneCallback on_done;
  uint32_t num_segments = 0;

  // Sender.
  std::vector<uint8_t> state;  // SegmentState by segment
  std::vector<Time> sent_at;   // last transmission of each segment
  struct Sent {
    uint32_t seq;
    Time at;
  };
  RingBuffer<Sent> in_flight;  // transmissions in send order (stale entries skipped)
  RingBuffer<uint32_t> lost;   // segments to retransmit
  uint32_t next_new = 0;
  uint32_t acked = 0;
  int64_t in_flight_bytes = 0;
  double cwnd = 0;
  double ssthresh = 1e18;
  bool has_rtt = false;
  Duration srtt{0};
  Duration rttvar{0};
  Duration min_rtt{0};
  Time rack_xmit{-1};  // send time of the most recently sent segment known delivered
  Duration rack_rtt{0};
  int reo_wnd_mult = 1;
  Time last_cut{-1};           // losses of segments sent before this do not cut the window again
  double cwnd_before_cut = 0;  // restored if the cut's loss proves spurious
  uint32_t snd_una = 0;        // the first segment not yet acknowledged
  double alpha = 0;            // DCTCP's estimate of the marked fraction
  uint32_t window_end = 0;     // the observation window ends when snd_una reaches this
  int64_t window_acked = 0;    // bytes acknowledged in the observation window
  int64_t window_marked = 0;   // of which echoed a CE mark
  // A window reduction is under way: until snd_una reaches cwr_end, no ECN cut and no growth.
  bool in_cwr = false;
  uint32_t cwr_end = 0;
  int rto_backoff = 1;
  bool in_ready = false;
  uint32_t path_label = 0;  // the label the switches' hash covers (0: never repathed)
  uint32_t repaths = 0;
  PlbState plb;
  Timer rto_timer;
  Timer rack_timer;

  // Receiver.
  std::vector<bool> received;
  uint32_t received_count = 0;
};

struct Transport::HostState {
  LinkId nic = kNoLink;
  RingBuffer<uint64_t> ready;  // flows with something to send, served round-robin
  bool pumping = false;
};

Transport::Transport(Network& net, const TransportConfig& config) : net_(net), config_(config) {
  const Topology& topo = net_.topology();
  hosts_.resize(topo.num_nodes());
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    if (topo.node(n).out_links.size() == 1) hosts_[n].nic = topo.node(n).out_links[0];
  }
  net_.set_receive_handler([this](PacketPtr p) { OnReceive(std::move(p)); });
  net_.set_drop_handler([this](const Packet& p, DropReason r) { OnDrop(p, r); });
  net_.set_nic_ready_handler([this](NodeId host) { Pump(host); });
}

Transport::~Transport() {
  net_.set_receive_handler(nullptr);
  net_.set_drop_handler(nullptr);
  net_.set_nic_ready_handler(nullptr);
}

uint64_t Transport::Send(NodeId src, NodeId dst, int64_t bytes, uint8_t traffic_class,
                         DoneCallback on_done) {
  assert(bytes > 0 && src != dst && hosts_[src].nic != kNoLink);
  const uint64_t id = flows_.size();
  auto f = std::make_unique<Flow>(*this, id);
  f->src = src;
  f->dst = dst;
  f->bytes = bytes;
  f->mss = config_.mss;
  f->traffic_class = traffic_class;
  f->start = net_.loop().now();
  f->on_done = std::move(on_done);
  f->num_segments = static_cast<uint32_t>((bytes + config_.mss - 1) / config_.mss);
  f->state.assign(f->num_segments, kUnsent);
  f->sent_at.assign(f->num_segments, Time{0});
  f->received.assign(f->num_segments, false);
  f->cwnd = static_cast<double>(config_.initial_window) * config_.mss;
  f->alpha = config_.dctcp_initial_alpha;
  Flow& flow = *f;
  flows_.push_back(std::move(f));
  flow_counters_.emplace_back();
  ++counters_.messages_started;
  MakeReady(flow);
  return id;
}

void Transport::MakeReady(Flow& f) {
  if (f.in_ready || !f.HasDataToSend()) return;
  f.in_ready = true;
  hosts_[f.src].ready.push_back(f.id);
  Pump(f.src);
}

void Transport::Pump(NodeId host) {
  HostState& h = hosts_[host];
  if (h.pumping) return;
  h.pumping = true;
  while (!h.ready.empty() && net_.QueuedBytes(h.nic) == 0) {
    const uint64_t id = h.ready.pop_front();
    Flow* f = flows_[id].get();
    if (f == nullptr) continue;
    f->in_ready = false;
    if (!SendOne(*f)) continue;
    if (f->HasDataToSend()) {
      f->in_ready = true;
      h.ready.push_back(id);
    }
  }
  h.pumping = false;
}

bool Transport::SendOne(Flow& f) {
  while (!f.lost.empty() && f.state[f.lost.front()] != kLost) f.lost.pop_front();
  uint32_t seq;
  if (!f.lost.empty()) {
    seq = f.lost.front();
  } else if (f.next_new < f.num_segments) {
    seq = f.next_new;
  } else {
    return false;
  }
  const int32_t payload = f.PayloadOf(seq);
  if (f.in_flight_bytes > 0 && static_cast<double>(f.in_flight_bytes + payload) > f.cwnd) {
    return false;
  }
  if (f.state[seq] == kLost) {
    f.lost.pop_front();
    ++counters_.retransmissions;
  } else {
    ++f.next_new;
  }
  const Time now = net_.loop().now();
  f.state[seq] = kInFlight;
  f.sent_at[seq] = now;
  f.in_flight.push_back(Flow::Sent{seq, now});
  f.in_flight_bytes += payload;

  PacketPtr p = net_.pool().Allocate();
  p->kind = PacketKind::kData;
  p->traffic_class = f.traffic_class;
  p->ecn_capable = true;
  p->src = f.src;
  p->dst = f.dst;
  p->flow_id = f.id;
  p->path_label = f.path_label;
  p->seq = seq;
  p->payload_bytes = payload;
  p->size_bytes = payload + config_.header_bytes;
  p->sent_time = now;
  ++counters_.data_sent;
  ++flow_counters_[f.id].sent;
  if (!f.rto_timer.pending()) ArmRto(f);
  net_.Send(f.src, std::move(p));
  return true;
}

void Transport::OnReceive(PacketPtr p) {
  if (p->kind == PacketKind::kData) {
    OnData(std::move(p));
  } else {
    ++counters_.acks_delivered;
    OnAck(*p);
  }
}

void Transport::OnData(PacketPtr p) {
  ++counters_.data_delivered;
  ++flow_counters_[p->flow_id].delivered;
  Flow* f = flows_[p->flow_id].get();
  bool duplicate = true;
  if (f != nullptr && !f->received[p->seq]) {
    duplicate = false;
    f->received[p->seq] = true;
    ++f->received_count;
    counters_.bytes_delivered += p->payload_bytes;
  }
  // Reuse the data packet as its ACK.
  const NodeId data_src = p->src;
  p->kind = PacketKind::kAck;
  p->src = p->dst;
  p->dst = data_src;
  p->ece = p->ce;
  p->ce = false;
  p->ecn_capable = false;
  p->duplicate = duplicate;
  p->size_bytes = config_.ack_bytes;
  p->payload_bytes = 0;
  ++counters_.acks_sent;
  const NodeId receiver = p->src;
  net_.Send(receiver, std::move(p));

  if (f != nullptr && !duplicate && f->received_count == f->num_segments) {
    ++counters_.messages_completed;
    MessageResult r;
    r.id = f->id;
    r.src = f->src;
    r.dst = f->dst;
    r.bytes = f->bytes;
    r.traffic_class = f->traffic_class;
    r.start = f->start;
    r.finish = net_.loop().now();
    DoneCallback done = std::move(f->on_done);
    if (done) done(r);
  }
}

void Transport::OnAck(const Packet& p) {
  Flow* fp = flows_[p.flow_id].get();
  if (fp == nullptr) return;
  Flow& f = *fp;
  if (p.duplicate && p.sent_time == f.sent_at[p.seq]) {
    // The receiver had this segment already: the retransmission was spurious, so the
    // reordering window was too tight (RACK-TLP, RFC 8985 §6.2).
    ++counters_.spurious_retransmissions;
    f.reo_wnd_mult = std::min(f.reo_wnd_mult * 2, 64);
    // The cut it caused was for nothing: undo it (as Linux does on a DSACK).
    if (f.cwnd < f.cwnd_before_cut) {
      ++counters_.cwnd_undos;
      f.cwnd = f.cwnd_before_cut;
      f.ssthresh = std::max(f.ssthresh, f.cwnd_before_cut);
      f.in_cwr = false;
    }
    f.cwnd_before_cut = 0;  // one undo per cut
  }
  const uint8_t st = f.state[p.seq];
  if (st == kAcked) return;
  const int32_t payload = f.PayloadOf(p.seq);
  if (st == kInFlight) f.in_flight_bytes -= payload;
  f.state[p.seq] = kAcked;
  ++f.acked;

  const Time now = net_.loop().now();
  const Duration sample = now - p.sent_time;
  if (!f.has_rtt) {
    f.has_rtt = true;
    f.srtt = sample;
    f.rttvar = sample / 2;
    f.min_rtt = sample;
  } else {
    const Duration err = sample > f.srtt ? sample - f.srtt : f.srtt - sample;
    f.rttvar = (3 * f.rttvar + err) / 4;
    f.srtt = (7 * f.srtt + sample) / 8;
    f.min_rtt = std::min(f.min_rtt, sample);
  }
  if (p.sent_time > f.rack_xmit) {
    f.rack_xmit = p.sent_time;
    f.rack_rtt = sample;
  }
  f.rto_backoff = 1;

  while (f.snd_una < f.num_segments && f.state[f.snd_una] == kAcked) ++f.snd_una;
  FlowCounters& fc = flow_counters_[f.id];
  if (p.ece && fc.first_ece < Time{0}) fc.first_ece = now;

  // DCTCP as Linux's tcp_dctcp.c runs it. An observation window covers the data sent while it
  // is open: it ends once everything sent before it began is acknowledged (snd_una reaches
  // the next_new recorded at its start), and its fraction of ECN-echoing bytes is folded into
  // alpha.
  f.window_acked += payload;
  if (p.ece) f.window_marked += payload;
  if (f.snd_una >= f.window_end) {
    const double frac = f.window_acked > 0 ? static_cast<double>(f.window_marked) /
                                                 static_cast<double>(f.window_acked)
                                           : 0.0;
    if (plb_ &&
        f.plb.OnRoundEnd(*plb_, f.window_acked, f.window_marked, f.in_flight_bytes > 0, now)) {
      Repath(f);
    }
    f.alpha = (1 - config_.dctcp_g) * f.alpha + config_.dctcp_g * frac;
    f.window_acked = 0;
    f.window_marked = 0;
    f.window_end = f.next_new;
  }
  // A reduction (CWR) lasts until everything sent before it is acknowledged: one cut per
  // window of data sent, and no growth meanwhile.
  if (f.in_cwr && f.snd_una >= f.cwr_end) f.in_cwr = false;
  if (p.ece && !f.in_cwr) {
    // The first echo in a window cuts, in slow start too (Linux's tcp_enter_cwr):
    // ssthresh = cwnd (1 - alpha/2). Linux lowers the window to it over the next round trip
    // (proportional rate reduction); here it drops at once (docs/transport.md).
    ++counters_.ecn_cuts;
    f.cwnd_before_cut = 0;  // congestion is real: a later spurious loss must not undo this
    SetSsthresh(f, std::max(2.0 * f.mss, f.cwnd * (1 - f.alpha / 2)));
    f.cwnd = std::min(f.cwnd, f.ssthresh);
    EnterCwr(f);
  }
  if (!p.ece && !f.in_cwr) {
    if (f.cwnd < f.ssthresh) {
      f.cwnd += payload;
    } else {
      f.cwnd += static_cast<double>(f.mss) * payload / f.cwnd;
    }
  }

  if (f.acked == f.num_segments) {
    FinishSender(f);
    return;
  }
  DetectLosses(f);
  if (f.in_flight_bytes > 0) {
    ArmRto(f);
  } else {
    f.rto_timer.Cancel();
  }
  MakeReady(f);
}

void Transport::DetectLosses(Flow& f) {
  const Time now = net_.loop().now();
  const Duration reo_wnd = std::max(config_.reorder_window_min, f.min_rtt / 4) * f.reo_wnd_mult;
  bool any_lost = false;
  while (!f.in_flight.empty()) {
    const Flow::Sent s = f.in_flight.front();
    if (f.state[s.seq] != kInFlight || f.sent_at[s.seq] != s.at) {
      f.in_flight.pop_front();  // acknowledged or sent again since
      continue;
    }
    if (s.at >= f.rack_xmit) break;  // nothing sent after it is known delivered yet
    const Time deadline = s.at + f.rack_rtt + reo_wnd;
    if (now < deadline) {
      f.rack_timer.ScheduleAt(deadline);
      break;
    }
    f.in_flight.pop_front();
    f.state[s.seq] = kLost;
    f.lost.push_back(s.seq);
    f.in_flight_bytes -= f.PayloadOf(s.seq);
    if (s.at > f.last_cut) {
      ++counters_.loss_cuts;
      f.cwnd_before_cut = f.cwnd;
      f.cwnd = std::max<double>(f.mss, f.cwnd / 2);
      SetSsthresh(f, f.cwnd);
      EnterCwr(f);
    }
    any_lost = true;
  }
  if (any_lost) MakeReady(f);
}

void Transport::SetSsthresh(Flow& f, double ssthresh) {
  f.ssthresh = ssthresh;
  FlowCounters& fc = flow_counters_[f.id];
  if (fc.slow_start_exit < Time{0}) fc.slow_start_exit = net_.loop().now();
}

void Transport::EnterCwr(Flow& f) {
  f.in_cwr = true;
  f.cwr_end = f.next_new;
  f.last_cut = net_.loop().now();
}

Duration Transport::Rto(const Flow& f) const {
  Duration rto = f.has_rtt ? std::max(config_.min_rto, f.srtt + 4 * f.rttvar) : config_.initial_rto;
  rto *= f.rto_backoff;
  return std::min(rto, config_.max_rto);
}

void Transport::ArmRto(Flow& f) { f.rto_timer.ScheduleIn(Rto(f)); }

void Transport::Repath(Flow& f) {
  ++f.repaths;
  f.path_label = static_cast<uint32_t>(Random::Hash(f.id * 0x9E3779B97F4A7C15ULL + f.repaths)) | 1;
  ++counters_.repaths;
}

void Transport::OnTimeout(Flow& f) {
  ++counters_.timeouts;
  if (config_.rehash_on_timeout) Repath(f);
  if (plb_) {
    // PLB pauses after a timeout: it says the network is in trouble, not this path.
    const uint64_t h = Random::Hash(f.id ^ (static_cast<uint64_t>(f.repaths) << 32));
    f.plb.OnTimeout(*plb_, net_.loop().now(), Random::ToUnit(h));
  }
  while (!f.in_flight.empty()) {
    const Flow::Sent s = f.in_flight.pop_front();
    if (f.state[s.seq] != kInFlight || f.sent_at[s.seq] != s.at) continue;
    f.state[s.seq] = kLost;
    f.lost.push_back(s.seq);
  }
  f.in_flight_bytes = 0;
  f.rack_timer.Cancel();
  SetSsthresh(f, std::max<double>(2.0 * f.mss, f.cwnd / 2));
  f.cwnd = f.mss;
  f.cwnd_before_cut = 0;
  f.in_cwr = false;  // slow start again from one segment
  f.last_cut = net_.loop().now();
  f.rto_backoff = std::min(f.rto_backoff * 2, 64);
  MakeReady(f);
}

void Transport::FinishSender(Flow& f) {
  const uint64_t id = f.id;
  flows_[id].reset();  // cancels the flow's timers
}

void Transport::OnDrop(const Packet& p, DropReason r) {
  if (p.kind == PacketKind::kData) {
    ++counters_.data_dropped;
    ++flow_counters_[p.flow_id].dropped;
  } else if (p.kind == PacketKind::kAck) {
    ++counters_.acks_dropped;
  }
}

}  // namespace dar::sim
