// dar-learned: the DAR loop with a learned policy refining the engine's weights.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/topology_gen.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learn/policy_loader.h"
#include "learn/policy_model.h"
#include "sim/dar_routing.h"
#include "sim/runner.h"
#include "sim/scenario.h"
#include "sim/sim_test_util.h"

namespace dar::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          fmt::format("dar_learned_test_{}_{}", ::getpid(), name))
      .string();
}

// A model whose logit is the analytic logit (one layer, weight 1 on kFeatAnalyticLogit): its
// weights are the engine's, up to the floor and INT8 rounding.
learn::PolicyModel AnalyticModel() {
  std::array<float, kPolicyFeatures> w{};
  w[kFeatAnalyticLogit] = 1;
  learn::PolicyModel m = learn::LinearPolicyModel("analytic", w);
  m.min_weight = 0.001;
  return m;
}

// The leaf-spine of dar_routing_test's steady scenario, with a transfer, under `policy`.
std::string Scenario(const std::string& policy) {
  return fmt::format(R"(
duration_ms: 1
drain_limit_ms: 200
topology: {{type: leaf_spine, leaves: 4, spines: 4, hosts_per_leaf: 2}}
events:
  - {{at_ms: 0, load: {{link: [leaf0, spine0], to: 0.6}}}}
  - {{at_ms: 0, load: {{link: [leaf1, spine2], to: 0.3}}}}
workloads:
  - {{type: bulk, size_mb: 2, transfers: [{{src: h0, dst: h7}}, {{src: h2, dst: h5}}]}}
policies:
  - {}
)",
                     policy);
}

// Drops the wall-clock figures of a policy's metrics, which differ from run to run; everything
// simulated is the same.
void EraseWallClock(nlohmann::json& metrics) {
  for (auto it = metrics.begin(); it != metrics.end();) {
    it = it.key().find("wall") != std::string::npos ? metrics.erase(it) : std::next(it);
  }
}

// Runs with the learned-policy loader, as dar-sim does.
absl::StatusOr<nlohmann::json> RunYaml(const std::string& yaml, RunOptions options = {}) {
  ASSIGN_OR_RETURN(sim::Scenario s, ParseScenario(yaml, std::string(DAR_SOURCE_DIR) + "/x.yaml"));
  if (!options.policy_loader) options.policy_loader = learn::LearnedPolicyLoader();
  return RunScenario(s, options);
}

TEST(DarLearnedTest, AnalyticModelRunsWithoutLoops) {
  const std::string path = TempPath("analytic.json");
  ASSERT_TRUE(learn::SavePolicyModel(AnalyticModel(), path).ok());
  for (const char* precision : {"int8", "float"}) {
    absl::StatusOr<nlohmann::json> r = RunYaml(Scenario(fmt::format(
        "{{name: dar-learned, period_ms: 1, model: {}, precision: {}}}", path, precision)));
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& m = (*r)["policies"][0]["metrics"];
    EXPECT_EQ(m["routing_loops"], 0);
    EXPECT_EQ(m["tables_refused"], 0);
    EXPECT_EQ(m["fallbacks_to_static"], 0);
    EXPECT_TRUE(m["completed"].get<bool>());
    EXPECT_THAT(m["learned_policy"].get<std::string>(), StartsWith(precision));
    EXPECT_THAT(m["learned_policy"].get<std::string>(), HasSubstr(path));
    EXPECT_GT(m["policy_cycles"].get<int64_t>(), 0);
    EXPECT_EQ(m["policy_cycles"], m["control_cycles"]);
    EXPECT_EQ(m["policy_failures"], 0);
    EXPECT_EQ(m["policy_fallbacks"], 0);
    EXPECT_GT(m["policy_decisions"].get<int64_t>(), 0);
  }
  std::filesystem::remove(path);
}

