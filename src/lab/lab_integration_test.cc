// The dar-lab binary on real namespaces, veths and tc: a diamond with placeholder services, its
// links checked with ICMP echo from inside the namespaces, link and rate changes, and `down`
// leaving nothing behind — also after `up` was killed halfway and after the state file was lost.
//
// Needs root (creates network namespaces); skips otherwise. Every lab is named after the test
// process's pid, so parallel runs do not collide, and is removed by a guard even when a test
// fails.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lab/command.h"
#include "lab/lab.h"
#include "lab/lab_config.h"
#include "lab/lab_state.h"
#include "lab/lab_test_util.h"

namespace dar::lab {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

uint16_t InternetChecksum(const uint8_t* data, size_t length) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < length; i += 2) sum += (data[i] << 8) | data[i + 1];
  if (length % 2 == 1) sum += data[length - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// One ICMP echo from inside `netns` to `address`; true if the reply came within a second (what
// `ip netns exec NETNS ping -c1 -W1 ADDRESS` checks; ping is not installed on every machine).
bool Ping(const std::string& netns, const std::string& address) {
  const std::string ns_path = "/run/netns/" + netns;
  const pid_t pid = fork();
  if (pid == 0) {
    const int ns = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(2);
    const int s = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    if (s < 0) _exit(3);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    if (inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1) _exit(4);
    const uint16_t id = static_cast<uint16_t>(getpid());
    uint8_t request[16] = {8,
                           0,
                           0,
                           0,
                           static_cast<uint8_t>(id >> 8),
                           static_cast<uint8_t>(id),
                           0,
                           1,
                           'd',
                           'a',
                           'r',
                           '-',
                           'l',
                           'a',
                           'b',
                           '!'};
    const uint16_t sum = InternetChecksum(request, sizeof request);
    request[2] = static_cast<uint8_t>(sum >> 8);
    request[3] = static_cast<uint8_t>(sum);
    if (sendto(s, request, sizeof request, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
      _exit(1);  // e.g. no route: the link is down
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) _exit(1);
      pollfd p = {s, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      uint8_t reply[1500];
      sockaddr_in from{};
      socklen_t from_length = sizeof from;
      const ssize_t n =
          recvfrom(s, reply, sizeof reply, 0, reinterpret_cast<sockaddr*>(&from), &from_length);
      if (n < 20) continue;
      const size_t ihl = (reply[0] & 0x0f) * 4;
      if (static_cast<size_t>(n) < ihl + 8) continue;
      const uint8_t* icmp = reply + ihl;
      if (icmp[0] == 0 && ((icmp[4] << 8) | icmp[5]) == id &&
          from.sin_addr.s_addr == to.sin_addr.s_addr) {
        _exit(0);
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Names in a directory that start with `prefix`.
std::vector<std::string> EntriesWithPrefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}
// Namespaces and root-namespace interfaces of a lab, read from the kernel's view directly.
std::vector<std::string> Namespaces(const std::string& prefix) {
  return EntriesWithPrefix("/run/netns", prefix);
}
std::vector<std::string> RootInterfaces(const std::string& prefix) {
  return EntriesWithPrefix("/sys/class/net", prefix);
}

// Processes whose command line has `arg` as one of its arguments.
std::vector<pid_t> ProcessesWithArg(const std::string& arg) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
    size_t start = 0;
    while (start < cmdline.size()) {
      const size_t end = cmdline.find('\0', start);
      if (cmdline.substr(start, end - start) == arg) {
        out.push_back(std::stoi(name));
        break;
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return out;
}

// True if `pid` runs in the namespace mounted at /run/netns/<netns>.
bool InNamespace(pid_t pid, const std::string& netns) {
  struct stat st;
  if (stat(("/run/netns/" + netns).c_str(), &st) != 0) return false;
  char link[64] = {};
  if (readlink(fmt::format("/proc/{}/ns/net", pid).c_str(), link, sizeof link - 1) < 0) {
    return false;
  }
  return std::string(link) == fmt::format("net:[{}]", st.st_ino);
}

class LabIntegrationTest : public LabTest {
 protected:
  void Start(char tag) {
    LabTest::Start("dl", tag);
    marker_ = fmt::format("9{}{}", getpid(), static_cast<int>(tag));
  }

  // The diamond, with placeholder services that say who they are and then sleep.
  std::string WriteLabFile() {
    return WriteDiamond({"100mbit", "", "", "20mbit"}, fmt::format(R"(  controller:
    command: [sleep, "{}"]
  agent:
    command: [sh, -c, "echo agent {{node_name}} {{node}} {{config}} {{controller_addr}}; exec sleep {}"]
)",
                                                                   marker_, marker_));
  }

  std::string Ifname(int link, char end) const { return fmt::format("{}-{}{}", name_, link, end); }
  std::string Tc(const std::string& node, const std::string& ifname) {
    absl::StatusOr<std::string> out =
        runner_.Run({"tc", "-n", Netns(node), "qdisc", "show", "dev", ifname});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  // Nothing of the lab is left: no namespace, no interface, no service process.
  void ExpectGone() {
    ReapOrphans();
    EXPECT_THAT(Namespaces(name_ + "-"), IsEmpty());
    EXPECT_THAT(RootInterfaces(name_ + "-"), IsEmpty());
    EXPECT_THAT(ProcessesWithArg(marker_), IsEmpty());
  }

  std::string marker_;  // the argument of every service's `sleep`
};

TEST_F(LabIntegrationTest, DiamondUpLinksRatesExecDown) {
  Start('a');
  if (IsSkipped() || HasFatalFailure()) return;
  CommandResult up = Cli({"up", WriteLabFile(), "--dir", dir_});
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  EXPECT_THAT(up.out, HasSubstr("controller 10.255.255.1:50051"));
  EXPECT_THAT(up.out, HasSubstr(dir_ + "/A.log"));

  // Services: five processes, each in its own namespace, with their placeholders expanded.
  absl::StatusOr<LabState> state = LoadLabState(StatePath(dir_));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->processes.size(), 5u);
  for (const ProcessRecord& p : state->processes) {
    EXPECT_TRUE(IsRunning(p.id)) << p.role << " " << p.node;
    EXPECT_TRUE(WaitFor([&] { return InNamespace(p.id.pid, p.netns); })) << p.netns;
  }
  EXPECT_EQ(state->processes[0].netns, name_ + "-ctl");
  EXPECT_TRUE(WaitFor([&] {
    return ReadFile(dir_ + "/C.log") ==
           fmt::format("agent C 3 {}/C.yaml 10.255.255.1:50051\n", dir_);
  })) << ReadFile(dir_ + "/C.log");

  // Every link carries ICMP both ways; nodes that are not neighbours have no route.
  const std::vector<std::tuple<std::string, std::string, int>> links = {
      {"A", "B", 0}, {"A", "C", 1}, {"B", "D", 2}, {"C", "D", 3}};
  for (const auto& [a, b, i] : links) {
    EXPECT_TRUE(Ping(Netns(a), fmt::format("10.1.{}.2", i))) << a << "->" << b;
    EXPECT_TRUE(Ping(Netns(b), fmt::format("10.1.{}.1", i))) << b << "->" << a;
  }
  EXPECT_FALSE(Ping(Netns("A"), "10.1.2.2"));  // D's end of B-D
  for (const char* node : {"A", "B", "C", "D"}) {
    EXPECT_TRUE(Ping(Netns(node), "10.255.255.1")) << node << "->controller";
  }

  // link down breaks that link only; link up restores it.
  ASSERT_EQ(Cli({"link", "down", "A", "B", "--dir", dir_}).exit_code, 0);
  EXPECT_FALSE(Ping(Netns("A"), "10.1.0.2"));
  EXPECT_FALSE(Ping(Netns("B"), "10.1.0.1"));
  EXPECT_TRUE(Ping(Netns("A"), "10.1.1.2"));
  EXPECT_TRUE(Ping(Netns("B"), "10.1.2.2"));
  EXPECT_TRUE(Ping(Netns("C"), "10.1.3.2"));
  EXPECT_TRUE(Ping(Netns("A"), "10.255.255.1"));
  ASSERT_EQ(Cli({"link", "up", "B", "A", "--dir", dir_}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return Ping(Netns("A"), "10.1.0.2"); }));

  // Rates: as configured, changed on both ends, removed.
  EXPECT_THAT(Tc("C", Ifname(3, 'a')), HasSubstr("tbf"));
  EXPECT_THAT(Tc("C", Ifname(3, 'a')), HasSubstr("rate 20Mbit"));
  EXPECT_THAT(Tc("D", Ifname(3, 'b')), HasSubstr("rate 20Mbit"));
  EXPECT_THAT(Tc("A", Ifname(1, 'a')), Not(HasSubstr("tbf")));
  ASSERT_EQ(Cli({"rate", "A", "B", "5mbit", "--dir", dir_}).exit_code, 0);
  EXPECT_THAT(Tc("A", Ifname(0, 'a')), HasSubstr("rate 5Mbit"));
  EXPECT_THAT(Tc("B", Ifname(0, 'b')), HasSubstr("rate 5Mbit"));
  EXPECT_TRUE(Ping(Netns("A"), "10.1.0.2"));
  ASSERT_EQ(Cli({"rate", "A", "B", "none", "--dir", dir_}).exit_code, 0);
  EXPECT_THAT(Tc("A", Ifname(0, 'a')), Not(HasSubstr("tbf")));
  EXPECT_THAT(Tc("B", Ifname(0, 'b')), Not(HasSubstr("tbf")));
  const CommandResult bad_rate = Cli({"rate", "A", "B", "fast", "--dir", dir_});
  EXPECT_EQ(bad_rate.exit_code, 1);
  EXPECT_THAT(bad_rate.err, HasSubstr("must be a rate such as 100mbit"));

  // exec runs in the node's namespace and passes the exit code.
  const CommandResult addr = Cli({"exec", "B", "--dir", dir_, "--", "ip", "-o", "-4", "addr"});
  EXPECT_EQ(addr.exit_code, 0);
  EXPECT_THAT(addr.out, HasSubstr("10.1.0.2/30"));
  EXPECT_THAT(addr.out, Not(HasSubstr("10.1.1.1/30")));  // A's
  EXPECT_EQ(Cli({"exec", "A", "--dir", dir_, "--", "sh", "-c", "exit 7"}).exit_code, 7);

  const CommandResult status = Cli({"status", "--dir", dir_});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("running"));
  EXPECT_THAT(status.out, Not(HasSubstr("exited")));

  const CommandResult down = Cli({"down", "--dir", dir_});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  EXPECT_THAT(down.out, HasSubstr("5 namespaces"));
  ExpectGone();
  const CommandResult again = Cli({"down", "--dir", dir_});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("0 namespaces"));
}

// `up` killed (SIGKILL) just before a step: the state file knows enough for `down`.
class LabCrashTest : public LabIntegrationTest,
                     public ::testing::WithParamInterface<std::pair<char, const char*>> {};

TEST_P(LabCrashTest, DownCleansUpAfterUpWasKilled) {
  const auto [tag, crash_step] = GetParam();
  Start(tag);
  if (IsSkipped() || HasFatalFailure()) return;
  absl::StatusOr<LabConfig> config = LoadLabConfig(WriteLabFile());
  ASSERT_TRUE(config.ok()) << config.status();

  const pid_t child = fork();
  if (child == 0) {
    SubprocessRunner runner;
    Lab lab(runner, dir_);
    UpOptions options;
    const std::string step = crash_step;
    options.on_step = [&](const std::string& s) {
      if (s.find(step) != std::string::npos) raise(SIGKILL);
    };
    lab.Up(*config, options).IgnoreError();
    _exit(3);  // not reached if the step came
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the crash step never came";

  absl::StatusOr<LabState> state = LoadLabState(StatePath(dir_));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->phase, LabPhase::kCreating);
  EXPECT_EQ(Namespaces(name_ + "-").size(), 5u);

  const CommandResult down = Cli({"down", "--dir", dir_});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  ExpectGone();
}

INSTANTIATE_TEST_SUITE_P(
    CrashPoints, LabCrashTest,
    ::testing::Values(std::pair<char, const char*>{'b', "-2a netns"},       // link 2 recorded only
                      std::pair<char, const char*>{'c', "start agent C"}),  // 3 services up
    [](const auto& info) { return info.param.first == 'b' ? "MidNetwork" : "MidServices"; });

TEST_F(LabIntegrationTest, DownByNameCleansUpWithoutTheStateFile) {
  Start('d');
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_EQ(Cli({"up", WriteLabFile(), "--dir", dir_}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return ProcessesWithArg(marker_).size() == 5; }));
  // A stray veth pair in the root namespace with the lab's prefix, as an interrupted run of an
  // older lab could leave.
  ASSERT_TRUE(
      runner_
          .Run({"ip", "link", "add", name_ + "-x1", "type", "veth", "peer", "name", name_ + "-x2"})
          .ok());
  std::filesystem::remove(StatePath(dir_));

  const CommandResult blind = Cli({"down", "--dir", dir_});
  EXPECT_EQ(blind.exit_code, 0);
  EXPECT_THAT(blind.err, HasSubstr("give --name"));
  EXPECT_EQ(Namespaces(name_ + "-").size(), 5u);  // nothing known, nothing touched

  const CommandResult down = Cli({"down", "--dir", dir_, "--name", name_});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  EXPECT_THAT(down.out, HasSubstr("5 processes stopped"));
  ExpectGone();
}

}  // namespace
}  // namespace dar::lab
