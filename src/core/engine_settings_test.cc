#include "core/engine_settings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<EngineSettings> Read(const std::string& yaml,
                                    EngineSettings s = DeployedEngineSettings()) {
  absl::StatusOr<YAML::Node> node = ParseYaml(yaml, "t.yaml");
  if (!node.ok()) return node.status();
  absl::StatusOr<YamlReader> r = YamlReader::Create(*node, "t.yaml: policy");
  if (!r.ok()) return r.status();
  if (absl::Status st = ReadEngineSettings(*r, s); !st.ok()) return st;
  if (absl::Status st = r->CheckNoUnknownKeys(); !st.ok()) return st;
  return s;
}

TEST(EngineSettingsTest, DeployedDefaultsAreTheMarginalLayer) {
  const EngineSettings s = DeployedEngineSettings();
  EXPECT_TRUE(s.marginal);
  EXPECT_EQ(s.marginal_config.routing.max_link_scans, kCycleLinkScans);
  EXPECT_EQ(s.routes.policy_refresh_cycles, kDeployedPolicyRefreshCycles);
  EXPECT_TRUE(s.routes.Validate().ok());
  absl::StatusOr<EngineSettings> empty = Read("{}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->marginal);
  EXPECT_EQ(empty->marginal_config, s.marginal_config);
  absl::StatusOr<EngineSettings> diffusion = Read("decision: diffusion");
  ASSERT_TRUE(diffusion.ok()) << diffusion.status();
  EXPECT_FALSE(diffusion->marginal);
}

TEST(EngineSettingsTest, ReadsEveryKey) {
  absl::StatusOr<EngineSettings> s = Read(R"(
decision: marginal
objective_power: 16
objective_length_weight: 0.001
demand_periods: 8
publish_gain: 0.05
other_load_horizon_periods: 30
max_link_scans: 5000
temperature: 0.7
hysteresis: 0.1
min_weight: 0.01
min_cost_change: 0.1
full_every: 20
reference_delay_us: 50
forecast_alpha: 0.1
forecast_beta: 0.2
forecast_phi: 0.9
cost_decay_periods: 3
policy_refresh_cycles: 2
cycle_threads: 3
latency_weights: {utilisation: 0.2}
bulk_weights: {capacity: 2}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->marginal);
  EXPECT_EQ(s->marginal_config.routing.objective.power, 16);
  EXPECT_EQ(s->marginal_config.routing.objective.length_weight, 0.001);
  EXPECT_EQ(s->marginal_config.demand_periods, 8);
  EXPECT_EQ(s->marginal_config.publish_gain, 0.05);
  EXPECT_EQ(s->marginal_config.other_load_horizon_periods, 30);
  EXPECT_EQ(s->marginal_config.routing.max_link_scans, 5000);
  EXPECT_EQ(s->routes.diffusion.temperature, 0.7);
  EXPECT_EQ(s->routes.diffusion.hysteresis, 0.1);
  EXPECT_EQ(s->routes.diffusion.min_weight, 0.01);
  EXPECT_EQ(s->routes.min_cost_change, 0.1);
  EXPECT_EQ(s->routes.full_every, 20);
  EXPECT_EQ(s->routes.scales.reference_delay, Microseconds(50));
  EXPECT_EQ(s->routes.forecast.alpha, 0.1);
  EXPECT_EQ(s->routes.forecast.beta, 0.2);
  EXPECT_EQ(s->routes.forecast.phi, 0.9);
  EXPECT_EQ(s->routes.cost_decay_periods, 3);
  EXPECT_EQ(s->routes.policy_refresh_cycles, 2);
  EXPECT_EQ(s->cycle_threads, 3);
  EXPECT_EQ(s->routes.latency.utilisation, 0.2);
  EXPECT_EQ(s->routes.bulk.capacity, 2);
  // Keys not given keep what the caller started from.
  EngineSettings start = DeployedEngineSettings();
  start.routes.cost_decay_periods = 4;
  absl::StatusOr<EngineSettings> kept = Read("temperature: 0.2", start);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->routes.cost_decay_periods, 4);
}

TEST(EngineSettingsTest, RefusesOutOfBoundsValuesNamingTheKey) {
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"decision: gradient", "policy.decision"},
           {"objective_power: 1", "policy.objective_power"},
           {"publish_gain: 1", "policy.publish_gain"},
           {"demand_periods: 0", "policy.demand_periods"},
           {"other_load_horizon_periods: -1", "policy.other_load_horizon_periods"},
           {"max_link_scans: -1", "policy.max_link_scans"},
           {"hysteresis: 3", "policy.hysteresis"},
           {"full_every: 0", "policy.full_every"},
           {"policy_refresh_cycles: 1001", "policy.policy_refresh_cycles"},
           {"cycle_threads: 65", "policy.cycle_threads"},
           {"cost_decay_periods: 0", "policy.cost_decay_periods"},
           {"latency_weights: {hop: 0}", "policy.latency_weights.hop"},
           {"bulk_weights: {speed: 1}", "policy.bulk_weights.speed"},
       }) {
    SCOPED_TRACE(yaml);
    absl::StatusOr<EngineSettings> s = Read(yaml);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.status().message(), HasSubstr("t.yaml: " + key));
  }
}

}  // namespace
}  // namespace dar