// The analytic-logit model in the loop gives the engine's weights back.
TEST(DarLearnedTest, AnalyticModelReproducesTheEngineWeights) {
  FatTreeParams p;
  p.k = 4;
  Topology topo = FatTree(p);
  const NodeId a0 = *topo.FindNode("a0");
  topo.mutable_link(topo.FindLink(a0, *topo.FindNode("c0"))).params.capacity = DataRate::Gbps(2.5);
  std::array<const RoutingTables*, 2> tables[2];
  std::unique_ptr<testing::Harness> harness[2];
  std::unique_ptr<ControlContext> ctx[2];  // the control planes keep a pointer to it
  std::unique_ptr<DarRouting> dar[2];
  for (int i = 0; i < 2; ++i) {
    harness[i] = std::make_unique<testing::Harness>(topo, ForwardingMode::kPerFlowlet);
    DarConfig c;
    c.decision = DarConfig::Decision::kDiffusion;  // what the learned policy refines
    if (i == 1) {
      c.weight_policy = std::make_shared<learn::LearnedPolicy>(AnalyticModel(), "mem");
    }
    dar[i] = std::make_unique<DarRouting>(c);
    ctx[i] = std::make_unique<ControlContext>(
        ControlContext{harness[i]->loop, harness[i]->net, harness[i]->rng});
    dar[i]->Start(*ctx[i]);
    tables[i] = {harness[i]->net.tables(0), harness[i]->net.tables(1)};
  }
  int rows = 0;
  for (int cls = 0; cls < 2; ++cls) {
    for (NodeId d : topo.Destinations()) {
      for (NodeId v = 0; v < topo.num_nodes(); ++v) {
        const auto analytic = tables[0][cls]->Lookup(v, d);
        const auto learned = tables[1][cls]->Lookup(v, d);
        ASSERT_EQ(analytic.size(), learned.size());
        for (size_t k = 0; k < analytic.size(); ++k) {
          EXPECT_EQ(analytic[k].link, learned[k].link);
          EXPECT_NEAR(analytic[k].weight, learned[k].weight, 0.01);
        }
        rows += analytic.size() >= 2;
      }
    }
  }
  EXPECT_GT(rows, 0);
  nlohmann::json m;
  dar[1]->Report(m);
  EXPECT_EQ(m["policy_decisions"], rows);
}

