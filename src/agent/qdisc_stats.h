// The egress queue of a network interface as the kernel's traffic control holds it: the
// statistics of its root qdisc, read over rtnetlink (RTM_GETQDISC).
//
// Where a link is shaped (tbf, htb, a NIC's own queues) packets wait in the qdisc, below the
// agent's socket: SIOCOUTQ on the socket does not see that queue, the qdisc's backlog does.
//
// Thread-safe, no shared state: each read opens its own netlink socket in the calling thread's
// network namespace and never blocks (the kernel answers a get before sendmsg returns). A few
// system calls per read: one read per link per probe period, not per packet.
#ifndef DAR_AGENT_QDISC_STATS_H_
#define DAR_AGENT_QDISC_STATS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dar::agent {

// One qdisc's kind and queue (struct gnet_stats_queue).
struct QdiscStats {
  std::string kind;             // "tbf", "fq_codel", "mq", "noqueue", ...
  int64_t backlog_bytes = 0;    // bytes waiting in it (children included)
  int64_t backlog_packets = 0;  // packets waiting in it
  int64_t drops = 0;            // packets it dropped since it was created
  // What left it since it was created (struct gnet_stats_basic): on a shaped link, what the
  // link delivered, as opposed to what was offered to it.
  int64_t sent_bytes = 0;
  int64_t sent_packets = 0;
};

// The root qdisc of interface `ifindex` in the calling thread's namespace. An interface
// without a queue (noqueue, e.g. a veth by default) reports an empty backlog.
// Errors: InvalidArgument for ifindex 0; NotFound when there is no such interface (or it has
// no root qdisc); Unavailable or Internal, naming the step and the errno, when the kernel
// cannot be asked or its answer cannot be read.
absl::StatusOr<QdiscStats> ReadRootQdiscStats(unsigned ifindex);

// Parses the kernel's answer to RTM_GETQDISC (one or more netlink messages) for the qdisc
// of `ifindex`. Errors: the NLMSG_ERROR the kernel sent (NotFound for ENOENT/ENODEV), or
// Internal when no RTM_NEWQDISC for `ifindex` is in `reply` or a message is truncated.
absl::StatusOr<QdiscStats> ParseQdiscReply(absl::Span<const uint8_t> reply, unsigned ifindex);

}  // namespace dar::agent

#endif  // DAR_AGENT_QDISC_STATS_H_
