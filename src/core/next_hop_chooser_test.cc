#include "core/next_hop_chooser.h"

#include <array>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

// Local port state of a forwarder with a handful of links, set by the test.
struct FakePorts {
  explicit FakePorts(int links) : up(links, true), queued(links, 0) {}
  bool forwardable(LinkId link) const { return up[link]; }
  int64_t queued_bytes(LinkId link) const { return queued[link]; }
  DataRate capacity(LinkId link) const {
    return capacities.empty() ? DataRate() : capacities[link];
  }

  std::vector<bool> up;
  std::vector<int64_t> queued;
  std::vector<DataRate> capacities;  // empty: unknown
};
static_assert(LocalPortState<FakePorts>);

ForwardingConfig Config(ForwardingMode mode, int64_t queue_bias_bytes = 0) {
  ForwardingConfig c;
  c.mode = mode;
  c.queue_bias_bytes = queue_bias_bytes;
  c.flowlet_gap = Microseconds(100);
  return c;
}

// How often each of links 0..3 was chosen over `n` calls of `choose(i)`.
template <typename F>
std::array<int, 4> Histogram(int n, F choose) {
  std::array<int, 4> counts{};
  for (int i = 0; i < n; ++i) {
    const LinkId l = choose(i);
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 4);
    if (l >= 0 && l < 4) ++counts[l];
  }
  return counts;
}

TEST(ForwardingModeTest, NamesRoundTrip) {
  for (ForwardingMode m :
       {ForwardingMode::kPerFlow, ForwardingMode::kPerFlowlet, ForwardingMode::kPerPacket,
        ForwardingMode::kPerPacketP2C, ForwardingMode::kDrill, ForwardingMode::kDrillFlowlet}) {
    absl::StatusOr<ForwardingMode> parsed = ParseForwardingMode(ForwardingModeName(m));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, m);
  }
  absl::StatusOr<ForwardingMode> bad = ParseForwardingMode("per_byte");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'per_byte'"));
}

TEST(ForwardingConfigTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(ForwardingConfig().Validate().ok());
  ForwardingConfig c;
  c.queue_bias_bytes = -1;
  EXPECT_THAT(c.Validate().message(), HasSubstr("queue_bias_bytes"));
  c = ForwardingConfig();
  c.flowlet_gap = Nanoseconds(-1);
  EXPECT_THAT(c.Validate().message(), HasSubstr("flowlet_gap"));
  c = ForwardingConfig();
  c.flowlet_table_size = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("flowlet_table_size"));
  c = ForwardingConfig();
  c.drill_samples = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("drill_samples"));
  c = ForwardingConfig();
  c.drill_memory = 2;
  EXPECT_THAT(c.Validate().message(), HasSubstr("drill_memory"));
  c = ForwardingConfig();
  c.reroute_threshold_bytes = -1;
  EXPECT_THAT(c.Validate().message(), HasSubstr("reroute_threshold_bytes"));
  c = ForwardingConfig();
  c.sticky_packets = -1;
  EXPECT_THAT(c.Validate().message(), HasSubstr("sticky_packets"));
  c = ForwardingConfig();
  c.bulk_sticky_packets = -1;
  EXPECT_THAT(c.Validate().message(), HasSubstr("bulk_sticky_packets"));
  c = ForwardingConfig();
  c.line_rate = DataRate::BitsPerSecond(-1);
  EXPECT_THAT(c.Validate().message(), HasSubstr("line_rate"));
}

TEST(NextHopChooserTest, PerPacketFollowsWeights) {
  const std::vector<NextHop> hops = {{0, 0.1}, {1, 0.2}, {2, 0.7}};
  FakePorts ports(3);
  NextHopChooser c(Config(ForwardingMode::kPerPacket), 1);
  Random rng(42);
  const int n = 100000;
  const std::array<int, 4> counts =
      Histogram(n, [&](int i) { return c.Choose(hops, 5, 9, Nanoseconds(i), rng, ports); });
  // Binomial standard deviations are below 0.0015 of n; 0.01 is over six of them.
  EXPECT_NEAR(counts[0] / double(n), 0.1, 0.01);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.01);
  EXPECT_NEAR(counts[2] / double(n), 0.7, 0.01);
}

