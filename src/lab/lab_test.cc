// Lab against a fake runner: which commands it issues, in what order relative to the state
// file, and what Down sweeps. No root needed; the integration test runs the real thing.
#include "lab/lab.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lab/lab_files.h"
#include "security/key_ring.h"
#include "security/tls.h"
#include "yaml-cpp/yaml.h"

namespace dar::lab {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kLabDiamond[] = R"(name: dmd
nodes:
  - {id: 1, name: A}
  - {id: 2, name: B}
  - {id: 3, name: C}
  - {id: 4, name: D}
links:
  - {a: A, b: B, rate: 100mbit}
  - {a: A, b: C}
  - {a: B, b: D}
  - {a: C, b: D}
)";

// Plays `ip` for the lab: keeps the namespaces and root interfaces that exist, and checks that
// everything created was in the state file before.
class FakeRunner : public CommandRunner {
 public:
  explicit FakeRunner(std::string state_path) : state_path_(std::move(state_path)) {}

  absl::StatusOr<CommandResult> Execute(const std::vector<std::string>& argv) override {
    const std::string cmd = FormatCommand(argv);
    commands.push_back(cmd);
    if (!fail_on.empty() && cmd.find(fail_on) != std::string::npos) {
      return CommandResult{2, "", "RTNETLINK answers: File exists\n"};
    }
    CommandResult r;
    if (cmd == "ip netns list") {
      for (const std::string& ns : namespaces) r.out += fmt::format("{} (id: 0)\n", ns);
    } else if (cmd == "ip -o link show") {
      int i = 1;
      for (const auto& [name, peer] : root_links) {
        r.out += fmt::format("{}: {}{}: <BROADCAST,MULTICAST> mtu 1500\\    link/ether\n", i++,
                             name, peer.empty() ? "" : "@" + peer);
      }
    } else if (StartsWith(argv, {"ip", "netns", "add"})) {
      if (!Recorded(argv[3], /*interface=*/false)) unrecorded.push_back(argv[3]);
      namespaces.insert(argv[3]);
    } else if (StartsWith(argv, {"ip", "netns", "del"})) {
      if (namespaces.erase(argv[3]) == 0) return CommandResult{1, "", "Cannot remove namespace"};
    } else if (StartsWith(argv, {"ip", "link", "add"})) {
      for (const std::string& name : {argv[3], argv[10]}) {
        if (!Recorded(name, /*interface=*/true)) unrecorded.push_back(name);
      }
    } else if (StartsWith(argv, {"ip", "link", "del"})) {
      auto it = root_links.find(argv[3]);
      if (it == root_links.end()) return CommandResult{1, "", "Cannot find device"};
      root_links.erase(it->second);  // a veth takes its peer along
      root_links.erase(argv[3]);
    }
    return r;
  }

  std::vector<std::string> commands;
  std::set<std::string> namespaces;
  std::map<std::string, std::string> root_links;  // name -> veth peer ("" for none)
  std::string fail_on;                            // a command containing this fails
  std::vector<std::string> unrecorded;            // created before being recorded

 private:
  static bool StartsWith(const std::vector<std::string>& argv,
                         const std::vector<std::string>& prefix) {
    return argv.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), argv.begin());
  }

  bool Recorded(const std::string& name, bool interface) const {
    absl::StatusOr<LabState> state = LoadLabState(state_path_);
    if (!state.ok()) return false;
    if (!interface) {
      return std::find(state->namespaces.begin(), state->namespaces.end(), name) !=
             state->namespaces.end();
    }
    return std::any_of(state->interfaces.begin(), state->interfaces.end(),
                       [&](const InterfaceRecord& i) { return i.name == name; });
  }

  std::string state_path_;
};

