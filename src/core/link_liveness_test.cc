#include "core/link_liveness.h"

#include "gtest/gtest.h"

namespace dar {
namespace {

TEST(LinkLivenessConfigTest, RefusesCountsBelowOneByName) {
  EXPECT_TRUE(LinkLivenessConfig{}.Validate().ok());
  const absl::Status missed = LinkLivenessConfig{.missed_probes = 0}.Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(missed));
  EXPECT_NE(missed.message().find("missed_probes 0"), std::string::npos) << missed;
  const absl::Status recover = LinkLivenessConfig{.recover_replies = -1}.Validate();
  EXPECT_NE(recover.message().find("recover_replies -1"), std::string::npos) << recover;
}

TEST(LinkLivenessTest, HealthyLinkStaysUp) {
  LinkLiveness l({.missed_probes = 3, .recover_replies = 2});
  EXPECT_TRUE(l.up());
  for (uint64_t seq = 1; seq <= 100; ++seq) {
    EXPECT_FALSE(l.OnProbeSent(seq));
    // Replies may come a probe late (RTT above the interval) without harm.
    if (seq >= 2) {
      EXPECT_FALSE(l.OnReply(seq - 1));
    }
  }
  EXPECT_TRUE(l.up());
}

TEST(LinkLivenessTest, DownAfterThreeMissedProbesUpAfterTwoReplies) {
  LinkLiveness l({.missed_probes = 3, .recover_replies = 2});
  EXPECT_FALSE(l.OnProbeSent(1));
  EXPECT_FALSE(l.OnReply(1));
  // Probes 2, 3, 4 go unanswered; each has a full interval before the next one leaves.
  EXPECT_FALSE(l.OnProbeSent(2));
  EXPECT_FALSE(l.OnProbeSent(3));
  EXPECT_FALSE(l.OnProbeSent(4));
  EXPECT_TRUE(l.up());
  EXPECT_TRUE(l.OnProbeSent(5));  // judged before 5 leaves: 2, 3, 4 missed
  EXPECT_FALSE(l.up());
  // A late reply to a probe sent before the failure does not bring it back.
  EXPECT_FALSE(l.OnReply(3));
  EXPECT_FALSE(l.OnReply(4));
  EXPECT_FALSE(l.up());
  // Replies to 5 and 6 (sent after it went down) do, on the second.
  EXPECT_FALSE(l.OnProbeSent(6));
  EXPECT_FALSE(l.OnReply(5));
  EXPECT_FALSE(l.up());
  EXPECT_TRUE(l.OnReply(6));
  EXPECT_TRUE(l.up());
}

TEST(LinkLivenessTest, RecoveryNeedsConsecutiveProbes) {
  LinkLiveness l({.missed_probes = 1, .recover_replies = 2});
  EXPECT_FALSE(l.OnProbeSent(1));
  EXPECT_TRUE(l.OnProbeSent(2));  // 1 missed
  for (uint64_t seq = 3; seq <= 8; ++seq) l.OnProbeSent(seq);
  EXPECT_FALSE(l.OnReply(3));
  EXPECT_FALSE(l.OnReply(5));  // not consecutive: the streak starts over
  EXPECT_FALSE(l.OnReply(7));
  EXPECT_FALSE(l.up());
  EXPECT_TRUE(l.OnReply(8));
  EXPECT_TRUE(l.up());
}

TEST(LinkLivenessTest, SendErrorIsDownAtOnce) {
  LinkLiveness l({.missed_probes = 3, .recover_replies = 2});
  EXPECT_FALSE(l.OnProbeSent(1));
  EXPECT_FALSE(l.OnReply(1));
  EXPECT_FALSE(l.OnProbeSent(2));
  EXPECT_TRUE(l.OnSendError());
  EXPECT_FALSE(l.up());
  EXPECT_FALSE(l.OnSendError());  // already down: no new event
  EXPECT_FALSE(l.OnReply(2));     // sent before the error
  EXPECT_FALSE(l.OnProbeSent(3));
  EXPECT_FALSE(l.OnProbeSent(4));
  EXPECT_FALSE(l.OnReply(3));
  EXPECT_TRUE(l.OnReply(4));
  EXPECT_TRUE(l.up());
}

TEST(LinkLivenessTest, ContinuingFailureDoesNotRepeatEvents) {
  LinkLiveness l({.missed_probes = 2, .recover_replies = 2});
  int changes = 0;
  for (uint64_t seq = 1; seq <= 50; ++seq) changes += l.OnProbeSent(seq);
  EXPECT_EQ(changes, 1);
  EXPECT_FALSE(l.up());
  EXPECT_EQ(l.unanswered(), 50);
}

// CableUp --------------------------------------------------------------------------------------

CableEnd Fresh(bool up) { return CableEnd{.heard = true, .fresh = true, .says_up = up}; }
CableEnd Silent() { return CableEnd{.heard = true, .fresh = false, .age = Milliseconds(420)}; }
CableEnd NeverHeard() { return CableEnd{}; }
CableEnd NoReverse() { return CableEnd{.exists = false}; }

TEST(CableUpTest, OneFreshEndSayingUpKeepsTheCableUp) {
  EXPECT_TRUE(CableUp(Fresh(true), Fresh(true), false));
  EXPECT_TRUE(CableUp(Fresh(true), Fresh(false), false));
  EXPECT_TRUE(CableUp(Fresh(false), Fresh(true), false));
  EXPECT_TRUE(CableUp(Silent(), Fresh(true), false));
}

TEST(CableUpTest, DownWhenTheFreshEndsSayDownOrEveryHeardEndWentSilent) {
  EXPECT_FALSE(CableUp(Fresh(false), Fresh(false), true));
  EXPECT_FALSE(CableUp(Fresh(false), Silent(), true));
  EXPECT_FALSE(CableUp(Fresh(false), NeverHeard(), true));
  EXPECT_FALSE(CableUp(Silent(), Silent(), true));
  EXPECT_FALSE(CableUp(Silent(), NeverHeard(), true));  // a node that was heard from went quiet
  EXPECT_FALSE(CableUp(Fresh(false), NoReverse(), true));
  EXPECT_FALSE(CableUp(Silent(), NoReverse(), true));
}

// A silent end whose node is behind as a whole (the controller's judgement: stream open, no
// fresh report of any of its links, within a grace) leaves the cable as it was, up or down. A
// fresh word still decides at once.
TEST(CableUpTest, SilenceOfANodeBehindKeepsTheCableAsItWas) {
  CableEnd lagging = Silent();
  lagging.lagging = true;
  EXPECT_TRUE(CableUp(lagging, Silent(), true));
  EXPECT_TRUE(CableUp(Silent(), lagging, true));
  EXPECT_FALSE(CableUp(lagging, lagging, false));
  EXPECT_TRUE(CableUp(lagging, lagging, true));
  EXPECT_TRUE(CableUp(lagging, NoReverse(), true));
  EXPECT_FALSE(CableUp(lagging, Fresh(false), true));
  EXPECT_TRUE(CableUp(lagging, Fresh(true), false));
  // Once no silent end's node is behind, silence takes it down.
  EXPECT_FALSE(CableUp(Silent(), Silent(), true));
  EXPECT_EQ(DescribeCableEnd(lagging), "silent for 420 ms (its node behind)");
}

TEST(CableUpTest, EndsNeverHeardFromTellNothing) {
  // A restarted controller keeps links up until their agents reconnect.
  EXPECT_TRUE(CableUp(NeverHeard(), NeverHeard(), false));
  EXPECT_TRUE(CableUp(NeverHeard(), NoReverse(), false));
}

TEST(CableUpTest, DescribesEachEndForTheOperator) {
  EXPECT_EQ(DescribeCableEnd(Fresh(true)), "up");
  EXPECT_EQ(DescribeCableEnd(Fresh(false)), "says down");
  EXPECT_EQ(DescribeCableEnd(Silent()), "silent for 420 ms");
  EXPECT_EQ(DescribeCableEnd(NeverHeard()), "not heard from yet");
  EXPECT_EQ(DescribeCableEnd(NoReverse()), "(no reverse)");
}

}  // namespace
}  // namespace dar
