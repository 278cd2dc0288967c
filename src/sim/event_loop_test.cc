#include "sim/event_loop.h"

#include <vector>

#include "gtest/gtest.h"

namespace dar::sim {
namespace {

TEST(EventLoopTest, RunsInTimeOrderThenSchedulingOrder) {
  EventLoop loop;
  std::vector<int> order;
  Timer a(loop, [&] { order.push_back(1); });
  Timer b(loop, [&] { order.push_back(2); });
  Timer c(loop, [&] { order.push_back(3); });
  c.ScheduleAt(Microseconds(5));
  b.ScheduleAt(Microseconds(3));
  a.ScheduleAt(Microseconds(3));
  loop.Run();
  EXPECT_EQ(order, (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(loop.now(), Microseconds(5));
  EXPECT_EQ(loop.events_run(), 3u);
}

TEST(EventLoopTest, CancelAndDestructionRemoveEvents) {
  EventLoop loop;
  int fired = 0;
  Timer a(loop, [&] { ++fired; });
  a.ScheduleAt(Microseconds(1));
  a.Cancel();
  {
    Timer b(loop, [&] { ++fired; });
    b.ScheduleAt(Microseconds(2));
    EXPECT_EQ(loop.pending(), 1u);
  }
  EXPECT_TRUE(loop.empty());
  loop.Run();
  EXPECT_EQ(fired, 0);
}

TEST(EventLoopTest, RescheduleMovesThePendingEvent) {
  EventLoop loop;
  std::vector<Time> at;
  Timer a(loop, [&] { at.push_back(loop.now()); });
  a.ScheduleAt(Microseconds(10));
  a.ScheduleAt(Microseconds(4));
  loop.Run();
  EXPECT_EQ(at, (std::vector<Time>{Microseconds(4)}));
}

TEST(EventLoopTest, RunUntilStopsAtTheHorizonAndAdvancesTime) {
  EventLoop loop;
  int fired = 0;
  Timer a(loop, [&] { ++fired; });
  Timer b(loop, [&] { ++fired; });
  a.ScheduleAt(Microseconds(1));
  b.ScheduleAt(Microseconds(20));
  loop.RunUntil(Microseconds(10));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(loop.now(), Microseconds(10));
  EXPECT_TRUE(b.pending());
}

TEST(EventLoopTest, ManyTimersComeOutSorted) {
  EventLoop loop;
  std::vector<std::unique_ptr<Timer>> timers;
  std::vector<int64_t> seen;
  uint64_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    timers.push_back(std::make_unique<Timer>(loop, [&] { seen.push_back(loop.now().count()); }));
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    timers.back()->ScheduleAt(Nanoseconds(static_cast<int64_t>(x >> 40)));
  }
  for (int i = 0; i < 2000; i += 3) timers[i]->Cancel();
  loop.Run();
  EXPECT_EQ(seen.size(), 2000u - 667u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST(EventLoopTest, TwoLoopsAreIndependent) {
  EventLoop a, b;
  int fa = 0, fb = 0;
  Timer ta(a, [&] { ++fa; });
  Timer tb(b, [&] { ++fb; });
  ta.ScheduleAt(Microseconds(1));
  tb.ScheduleAt(Microseconds(2));
  a.Run();
  EXPECT_EQ(fa, 1);
  EXPECT_EQ(fb, 0);
  EXPECT_EQ(b.now(), Time(0));
}

}  // namespace
}  // namespace dar::sim