class LabTest : public ::testing::Test {
 protected:
  LabTest()
      : dir_((std::filesystem::temp_directory_path() /
              fmt::format("dar-lab-test-{}-{}", getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                 .string()),
        runner_(StatePath(dir_)),
        lab_(runner_, dir_) {
    std::filesystem::remove_all(dir_);
  }
  ~LabTest() override { std::filesystem::remove_all(dir_); }

  static LabConfig Diamond() {
    absl::StatusOr<LabConfig> c = ParseLabConfig(kLabDiamond, "diamond.yaml");
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }

  void UpDiamond() {
    absl::StatusOr<LabState> state = lab_.Up(Diamond(), UpOptions());
    ASSERT_TRUE(state.ok()) << state.status();
    runner_.commands.clear();
  }

  std::string dir_;
  FakeRunner runner_;
  Lab lab_;
};

TEST_F(LabTest, UpRecordsEveryResourceBeforeCreatingIt) {
  std::vector<std::string> steps;
  UpOptions options;
  options.file = "diamond.yaml";
  options.on_step = [&](const std::string& step) { steps.push_back(step); };
  absl::StatusOr<LabState> state = lab_.Up(Diamond(), options);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_THAT(runner_.unrecorded, IsEmpty());

  const std::vector<std::string>& c = runner_.commands;
  for (const char* ns : {"dmd-ctl", "dmd-A", "dmd-B", "dmd-C", "dmd-D"}) {
    EXPECT_THAT(c, Contains(fmt::format("ip netns add {}", ns)));
    EXPECT_THAT(c, Contains(fmt::format("ip -n {} link set lo up", ns)));
  }
  EXPECT_THAT(c, Contains("ip link add dmd-0a netns dmd-A type veth peer name dmd-0b netns dmd-B"));
  EXPECT_THAT(c, Contains("ip -n dmd-A addr add 10.1.0.1/30 dev dmd-0a"));
  EXPECT_THAT(c, Contains("ip -n dmd-B addr add 10.1.0.2/30 dev dmd-0b"));
  EXPECT_THAT(c, Contains("ip -n dmd-D link set dmd-3b up"));
  EXPECT_THAT(c, Contains("tc -n dmd-A qdisc replace dev dmd-0a root tbf rate 100000000bit burst "
                          "125000 latency 50ms"));
  EXPECT_THAT(c, Contains("tc -n dmd-B qdisc replace dev dmd-0b root tbf rate 100000000bit burst "
                          "125000 latency 50ms"));
  EXPECT_THAT(c, Not(Contains(HasSubstr("dev dmd-1a root tbf"))));  // link 1 is unlimited
  EXPECT_THAT(c, Contains("ip -n dmd-ctl addr add 10.255.255.1/32 dev lo"));
  EXPECT_THAT(c,
              Contains("ip link add dmd-m3 netns dmd-C type veth peer name dmd-c3 netns dmd-ctl"));
  EXPECT_THAT(c, Contains("ip -n dmd-C route add 10.255.255.1/32 via 10.255.3.1 dev dmd-m3"));
  // Nothing changes the root namespace: every change names a namespace.
  for (const std::string& cmd : c) {
    if (cmd.rfind("ip netns ", 0) == 0 || cmd == "ip -o link show") continue;
    EXPECT_TRUE(cmd.rfind("ip -n ", 0) == 0 || cmd.rfind("tc -n ", 0) == 0 ||
                cmd.find(" netns ") != std::string::npos)
        << cmd;
  }
  // on_step saw every change (all commands but the two listings).
  EXPECT_EQ(steps.size(), c.size() - 2);

  EXPECT_EQ(state->phase, LabPhase::kUp);
  EXPECT_EQ(state->namespaces.size(), 5u);
  EXPECT_EQ(state->interfaces.size(), 16u);  // 4 links and 4 management links, two ends each
  absl::StatusOr<LabState> saved = lab_.LoadState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->phase, LabPhase::kUp);
  EXPECT_EQ(saved->file, "diamond.yaml");
}

TEST_F(LabTest, UpWritesANodeConfigForEachAgentAndOneForTheController) {
  UpDiamond();
  const YAML::Node a = YAML::LoadFile(dir_ + "/A.yaml");
  EXPECT_EQ(a["node"]["id"].as<int>(), 1);
  EXPECT_EQ(a["node"]["name"].as<std::string>(), "A");
  EXPECT_EQ(a["netns"].as<std::string>(), "dmd-A");
  EXPECT_EQ(a["controller"].as<std::string>(), "10.255.255.1:50051");
  EXPECT_EQ(a["management"]["interface"].as<std::string>(), "dmd-m1");
  EXPECT_EQ(a["management"]["address"].as<std::string>(), "10.255.1.2/30");
  ASSERT_EQ(a["neighbours"].size(), 2u);
  const YAML::Node b = a["neighbours"][0];
  EXPECT_EQ(b["name"].as<std::string>(), "B");
  EXPECT_EQ(b["id"].as<int>(), 2);
  EXPECT_EQ(b["link"].as<int>(), 0);
  EXPECT_EQ(b["interface"].as<std::string>(), "dmd-0a");
  EXPECT_EQ(b["address"].as<std::string>(), "10.1.0.1/30");
  EXPECT_EQ(b["peer_address"].as<std::string>(), "10.1.0.2");
  EXPECT_EQ(b["peer_interface"].as<std::string>(), "dmd-0b");
  EXPECT_EQ(b["rate_bps"].as<int64_t>(), 100'000'000);
  EXPECT_FALSE(a["neighbours"][1]["rate_bps"].IsDefined());
  // D is the b end of its links: its addresses are the .2 ones.
  const YAML::Node d = YAML::LoadFile(dir_ + "/D.yaml");
  ASSERT_EQ(d["neighbours"].size(), 2u);
  EXPECT_EQ(d["neighbours"][1]["name"].as<std::string>(), "C");
  EXPECT_EQ(d["neighbours"][1]["address"].as<std::string>(), "10.1.3.2/30");

  const YAML::Node ctl = YAML::LoadFile(dir_ + "/controller.yaml");
  EXPECT_EQ(ctl["listen"].as<std::string>(), "10.255.255.1:50051");
  EXPECT_EQ(ctl["nodes"].size(), 4u);
  EXPECT_EQ(ctl["links"].size(), 4u);
  EXPECT_EQ(ctl["links"][2]["a"].as<std::string>(), "B");
}

TEST_F(LabTest, UpWritesCredentialsAndConfigsTheServicesAccept) {
  UpDiamond();
  // Every agent's config parses, names its own certificate, and the certificate chains to the
  // lab's CA with the node's identity.
  for (const char* name : {"A", "B", "C", "D"}) {
    absl::StatusOr<agent::AgentConfig> c =
        agent::LoadAgentConfig(fmt::format("{}/{}.yaml", dir_, name));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->self_node().name, name);
    EXPECT_EQ(c->nodes.size(), 4u);
    EXPECT_EQ(c->links.size(), 4u);
    EXPECT_EQ(c->neighbours.size(), 2u);
    EXPECT_EQ(c->state_dir, fmt::format("{}/state/{}", dir_, name));
    EXPECT_EQ(c->links[0].capacity, DataRate::Mbps(100));
    EXPECT_EQ(c->links[1].capacity, kLabUnlimitedCapacity);
    EXPECT_EQ(c->line_rate, kLabUnlimitedCapacity);
    absl::StatusOr<security::TlsMaterial> tls = security::LoadTlsMaterial(c->tls, absl::Now());
    ASSERT_TRUE(tls.ok()) << tls.status();
    EXPECT_EQ(tls->identity,
              security::SpiffeId::Node("dmd.dar", std::to_string(c->self_node().id)));
    ASSERT_TRUE(c->initial_key.has_value());
    EXPECT_TRUE(security::LoadKeyFile(c->initial_key->file).ok());
    EXPECT_EQ(std::filesystem::status(c->initial_key->file).permissions() &
                  std::filesystem::perms::others_read,
              std::filesystem::perms::none);
  }
  // The controller's and the admin's certificates chain to the same CA.
  const YAML::Node ctl = YAML::LoadFile(dir_ + "/controller.yaml");
  security::TlsFiles files{dir_ + "/" + ctl["tls"]["cert"].as<std::string>(),
                           dir_ + "/" + ctl["tls"]["key"].as<std::string>(),
                           dir_ + "/" + ctl["tls"]["ca"].as<std::string>()};
  absl::StatusOr<security::TlsMaterial> tls = security::LoadTlsMaterial(files, absl::Now());
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->identity, security::SpiffeId::Controller("dmd.dar"));
  EXPECT_EQ(ctl["trust_domain"].as<std::string>(), "dmd.dar");
  EXPECT_EQ(ctl["nodes"][2]["overlay"].as<std::string>(), "10.77.0.3");
  // The controller starts its key ring with the agents' key and keeps it across restarts.
  EXPECT_EQ(ctl["state_dir"].as<std::string>(), "state/controller");
  EXPECT_EQ(ctl["initial_key"]["id"].as<int>(), kLabInitialKeyId);
  EXPECT_EQ(dir_ + "/" + ctl["initial_key"]["file"].as<std::string>(),
            agent::LoadAgentConfig(dir_ + "/A.yaml")->initial_key->file);
  files = {dir_ + "/certs/admin-admin.crt", dir_ + "/certs/admin-admin.key",
           dir_ + "/certs/ca.crt"};
  tls = security::LoadTlsMaterial(files, absl::Now());
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->identity, security::SpiffeId::Admin("dmd.dar", "admin"));
}