TEST(NextHopChooserTest, PerFlowIsStickyAndSpreadsFlowsByWeight) {
  const std::vector<NextHop> hops = {{0, 0.25}, {1, 0.75}};
  FakePorts ports(2);
  NextHopChooser c(Config(ForwardingMode::kPerFlow), 3);
  Random rng(1);
  const Random before = rng;
  const int n = 40000;
  const std::array<int, 4> counts =
      Histogram(n, [&](int flow) { return c.Choose(hops, flow, 9, Time{0}, rng, ports); });
  EXPECT_NEAR(counts[0] / double(n), 0.25, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.75, 0.02);
  // The same flow takes the same next hop whatever the time, queues or other flows.
  const LinkId first = c.Choose(hops, 77, 9, Time{0}, rng, ports);
  ports.queued[first] = 1 << 20;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(c.Choose(hops, 77, 9, Milliseconds(i), rng, ports), first);
    c.Choose(hops, 1000 + i, 9, Milliseconds(i), rng, ports);
  }
  // Per-flow choice is a hash: it never draws from the caller's Random.
  Random copy = before;
  EXPECT_EQ(rng.Next(), copy.Next());
}

TEST(NextHopChooserTest, SaltDecorrelatesForwarders) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  NextHopChooser a(Config(ForwardingMode::kPerFlow), 1);
  NextHopChooser b(Config(ForwardingMode::kPerFlow), 2);
  Random rng(1);
  int same = 0;
  const int n = 10000;
  for (int flow = 0; flow < n; ++flow) {
    same += a.Choose(hops, flow, 9, Time{0}, rng, ports) ==
            b.Choose(hops, flow, 9, Time{0}, rng, ports);
  }
  EXPECT_NEAR(same / double(n), 0.5, 0.03);
}

TEST(NextHopChooserTest, SkipsLinksThatAreNotForwardableInEveryMode) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.3}, {2, 0.2}};
  for (ForwardingMode mode :
       {ForwardingMode::kPerFlow, ForwardingMode::kPerFlowlet, ForwardingMode::kPerPacket,
        ForwardingMode::kPerPacketP2C, ForwardingMode::kDrill, ForwardingMode::kDrillFlowlet}) {
    SCOPED_TRACE(ForwardingModeName(mode));
    FakePorts ports(3);
    ports.up[0] = false;
    ForwardingConfig config = Config(mode, /*queue_bias_bytes=*/1000);
    config.drill_memory = 0;  // with memory and equal queues DRILL would keep its first pick
    NextHopChooser c(config, 5);
    Random rng(9);
    const std::array<int, 4> counts = Histogram(
        20000, [&](int i) { return c.Choose(hops, i % 500, 9, Microseconds(i), rng, ports); });
    EXPECT_EQ(counts[0], 0);
    EXPECT_GT(counts[1], counts[2]);  // the live ones keep their relative weights
    EXPECT_GT(counts[2], 0);
    // Nothing forwardable: no next hop.
    ports.up.assign(3, false);
    for (int flow = 0; flow < 50; ++flow) {
      EXPECT_EQ(c.Choose(hops, flow, 9, Seconds(1), rng, ports), kNoLink);
    }
  }
}

TEST(NextHopChooserTest, SingleAndEmptyNextHops) {
  FakePorts ports(2);
  NextHopChooser c(Config(ForwardingMode::kPerPacket), 5);
  Random rng(9);
  const std::vector<NextHop> one = {{1, 1.0}};
  EXPECT_EQ(c.Choose({}, 1, 2, Time{0}, rng, ports), kNoLink);
  EXPECT_EQ(c.Choose(one, 1, 2, Time{0}, rng, ports), 1);
  ports.up[1] = false;
  EXPECT_EQ(c.Choose(one, 1, 2, Time{0}, rng, ports), kNoLink);
}

TEST(NextHopChooserTest, ZeroWeightIsNeverChosen) {
  const std::vector<NextHop> hops = {{0, 0.0}, {1, 1.0}, {2, 0.0}};
  FakePorts ports(3);
  for (ForwardingMode mode :
       {ForwardingMode::kPerFlow, ForwardingMode::kPerPacket, ForwardingMode::kPerPacketP2C}) {
    NextHopChooser c(Config(mode), 5);
    Random rng(3);
    const std::array<int, 4> counts =
        Histogram(5000, [&](int i) { return c.Choose(hops, i, 9, Time{0}, rng, ports); });
    EXPECT_EQ(counts[1], 5000) << ForwardingModeName(mode);
  }
}

