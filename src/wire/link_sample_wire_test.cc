#include "wire/link_sample_wire.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::wire {
namespace {

using ::testing::HasSubstr;

LinkSample Measured() {
  LinkSample s;
  s.at = Seconds(5);
  s.rtt_smoothed = Microseconds(1234);
  s.rtt_min = Duration(987'654);  // not a whole microsecond: must arrive exactly
  s.rtt_p95 = Milliseconds(3);
  s.loss = 0.25;
  s.throughput = DataRate::Mbps(80);
  s.utilisation = 0.8;
  s.queue_bytes = 4096;
  s.up = false;
  return s;
}

TEST(LinkSampleWireTest, WhatTheAgentMeasuresIsWhatTheControllerObserves) {
  v1::LinkSample m;
  ToWire(Measured(), &m);
  ASSERT_TRUE(CheckWireSample(m, 0, 7).ok());
  const LinkSample got = FromWire(m, DataRate::Mbps(100), Seconds(9));
  const LinkSample want = Measured();
  EXPECT_EQ(got.at, Seconds(9));  // the receiver's clock
  EXPECT_EQ(got.rtt_smoothed, want.rtt_smoothed);
  EXPECT_EQ(got.rtt_min, want.rtt_min);
  EXPECT_EQ(got.rtt_p95, want.rtt_p95);
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.throughput, want.throughput);
  EXPECT_DOUBLE_EQ(got.utilisation, want.utilisation);
  EXPECT_EQ(got.queue_bytes, want.queue_bytes);
  EXPECT_EQ(got.up, want.up);
}

TEST(LinkSampleWireTest, UtilisationFromTheRateWhereTheAgentKnewNoCapacity) {
  LinkSample s = Measured();
  s.utilisation = 0;
  v1::LinkSample m;
  ToWire(s, &m);
  EXPECT_DOUBLE_EQ(FromWire(m, DataRate::Mbps(160), Time(0)).utilisation, 0.5);
  EXPECT_DOUBLE_EQ(FromWire(m, DataRate::Mbps(40), Time(0)).utilisation, 1.0);  // clamped
  EXPECT_DOUBLE_EQ(FromWire(m, DataRate(), Time(0)).utilisation, 0.0);
}

TEST(LinkSampleWireTest, OutOfRangeFieldsAreRefusedByNameAndSender) {
  const auto refusal = [](auto spoil) {
    v1::LinkSample m;
    ToWire(Measured(), &m);
    m.set_neighbor_id(4);
    spoil(m);
    return std::string(CheckWireSample(m, 2, 9).message());
  };
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_rtt_ms(-1); }),
              HasSubstr("samples[2].rtt_ms from node 9 (link to node 4): must be in [0, 1000000]"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_rtt_min_ns(-5); }),
              HasSubstr("samples[2].rtt_min_ns from node 9 (link to node 4)"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) {
                m.set_rtt_p95_ms(std::numeric_limits<double>::quiet_NaN());
              }),
              HasSubstr("rtt_p95_ms"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_loss(1.5); }), HasSubstr("loss"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_tx_bps(1e16); }), HasSubstr("tx_bps"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_utilisation(-0.1); }),
              HasSubstr("utilisation"));
  EXPECT_THAT(refusal([](v1::LinkSample& m) { m.set_queue_bytes(-1); }), HasSubstr("queue_bytes"));
}

}  // namespace
}  // namespace dar::wire