TEST_F(LabTest, UpRefusesANameInUse) {
  runner_.namespaces = {"dmdx-A", "other"};  // a lab called dmdx is not in the way
  runner_.root_links = {{"dmd-9a", "dmd-9b"}, {"dmd-9b", "dmd-9a"}};
  absl::StatusOr<LabState> state = lab_.Up(Diamond(), UpOptions());
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(state.status().message()),
              HasSubstr("lab name 'dmd' is in use: interface dmd-9a exists"));
  runner_.root_links.clear();
  runner_.namespaces.insert("dmd-B");
  state = lab_.Up(Diamond(), UpOptions());
  ASSERT_FALSE(state.ok());
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("namespace dmd-B exists"));
  EXPECT_THAT(runner_.commands, Not(Contains(HasSubstr("netns add"))));
}

TEST_F(LabTest, UpRefusesADirWithALabUp) {
  UpDiamond();
  absl::StatusOr<LabState> state = lab_.Up(Diamond(), UpOptions());
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().message(),
            fmt::format("lab dmd is up in {}; run `dar-lab down --dir {}` first", lab_.dir(),
                        lab_.dir()));
}

TEST_F(LabTest, UpRemovesWhatItCreatedWhenAStepFails) {
  runner_.fail_on = "ip link add dmd-2a";
  absl::StatusOr<LabState> state = lab_.Up(Diamond(), UpOptions());
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().message(),
            "`ip link add dmd-2a netns dmd-B type veth peer name dmd-2b netns dmd-D` exited with "
            "2: RTNETLINK answers: File exists (everything created was removed again)");
  EXPECT_THAT(runner_.namespaces, IsEmpty());
  EXPECT_THAT(runner_.commands, Contains("ip netns del dmd-A"));
  absl::StatusOr<LabState> saved = lab_.LoadState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->phase, LabPhase::kDown);
}

