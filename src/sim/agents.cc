#include "sim/agents.h"

namespace dar::sim {

SimAgents::SimAgents(EventLoop& loop, Network& net, const AgentConfig& config, SampleSink sink)
    : loop_(loop),
      net_(net),
      config_(config),
      sink_(std::move(sink)),
      tick_(loop, [this] { Tick(); }),
      reports_(loop, [this](std::vector<LinkSample>&& s) { sink_(s); }) {
  const Topology& topo = net_.topology();
  monitors_.reserve(topo.num_links());
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    LinkMonitorConfig m = config_.monitor;
    m.sample_period = config_.period;
    m.capacity = topo.link(l).params.capacity;
    monitors_.emplace_back(m);
  }
  liveness_.assign(topo.num_links(), LinkLiveness(config_.liveness));
  net_.set_probe_handler(
      [this](NodeId at, LinkId in_link, PacketPtr p) { OnProbe(at, in_link, std::move(p)); });
}

SimAgents::~SimAgents() { net_.set_probe_handler(nullptr); }

void SimAgents::Start() { tick_.ScheduleIn(Duration(0)); }

void SimAgents::Tick() {
  const Time now = loop_.now();
  const Topology& topo = net_.current();
  std::vector<LinkSample> samples(topo.num_links());
  ++seq_;
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const LinkCounters& c = net_.counters(l);
    monitors_[l].set_capacity(topo.link(l).params.capacity);  // the port's speed now
    monitors_[l].OnCounters(now, c.tx_bytes, net_.QueuedBytes(l));
    // The probes sent before this one are judged as it leaves. A link without a reverse cannot
    // be answered here (the reply has no way back) and is not judged: carrier alone says.
    const bool probed = topo.link(l).reverse != kNoLink;
    if (probed && liveness_[l].OnProbeSent(seq_) && on_liveness_) {
      on_liveness_(l, liveness_[l].up());
    }
    samples[l] = monitors_[l].Sample(now);
    samples[l].up = liveness_[l].up();
    // The next probe; the link's own port carries it, behind whatever is queued.
    monitors_[l].OnProbeSent(seq_, now);
    PacketPtr p = net_.pool().Allocate();
    p->kind = PacketKind::kProbe;
    p->src = topo.link(l).src;
    p->dst = topo.link(l).dst;
    p->seq = seq_;
    p->size_bytes = config_.probe_bytes;
    p->sent_time = now;
    net_.SendOnLink(l, std::move(p));
    ++probes_sent_;
  }
  reports_.Send(std::move(samples), config_.report_delay);
  tick_.ScheduleIn(config_.period);
}

void SimAgents::OnProbe(NodeId at, LinkId in_link, PacketPtr p) {
  const Time now = loop_.now();
  if (p->kind == PacketKind::kProbe) {
    // The far end answers at once on the reverse link (t2 = t3: no hold time).
    const LinkId back = net_.topology().link(in_link).reverse;
    if (back == kNoLink) return;
    p->kind = PacketKind::kProbeReply;
    p->peer_received = now;
    p->peer_sent = now;
    std::swap(p->src, p->dst);
    net_.SendOnLink(back, std::move(p));
    return;
  }
  // A reply came back over the reverse of the probed link.
  const LinkId probed = net_.topology().link(in_link).reverse;
  if (probed == kNoLink) return;
  bool counted = false;
  monitors_[probed]
      .OnProbeReply(p->seq, p->sent_time, p->peer_received, p->peer_sent, now, &counted)
      .IgnoreError();  // what it refuses, the loss window counts
  if (counted && liveness_[probed].OnReply(p->seq) && on_liveness_) on_liveness_(probed, true);
}

std::vector<bool> CablesUp(const Topology& topo, const std::vector<LinkSample>& samples) {
  const auto end = [&](LinkId x) {
    if (x == kNoLink) return CableEnd{.exists = false};
    return CableEnd{.heard = true, .fresh = true, .says_up = samples[x].up};
  };
  std::vector<bool> up(topo.num_links(), true);
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    up[l] = CableUp(end(l), end(topo.link(l).reverse), /*was_up=*/true);  // ends always fresh
  }
  return up;
}

}  // namespace dar::sim
