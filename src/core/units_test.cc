#include "core/units.h"

#include "gtest/gtest.h"

namespace dar {
namespace {

// Configuration durations round to the nearest nanosecond, halves away from zero, the same
// way on both sides of zero.
TEST(SecondsFTest, RoundsToTheNearestNanosecondOnBothSides) {
  EXPECT_EQ(SecondsF(0.1), Milliseconds(100));
  EXPECT_EQ(SecondsF(-0.3), -Milliseconds(300));
  EXPECT_EQ(SecondsF(2.5e-9), Nanoseconds(3));
  EXPECT_EQ(SecondsF(-2.5e-9), Nanoseconds(-3));
  EXPECT_EQ(SecondsF(1.4e-9), Nanoseconds(1));
  EXPECT_EQ(SecondsF(-1.4e-9), Nanoseconds(-1));
  EXPECT_EQ(SecondsF(0), Duration(0));
  static_assert(SecondsF(1.0) == Seconds(1));  // usable in constant expressions
}

}  // namespace
}  // namespace dar