TEST_F(LabTest, UpChecksServiceProgramsBeforeCreatingAnything) {
  LabConfig config = Diamond();
  config.agent = ServiceConfig{{"dar-no-such-agent", "--config", "{config}"}};
  absl::StatusOr<LabState> state = lab_.Up(config, UpOptions());
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state.status().message(),
            "services.agent.command[0]: 'dar-no-such-agent' not found in PATH");
  EXPECT_THAT(runner_.commands, Not(Contains(HasSubstr("add"))));
  EXPECT_FALSE(std::filesystem::exists(StatePath(dir_)));
}

TEST_F(LabTest, DownRemovesEverythingAndIsIdempotent) {
  UpDiamond();
  absl::StatusOr<DownReport> report = lab_.Down(DownOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->name, "dmd");
  EXPECT_EQ(report->namespaces_deleted.size(), 5u);
  EXPECT_THAT(runner_.namespaces, IsEmpty());
  EXPECT_THAT(runner_.commands, Contains("ip netns pids dmd-A"));
  absl::StatusOr<LabState> saved = lab_.LoadState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->phase, LabPhase::kDown);
  EXPECT_THAT(saved->namespaces, IsEmpty());
  EXPECT_THAT(saved->interfaces, IsEmpty());
  EXPECT_EQ(saved->layout.name, "dmd");  // kept, so a later Down still knows the name

  runner_.commands.clear();
  report = lab_.Down(DownOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->namespaces_deleted, IsEmpty());
  EXPECT_THAT(runner_.commands, Not(Contains(HasSubstr("del"))));
}

TEST_F(LabTest, DownSweepsByNameWithoutAStateFile) {
  runner_.namespaces = {"dmd-A", "dmd-ctl", "dmdx-A", "other"};
  runner_.root_links = {{"dmd-x1", "dmd-x2"}, {"dmd-x2", "dmd-x1"}, {"dmdx-0a", ""}, {"eth0", ""}};

  absl::StatusOr<DownReport> report = lab_.Down(DownOptions());  // no name: nothing known
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->note, HasSubstr("give --name"));
  EXPECT_THAT(runner_.commands, IsEmpty());

  DownOptions by_name;
  by_name.name = "dmd";
  report = lab_.Down(by_name);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->namespaces_deleted, (std::vector<std::string>{"dmd-A", "dmd-ctl"}));
  EXPECT_EQ(runner_.namespaces, (std::set<std::string>{"dmdx-A", "other"}));
  // Deleting dmd-x1 took dmd-x2 along; the failed second deletion is not an error.
  EXPECT_EQ(report->interfaces_deleted, (std::vector<std::string>{"dmd-x1"}));
  EXPECT_EQ(runner_.root_links.size(), 2u);
  EXPECT_TRUE(runner_.root_links.contains("dmdx-0a"));
  EXPECT_THAT(report->note, HasSubstr("no state file"));
}

TEST_F(LabTest, DownWithAnUnreadableStateFileNeedsAName) {
  std::filesystem::create_directories(dir_);
  std::ofstream(StatePath(dir_)) << "{garbage";
  absl::StatusOr<DownReport> report = lab_.Down(DownOptions());
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("give --name"));
  DownOptions by_name;
  by_name.name = "dmd";
  runner_.namespaces = {"dmd-A"};
  report = lab_.Down(by_name);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(runner_.namespaces, IsEmpty());
}

