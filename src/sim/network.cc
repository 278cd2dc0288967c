#include "sim/network.h"

#include <algorithm>

namespace dar::sim {

std::string_view DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kQueueFull:
      return "queue_full";
    case DropReason::kLinkDown:
      return "link_down";
    case DropReason::kHopLimit:
      return "hop_limit";
    case DropReason::kNoRoute:
      return "no_route";
    case DropReason::kSilentFailure:
      return "silent_failure";
    case DropReason::kCount:
      break;
  }
  return "?";
}

// The output side of one directed link: a drop-tail FIFO, a serialiser and the wire.
// Packets leave the wire in the order they entered it (constant propagation delay), so the
// wire is a FIFO too and needs a single timer for its head.
class Network::Port {
 public:
  Port(Network& net, LinkId id, const Link& link, bool host_nic, int64_t queue_bytes)
      : net_(net),
        id_(id),
        src_(link.src),
        host_nic_(host_nic),
        dst_(link.dst),
        capacity_(link.params.capacity),
        delay_(link.params.delay),
        queue_limit_(queue_bytes),
        up_(link.up),
        tx_done_(net.loop_, [this] { OnTransmitted(); }),
        arrival_(net.loop_, [this] { OnArrival(); }) {}

  bool up() const { return up_; }
  // Up, and not ruled out by the forwarder's own liveness check.
  bool forwardable() const { return up_ && usable_; }
  void set_usable(bool usable) { usable_ = usable; }
  void set_silent_failure(bool failed) { silent_ = failed; }
  int64_t queued_bytes() const { return queued_bytes_; }
  DataRate capacity() const { return capacity_; }
  const LinkCounters& counters() const { return counters_; }
  LinkCounters& mutable_counters() { return counters_; }

  void Enqueue(PacketPtr p) {
    if (!up_) {
      net_.Drop(std::move(p), DropReason::kLinkDown, id_);
      return;
    }
    if (queued_bytes_ + p->size_bytes > queue_limit_) {
      net_.Drop(std::move(p), DropReason::kQueueFull, id_);
      return;
    }
    queued_bytes_ += p->size_bytes;
    if (net_.config_.ecn_threshold_bytes > 0 && p->ecn_capable &&
        queued_bytes_ > net_.config_.ecn_threshold_bytes) {
      p->ce = true;
      ++counters_.ecn_marks;
    }
    counters_.max_queue_bytes = std::max(counters_.max_queue_bytes, queued_bytes_);
    queue_.push_back(std::move(p));
    if (!tx_done_.pending()) StartTransmit();
  }

  void SetUp(bool up) {
    if (up_ == up) return;
    up_ = up;
    if (up) return;
    tx_done_.Cancel();
    arrival_.Cancel();
    if (in_tx_) net_.Drop(std::move(in_tx_), DropReason::kLinkDown, id_);
    while (!queue_.empty()) net_.Drop(queue_.pop_front(), DropReason::kLinkDown, id_);
    while (!wire_.empty())
      net_.Drop(std::move(wire_.pop_front().packet), DropReason::kLinkDown, id_);
    queued_bytes_ = 0;
  }

  void SetCapacity(DataRate c) { capacity_ = c; }

 private:
  struct InFlight {
    Time arrival{0};
    PacketPtr packet;
  };

  void StartTransmit() {
    in_tx_ = queue_.pop_front();
    queued_bytes_ -= in_tx_->size_bytes;
    if (net_.balancer_) net_.balancer_->OnTransmit(id_, *in_tx_, net_.loop_.now());
    tx_done_.ScheduleIn(capacity_.TransmitTime(in_tx_->size_bytes));
    if (host_nic_ && queued_bytes_ == 0 && net_.on_nic_ready_) net_.on_nic_ready_(src_);
  }

  void OnTransmitted() {
    ++counters_.tx_packets;
    counters_.tx_bytes += in_tx_->size_bytes;
    if (silent_) {
      net_.Drop(std::move(in_tx_), DropReason::kSilentFailure, id_);
      if (!queue_.empty()) StartTransmit();
      return;
    }
    const Time arrival = net_.loop_.now() + delay_;
    wire_.push_back(InFlight{arrival, std::move(in_tx_)});
    if (!arrival_.pending()) arrival_.ScheduleAt(arrival);
    if (!queue_.empty()) StartTransmit();
  }

  void OnArrival() {
    const Time now = net_.loop_.now();
    while (!wire_.empty() && wire_.front().arrival <= now) {
      net_.Receive(dst_, std::move(wire_.pop_front().packet), id_);
    }
    if (!wire_.empty()) arrival_.ScheduleAt(wire_.front().arrival);
  }

  Network& net_;
  LinkId id_;
  NodeId src_;
  bool host_nic_;
  NodeId dst_;
  DataRate capacity_;
  Duration delay_;
  int64_t queue_limit_;
  bool up_;
  bool usable_ = true;
  bool silent_ = false;
  int64_t queued_bytes_ = 0;
  RingBuffer<PacketPtr> queue_;
  PacketPtr in_tx_;
  RingBuffer<InFlight> wire_;
  LinkCounters counters_;
  Timer tx_done_;
  Timer arrival_;
};

// The forwarders' view of their ports, as NextHopChooser reads it.
class Network::PortView {
 public:
  explicit PortView(const std::vector<std::unique_ptr<Port>>& ports) : ports_(ports) {}
  bool forwardable(LinkId link) const { return ports_[link]->forwardable(); }
  int64_t queued_bytes(LinkId link) const { return ports_[link]->queued_bytes(); }
  DataRate capacity(LinkId link) const { return ports_[link]->capacity(); }