TEST(NextHopChooserTest, FlowletStaysWithinGapAndRepicksAfterIt) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  NextHopChooser c(Config(ForwardingMode::kPerFlowlet), 11);
  Random rng(5);
  const uint64_t flow = 1234;
  Time now{0};
  const LinkId first = c.Choose(hops, flow, 9, now, rng, ports);
  ASSERT_NE(first, kNoLink);
  // Packets at most flowlet_gap apart stay on it, whatever the queues say.
  ports.queued[first] = 1 << 20;
  for (int i = 0; i < 200; ++i) {
    now += Microseconds(100);
    ASSERT_EQ(c.Choose(hops, flow, 9, now, rng, ports), first) << i;
  }
  // After a gap longer than flowlet_gap every packet starts a flowlet: both next hops are
  // used, each about half the time (the queue bias is off).
  ports.queued[first] = 0;
  int moved = 0;
  const int n = 2000;
  LinkId prev = first;
  for (int i = 0; i < n; ++i) {
    now += Microseconds(101);
    const LinkId l = c.Choose(hops, flow, 9, now, rng, ports);
    moved += l != prev;
    prev = l;
  }
  EXPECT_NEAR(moved / double(n), 0.5, 0.05);
}

TEST(NextHopChooserTest, FlowletDirectionsAndFlowsAreSeparate) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  ForwardingConfig config = Config(ForwardingMode::kPerFlowlet);
  config.flowlet_table_size = 1 << 16;  // few collisions among the flows below
  NextHopChooser c(config, 11);
  Random rng(5);
  // Many flows, each in both directions, all in one flowlet: their first choices spread, and
  // each keeps its own.
  std::vector<LinkId> forward(200), backward(200);
  for (int f = 0; f < 200; ++f) {
    forward[f] = c.Choose(hops, f, 1, Time{0}, rng, ports);
    backward[f] = c.Choose(hops, f, 2, Time{0}, rng, ports);
  }
  int differ = 0;
  for (int f = 0; f < 200; ++f) {
    EXPECT_EQ(c.Choose(hops, f, 1, Microseconds(50), rng, ports), forward[f]);
    EXPECT_EQ(c.Choose(hops, f, 2, Microseconds(50), rng, ports), backward[f]);
    differ += forward[f] != backward[f];
  }
  EXPECT_GT(differ, 50);
  EXPECT_LT(differ, 150);
}

TEST(NextHopChooserTest, FlowletLeavesADeadOrWithdrawnNextHopAtOnce) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  NextHopChooser c(Config(ForwardingMode::kPerFlowlet), 11);
  Random rng(5);
  const LinkId first = c.Choose(hops, 1, 9, Time{0}, rng, ports);
  ASSERT_NE(first, kNoLink);
  const LinkId other = 1 - first;
  ports.up[first] = false;
  EXPECT_EQ(c.Choose(hops, 1, 9, Microseconds(1), rng, ports), other);
  ports.up[first] = true;
  // It stays on the new next hop within the gap.
  EXPECT_EQ(c.Choose(hops, 1, 9, Microseconds(2), rng, ports), other);
  // A new table that no longer offers it moves the flowlet too.
  const std::vector<NextHop> only_first = {{first, 0.5}, {2, 0.5}};
  FakePorts three(3);
  const LinkId moved = c.Choose(only_first, 1, 9, Microseconds(3), rng, three);
  EXPECT_NE(moved, other);
  EXPECT_NE(moved, kNoLink);
}

TEST(NextHopChooserTest, SetConfigForgetsFlowlets) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  NextHopChooser c(Config(ForwardingMode::kPerFlowlet), 11);
  Random rng(5);
  // Find a flowlet that a fresh pick would move: after set_config the entry is gone, so
  // some of many flows must re-pick differently within what was their gap.
  std::vector<LinkId> first(100);
  for (int f = 0; f < 100; ++f) first[f] = c.Choose(hops, f, 9, Time{0}, rng, ports);
  c.set_config(Config(ForwardingMode::kPerFlowlet));
  int moved = 0;
  for (int f = 0; f < 100; ++f)
    moved += c.Choose(hops, f, 9, Microseconds(1), rng, ports) != first[f];
  EXPECT_GT(moved, 20);
}

