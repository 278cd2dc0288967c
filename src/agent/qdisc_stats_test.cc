#include "agent/qdisc_stats.h"

#include <errno.h>
#include <linux/gen_stats.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dar::agent {
namespace {

// Builds netlink messages as the kernel lays them out.
class Message {
 public:
  explicit Message(uint16_t type) { Append(nlmsghdr{.nlmsg_type = type}); }
  template <typename T>
  Message& Append(const T& value) {
    // (resize and memcpy: g++ 12 warns, wrongly, of an overflow in inserting the bytes.)
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
    Pad();
    return *this;
  }
  // An attribute whose payload is `payload`.
  Message& Attribute(uint16_t type, const std::vector<uint8_t>& payload) {
    Append(rtattr{static_cast<unsigned short>(RTA_LENGTH(payload.size())), type});
    bytes_.insert(bytes_.end(), payload.begin(), payload.end());
    Pad();
    return *this;
  }
  std::vector<uint8_t> Finish() const {
    std::vector<uint8_t> out = bytes_;
    const uint32_t len = static_cast<uint32_t>(out.size());
    std::memcpy(out.data(), &len, sizeof(len));  // nlmsg_len
    return out;
  }

 private:
  void Pad() { bytes_.resize(NLMSG_ALIGN(bytes_.size()), 0); }
  std::vector<uint8_t> bytes_;
};

template <typename T>
std::vector<uint8_t> Bytes(const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  return std::vector<uint8_t>(p, p + sizeof(T));
}

std::vector<uint8_t> Kind(const std::string& kind) {
  std::vector<uint8_t> out(kind.begin(), kind.end());
  out.push_back(0);
  return out;
}

// TCA_STATS2 holding a TCA_STATS_BASIC (what left) and a TCA_STATS_QUEUE.
std::vector<uint8_t> Stats2(uint32_t qlen, uint32_t backlog, uint32_t drops,
                            uint64_t sent_bytes = 0, uint32_t sent_packets = 0) {
  const gnet_stats_basic b{.bytes = sent_bytes, .packets = sent_packets};
  std::vector<uint8_t> out = Bytes(rtattr{RTA_LENGTH(sizeof(b)), TCA_STATS_BASIC});
  const std::vector<uint8_t> basic = Bytes(b);
  out.insert(out.end(), basic.begin(), basic.end());
  out.resize(RTA_ALIGN(out.size()), 0);
  const gnet_stats_queue q{.qlen = qlen, .backlog = backlog, .drops = drops};
  const std::vector<uint8_t> head = Bytes(rtattr{RTA_LENGTH(sizeof(q)), TCA_STATS_QUEUE});
  out.insert(out.end(), head.begin(), head.end());
  const std::vector<uint8_t> body = Bytes(q);
  out.insert(out.end(), body.begin(), body.end());
  out.resize(RTA_ALIGN(out.size()), 0);
  return out;
}

TEST(QdiscStatsTest, ReadsKindAndQueueOfTheAskedInterface) {
  std::vector<uint8_t> reply = Message(RTM_NEWQDISC)
                                   .Append(tcmsg{.tcm_ifindex = 3, .tcm_parent = TC_H_ROOT})
                                   .Attribute(TCA_KIND, Kind("fq_codel"))
                                   .Attribute(TCA_STATS2, Stats2(1, 1500, 0))
                                   .Finish();
  const std::vector<uint8_t> second =
      Message(RTM_NEWQDISC)
          .Append(tcmsg{.tcm_ifindex = 7, .tcm_parent = TC_H_ROOT})
          .Attribute(TCA_KIND, Kind("tbf"))
          .Attribute(TCA_STATS2, Stats2(41, 61500, 9, 5'000'000'000, 3'400'000))
          .Finish();
  reply.insert(reply.end(), second.begin(), second.end());
  absl::StatusOr<QdiscStats> s = ParseQdiscReply(reply, 7);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, "tbf");
  EXPECT_EQ(s->backlog_bytes, 61500);
  EXPECT_EQ(s->backlog_packets, 41);
  EXPECT_EQ(s->drops, 9);
  EXPECT_EQ(s->sent_bytes, 5'000'000'000);  // a 64-bit counter past 4 GB
  EXPECT_EQ(s->sent_packets, 3'400'000);
}

TEST(QdiscStatsTest, FallsBackToTheOldStatisticsBlock) {
  tc_stats old{};
  old.qlen = 2;
  old.backlog = 3000;
  old.drops = 1;
  old.bytes = 123456;
  old.packets = 100;
  const std::vector<uint8_t> reply = Message(RTM_NEWQDISC)
                                         .Append(tcmsg{.tcm_ifindex = 2})
                                         .Attribute(TCA_KIND, Kind("htb"))
                                         .Attribute(TCA_STATS, Bytes(old))
                                         .Finish();
  absl::StatusOr<QdiscStats> s = ParseQdiscReply(reply, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->backlog_bytes, 3000);
  EXPECT_EQ(s->backlog_packets, 2);
  EXPECT_EQ(s->sent_bytes, 123456);
  EXPECT_EQ(s->sent_packets, 100);
}

TEST(QdiscStatsTest, KernelErrorsAndMissingAnswersAreErrors) {
  nlmsgerr e{};
  e.error = -ENODEV;
  const std::vector<uint8_t> no_device = Message(NLMSG_ERROR).Append(e).Finish();
  EXPECT_EQ(ParseQdiscReply(no_device, 4).status().code(), absl::StatusCode::kNotFound);

  const std::vector<uint8_t> other = Message(RTM_NEWQDISC).Append(tcmsg{.tcm_ifindex = 5}).Finish();
  absl::Status s = ParseQdiscReply(other, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("interface 4"), std::string::npos) << s;

  std::vector<uint8_t> truncated = Message(RTM_NEWQDISC)
                                       .Append(tcmsg{.tcm_ifindex = 4})
                                       .Attribute(TCA_KIND, Kind("tbf"))
                                       .Finish();
  truncated.resize(truncated.size() - 4);  // nlmsg_len now runs past the end
  EXPECT_EQ(ParseQdiscReply(truncated, 4).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ReadRootQdiscStats(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dar::agent