 private:
  const std::vector<std::unique_ptr<Port>>& ports_;
};

Network::Network(EventLoop& loop, Random& rng, const Topology& topology,
                 const NetworkConfig& config)
    : loop_(loop), rng_(rng), topology_(topology), config_(config) {
  const int n = topology_.num_nodes();
  route_target_.resize(n);
  last_hop_link_.assign(n, kNoLink);
  stub_uplink_.resize(n);
  choosers_.reserve(n);
  for (NodeId i = 0; i < n; ++i) {
    route_target_[i] = topology_.RouteTarget(i);
    stub_uplink_[i] = topology_.StubUplink(i);
    if (route_target_[i] != i) last_hop_link_[i] = topology_.FindLink(route_target_[i], i);
    choosers_.emplace_back(ForwardingConfig(), rng_.Next());  // each switch's hash seed
  }
  ports_.reserve(topology_.num_links());
  for (LinkId l = 0; l < topology_.num_links(); ++l) {
    const Link& link = topology_.link(l);
    const bool host_nic = topology_.node(link.src).kind == NodeKind::kHost;
    ports_.push_back(std::make_unique<Port>(
        *this, l, link, host_nic, host_nic ? config_.host_queue_bytes : link.params.queue_bytes));
  }
}

Network::~Network() = default;

void Network::InstallTables(std::shared_ptr<const RoutingTables> tables, int traffic_class) {
  if (traffic_class == kAllClasses) {
    tables_.fill(tables);
  } else {
    tables_[traffic_class] = std::move(tables);
  }
}

void Network::set_forwarding(const ForwardingConfig& f) {
  for (NextHopChooser& c : choosers_) c.set_config(f);
}

void Network::Send(NodeId node, PacketPtr p) {
  p->hop_limit = config_.initial_hop_limit;
  if (on_send_ && p->kind != PacketKind::kProbe && p->kind != PacketKind::kProbeReply) {
    on_send_(node, *p);
  }
  Receive(node, std::move(p), kNoLink);
}

void Network::SendOnLink(LinkId link, PacketPtr p) { ports_[link]->Enqueue(std::move(p)); }

void Network::SetLinkUp(LinkId link, bool up) {
  topology_.mutable_link(link).up = up;
  ports_[link]->SetUp(up);
}

void Network::SetLinkSilentFailure(LinkId link, bool failed) {
  ports_[link]->set_silent_failure(failed);
}

void Network::SetLinkUsable(LinkId link, bool usable) { ports_[link]->set_usable(usable); }

void Network::SetLinkCapacity(LinkId link, DataRate capacity) {
  topology_.mutable_link(link).params.capacity = capacity;
  ports_[link]->SetCapacity(capacity);
}

int64_t Network::QueuedBytes(LinkId link) const { return ports_[link]->queued_bytes(); }

bool Network::Forwardable(LinkId link) const { return ports_[link]->forwardable(); }

const LinkCounters& Network::counters(LinkId link) const { return ports_[link]->counters(); }

int64_t Network::total_drops() const {
  int64_t t = 0;
  for (int64_t d : drops_) t += d;
  return t;
}

void Network::Drop(PacketPtr p, DropReason r, LinkId link) {
  if (p->kind == PacketKind::kFiller) {
    ++filler_drops_;
    return;
  }
  if (p->kind == PacketKind::kProbe || p->kind == PacketKind::kProbeReply) {
    ++probe_drops_;  // the agents' own traffic: not counted against the policy
    return;
  }
  ++drops_[static_cast<int>(r)];
  if (link != kNoLink) ++ports_[link]->mutable_counters().drops;
  if (on_drop_) on_drop_(*p, r);
}

void Network::Receive(NodeId node, PacketPtr p, LinkId in_link) {
  if (p->kind == PacketKind::kFiller) return;  // background load ends at the link's far end
  if (p->kind == PacketKind::kProbe || p->kind == PacketKind::kProbeReply) {
    if (on_probe_) on_probe_(node, in_link, std::move(p));
    return;
  }
  if (node == p->dst) {
    on_receive_(std::move(p));
    return;
  }
  Forward(node, std::move(p));
}

void Network::Forward(NodeId node, PacketPtr p) {
  if (p->hop_limit == 0) {
    Drop(std::move(p), DropReason::kHopLimit, kNoLink);
    return;
  }
  --p->hop_limit;
  const NodeId target = route_target_[p->dst];
  LinkId out = kNoLink;
  if (const LinkId up = stub_uplink_[node]; up != kNoLink) {
    if (ports_[up]->forwardable()) out = up;
  } else if (node == target) {
    if (balancer_) balancer_->OnLastSwitch(node, *p, loop_.now());
    out = last_hop_link_[p->dst];
  } else if (const RoutingTables* t = tables_[p->traffic_class % kClasses].get();
             t != nullptr && t->IsDestination(target)) {
    const absl::Span<const NextHop> hops = t->Lookup(node, target);
    if (balancer_ && hops.size() > 1) out = balancer_->Choose(node, *p, hops, loop_.now());
    if (out == kNoLink) {
      const uint64_t flow = p->flow_id ^ (static_cast<uint64_t>(p->path_label) << 32);
      out = choosers_[node].Choose(hops, flow, p->dst, loop_.now(), rng_, PortView(ports_),
                                   p->traffic_class);
    }
  }
  if (out == kNoLink) {
    Drop(std::move(p), DropReason::kNoRoute, kNoLink);
    return;
  }
  ports_[out]->Enqueue(std::move(p));
}

}  // namespace dar::sim