TEST(NextHopChooserTest, QueueBiasShiftsNewTrafficAwayFromLongQueues) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  ports.queued[0] = 3000;  // weight 0.5 / (1 + 3000 / 1000) = 0.125 against 0.5
  NextHopChooser c(Config(ForwardingMode::kPerPacket, /*queue_bias_bytes=*/1000), 5);
  Random rng(8);
  const int n = 50000;
  std::array<int, 4> counts =
      Histogram(n, [&](int i) { return c.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_NEAR(counts[0] / double(n), 0.2, 0.01);
  // Without a bias the queue is ignored.
  NextHopChooser plain(Config(ForwardingMode::kPerPacket), 5);
  counts = Histogram(n, [&](int i) { return plain.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.01);
  // Flowlets start by the same corrected weights.
  NextHopChooser flowlets(Config(ForwardingMode::kPerFlowlet, /*queue_bias_bytes=*/1000), 5);
  counts = Histogram(n, [&](int i) {
    return flowlets.Choose(hops, 1, 9, Milliseconds(i), rng, ports);  // every packet a flowlet
  });
  EXPECT_NEAR(counts[0] / double(n), 0.2, 0.01);
}

TEST(NextHopChooserTest, PowerOfTwoChoicesPrefersTheShorterQueue) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  ports.queued[0] = 10;
  NextHopChooser c(Config(ForwardingMode::kPerPacketP2C), 5);
  Random rng(8);
  const int n = 50000;
  // Link 0 wins only when both candidates are link 0: a quarter of the time.
  const std::array<int, 4> counts =
      Histogram(n, [&](int i) { return c.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_NEAR(counts[0] / double(n), 0.25, 0.01);
}

// DRILL(d, m): the shortest queue among d random next hops and the last winner. Without
// memory, the one empty queue of four is among two draws 1 - (3/4)^2 = 7/16 of the time; with
// memory, once found it is kept for as long as it stays the shortest.
TEST(NextHopChooserTest, DrillRemembersTheLastBestNextHop) {
  const std::vector<NextHop> hops = {{0, 0.25}, {1, 0.25}, {2, 0.25}, {3, 0.25}};
  FakePorts ports(4);
  ports.queued = {3000, 3000, 0, 3000};
  ForwardingConfig config = Config(ForwardingMode::kDrill);
  config.drill_samples = 2;
  config.drill_memory = 0;
  NextHopChooser memoryless(config, 5);
  Random rng(8);
  const int n = 40000;
  std::array<int, 4> counts =
      Histogram(n, [&](int) { return memoryless.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_NEAR(counts[2] / double(n), 7.0 / 16, 0.01);

  config.drill_memory = 1;
  NextHopChooser drill(config, 5);
  counts = Histogram(n, [&](int) { return drill.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_GT(counts[2], n - 20);  // only until the first draw finds it
  // The memory is per destination, and the winner is dropped once its queue grows.
  ports.queued = {0, 3000, 6000, 3000};
  counts = Histogram(200, [&](int) { return drill.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_GT(counts[0], 180);
  // A remembered next hop that is no longer forwardable is never chosen.
  ports.up[0] = false;
  counts = Histogram(200, [&](int) { return drill.Choose(hops, 1, 9, Time{0}, rng, ports); });
  EXPECT_EQ(counts[0], 0);
  // One sample, no memory: blind random choice.
  config.drill_samples = 1;
  config.drill_memory = 0;
  NextHopChooser blind(config, 5);
  ports.up[0] = true;
  counts = Histogram(n, [&](int) { return blind.Choose(hops, 1, 9, Time{0}, rng, ports); });
  for (int c : counts) EXPECT_NEAR(c / double(n), 0.25, 0.01);
}

// DRILL per flowlet: a flowlet starts on DRILL's choice and stays there while its queue is
// within reroute_threshold_bytes of the shortest; past that it moves, and stays again.
TEST(NextHopChooserTest, DrillFlowletMovesOnlyPastTheThreshold) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  ports.queued = {0, 3000};
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.reroute_threshold_bytes = 6000;
  config.sticky_packets = 1000;  // held for the whole test (the next test: after them)
  config.drill_samples = 16;     // DRILL's choice is then the shorter queue but for 2^-16
  NextHopChooser c(config, 5);
  Random rng(3);
  Time t{0};
  auto next = [&] {
    t += Microseconds(1);
    return c.Choose(hops, /*flow=*/7, 9, t, rng, ports);
  };
  EXPECT_EQ(next(), 0);
  // Link 0's queue grows past link 1's, but by no more than the threshold: the flowlet stays.
  ports.queued = {9000, 3000};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(next(), 0) << i;
  // Past the threshold it moves, once, and then stays on its new next hop.
  ports.queued = {9001, 3000};
  EXPECT_EQ(next(), 1);
  ports.queued = {4000, 9000};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(next(), 1) << i;
  // After a gap the flowlet starts afresh on DRILL's choice.
  t += Microseconds(200);
  ports.queued = {0, 9000};
  EXPECT_EQ(next(), 0);
  // A withdrawn next hop is left at once, whatever the threshold.
  ports.up[0] = false;
  EXPECT_EQ(next(), 1);
  // Threshold 0: every packet takes a strictly shorter queue, as DRILL does.
  config.reroute_threshold_bytes = 0;
  NextHopChooser eager(config, 5);
  ports.up[0] = true;
  ports.queued = {100, 0};
  int moved = 0;
  for (int i = 0; i < 100; ++i) {
    t += Microseconds(1);
    ports.queued = i % 2 == 0 ? std::vector<int64_t>{100, 0} : std::vector<int64_t>{0, 100};
    const LinkId l = eager.Choose(hops, 7, 9, t, rng, ports);
    moved += ports.queued[l] == 0 ? 1 : 0;
  }
  EXPECT_GT(moved, 90);
}

// Without spray_long_flows, after sticky_packets packets a flowlet is balanced per packet:
// each takes DRILL's choice.
TEST(NextHopChooserTest, DrillFlowletSpreadsALongFlowletPerPacket) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.reroute_threshold_bytes = 6000;
  config.sticky_packets = 10;
  config.spray_long_flows = false;
  config.drill_samples = 16;
  NextHopChooser c(config, 5);
  Random rng(3);
  Time t{0};
  int on_shorter = 0, first_ten_moves = 0;
  LinkId last = kNoLink;
  for (int i = 0; i < 110; ++i) {
    t += Microseconds(1);
    // The queues swap every packet, by less than the threshold.
    ports.queued = i % 2 == 0 ? std::vector<int64_t>{0, 3000} : std::vector<int64_t>{3000, 0};
    const LinkId l = c.Choose(hops, 7, 9, t, rng, ports);
    if (i < 10) {
      first_ten_moves += last != kNoLink && l != last;
    } else {
      on_shorter += ports.queued[l] == 0;
    }
    last = l;
  }
  EXPECT_EQ(first_ten_moves, 0);  // held while short
  EXPECT_EQ(on_shorter, 100);     // then every packet on the shorter queue
  // A new flowlet (after a gap) is held again.
  t += Microseconds(200);
  last = kNoLink;
  int moves = 0;
  for (int i = 0; i < 10; ++i) {
    t += Microseconds(1);
    ports.queued = i % 2 == 0 ? std::vector<int64_t>{0, 3000} : std::vector<int64_t>{3000, 0};
    const LinkId l = c.Choose(hops, 7, 9, t, rng, ports);
    moves += last != kNoLink && l != last;
    last = l;
  }
  EXPECT_EQ(moves, 0);
}

// With spray_long_flows (the default), the packets after the first sticky_packets follow the
// weights, not the queues: a 1:3 split whatever the queues say (DRILL would take the empty
// one every time).
TEST(NextHopChooserTest, DrillFlowletCanSprayALongFlowletByWeight) {
  const std::vector<NextHop> hops = {{0, 0.25}, {1, 0.75}};
  FakePorts ports(2);
  ports.queued = {0, 100000};  // the heavier next hop has the long queue
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.sticky_packets = 10;
  config.spray_long_flows = true;
  NextHopChooser c(config, 5);
  Random rng(3);
  Time t{0};
  int on_heavier = 0;
  for (int i = 0; i < 4010; ++i) {
    t += Microseconds(1);
    const LinkId l = c.Choose(hops, 7, 9, t, rng, ports);
    if (i >= 10) on_heavier += l == 1;
  }
  EXPECT_NEAR(on_heavier / 4000.0, 0.75, 0.03);
}

// A bulk-class flowlet is held for bulk_sticky_packets, then sprayed; a latency-class one,
// and one of any other class, for sticky_packets.
TEST(NextHopChooserTest, DrillFlowletHoldsABulkFlowletForFewerPackets) {
  const std::vector<NextHop> hops = {{0, 0.5}, {1, 0.5}};
  FakePorts ports(2);  // empty queues: DRILL never moves a held flowlet
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.sticky_packets = 60;
  config.bulk_sticky_packets = 10;
  // The index of the first packet that leaves on another next hop than the first one.
  auto first_move = [&](int traffic_class) {
    NextHopChooser c(config, 5);
    Random rng(3);
    Time t{0};
    LinkId first = kNoLink;
    for (int i = 0; i < 200; ++i) {
      t += Microseconds(1);
      const LinkId l = c.Choose(hops, 7, 9, t, rng, ports, traffic_class);
      if (first == kNoLink) first = l;
      if (l != first) return i;
    }
    return -1;
  };
  EXPECT_GE(first_move(0), 60);
  EXPECT_GE(first_move(3), 60);
  const int bulk = first_move(kBulkClass);
  EXPECT_GE(bulk, 10);
  EXPECT_LT(bulk, 60);
}

// With the line rate known, a long flowlet is sprayed only where that can buy something: on
// equal next hops faster than one flow it is kept on one; it is sprayed where a next hop is no
// faster than the line rate (unknown counts as no faster), or where the weights are uneven,
// which a next hop that is not forwardable makes them.
TEST(NextHopChooserTest, DrillFlowletSpraysOnlyWhereItCanBuySomething) {
  const std::vector<NextHop> even = {{0, 0.5}, {1, 0.5}};
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.sticky_packets = 10;
  config.line_rate = DataRate::Gbps(10);
  // How many of 400 packets after the hold leave on another next hop than the first one.
  auto moves_after_hold = [&](const std::vector<NextHop>& hops, const FakePorts& ports) {
    NextHopChooser c(config, 5);
    Random rng(3);
    Time t{0};
    LinkId first = kNoLink;
    int moves = 0;
    for (int i = 0; i < 410; ++i) {
      t += Microseconds(1);
      const LinkId l = c.Choose(hops, 7, 9, t, rng, ports);
      if (first == kNoLink) first = l;
      if (i >= 10) moves += l != first;
    }
    return moves;
  };
  FakePorts fast(3);  // empty queues: a held flowlet never moves
  fast.capacities = {DataRate::Gbps(20), DataRate::Gbps(20), DataRate::Gbps(20)};
  EXPECT_EQ(moves_after_hold(even, fast), 0);
  // Weights within 1% of each other are even.
  EXPECT_EQ(moves_after_hold({{0, 0.502}, {1, 0.498}}, fast), 0);

  FakePorts fillable = fast;
  fillable.capacities[1] = DataRate::Gbps(10);
  EXPECT_GT(moves_after_hold(even, fillable), 100);
  FakePorts unknown = fast;
  unknown.capacities[0] = DataRate();
  EXPECT_GT(moves_after_hold(even, unknown), 100);
  EXPECT_GT(moves_after_hold({{0, 0.6}, {1, 0.4}}, fast), 100);
  // Link 2 down: two of three next hops left, so the weights as offered are uneven.
  FakePorts one_down = fast;
  one_down.up[2] = false;
  EXPECT_GT(moves_after_hold({{0, 0.34}, {1, 0.33}, {2, 0.33}}, one_down), 100);

  config.line_rate = DataRate();  // unknown: sprayed everywhere
  EXPECT_GT(moves_after_hold(even, fast), 100);
}

// Where neither DRILL nor spraying can buy anything (even weights over next hops faster than
// a flow), a flowlet is LetFlow's: its start is drawn by weight, whatever the queues, and it
// is never moved, however long it grows or its queue gets; after a gap it is drawn afresh.
TEST(NextHopChooserTest, DrillFlowletIsLetFlowWhereNothingCanBeBought) {
  const std::vector<NextHop> even = {{0, 0.5}, {1, 0.5}};
  ForwardingConfig config = Config(ForwardingMode::kDrillFlowlet);
  config.line_rate = DataRate::Gbps(10);
  config.sticky_packets = 10;
  config.drill_samples = 16;  // DRILL's choice: the shorter queue but for 2^-16
  FakePorts ports(2);
  ports.capacities = {DataRate::Gbps(20), DataRate::Gbps(20)};
  ports.queued = {1'000'000, 0};
  NextHopChooser c(config, 5);
  Random rng(3);
  // 400 flows start at once: DRILL would send all of them to link 1; by weight about half.
  std::array<int, 4> starts = Histogram(
      400, [&](int i) { return c.Choose(even, /*flow=*/i, 9, Microseconds(1), rng, ports); });
  EXPECT_GT(starts[0], 150);
  EXPECT_GT(starts[1], 150);
  // One flowlet, 500 packets 1 us apart, its own next hop's queue 1 MB longer than the
  // other's throughout (far past the threshold): it never moves.
  Time t = Microseconds(10);
  const LinkId first = c.Choose(even, /*flow=*/1000, 9, t, rng, ports);
  for (int i = 0; i < 500; ++i) {
    t += Microseconds(1);
    ports.queued =
        first == 0 ? std::vector<int64_t>{1'000'000, 0} : std::vector<int64_t>{0, 1'000'000};
    ASSERT_EQ(c.Choose(even, 1000, 9, t, rng, ports), first) << i;
  }
  // After a gap it is drawn afresh: over many gaps it lands on both next hops.
  LinkId last = kNoLink;
  std::array<int, 4> redrawn = Histogram(100, [&](int) {
    t += Microseconds(200);
    return last = c.Choose(even, 1000, 9, t, rng, ports);
  });
  EXPECT_GT(redrawn[0], 20);
  EXPECT_GT(redrawn[1], 20);
  // A withdrawn next hop is left at once.
  ports.up[last] = false;
  t += Microseconds(1);
  EXPECT_EQ(c.Choose(even, 1000, 9, t, rng, ports), 1 - last);
  ports.up[last] = true;

  // A long flowlet follows a change of its row within 64 packets: once a next hop's capacity
  // is cut to the line rate, or the weights become uneven, it is sprayed by the weights.
  auto moves_after_change = [&](const std::vector<NextHop>& after, const FakePorts& changed) {
    t += Microseconds(200);
    const LinkId start = c.Choose(even, 2000, 9, t, rng, ports);
    int moves = 0;
    for (int i = 0; i < 400; ++i) {
      t += Microseconds(1);
      moves += c.Choose(after, 2000, 9, t, rng, changed) != start;
    }
    return moves;
  };
  EXPECT_EQ(moves_after_change(even, ports), 0);
  FakePorts cut = ports;
  cut.capacities[0] = DataRate::Gbps(10);
  EXPECT_GT(moves_after_change(even, cut), 100);
  EXPECT_GT(moves_after_change({{0, 0.7}, {1, 0.3}}, ports), 50);

  // Uneven weights: DRILL's choice again, the shorter queue.
  ports.up = {true, true};
  ports.queued = {1'000'000, 0};
  NextHopChooser uneven(config, 5);
  const std::array<int, 4> drilled = Histogram(100, [&](int i) {
    return uneven.Choose({{0, 0.6}, {1, 0.4}}, i, 9, Microseconds(1), rng, ports);
  });
  EXPECT_EQ(drilled[1], 100);
}

TEST(NextHopChooserTest, SameSeedSameChoices) {
  const std::vector<NextHop> hops = {{0, 0.3}, {1, 0.3}, {2, 0.4}};
  FakePorts ports(3);
  ports.queued = {100, 5000, 0};
  for (ForwardingMode mode :
       {ForwardingMode::kPerFlowlet, ForwardingMode::kPerPacket, ForwardingMode::kPerPacketP2C,
        ForwardingMode::kDrill, ForwardingMode::kDrillFlowlet}) {
    NextHopChooser a(Config(mode, 2000), 5), b(Config(mode, 2000), 5);
    Random ra(77), rb(77);
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(a.Choose(hops, i % 37, 9, Microseconds(i * 30), ra, ports),
                b.Choose(hops, i % 37, 9, Microseconds(i * 30), rb, ports));
    }
  }
}

}  // namespace
}  // namespace dar
