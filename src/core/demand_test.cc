#include "core/demand.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "core/routing.h"
#include "core/topology_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Four routers in a line, 1 - 2 - 3 - 4, named by id.
Topology Line4() {
  absl::StatusOr<Topology> topo = ParseNodeLinkJson(R"({
    "nodes": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}],
    "edges": [{"source": 1, "target": 2}, {"source": 2, "target": 3},
              {"source": 3, "target": 4}]})",
                                                    "line4.json", JsonImportOptions());
  return std::move(topo).value();
}

std::map<std::pair<std::string, std::string>, double> ByName(const Topology& topo,
                                                             const std::vector<Demand>& d) {
  std::map<std::pair<std::string, std::string>, double> out;
  for (const Demand& x : d) out[{topo.node(x.src).name, topo.node(x.dst).name}] = x.amount;
  return out;
}

TEST(GravityDemandTest, DegreesNormalisedToTheUniformTotal) {
  const Topology topo = Line4();
  EXPECT_EQ(GravityWeights(topo), (std::vector<double>{1, 2, 2, 1}));
  absl::StatusOr<std::vector<Demand>> gravity = GravityDemand(topo);
  ASSERT_TRUE(gravity.ok()) << gravity.status();
  ASSERT_EQ(gravity->size(), 12u);
  EXPECT_NEAR(TotalDemand(*gravity), 12.0, 1e-12);
  // Sum over ordered pairs of w(s) w(d) = 6^2 - (1 + 4 + 4 + 1) = 26; scale 12 / 26.
  const auto by_name = ByName(topo, *gravity);
  EXPECT_NEAR(by_name.at({"1", "4"}), 1.0 * 12 / 26, 1e-12);
  EXPECT_NEAR(by_name.at({"2", "3"}), 4.0 * 12 / 26, 1e-12);
  EXPECT_NEAR(by_name.at({"3", "1"}), 2.0 * 12 / 26, 1e-12);
}

TEST(GravityDemandTest, NodeWeightsFromTheFileWhenEveryNodeHasOne) {
  absl::StatusOr<Topology> topo = ParseNodeLinkJson(R"({
    "nodes": [{"id": "a", "weight": 3}, {"id": "b", "weight": 1}, {"id": "c", "weight": 0}],
    "edges": [{"source": "a", "target": "b"}, {"source": "b", "target": "c"}]})",
                                                    "w.json", JsonImportOptions());
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<std::vector<Demand>> gravity = GravityDemand(*topo);
  ASSERT_TRUE(gravity.ok()) << gravity.status();
  // Only a <-> b has a positive product; the total is still 3 * 2 = 6.
  const auto by_name = ByName(*topo, *gravity);
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_NEAR(by_name.at({"a", "b"}), 3.0, 1e-12);
  EXPECT_NEAR(by_name.at({"b", "a"}), 3.0, 1e-12);

  // One node without a weight: degrees for all.
  absl::StatusOr<Topology> partial = ParseNodeLinkJson(R"({
    "nodes": [{"id": "a", "weight": 3}, {"id": "b"}],
    "edges": [{"source": "a", "target": "b"}]})",
                                                       "p.json", JsonImportOptions());
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(GravityWeights(*partial), (std::vector<double>{1, 1}));

  absl::StatusOr<Topology> lonely =
      ParseNodeLinkJson(R"({"nodes": [{"id": "a", "weight": 3}, {"id": "b", "weight": 0}]})",
                        "l.json", JsonImportOptions());
  ASSERT_TRUE(lonely.ok());
  EXPECT_FALSE(GravityDemand(*lonely).ok());
}

