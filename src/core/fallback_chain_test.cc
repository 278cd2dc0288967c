#include "core/fallback_chain.h"

#include "gtest/gtest.h"

namespace dar {
namespace {

TEST(FallbackChainTest, StaticUntilTheFirstTableThenCurrentWhileFresh) {
  FallbackChain chain(Seconds(3));
  EXPECT_EQ(chain.Observe(Time(0)), TableSource::kStatic);
  EXPECT_FALSE(chain.version().has_value());
  ASSERT_TRUE(chain.CheckVersion(0).ok());  // any version before the first
  chain.Accept(7, Seconds(1));
  EXPECT_EQ(chain.Observe(Seconds(1)), TableSource::kCurrent);
  EXPECT_EQ(chain.Observe(Seconds(4)), TableSource::kCurrent);  // exactly stale_after old
  EXPECT_EQ(chain.counters().recoveries_from_static, 0);        // the first table is no recovery
  EXPECT_EQ(chain.counters().fallbacks_to_static, 0);
}

TEST(FallbackChainTest, VersionsOnlyGrowEvenPastAStaleTable) {
  FallbackChain chain(Seconds(3));
  chain.Accept(7, Time(0));
  EXPECT_EQ(chain.Observe(Seconds(10)), TableSource::kStatic);
  const absl::Status repeated = chain.CheckVersion(7);
  EXPECT_TRUE(absl::IsFailedPrecondition(repeated));
  EXPECT_EQ(repeated.message(), "version 7 is not newer than the installed version 7");
  EXPECT_FALSE(chain.CheckVersion(3).ok());
  EXPECT_TRUE(chain.CheckVersion(8).ok());
}

TEST(FallbackChainTest, RefusedOfferMakesTheCurrentTableLastGoodUntilTheNextAccepted) {
  FallbackChain chain(Seconds(3));
  chain.Accept(1, Time(0));
  chain.Observe(Time(0));
  chain.RefuseInvalid();
  EXPECT_EQ(chain.Observe(Seconds(1)), TableSource::kLastGood);
  EXPECT_EQ(chain.counters().fallbacks_to_last_good, 1);
  EXPECT_EQ(chain.Observe(Seconds(5)), TableSource::kStatic);  // and it still goes stale
  chain.Accept(2, Seconds(5));
  EXPECT_EQ(chain.Observe(Seconds(5)), TableSource::kCurrent);
  EXPECT_EQ(chain.counters().fallbacks_to_static, 1);
  EXPECT_EQ(chain.counters().recoveries_from_static, 1);
}

TEST(FallbackChainTest, TransitionsAreCountedOnceWhateverTheCalls) {
  FallbackChain chain(Seconds(1));
  chain.Accept(1, Time(0));
  for (int i = 0; i < 5; ++i) chain.Observe(Time(0));
  for (int i = 0; i < 5; ++i) chain.Observe(Seconds(2));
  EXPECT_EQ(chain.counters().fallbacks_to_static, 1);
  EXPECT_EQ(chain.SourceAt(Time(0)), TableSource::kCurrent);  // no side effect, no count
  EXPECT_EQ(chain.source(), TableSource::kStatic);
}

TEST(FallbackChainTest, ANewStaleTimeoutCountsFromTheAcceptance) {
  FallbackChain chain(Seconds(3));
  chain.Accept(1, Time(0));
  EXPECT_EQ(chain.Observe(Seconds(2)), TableSource::kCurrent);
  chain.set_stale_after(Seconds(1));
  EXPECT_EQ(chain.Observe(Seconds(2)), TableSource::kStatic);
  EXPECT_EQ(chain.source(), TableSource::kStatic);
}

}  // namespace
}  // namespace dar
