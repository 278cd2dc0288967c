#include "core/topology_gen.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

int CountKind(const Topology& topo, NodeKind kind) {
  int n = 0;
  for (NodeId i = 0; i < topo.num_nodes(); ++i) n += topo.node(i).kind == kind;
  return n;
}

NodeId Id(const Topology& topo, const std::string& name) { return topo.FindNode(name).value(); }

void ExpectFatTreeShape(int k) {
  FatTreeParams params;
  params.k = k;
  params.host_link.capacity = DataRate::Gbps(25);
  params.fabric_link.capacity = DataRate::Gbps(100);
  const Topology topo = FatTree(params);
  const int half = k / 2;
  EXPECT_EQ(CountKind(topo, NodeKind::kHost), k * k * k / 4);
  EXPECT_EQ(topo.num_nodes(), k * k * k / 4 + k * k + half * half);
  // Cables: hosts + edge-agg + agg-core, two directed links each.
  EXPECT_EQ(topo.num_links(), 2 * (k * k * k / 4 + k * half * half + k * half * half));
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    const Node& node = topo.node(n);
    const size_t degree = node.kind == NodeKind::kHost ? 1 : k;
    EXPECT_EQ(node.out_links.size(), degree) << node.name;
    EXPECT_EQ(node.in_links.size(), degree) << node.name;
  }
  for (const Link& l : topo.links()) {
    const bool host_link =
        topo.node(l.src).kind == NodeKind::kHost || topo.node(l.dst).kind == NodeKind::kHost;
    EXPECT_EQ(l.params.capacity, DataRate::Gbps(host_link ? 25 : 100));
    EXPECT_EQ(topo.link(l.reverse).reverse, topo.FindLink(l.src, l.dst));
  }
  // Names and wiring.
  EXPECT_EQ(topo.node(0).name, "h0");
  const int last_host = k * k * k / 4 - 1;
  EXPECT_NE(topo.FindLink(Id(topo, absl::StrCat("h", last_host)),
                          Id(topo, absl::StrCat("e", last_host / half))),
            kNoLink);
  EXPECT_NE(topo.FindLink(Id(topo, "e0"), Id(topo, absl::StrCat("a", half - 1))), kNoLink);
  EXPECT_EQ(topo.FindLink(Id(topo, "e0"), Id(topo, absl::StrCat("a", half))), kNoLink);
  // Aggregation switch j of every pod reaches cores j*half .. j*half+half-1.
  const NodeId a1 = Id(topo, absl::StrCat("a", half + 1));  // pod 1, j = 1
  EXPECT_NE(topo.FindLink(a1, Id(topo, absl::StrCat("c", half))), kNoLink);
  EXPECT_EQ(topo.FindLink(a1, Id(topo, "c0")), kNoLink);
  EXPECT_EQ(topo.Destinations().size(), static_cast<size_t>(k * half));  // the edge switches
}

TEST(FatTreeTest, K4Shape) { ExpectFatTreeShape(4); }
TEST(FatTreeTest, K8Shape) { ExpectFatTreeShape(8); }

TEST(FatTreeTest, K4Counts) {
  const Topology topo = FatTree(FatTreeParams{.k = 4});
  EXPECT_EQ(topo.num_nodes(), 36);
  EXPECT_EQ(topo.num_links(), 96);
  EXPECT_EQ(topo.Hosts().size(), 16u);
}

TEST(FatTreeTest, K8Counts) {
  const Topology topo = FatTree(FatTreeParams{.k = 8});
  EXPECT_EQ(topo.num_nodes(), 208);
  EXPECT_EQ(topo.num_links(), 768);
  EXPECT_EQ(topo.Hosts().size(), 128u);
}

