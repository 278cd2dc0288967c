#include "sim/plb.h"

#include "gtest/gtest.h"

namespace dar::sim {
namespace {

// Twelve congested rounds in a row (at least half the segments marked) repath; a round below
// half starts the count again.
TEST(PlbStateTest, RepathsAfterTwelveCongestedRoundsInARow) {
  const PlbConfig config;
  PlbState s;
  const Time now = Time(0) + Milliseconds(1);
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(s.OnRoundEnd(config, 10, 5, true, now)) << i;
  EXPECT_FALSE(s.OnRoundEnd(config, 10, 4, true, now));  // 40%: not congested
  EXPECT_EQ(s.congested_rounds(), 0);
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(s.OnRoundEnd(config, 10, 9, true, now));
  EXPECT_TRUE(s.OnRoundEnd(config, 10, 10, true, now));
  EXPECT_EQ(s.congested_rounds(), 0);
  EXPECT_FALSE(s.OnRoundEnd(config, 0, 0, true, now));  // an empty round says nothing
}

// With nothing in flight a connection repaths after three congested rounds already.
TEST(PlbStateTest, AnIdleConnectionRepathsSooner) {
  const PlbConfig config;
  PlbState s;
  EXPECT_FALSE(s.OnRoundEnd(config, 10, 8, true, Time(0)));
  EXPECT_FALSE(s.OnRoundEnd(config, 10, 8, true, Time(0)));
  EXPECT_TRUE(s.OnRoundEnd(config, 10, 8, false, Time(0)));
  PlbConfig no_idle = config;
  no_idle.idle_rehash_rounds = 0;
  PlbState t;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(t.OnRoundEnd(no_idle, 10, 8, false, Time(0)));
}

// After a retransmission timeout PLB pauses for [60 s, 120 s).
TEST(PlbStateTest, ATimeoutPausesRepathing) {
  const PlbConfig config;
  PlbState s;
  s.OnTimeout(config, Time(0), 0.99);
  for (int i = 0; i < 30; ++i)
    EXPECT_FALSE(s.OnRoundEnd(config, 10, 10, true, Time(0) + Seconds(59)));
  int repaths = 0;
  for (int i = 0; i < 24; ++i)
    repaths += s.OnRoundEnd(config, 10, 10, true, Time(0) + Seconds(120));
  EXPECT_EQ(repaths, 2);
}

}  // namespace
}  // namespace dar::sim
