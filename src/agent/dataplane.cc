// The data plane: creation, the control surface, the loop, probing and liveness.
#include "agent/dataplane.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
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
#include <utility>

#include "agent/dataplane_internal.h"
#include "agent/qdisc_stats.h"
#include "base/status_macros.h"
#include "core/telemetry.h"
#include "fmt/format.h"
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

// Raises a socket buffer beyond net.core.{r,w}mem_max when allowed (CAP_NET_ADMIN); harmless
// otherwise, since SetBufferBytes has already asked for the capped size.
void ForceBufferBytes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes));
}

}  // namespace

// Dataplane -----------------------------------------------------------------------------------

Dataplane::Dataplane(const DataplaneConfig& config)
    : config_(config),
      topology_(*config.topology),
      chooser_(config.forwarding,
               Random::Hash(config.seed ^ (0x5a17ull << 32) ^ static_cast<uint64_t>(config.node))),
      rng_(Random::Hash(config.seed) ^ static_cast<uint64_t>(config.node)),
      sequencer_(
          config.overlay_addresses.size(),
          std::max<int64_t>(WallNow().count(), static_cast<int64_t>(std::min<uint64_t>(
                                                   config.sequence_floor_ms, uint64_t{1} << 43)) *
                                                   1'000'000)),
      replay_(config.overlay_addresses.size()),
      pending_forwarding_(config.forwarding) {}

Dataplane::~Dataplane() { Stop(); }

absl::StatusOr<std::unique_ptr<Dataplane>> Dataplane::Create(const DataplaneConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Dataplane> dp(new Dataplane(config));
  const DataplaneConfig& c = dp->config_;

  if (!c.initial_keys.empty()) {
    ASSIGN_OR_RETURN(auto keys, BuildKeyRing(c.initial_keys, c));
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
  ASSIGN_OR_RETURN(std::shared_ptr<const net::OverlayKeyRing> ring, BuildKeyRing(keys, config_));
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
        fmt::format("probe interval {} ms: must be between 1 ms and 60 s",
                    static_cast<double>(interval.count()) / 1e6));
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
  for (const auto& p : ports_) {
    MutexLock lock(&p->monitor_mu);
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
  for (size_t i = 0; i < kDropReasons; ++i) c.drops[i] = counters_.drops[i].Get();
#define DAR_DATAPLANE_COUNTER_READ(name, help) c.name = counters_.name.Get();
  DAR_DATAPLANE_COUNTERS(DAR_DATAPLANE_COUNTER_READ)
#undef DAR_DATAPLANE_COUNTER_READ
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

bool Dataplane::FirstTime(const net::OverlayPacket& packet) {
  if (replay_.Accept(packet.header.source, packet.key_id, packet.header.sequence)) return true;
  Drop(DropReason::kReplayed);
  return false;
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
    for (auto& p : ports_) {
      p->liveness.set_missed_probes(missed);
      MutexLock lock(&p->monitor_mu);
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
      MutexLock lock(&p.monitor_mu);
      p.monitor.OnProbeSent(seq, t1);
      p.monitor.OnCounters(now, p.Delivered(qdisc), p.queued_bytes + below);
    }
    counters_.probes_sent.Add();
    net::OverlayHeader h;
    h.type = net::OverlayType::kProbe;
    h.hop_limit = 1;
    h.source = static_cast<uint32_t>(config_.node);
    h.destination = static_cast<uint32_t>(p.config.neighbour);
    h.sequence = sequencer_.Next(h.destination);
    SendProbe(p, h, net::EncodeProbe(net::ProbeBody{seq, t1}), *key);
  }
}

void Dataplane::SendProbe(Port& port, const net::OverlayHeader& header,
                          absl::Span<const uint8_t> body, const net::OverlayKey& key) {
  std::array<uint8_t, 256> datagram;
  const absl::StatusOr<size_t> size = net::SealOverlay(
      header, body, key, static_cast<uint32_t>(port.config.neighbour), absl::MakeSpan(datagram));
  if (!size.ok()) {
    Drop(DropReason::kNoKey);  // the key set has no key shared with this neighbour
    return;
  }
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
  counters_.sent.Add();
  counters_.sent_bytes.Add(*size);
  port.tx_wire_bytes.Add(*size + kUnderlayHeaderBytes);
}

void Dataplane::HandleProbe(Port& in, const net::OverlayPacket& packet, Time wall_rx) {
  if (packet.header.source != static_cast<uint32_t>(in.config.neighbour) ||
      packet.header.destination != static_cast<uint32_t>(config_.node)) {
    Drop(DropReason::kBadProbe);
    return;
  }
  if (!FirstTime(packet)) return;
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
  h.sequence = sequencer_.Next(h.destination);
  counters_.probe_replies_sent.Add();
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
  if (!FirstTime(packet)) return;
  const absl::StatusOr<net::ProbeReplyBody> reply = net::DecodeProbeReply(packet.payload);
  if (!reply.ok()) {
    Drop(DropReason::kBadLength);
    return;
  }
  bool counted = false;
  {
    MutexLock lock(&in.monitor_mu);
    const absl::Status s = in.monitor.OnProbeReply(reply->sequence, reply->t1, reply->t2, reply->t3,
                                                   wall_rx, &counted);
    if (!s.ok()) counters_.probe_replies_rejected.Add();
  }
  if (!counted) return;
  counters_.probe_replies_received.Add();
  in.probes_answered.Add();
  if (in.liveness.OnReply(reply->sequence)) SetPortUp(in, in.liveness.up());
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
          counters_.carrier_losses.Add();
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
  counters_.liveness_changes.Add();
  if (active_callback_) active_callback_(port.config.neighbour, up);
}

}  // namespace dar::agent