// ECMP under the degree gravity matrix matches the loads topohub publishes for its `deg` mode
// (the product of the degrees) on every WAN file: the matrix is the same up to scale.
TEST(GravityDemandTest, EcmpLoadsMatchTopohubDegreeMode) {
  for (const char* name : {"Abilene", "Sprint", "Iij", "VtlWavenet2011"}) {
    const std::string file = std::string(DAR_SOURCE_DIR) + "/data/topologies/wan/" + name + ".json";
    absl::StatusOr<Topology> topo = LoadNodeLinkJson(file, JsonImportOptions());
    ASSERT_TRUE(topo.ok()) << topo.status();
    absl::StatusOr<std::vector<Demand>> gravity = GravityDemand(*topo);
    ASSERT_TRUE(gravity.ok()) << gravity.status();
    absl::StatusOr<std::vector<double>> loads =
        ComputeLinkLoads(*topo, ComputeEcmpTables(*topo), *gravity);
    ASSERT_TRUE(loads.ok()) << loads.status();
    const double busiest = *std::max_element(loads->begin(), loads->end());
    std::ifstream in(file);
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (const auto& e : doc["edges"]) {
      const NodeId s = topo->FindNode(e["source"].get<std::string>()).value();
      const NodeId t = topo->FindNode(e["target"].get<std::string>()).value();
      EXPECT_NEAR((*loads)[topo->FindLink(s, t)] * 100 / busiest, e["ecmp_fwd"]["deg"], 0.5)
          << name << " " << s << "->" << t;
      EXPECT_NEAR((*loads)[topo->FindLink(t, s)] * 100 / busiest, e["ecmp_bwd"]["deg"], 0.5)
          << name << " " << t << "->" << s;
    }
  }
}

TEST(DemandMatrixTest, NestedObjectAtTopLevel) {
  const Topology topo = Line4();
  absl::StatusOr<std::vector<Demand>> m =
      ParseDemandMatrix(R"({"4": {"1": 2.5, "2": 0}, "1": {"4": 3003.0, "3": 1}})", "m.json", topo);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);  // the zero is dropped; ordered by source then destination
  EXPECT_EQ(topo.node((*m)[0].src).name, "1");
  EXPECT_EQ(topo.node((*m)[0].dst).name, "3");
  EXPECT_EQ((*m)[0].amount, 1.0);
  EXPECT_EQ((*m)[1].amount, 3003.0);
  EXPECT_EQ(topo.node((*m)[2].src).name, "4");
  EXPECT_EQ((*m)[2].amount, 2.5);
}

TEST(DemandMatrixTest, GraphDemandsOfATopohubFile) {
  const Topology topo = Line4();
  absl::StatusOr<std::vector<Demand>> m = ParseDemandMatrix(R"({
    "directed": false, "graph": {"name": "x", "demands": {"2": {"3": 7}}, "stats": {}},
    "nodes": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}], "edges": []})",
                                                            "topo.json", topo);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].amount, 7.0);
}

TEST(DemandMatrixTest, ListOfEntries) {
  const Topology topo = Line4();
  absl::StatusOr<std::vector<Demand>> m = ParseDemandMatrix(
      R"([{"src": 1, "dst": "4", "demand": 2}, {"src": "3", "dst": 2, "demand": 0.5}])", "l.json",
      topo);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto by_name = ByName(topo, *m);
  EXPECT_EQ(by_name.at({"1", "4"}), 2.0);
  EXPECT_EQ(by_name.at({"3", "2"}), 0.5);
}

TEST(DemandMatrixTest, ReadsAFile) {
  const Topology topo = Line4();
  const std::string path = ::testing::TempDir() + "/demand_test_matrix.json";
  { std::ofstream(path) << R"({"1": {"2": 1}})"; }
  absl::StatusOr<std::vector<Demand>> m = LoadDemandMatrix(path, topo);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(), 1u);
  absl::StatusOr<std::vector<Demand>> missing = LoadDemandMatrix(path + ".none", topo);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open"));
}

struct BadMatrix {
  const char* text;
  std::vector<const char*> expected;  // substrings of the error
};

class BadMatrixTest : public ::testing::TestWithParam<BadMatrix> {};

