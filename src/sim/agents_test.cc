#include "sim/agents.h"

#include <vector>

#include "gtest/gtest.h"

namespace dar::sim {
namespace {

// a = b over a duplex cable, and a one-way link a -> b beside it.
struct TwoSwitches {
  TwoSwitches() {
    LinkParams p;
    p.capacity = DataRate::Gbps(10);
    p.delay = Microseconds(5);
    const NodeId a = topo.AddNode("a", NodeKind::kSwitch);
    const NodeId b = topo.AddNode("b", NodeKind::kSwitch);
    std::tie(ab, ba) = topo.AddDuplexLink(a, b, p);
    one_way = topo.AddLink(a, b, p);
  }
  Topology topo;
  LinkId ab = kNoLink, ba = kNoLink, one_way = kNoLink;
};

TEST(SimAgentsTest, ProbesJudgeCablesAndLeaveOneWayLinksToCarrier) {
  TwoSwitches s;
  EventLoop loop;
  Random rng(7);
  Network net(loop, rng, s.topo, NetworkConfig{});
  std::vector<LinkSample> last;
  std::vector<std::pair<LinkId, bool>> changes;
  SimAgents agents(loop, net, AgentConfig{}, [&](const std::vector<LinkSample>& x) { last = x; });
  agents.set_liveness_handler([&](LinkId l, bool up) { changes.emplace_back(l, up); });
  agents.Start();
  loop.RunUntil(Seconds(1));
  // Healthy: no verdict changed, and the controller's rule keeps every link up, the one-way
  // link too (its probes can never be answered: no way back).
  EXPECT_TRUE(changes.empty());
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(CablesUp(s.topo, last), (std::vector<bool>{true, true, true}));

  // The cable fails: both ends miss three probes and call it down; the controller's rule then
  // has both ends saying down. The one-way link is not judged by probes.
  net.SetLinkUp(s.ab, false);
  net.SetLinkUp(s.ba, false);
  loop.RunUntil(Seconds(2));
  EXPECT_EQ(changes, (std::vector<std::pair<LinkId, bool>>{{s.ab, false}, {s.ba, false}}));
  EXPECT_EQ(CablesUp(s.topo, last), (std::vector<bool>{false, false, true}));

  // Back: up again after two consecutive replies at each end (LinkLivenessConfig's default).
  changes.clear();
  net.SetLinkUp(s.ab, true);
  net.SetLinkUp(s.ba, true);
  loop.RunUntil(Seconds(3));
  EXPECT_EQ(changes, (std::vector<std::pair<LinkId, bool>>{{s.ab, true}, {s.ba, true}}));
  EXPECT_EQ(CablesUp(s.topo, last), (std::vector<bool>{true, true, true}));
}

}  // namespace
}  // namespace dar::sim
