#include "agent/qdisc_stats.h"

#include <errno.h>
#include <linux/gen_stats.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "fmt/format.h"

namespace dar::agent {
namespace {

// The kernel's answer to a get of one qdisc: its kind, options and statistics, well under
// this (options of the largest qdiscs are a few hundred bytes).
constexpr size_t kReplyBytes = 16384;

absl::Status ErrnoStatus(int err, std::string_view step, unsigned ifindex) {
  const std::string text =
      fmt::format("qdisc stats of interface {}: {}: {}", ifindex, step, std::strerror(err));
  if (err == ENOENT || err == ENODEV) return absl::NotFoundError(text);
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return absl::UnavailableError(text);
  return absl::InternalError(text);
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// Reads a T at `offset` of `bytes` (netlink data need not be aligned for T in a caller's
// buffer). REQUIRES: offset + sizeof(T) <= bytes.size().
template <typename T>
T ReadAt(absl::Span<const uint8_t> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// Calls f(type, payload) for each attribute in `attrs` (a run of rtattrs); false if one is
// truncated.
template <typename F>
bool ForEachAttribute(absl::Span<const uint8_t> attrs, F f) {
  size_t at = 0;
  while (at + sizeof(rtattr) <= attrs.size()) {
    const auto a = ReadAt<rtattr>(attrs, at);
    if (a.rta_len < sizeof(rtattr) || at + a.rta_len > attrs.size()) return false;
    f(a.rta_type & NLA_TYPE_MASK, attrs.subspan(at + RTA_LENGTH(0), a.rta_len - RTA_LENGTH(0)));
    at += RTA_ALIGN(a.rta_len);
  }
  return true;
}

}  // namespace

absl::StatusOr<QdiscStats> ParseQdiscReply(absl::Span<const uint8_t> reply, unsigned ifindex) {
  size_t at = 0;
  while (at + sizeof(nlmsghdr) <= reply.size()) {
    const auto h = ReadAt<nlmsghdr>(reply, at);
    if (h.nlmsg_len < sizeof(nlmsghdr) || at + h.nlmsg_len > reply.size()) {
      return absl::InternalError(fmt::format(
          "qdisc stats of interface {}: truncated netlink message at byte {}", ifindex, at));
    }
    const absl::Span<const uint8_t> body =
        reply.subspan(at + NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
    at += NLMSG_ALIGN(h.nlmsg_len);
    if (h.nlmsg_type == NLMSG_ERROR && body.size() >= sizeof(nlmsgerr)) {
      const int err = ReadAt<nlmsgerr>(body, 0).error;
      if (err != 0) return ErrnoStatus(-err, "RTM_GETQDISC", ifindex);
      continue;  // an acknowledgement
    }
    if (h.nlmsg_type != RTM_NEWQDISC || body.size() < sizeof(tcmsg)) continue;
    const auto tc = ReadAt<tcmsg>(body, 0);
    if (static_cast<unsigned>(tc.tcm_ifindex) != ifindex) continue;
    QdiscStats stats;
    bool have_queue = false;
    const absl::Span<const uint8_t> attrs = body.subspan(NLMSG_ALIGN(sizeof(tcmsg)));
    const bool whole = ForEachAttribute(attrs, [&](int type, absl::Span<const uint8_t> value) {
      if (type == TCA_KIND) {
        stats.kind.assign(reinterpret_cast<const char*>(value.data()),
                          strnlen(reinterpret_cast<const char*>(value.data()), value.size()));
      } else if (type == TCA_STATS2) {
        ForEachAttribute(value, [&](int nested, absl::Span<const uint8_t> v) {
          if (nested == TCA_STATS_BASIC && v.size() >= sizeof(gnet_stats_basic)) {
            const auto b = ReadAt<gnet_stats_basic>(v, 0);
            stats.sent_bytes = static_cast<int64_t>(b.bytes);
            stats.sent_packets = b.packets;
            return;
          }
          if (nested != TCA_STATS_QUEUE || v.size() < sizeof(gnet_stats_queue)) return;
          const auto q = ReadAt<gnet_stats_queue>(v, 0);
          stats.backlog_bytes = q.backlog;
          stats.backlog_packets = q.qlen;
          stats.drops = q.drops;
          have_queue = true;
        });
      } else if (type == TCA_STATS && !have_queue && value.size() >= sizeof(tc_stats)) {
        // The old statistics block: kernels that do not send TCA_STATS2.
        const auto s = ReadAt<tc_stats>(value, 0);
        stats.backlog_bytes = s.backlog;
        stats.backlog_packets = s.qlen;
        stats.drops = s.drops;
        stats.sent_bytes = static_cast<int64_t>(s.bytes);
        stats.sent_packets = s.packets;
      }
    });
    if (!whole) {
      return absl::InternalError(
          fmt::format("qdisc stats of interface {}: truncated attribute in RTM_NEWQDISC", ifindex));
    }
    return stats;
  }
  return absl::InternalError(
      fmt::format("qdisc stats of interface {}: no RTM_NEWQDISC for it in the kernel's answer "
                  "({} bytes)",
                  ifindex, reply.size()));
}

absl::StatusOr<QdiscStats> ReadRootQdiscStats(unsigned ifindex) {
  if (ifindex == 0) {
    return absl::InvalidArgumentError("qdisc stats: interface index 0 (an unknown interface)");
  }
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return ErrnoStatus(errno, "socket(NETLINK_ROUTE)", ifindex);
  const FdCloser closer(fd);
  struct {
    nlmsghdr h;
    tcmsg tc;
  } request{};
  request.h.nlmsg_len = NLMSG_LENGTH(sizeof(tcmsg));
  request.h.nlmsg_type = RTM_GETQDISC;
  // A get (not a dump) of the root qdisc; NLM_F_ECHO: the answer comes back to us.
  request.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ECHO;
  request.h.nlmsg_seq = 1;
  request.tc.tcm_family = AF_UNSPEC;
  request.tc.tcm_ifindex = static_cast<int>(ifindex);
  request.tc.tcm_parent = TC_H_ROOT;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &request, request.h.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
    return ErrnoStatus(errno, "sendto(RTM_GETQDISC)", ifindex);
  }
  // rtnetlink runs a get in the sender's context: the answer is queued before sendto returns.
  alignas(nlmsghdr) uint8_t buffer[kReplyBytes];
  const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n < 0) return ErrnoStatus(errno, "recv(RTM_GETQDISC answer)", ifindex);
  return ParseQdiscReply(absl::MakeConstSpan(buffer, static_cast<size_t>(n)), ifindex);
}

}  // namespace dar::agent