TEST_P(BadMatrixTest, RefusedWithFileLineAndProblem) {
  const Topology topo = Line4();
  absl::StatusOr<std::vector<Demand>> m = ParseDemandMatrix(GetParam().text, "bad.json", topo);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* s : GetParam().expected) {
    EXPECT_THAT(m.status().message(), HasSubstr(s));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, BadMatrixTest,
    ::testing::Values(
        // Syntax: the byte offset becomes line:column.
        BadMatrix{"{\"1\": {\"2\": 1},\n \"2\": {\"3\" 4}}",
                  {"bad.json:2:12: not valid JSON", "syntax error"}},
        BadMatrix{"{\"1\": {\"2\": 1}", {"bad.json:1:", "not valid JSON"}},
        BadMatrix{"", {"bad.json:1:1: not valid JSON"}},
        // An overflowing number is refused by the parser (JSON has no infinity or NaN).
        BadMatrix{"{\"1\":\n {\"2\": 1e999}}", {"bad.json:2:", "not valid JSON", "overflow"}},
        BadMatrix{"{\"1\": {\"2\": 1},\n \"42\": {\"3\": 1}}",
                  {"bad.json:2: /42: source '42' is not a node"}},
        BadMatrix{"{\"1\": {\"2\": 1,\n\n        \"9\": 1}}",
                  {"bad.json:3: /1/9: destination '9' is not a node"}},
        BadMatrix{"{\"1\": {\"2\": -1}}", {"bad.json:1: /1/2: demand must not be negative"}},
        BadMatrix{"{\"1\": {\"2\": \"lots\"}}", {"/1/2: demand must be a number"}},
        BadMatrix{"{\"1\": {\"2\": null}}", {"/1/2: demand must be a number"}},
        BadMatrix{"{\"1\": 5}", {"/1: must be an object"}},
        BadMatrix{"{\"1\": {\"1\": 5}}", {"/1/1: demand from node '1' to itself"}},
        BadMatrix{"{\"1\": {\"2\": 1},\n \"1\": {\"3\": 1}}", {"bad.json:2: /1: key repeated"}},
        BadMatrix{"{\"1\": {\"2\": 1,\n\n \"2\": 3}}", {"bad.json:3: /1/2: key repeated"}},
        BadMatrix{"{\"1\": {\"2\": 0}}", {"no positive demand"}},
        BadMatrix{"{\"graph\": {\"demands\": {}}, \"nodes\": []}",
                  {"/graph/demands: the matrix has no positive demand"}},
        BadMatrix{"{\"graph\": {\"demands\": {\"1\": {\"7\": 1}}}}",
                  {"/graph/demands/1/7: destination '7' is not a node"}},
        BadMatrix{"{\"graph\": {\"demands\": []}}", {"/graph/demands: must be an object"}},
        BadMatrix{"42", {"a demand matrix is an object"}},
        BadMatrix{"{\"directed\": false, \"nodes\": [], \"edges\": []}",
                  {"bad.json: a node-link topology file without graph.demands"}},
        BadMatrix{"[{\"src\": 1, \"dst\": 2, \"demand\": 1},\n {\"src\": 1, \"dst\": 5, "
                  "\"demand\": 1}]",
                  {"bad.json:2: /1/dst: destination '5' is not a node"}},
        BadMatrix{"[{\"src\": 1, \"demand\": 1}]", {"/0: has no \"dst\""}},
        BadMatrix{"[{\"src\": 1, \"dst\": 2}]", {"/0: has no \"demand\""}},
        BadMatrix{"[{\"src\": true, \"dst\": 2, \"demand\": 1}]",
                  {"/0/src: src must be a node id"}},
        BadMatrix{"[{\"src\": 1, \"dst\": 2, \"demand\": -0.5}]",
                  {"/0/demand: demand must not be negative"}},
        BadMatrix{"[{\"src\": 1, \"dst\": 2, \"demand\": 1},\n{\"src\": 1, \"dst\": 2, "
                  "\"demand\": 2}]",
                  {"bad.json:2: /1/demand: the pair '1' -> '2' is given twice"}},
        BadMatrix{"[3]", {"/0: must be an object"}}));

}  // namespace
}  // namespace dar