TEST_F(LabTest, DownRefusesANameThatContradictsTheStateFile) {
  UpDiamond();
  DownOptions other;
  other.name = "xyz";
  absl::StatusOr<DownReport> report = lab_.Down(other);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("is for lab 'dmd', not 'xyz'"));
  EXPECT_EQ(runner_.namespaces.size(), 5u);
}

TEST_F(LabTest, LinkStateAndRateChangeBothEnds) {
  EXPECT_EQ(lab_.SetLinkUp("A", "B", false).code(), absl::StatusCode::kFailedPrecondition);
  UpDiamond();
  ASSERT_TRUE(lab_.SetLinkUp("B", "A", false).ok());
  EXPECT_EQ(runner_.commands, (std::vector<std::string>{"ip -n dmd-A link set dmd-0a down",
                                                        "ip -n dmd-B link set dmd-0b down"}));
  EXPECT_FALSE(lab_.LoadState()->layout.links[0].up);
  ASSERT_TRUE(lab_.SetLinkUp("A", "B", true).ok());
  EXPECT_TRUE(lab_.LoadState()->layout.links[0].up);

  runner_.commands.clear();
  ASSERT_TRUE(lab_.SetRate("A", "C", DataRate::Mbps(5)).ok());
  EXPECT_EQ(runner_.commands,
            (std::vector<std::string>{
                "tc -n dmd-A qdisc replace dev dmd-1a root tbf rate 5000000bit burst 65536 "
                "latency 50ms",
                "tc -n dmd-C qdisc replace dev dmd-1b root tbf rate 5000000bit burst 65536 "
                "latency 50ms"}));
  EXPECT_EQ(lab_.LoadState()->layout.links[1].rate, DataRate::Mbps(5));
  runner_.commands.clear();
  ASSERT_TRUE(lab_.SetRate("A", "C", std::nullopt).ok());
  EXPECT_EQ(runner_.commands, (std::vector<std::string>{"tc -n dmd-A qdisc del dev dmd-1a root",
                                                        "tc -n dmd-C qdisc del dev dmd-1b root"}));
  EXPECT_FALSE(lab_.LoadState()->layout.links[1].rate.has_value());
  runner_.commands.clear();
  ASSERT_TRUE(lab_.SetRate("A", "C", std::nullopt).ok());  // already unlimited
  EXPECT_THAT(runner_.commands, IsEmpty());

  EXPECT_EQ(lab_.SetLinkUp("A", "D", false).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(lab_.SetRate("A", "Q", DataRate::Mbps(1)).code(), absl::StatusCode::kNotFound);
}

TEST_F(LabTest, ExecRunsInTheNodesNamespace) {
  EXPECT_EQ(lab_.ExecArgv("A", {"true"}).status().code(), absl::StatusCode::kFailedPrecondition);
  UpDiamond();
  EXPECT_EQ(*lab_.ExecArgv("A", {"ping", "-c1", "10.1.0.2"}),
            (std::vector<std::string>{"ip", "netns", "exec", "dmd-A", "ping", "-c1", "10.1.0.2"}));
  EXPECT_EQ((*lab_.ExecArgv("4", {"true"}))[3], "dmd-D");
  EXPECT_EQ((*lab_.ExecArgv("ctl", {"true"}))[3], "dmd-ctl");
  EXPECT_EQ(lab_.ExecArgv("E", {"true"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(lab_.ExecArgv("A", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LabTest, DescribeLabShowsAddressesPathsAndState) {
  UpDiamond();
  ASSERT_TRUE(lab_.SetLinkUp("C", "D", false).ok());
  const std::string text = DescribeLab(*lab_.LoadState(), lab_.dir());
  EXPECT_THAT(text, HasSubstr("lab dmd in " + lab_.dir() + ": up"));
  EXPECT_THAT(text, HasSubstr("controller 10.255.255.1:50051 in netns dmd-ctl"));
  EXPECT_THAT(text, HasSubstr(lab_.dir() + "/B.log"));
  EXPECT_THAT(text, HasSubstr("dmd-0a 10.1.0.1/30 <-> dmd-0b 10.1.0.2/30  100mbit  up"));
  EXPECT_THAT(text, HasSubstr("dmd-3a 10.1.3.1/30 <-> dmd-3b 10.1.3.2/30  unlimited  down"));
  EXPECT_THAT(text, HasSubstr("not started"));
}

}  // namespace
}  // namespace dar::lab