TEST(LeafSpineTest, ShapeAndOversubscription) {
  LeafSpineParams params;
  params.leaves = 6;
  params.spines = 2;
  params.hosts_per_leaf = 12;
  params.host_link.capacity = DataRate::Gbps(25);
  params.fabric_link.capacity = DataRate::Gbps(100);
  const Topology topo = LeafSpine(params);
  EXPECT_EQ(topo.Hosts().size(), 72u);
  EXPECT_EQ(topo.num_nodes(), 72 + 6 + 2);
  EXPECT_EQ(topo.num_links(), 2 * (72 + 6 * 2));
  EXPECT_DOUBLE_EQ(Oversubscription(params), 1.5);
  const NodeId leaf5 = Id(topo, "leaf5");
  EXPECT_EQ(topo.node(leaf5).out_links.size(), 12u + 2u);
  EXPECT_EQ(topo.node(Id(topo, "spine1")).out_links.size(), 6u);
  EXPECT_NE(topo.FindLink(Id(topo, "h71"), leaf5), kNoLink);
  EXPECT_NE(topo.FindLink(Id(topo, "h60"), leaf5), kNoLink);
  EXPECT_EQ(topo.FindLink(Id(topo, "h59"), leaf5), kNoLink);
  // Host capacity per leaf against fabric capacity per leaf.
  int64_t host_bps = 0, fabric_bps = 0;
  for (LinkId l : topo.node(leaf5).in_links) {
    const Link& link = topo.link(l);
    (topo.node(link.src).kind == NodeKind::kHost ? host_bps : fabric_bps) +=
        link.params.capacity.bps();
  }
  EXPECT_DOUBLE_EQ(static_cast<double>(host_bps) / static_cast<double>(fabric_bps), 1.5);
}

TEST(AttachHostsTest, NamesAndLinks) {
  Topology topo;
  const NodeId a = topo.AddNode("A", NodeKind::kSwitch);
  const NodeId b = topo.AddNode("B", NodeKind::kSwitch);
  topo.AddDuplexLink(a, b, LinkParams());
  AttachHosts(topo, 2, LinkParams{.capacity = DataRate::Gbps(1)});
  EXPECT_EQ(topo.num_nodes(), 6);
  EXPECT_EQ(topo.node(2).name, "A-h0");
  EXPECT_EQ(topo.node(5).name, "B-h1");
  EXPECT_EQ(topo.RouteTarget(5), b);
  EXPECT_EQ(topo.link(topo.FindLink(5, b)).params.capacity, DataRate::Gbps(1));
  EXPECT_EQ(topo.Destinations(), (std::vector<NodeId>{a, b}));
}

TEST(LinkOverrideTest, ScalesDownsAndReweighsBothDirections) {
  Topology topo = LeafSpine(LeafSpineParams{});
  const NodeId leaf0 = Id(topo, "leaf0"), spine1 = Id(topo, "spine1");
  ASSERT_TRUE(ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "spine1", .capacity_fraction = 0.25},
                                        {.a = "spine1", .b = "leaf0", .metric = 3}})
                  .ok());
  for (LinkId l : {topo.FindLink(leaf0, spine1), topo.FindLink(spine1, leaf0)}) {
    EXPECT_EQ(topo.link(l).params.capacity, DataRate::Gbps(2.5));
    EXPECT_EQ(topo.link(l).params.metric, 3);
    EXPECT_TRUE(topo.link(l).up);
  }
  ASSERT_TRUE(ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "spine1", .down = true}}).ok());
  EXPECT_FALSE(topo.link(topo.FindLink(leaf0, spine1)).up);
  EXPECT_FALSE(topo.link(topo.FindLink(spine1, leaf0)).up);
  EXPECT_TRUE(topo.link(topo.FindLink(leaf0, Id(topo, "spine0"))).up);
}

TEST(LinkOverrideTest, ErrorsNameTheProblem) {
  Topology topo = LeafSpine(LeafSpineParams{});
  absl::Status s = ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "nowhere", .down = true}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown node 'nowhere'"));
  s = ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "leaf1", .down = true}});
  EXPECT_THAT(s.message(), HasSubstr("no link between"));
  EXPECT_THAT(s.message(), HasSubstr("leaf0 - leaf1"));
  s = ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "spine0", .capacity_fraction = -1}});
  EXPECT_THAT(s.message(), HasSubstr("capacity_fraction"));
  s = ApplyLinkOverrides(topo, {{.a = "leaf0", .b = "spine0", .metric = 0}});
  EXPECT_THAT(s.message(), HasSubstr("metric"));
}

}  // namespace
}  // namespace dar
