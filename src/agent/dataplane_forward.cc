// The data plane's per-packet path (see dataplane.h for the picture).
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "agent/dataplane.h"
#include "agent/dataplane_internal.h"
#include "net/udp_socket.h"

namespace dar::agent {
namespace {

// Receive batches taken from one ready socket before the others get a turn.
constexpr int kBatchesPerWake = 4;
// Datagrams handled before what they produced is sent (or written to the TUN) even in the middle
// of a batch: with GRO and TUN super-packets a batch can hold megabytes, and the next hop
// should not wait for all of it (a GSO message's worth keeps sends batched).
constexpr size_t kFlushDatagrams = 64;

}  // namespace

// The per-packet path: receive, authenticate and route datagrams from the links, deliver to
// the TUN, read and seal what the TUN gives, queue and send in batches. Kept in one file so
// that the compiler sees the whole path at once.

void Dataplane::ReceiveFrom(Port& port, net::UdpSocket& socket) {
  const size_t batch = recv_slots_.size();
  for (int round = 0; round < kBatchesPerWake; ++round) {
    for (size_t i = 0; i < batch; ++i) {
      recv_slots_[i] = net::RecvSlot(
          absl::MakeSpan(recv_arena_.data() + i * recv_slot_bytes_, recv_slot_bytes_));
    }
    absl::StatusOr<int> got = socket.RecvBatch(absl::MakeSpan(recv_slots_));
    const size_t n = got.ok() ? static_cast<size_t>(*got) : 0;
    if (!got.ok()) counters_.recv_errors.Add();
    const Time wall_rx = n > 0 ? WallNow() : Time(0);
    const Time now = n > 0 ? SteadyNow() : Time(0);
    if (n > 0) counters_.receive_batches.Add();
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
        counters_.received.Add();
        Drop(DropReason::kTruncated);
        continue;
      }
      if (slot.segment_size > 0) counters_.gro_slots.Add();
      net::ForEachDatagram(slot, [&](size_t offset, size_t size) {
        counters_.received.Add();
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
  net::ParseOverlayBatch(
      absl::MakeConstSpan(spans.data(), n), active_keys_ ? *active_keys_ : kNoKeys,
      static_cast<uint32_t>(config_.node), static_cast<uint32_t>(in.config.neighbour),
      statuses.data(), packets.data());
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
    if (FirstTime(packet)) Deliver(packet.payload);
    return;
  }
  Route(kNoBuffer, data, size, packet.header, /*transit=*/true, now);
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
  counters_.delivered.Add();
}

void Dataplane::FlushDelivery() {
  const auto flush = [&](auto& coalescer) {
    if (coalescer.empty()) return;
    const int segments = coalescer.segments();
    net::OffloadInfo info;
    const absl::Span<const uint8_t> packet = coalescer.Take(&info);
    const absl::StatusOr<bool> written = tun_->Write(packet, info);
    if (!written.ok() || !*written) {
      counters_.drops[static_cast<size_t>(DropReason::kTunWrite)].Add(
          static_cast<uint64_t>(segments));
      // A kernel without UDP segmentation offload for TUN writes (before 6.2) refuses them:
      // this batch is lost, and from now on datagrams are written one by one.
      if (!written.ok() && info.gso == net::OffloadInfo::Gso::kUdp) udp_coalesce_ = false;
      return;
    }
    counters_.delivered.Add(static_cast<uint64_t>(segments));
    if (segments > 1) counters_.tun_super_writes.Add();
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
      if (!n.ok()) counters_.recv_errors.Add();
      GiveBuffer(b);
      break;
    }
    counters_.from_tun.Add();
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
    counters_.tun_super_reads.Add();
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
    if (key == nullptr || key->peer(static_cast<uint32_t>(it->second)) == nullptr) {
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
    h.sequence = sequencer_.Next(h.destination);
    sent_to_[static_cast<size_t>(it->second)].Add(sizes[i]);
    const absl::StatusOr<size_t> size =
        net::SealOverlayHeader(h, packet, key->id(), absl::MakeSpan(BufferData(b), buffer_bytes_));
    assert(size.ok());
    kept[m] = b;
    data[m] = BufferData(b);
    sealed[m++] = *size;
  }
  if (m == 0) return;
  // End-to-end tags, side by side for each run of one destination (a super-packet's segments).
  for (size_t j = 0; j < m;) {
    size_t run = 1;
    while (j + run < m && headers[j + run].destination == headers[j].destination) ++run;
    net::TagSealedOverlays(key->peer(headers[j].destination)->end_to_end, &data[j], &sealed[j],
                           run);
    j += run;
  }
  for (size_t j = 0; j < m; ++j) {
    counters_.encapsulated.Add();
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
  Port& port = *ports_[static_cast<size_t>(port_of_link_[static_cast<size_t>(link)])];
  // The hop tag, for the neighbour it goes to, under the key epoch the ingress sealed with.
  const net::OverlayKey* key = active_keys_ ? active_keys_->Find(net::OverlayKeyId(data)) : nullptr;
  const net::OverlayPeerKeys* next =
      key == nullptr ? nullptr : key->peer(static_cast<uint32_t>(port.config.neighbour));
  if (next == nullptr) {
    DropBuffer(DropReason::kNoKey, buffer);
    return;
  }
  if (transit) {
    const net::OverlayStatus s = net::ForwardOverlay(absl::MakeSpan(data, size));
    if (s != net::OverlayStatus::kOk) {
      DropBuffer(DropReasonFor(s), buffer);
      return;
    }
    counters_.forwarded.Add();
  }
  net::SetOverlayHopTag(data, size, next->hop, static_cast<uint32_t>(port.config.neighbour));
  Enqueue(port, data, size, buffer);
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
      if (tx.runs[m] > 1) counters_.gso_messages.Add();
      for (uint32_t k = 0; k < tx.runs[m]; ++k) {
        const Port::Queued q = port.Pop();
        counters_.sent.Add();
        counters_.sent_bytes.Add(q.size);
        port.tx_wire_bytes.Add(q.size + kUnderlayHeaderBytes);
        GiveBuffer(q.buffer);
      }
    }
    counters_.send_batches.Add();
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

}  // namespace dar::agent
