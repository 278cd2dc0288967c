#include "lab/lab_state.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dar::lab {
namespace {

using ::testing::HasSubstr;

LabState SampleState() {
  LabConfig config;
  config.name = "dmd";
  config.nodes = {{1, "A"}, {2, "B"}};
  config.links = {{"A", "B", DataRate::Mbps(100)}};
  LabState state;
  state.phase = LabPhase::kUp;
  state.file = "/labs/dmd.yaml";
  state.layout = MakeLayout(config);
  state.layout.links[0].up = false;
  state.namespaces = {"dmd-ctl", "dmd-A", "dmd-B"};
  state.interfaces = {{"dmd-A", "dmd-0a"}, {"dmd-B", "dmd-0b"}, {"", "dmd-x"}};
  state.processes = {
      {"controller", "", "dmd-ctl", {1234, 99887766}, "/d/controller.log", {"sleep", "9"}},
      {"agent", "A", "dmd-A", {1235, 99887767}, "/d/A.log", {"dar-agent", "--config", "x"}}};
  return state;
}

std::string StateErrorOf(const std::string& text) {
  absl::StatusOr<LabState> s = ParseLabState(text, "s.json");
  EXPECT_FALSE(s.ok());
  return std::string(s.status().message());
}

// The sample state as JSON with `edit` applied.
template <typename F>
std::string Edited(F edit) {
  nlohmann::json j = nlohmann::json::parse(SerializeLabState(SampleState()));
  edit(j);
  return j.dump();
}

TEST(LabStateTest, RoundTrips) {
  const LabState in = SampleState();
  absl::StatusOr<LabState> out = ParseLabState(SerializeLabState(in), "s.json");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->phase, LabPhase::kUp);
  EXPECT_EQ(out->file, in.file);
  EXPECT_EQ(out->layout.name, "dmd");
  EXPECT_EQ(out->layout.ctl_netns, "dmd-ctl");
  EXPECT_EQ(out->layout.controller_addr(), in.layout.controller_addr());
  ASSERT_EQ(out->layout.nodes.size(), 2u);
  EXPECT_EQ(out->layout.nodes[1].mgmt_address, "10.255.2.2");
  ASSERT_EQ(out->layout.links.size(), 1u);
  EXPECT_EQ(out->layout.links[0].rate, DataRate::Mbps(100));
  EXPECT_FALSE(out->layout.links[0].up);
  EXPECT_EQ(out->layout.links[0].b.ifname, "dmd-0b");
  EXPECT_EQ(out->namespaces, in.namespaces);
  ASSERT_EQ(out->interfaces.size(), 3u);
  EXPECT_EQ(out->interfaces[2].netns, "");
  EXPECT_EQ(out->interfaces[2].name, "dmd-x");
  ASSERT_EQ(out->processes.size(), 2u);
  EXPECT_EQ(out->processes[1].role, "agent");
  EXPECT_EQ(out->processes[1].node, "A");
  EXPECT_EQ(out->processes[1].id.pid, 1235);
  EXPECT_EQ(out->processes[1].id.start_time, 99887767u);
  EXPECT_EQ(out->processes[1].argv, in.processes[1].argv);
  // The same text again: serialization is deterministic.
  EXPECT_EQ(SerializeLabState(*out), SerializeLabState(in));
}

TEST(LabStateTest, AnUnlimitedLinkHasNoRate) {
  LabState in = SampleState();
  in.layout.links[0].rate.reset();
  absl::StatusOr<LabState> out = ParseLabState(SerializeLabState(in), "s.json");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->layout.links[0].rate.has_value());
}

TEST(LabStateTest, SaveAndLoadAFile) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("dar-lab-state-test-{}", getpid()))
          .string();
  std::filesystem::create_directories(dir);
  const std::string path = StatePath(dir);
  EXPECT_EQ(LoadLabState(path).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(SaveLabState(SampleState(), path).ok());
  absl::StatusOr<LabState> loaded = LoadLabState(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->processes.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(SaveLabState(SampleState(), "/nonexistent-dir/state.json").ok());
  std::filesystem::remove_all(dir);
}

TEST(LabStateTest, MalformedFilesNameTheField) {
  EXPECT_THAT(StateErrorOf("{not json"), HasSubstr("s.json: not valid JSON"));
  EXPECT_EQ(StateErrorOf("[]"), "s.json: not an object");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["version"] = 2; })),
            "s.json: version: 2 is not supported (this dar-lab writes 1)");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["phase"] = "sideways"; })),
            "s.json: phase: 'sideways' is not creating, up or down");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j.erase("namespaces"); })),
            "s.json: namespaces: missing");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["namespaces"][1] = 7; })),
            "s.json: namespaces[1]: must be a string");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["layout"]["links"][0]["rate_bps"] = "fast"; })),
            "s.json: layout.links[0].rate_bps: must be an integer");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["layout"]["links"][0]["a"]["node"] = 5; })),
            "s.json: layout.links[0].a.node: 5 is not a node index");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["processes"][0]["pid"] = -4; })),
            "s.json: processes[0].pid: -4 is not a pid");
  EXPECT_EQ(StateErrorOf(Edited([](auto& j) { j["layout"]["nodes"][1] = "B"; })),
            "s.json: layout.nodes[1]: must be an object");
}

}  // namespace
}  // namespace dar::lab
