// The data path allocates nothing in steady state: packets come from a pool, queues and the
// event heap keep their capacity. Its own binary, because it replaces global operator new.
#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "sim/sim_test_util.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace dar::sim {
namespace {

TEST(AllocationTest, SteadyStateForwardingAndTransportDoNotAllocate) {
  LinkParams p;
  p.capacity = DataRate::Gbps(10);
  p.delay = Microseconds(2);
  const Topology topo = testing::Chain(3, p);
  NetworkConfig nc;
  nc.ecn_threshold_bytes = 30'000;
  testing::Harness h(topo, ForwardingMode::kPerPacket, nc);
  bool done = false;
  h.transport.Send(0, 1, 50'000'000, 0, [&](const MessageResult&) { done = true; });
  h.loop.RunUntil(Milliseconds(2));  // warm up: pools, queues and the heap reach their size
  const uint64_t events_before = h.loop.events_run();
  const int64_t before = g_allocations.load();
  h.loop.RunUntil(Milliseconds(30));
  const int64_t allocations = g_allocations.load() - before;
  const uint64_t events = h.loop.events_run() - events_before;
  ASSERT_FALSE(done);
  EXPECT_GT(events, 100'000u);
  EXPECT_EQ(allocations, 0) << "over " << events << " events";
}

}  // namespace
}  // namespace dar::sim