// A refused model fails the run, naming the file and what is wrong with it, unless the policy
// says `fallback: analytic`: then it runs the analytic engine and its metrics say so.
TEST(DarLearnedTest, ARefusedModelFailsTheRunUnlessTheFallbackIsAnalytic) {
  const std::string path = TempPath("corrupt.json");
  ASSERT_TRUE(learn::SavePolicyModel(AnalyticModel(), path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  absl::StatusOr<nlohmann::json> refused =
      RunYaml(Scenario(fmt::format("{{name: dar-learned, period_ms: 1, model: {}}}", path)));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("model"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("bad JSON"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("fallback: analytic"));
  absl::StatusOr<nlohmann::json> learned = RunYaml(Scenario(
      fmt::format("{{name: dar-learned, period_ms: 1, model: {}, fallback: analytic}}", path)));
  ASSERT_TRUE(learned.ok()) << learned.status();
  const auto& m = (*learned)["policies"][0]["metrics"];
  EXPECT_THAT(m["learned_policy"].get<std::string>(), StartsWith("refused: "));
  EXPECT_THAT(m["learned_policy"].get<std::string>(), HasSubstr(path));
  EXPECT_THAT(m["learned_policy"].get<std::string>(), HasSubstr("bad JSON"));
  EXPECT_GT(m["control_cycles"].get<int64_t>(), 0);
  EXPECT_EQ(m["policy_fallbacks"], m["control_cycles"]);
  EXPECT_EQ(m["routing_loops"], 0);
  EXPECT_TRUE(m["completed"].get<bool>());
  // A missing file alike.
  ASSERT_FALSE(
      RunYaml(Scenario("{name: dar-learned, period_ms: 1, model: no-such-model.json}")).ok());
  absl::StatusOr<nlohmann::json> missing = RunYaml(
      Scenario("{name: dar-learned, period_ms: 1, model: no-such-model.json, fallback: analytic}"));
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_THAT((*missing)["policies"][0]["metrics"]["learned_policy"].get<std::string>(),
              HasSubstr("cannot open '" + std::string(DAR_SOURCE_DIR) + "/no-such-model.json'"));
  std::filesystem::remove(path);
}

// `audit: float` runs the FP32 model beside the INT8 one on every decision and reports the
// agreement; the INT8 weights still route, so the run is the unaudited one.
TEST(DarLearnedTest, AuditComparesInt8WithFloatWithoutChangingTheRun) {
  const std::string path = TempPath("audit.json");
  ASSERT_TRUE(learn::SavePolicyModel(AnalyticModel(), path).ok());
  const std::string policy = fmt::format("name: dar-learned, period_ms: 1, model: {}", path);
  absl::StatusOr<nlohmann::json> plain = RunYaml(Scenario("{" + policy + "}"));
  absl::StatusOr<nlohmann::json> audited = RunYaml(Scenario("{" + policy + ", audit: float}"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(audited.ok()) << audited.status();
  nlohmann::json p = (*plain)["policies"][0]["metrics"];
  nlohmann::json a = (*audited)["policies"][0]["metrics"];
  ASSERT_TRUE(a.contains("int8_vs_float"));
  EXPECT_FALSE(p.contains("int8_vs_float"));
  const nlohmann::json audit = a["int8_vs_float"];
  EXPECT_EQ(audit["decisions"], a["policy_decisions"]);
  EXPECT_GT(audit["decisions"].get<int64_t>(), 0);
  EXPECT_EQ(audit["float_failures"], 0);
  // The analytic-logit model differs from FP32 by INT8 rounding only.
  EXPECT_GT(audit["same_next_hop_for_a_hash"].get<double>(), 0.99);
  EXPECT_LT(audit["max_weight_error"].get<double>(), 0.01);
  EXPECT_THAT(a["learned_policy"].get<std::string>(), HasSubstr("audited against float"));
  for (nlohmann::json* m : {&p, &a}) {
    for (const char* key : {"learned_policy", "int8_vs_float"}) m->erase(key);
    EraseWallClock(*m);
  }
  EXPECT_EQ(p, a);
  std::filesystem::remove(path);
}

TEST(DarLearnedTest, SettingsAreChecked) {
  absl::StatusOr<nlohmann::json> r = RunYaml(Scenario("{name: dar-learned, period_ms: 1}"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("model"));
  r = RunYaml(Scenario("{name: dar-learned, model: m.json, precision: int4}"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("precision"));
  r = RunYaml(Scenario("{name: dar-learned, model: m.json, precision: float, audit: float}"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("audit"));
}

// A policy that answers NaN: every cycle keeps the engine's tables, so the run is the
// analytic one, and every cycle is counted as a failure.
class NanPolicy : public WeightPolicy {
 public:
  absl::Status Weigh(const PolicyBatch&, absl::Span<double> weights, Executor& executor) override {
    std::fill(weights.begin(), weights.end(), std::numeric_limits<double>::quiet_NaN());
    return absl::OkStatus();
  }
  std::string Describe() const override { return "nan"; }
};

TEST(DarLearnedTest, InjectedPolicyReturningNanKeepsTheAnalyticTables) {
  absl::StatusOr<nlohmann::json> analytic =
      RunYaml(Scenario("{name: dar, decision: diffusion, period_ms: 1}"));
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  RunOptions options;
  options.weight_policy = std::make_shared<NanPolicy>();
  absl::StatusOr<nlohmann::json> nan = RunYaml(Scenario("{name: dar, period_ms: 1}"), options);
  ASSERT_TRUE(nan.ok()) << nan.status();
  nlohmann::json m = (*nan)["policies"][0]["metrics"];
  EXPECT_EQ(m["learned_policy"], "nan");
  EXPECT_GT(m["policy_cycles"].get<int64_t>(), 0);
  EXPECT_EQ(m["policy_failures"], m["policy_cycles"]);
  EXPECT_EQ(m["policy_fallbacks"], m["policy_cycles"]);
  EXPECT_EQ(m["policy_decisions"], 0);
  EXPECT_EQ(m["policy_rows_held"], 0);  // a failing policy's cycles keep nothing of it
  for (const char* key : {"learned_policy", "policy_fallbacks", "policy_cycles", "policy_failures",
                          "policy_decisions", "policy_rows_held"}) {
    m.erase(key);
  }
  nlohmann::json a = (*analytic)["policies"][0]["metrics"];
  EraseWallClock(a);
  EraseWallClock(m);
  EXPECT_EQ(m, a);
  // A weight policy refines the diffusion engine: asking for the marginal layer with one is
  // refused, not run without it.
  absl::StatusOr<nlohmann::json> marginal =
      RunYaml(Scenario("{name: dar, decision: marginal, period_ms: 1}"), options);
  ASSERT_FALSE(marginal.ok());
  EXPECT_THAT(std::string(marginal.status().message()), ::testing::HasSubstr("decision"));
}

// Every scenario shipped in scenarios/ loads, and the model of every dar-learned policy in
// them is accepted (a refused model would fail the run).
TEST(DarLearnedTest, ShippedScenariosModelsAreAccepted) {
  int files = 0, models = 0;
  for (const char* dir : {"/scenarios", "/scenarios/train"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(DAR_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".yaml") continue;
      ++files;
      absl::StatusOr<sim::Scenario> s = LoadScenario(entry.path().string());
      ASSERT_TRUE(s.ok()) << s.status();
      for (const PolicySpec& p : s->policies) {
        if (p.routing != "dar-learned") continue;
        const std::filesystem::path model =
            std::filesystem::path(s->base_dir) / p.block["model"].as<std::string>();
        EXPECT_TRUE(learn::LoadPolicyModel(model.string()).ok()) << entry.path() << ": " << model;
        ++models;
      }
    }
  }
  EXPECT_GE(files, 10);
  EXPECT_GE(models, 8);
}

}  // namespace
}  // namespace dar::sim
