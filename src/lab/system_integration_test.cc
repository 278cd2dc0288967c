// The whole system, for real: `dar-lab up` builds a diamond of network namespaces (A-B-D and
// A-C-D) and starts the real dar-controller and a real dar-agent per node; real traffic crosses
// the overlay (iperf3, and a paced stream of numbered UDP datagrams whose arrivals are timed);
// a link fails under a transfer, the controller is killed and restarted under traffic, and
// impostors try to join. What each test measures is printed and recorded as a test property.
//
// Needs root, iperf3 and openssl (scripts/install-deps.sh installs them); skips otherwise.
// Every lab is named after the test process and removed by TearDown, also when a test fails.
// One file over 600 lines: every test runs on the one lab fixture, which is most of it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "agent/agent_config.h"
#include "agent/saved_keys.h"
#include "base/status_macros.h"
#include "dar/v1/agent.pb.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lab/datagram_test_util.h"
#include "lab/lab_files.h"
#include "lab/lab_test_util.h"
#include "net/ip_packet.h"
#include "net/netns.h"
#include "net/overlay_header.h"
#include "net/scoped_fd.h"
#include "nlohmann/json.hpp"
#include "security/key_ring.h"

extern char** environ;

namespace dar::lab {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::Not;

// Copies an agent's saved table file (agent/table_store.h: a header line, then the table) with
// its version set near 2^64 and the header's size and FNV-1a checksum made to match.
bool WriteHugeVersionTable(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::string header;
  if (!std::getline(in, header)) return false;
  v1::RouteTable table;
  if (!table.ParseFromIstream(&in)) return false;
  table.set_version(~uint64_t{0} - 7);
  const std::string payload = table.SerializeAsString();
  uint64_t fnv = 0xcbf29ce484222325;
  for (const unsigned char c : payload) fnv = (fnv ^ c) * 0x100000001b3;
  // "dar-agent-table 1 node=N size=S fnv1a64=H": keep the first three fields.
  size_t at = 0;
  for (int i = 0; i < 3 && at != std::string::npos; ++i) at = header.find(' ', at + 1);
  if (at == std::string::npos) return false;
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  std::ofstream(to, std::ios::binary)
      << header.substr(0, at) << fmt::format(" size={} fnv1a64={:016x}\n", payload.size(), fnv)
      << payload;
  return true;
}

int64_t Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::string Bin(const std::string& name) { return BinaryPath(name); }

// A background process, stdout and stderr to a file; killed and reaped when destroyed.
class Child {
 public:
  Child() = default;
  Child(Child&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  Child& operator=(Child&&) = delete;
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  static absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv,
                                     const std::string& output) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    Child child;
    const int err = posix_spawnp(&child.pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
      child.pid_ = -1;
      return absl::ErrnoToStatus(err, fmt::format("cannot run {}", argv[0]));
    }
    return child;
  }

  // Its exit code once it has exited within `timeout`; nullopt if it still runs. -1 if killed.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    int status = 0;
    const bool exited = WaitFor(
        [&] {
          if (pid_ <= 0) return true;
          return ::waitpid(pid_, &status, WNOHANG) == pid_;
        },
        timeout);
    if (!exited) return std::nullopt;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

// A diamond lab with the real services of this build. Links: 0 A-B, 1 A-C, 2 B-D, 3 C-D; link
// i's ends are "<lab>-<i>a" (first node) and "<lab>-<i>b".
class SystemTest : public LabTest {
 protected:
  void Up(char tag, const std::string& c_d_rate = "100mbit") {
    if (::access("/usr/bin/iperf3", X_OK) != 0) GTEST_SKIP() << "needs iperf3";
    Start("ds", tag);
    if (IsSkipped() || HasFatalFailure()) return;
    const std::string file = WriteDiamond(
        {"100mbit", "100mbit", "100mbit", c_d_rate},
        fmt::format("  controller:\n    command: [{}, --config, \"{{config}}\", --listen, "
                    "\"{{controller_addr}}\"]\n  agent:\n    command: [{}, --config, "
                    "\"{{config}}\"]\n",
                    Bin("dar-controller"), Bin("dar-agent")));
    const CommandResult up = Cli({"up", file, "--dir", dir_});
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    ASSERT_TRUE(WaitFor([&] { return AllAgentsHaveTables(); }, std::chrono::seconds(30)))
        << Darctl({"show", "nodes"}).dump(1) << ReadFile(dir_ + "/controller.log");
  }

  // darctl against the lab's controller, from the controller's namespace; its JSON output
  // (null if it failed).
  nlohmann::json Darctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {"ip", "netns", "exec", Netns("ctl"), Bin("darctl")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(),
                {"-j", "--controller", "10.255.255.1:50051", "--tls-dir", dir_ + "/certs"});
    absl::StatusOr<CommandResult> r = SubprocessRunner(Seconds(20)).Execute(argv);
    if (!r.ok() || r->exit_code != 0) return nullptr;
    return nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  }

  // darctl as an operator types it (no -j unless in `args`): exit code, output, errors.
  CommandResult DarctlRun(std::vector<std::string> args) {
    std::vector<std::string> argv = {"ip", "netns", "exec", Netns("ctl"), Bin("darctl")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--controller", "10.255.255.1:50051", "--tls-dir", dir_ + "/certs"});
    absl::StatusOr<CommandResult> r = SubprocessRunner(Seconds(20)).Execute(argv);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }

  static uint64_t U64(const nlohmann::json& v) {
    if (v.is_string()) return std::stoull(v.get<std::string>());
    return v.is_number() ? v.get<uint64_t>() : 0;
  }

  // The first process of the lab's state file with this role ("controller", "agent") and, if
  // given, node; an empty object if there is none (a test failure says so).
  nlohmann::json Process(const std::string& role, const std::string& node = "") {
    const nlohmann::json state =
        nlohmann::json::parse(ReadFile(dir_ + "/state.json"), nullptr, false);
    if (state.is_object()) {
      for (const nlohmann::json& p : state.value("processes", nlohmann::json::array())) {
        if (p.value("role", "") == role && (node.empty() || p.value("node", "") == node)) return p;
      }
    }
    ADD_FAILURE() << "no " << role << " " << node << " in " << state.dump(1);
    return nlohmann::json::object();
  }

  // The table version each node acknowledged, by name; empty if darctl failed.
  std::map<std::string, uint64_t> AckedVersions(bool connected_only = true) {
    std::map<std::string, uint64_t> out;
    const nlohmann::json nodes = Darctl({"show", "nodes"});
    if (!nodes.is_object()) return out;
    for (const nlohmann::json& n : nodes.value("nodes", nlohmann::json::array())) {
      if (connected_only && !n.value("connected", false)) continue;
      out[n.value("name", "")] = U64(n.value("acked_version", nlohmann::json()));
    }
    return out;
  }

  // Waits up to 30 s for the controller's key ring to be steady on one key other than `not_id`;
  // that key's id, or nullopt (with the ring's last view in the failure).
  std::optional<uint32_t> WaitForSteadyKeyOtherThan(uint32_t not_id) {
    nlohmann::json k;
    const bool steady = WaitFor(
        [&] {
          k = Darctl({"keys", "show"});
          return k.is_object() && k.value("phase", "") == "steady" && k["keys"].size() == 1 &&
                 k["keys"][0].value("key_id", 0u) != not_id;
        },
        std::chrono::seconds(30));
    if (!steady) {
      ADD_FAILURE() << "keys not steady on a key other than " << not_id << ": " << k.dump(1);
      return std::nullopt;
    }
    return k["keys"][0].value("key_id", 0u);
  }

  bool AllAgentsHaveTables(uint64_t above = 0) {
    const std::map<std::string, uint64_t> v = AckedVersions();
    if (v.size() != 4) return false;
    return std::all_of(v.begin(), v.end(), [&](const auto& e) { return e.second > above; });
  }

  // A's next hops toward D and their weights (the largest over the classes), as darctl shows
  // them.
  std::map<std::string, double> NextHopWeightsAToD() {
    std::map<std::string, double> out;
    const nlohmann::json r = Darctl({"show", "routes", "--node", "A", "--dest", "D"});
    if (!r.is_object()) return out;
    for (const nlohmann::json& route : r.value("routes", nlohmann::json::array())) {
      for (const nlohmann::json& h : route.value("next_hops", nlohmann::json::array())) {
        double& w = out[h.value("neighbour", "")];
        w = std::max(w, h.value("weight", 0.0));
      }
    }
    return out;
  }

  // A's next hops toward D with a weight above 1%.
  std::vector<std::string> NextHopsAToD() {
    std::vector<std::string> out;
    for (const auto& [hop, weight] : NextHopWeightsAToD()) {
      if (weight > 0.01) out.push_back(hop);
    }
    return out;
  }

  // Bytes the interface has sent (the kernel's counter).
  uint64_t TxBytes(const std::string& node, const std::string& ifname) {
    absl::StatusOr<std::string> out =
        runner_.Run({"ip", "-n", Netns(node), "-s", "-j", "link", "show", "dev", ifname});
    if (!out.ok()) return 0;
    const nlohmann::json j = nlohmann::json::parse(*out, nullptr, false);
    if (!j.is_array() || j.empty()) return 0;
    return j[0]["stats64"]["tx"].value("bytes", uint64_t{0});
  }
  std::string If(int link, char end) const { return fmt::format("{}-{}{}", name_, link, end); }

  // The branch (B or C) that carried most of A's traffic while `wait` ran.
  std::string BusierBranch(const std::function<void()>& wait) {
    const uint64_t b0 = TxBytes("A", If(0, 'a')), c0 = TxBytes("A", If(1, 'a'));
    wait();
    const uint64_t b = TxBytes("A", If(0, 'a')) - b0, c = TxBytes("A", If(1, 'a')) - c0;
    return b >= c ? "B" : "C";
  }

  // iperf3 in `node`'s namespace, its output to <dir>/<file>.
  absl::StatusOr<Child> Iperf(const std::string& node, std::vector<std::string> args,
                              const std::string& file) {
    std::vector<std::string> argv = {"ip", "netns", "exec", Netns(node), "iperf3"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::Spawn(argv, dir_ + "/" + file);
  }
  // An iperf3 server for one test on D's overlay address.
  absl::StatusOr<Child> IperfServer(int port) {
    ASSIGN_OR_RETURN(Child server,
                     Iperf("D", {"-s", "-1", "-B", "10.77.0.4", "-p", std::to_string(port)},
                           fmt::format("iperf3-server-{}.txt", port)));
    const bool listening = WaitFor([&] {
      absl::StatusOr<std::string> ss = runner_.Run(
          {"ip", "netns", "exec", Netns("D"), "ss", "-ltnH", fmt::format("sport = :{}", port)});
      return ss.ok() && !ss->empty();
    });
    if (!listening) return absl::DeadlineExceededError("iperf3 server does not listen");
    return server;
  }
};

// iperf3 and a 1 ms datagram stream from A to D; the far link of the branch they use goes down
// two seconds in. The controller learns it from the agents' samples and moves A's traffic to
// the other branch; the transfer continues. Reports the longest gap in delivery.
TEST_F(SystemTest, TransferSurvivesAFarLinkGoingDown) {
  Up('l', "50mbit");
  if (IsSkipped() || HasFatalFailure()) return;
  absl::StatusOr<Child> server = IperfServer(5201);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<DatagramStream>> stream =
      DatagramStream::Open(Netns("A"), Netns("D"), "10.77.0.4", 9000);
  ASSERT_TRUE(stream.ok()) << stream.status();
  (*stream)->Start();
  const auto iperf_start = Clock::now();
  absl::StatusOr<Child> client =
      Iperf("A", {"-c", "10.77.0.4", "-p", "5201", "-t", "6", "-i", "0.25", "-J"}, "iperf3.json");
  ASSERT_TRUE(client.ok()) << client.status();

  ASSERT_TRUE((*stream)->WaitSent(1500));
  const std::string via = BusierBranch([&] { (*stream)->WaitSent(500); });
  const std::string other = via == "B" ? "C" : "B";
  const uint32_t failed_seq = (*stream)->sent();
  const auto failed_at = Clock::now();
  const CommandResult down = Cli({"link", "down", via, "D", "--dir", dir_});
  ASSERT_EQ(down.exit_code, 0) << down.err;

  ASSERT_TRUE(WaitFor([&] { return NextHopsAToD() == std::vector<std::string>{other}; }))
      << Darctl({"show", "routes", "--node", "A"}).dump(1);
  const std::optional<int> iperf_exit = client->Wait(std::chrono::seconds(20));
  (*stream)->WaitSent(1000);
  (*stream)->Stop();

  // The transfer finished, and carried data in every quarter second from 1 s after the failure.
  ASSERT_EQ(iperf_exit, std::optional<int>(0)) << ReadFile(dir_ + "/iperf3.json");
  const nlohmann::json result =
      nlohmann::json::parse(ReadFile(dir_ + "/iperf3.json"), nullptr, false);
  ASSERT_TRUE(result.is_object());
  const double failed_s = std::chrono::duration<double>(failed_at - iperf_start).count();
  double before_bps = 0, after_bps = 0;
  int before_n = 0, after_n = 0, empty = 0;
  for (const nlohmann::json& i : result["intervals"]) {
    const double start = i["sum"]["start"].get<double>();
    const double bps = i["sum"]["bits_per_second"].get<double>();
    if (i["sum"]["bytes"].get<double>() == 0) ++empty;
    if (start + 0.25 <= failed_s) {
      before_bps += bps;
      ++before_n;
    } else if (start >= failed_s + 1.0) {
      EXPECT_GT(bps, 0) << "interval at " << start << " s carried nothing";
      after_bps += bps;
      ++after_n;
    }
  }
  ASSERT_GT(after_n, 0);

  // The datagram stream: nothing lost once the routes moved (the last second), and the gap.
  const DatagramStream::Report r = (*stream)->Analyse(failed_seq, (*stream)->sent());
  const DatagramStream::Report tail = (*stream)->Analyse(r.sent - 1000, r.sent);
  EXPECT_EQ(tail.lost, 0u);
  // The issue's goal, under 300 ms of outage with 100 ms probes, as datagrams lost (one a ms):
  // a loaded machine that delays the stream's threads stretches the gap, not the loss.
  EXPECT_LT(r.lost, 300u);
  EXPECT_LT(r.longest_gap_ms, 2000);
  const nlohmann::json events = Darctl({"show", "events"});
  EXPECT_THAT(events.dump(), HasSubstr("link_down"));

  std::printf(
      "link %s-D down under a transfer from A to D (probes every 100 ms): longest gap in "
      "delivery %lld ms, %u of %u datagrams lost after the failure; iperf3 %.1f Mbit/s before, "
      "%.1f Mbit/s from 1 s after (via %s), %d empty 250 ms intervals\n",
      via.c_str(), static_cast<long long>(r.longest_gap_ms), r.lost, r.sent - failed_seq,
      before_n ? before_bps / before_n / 1e6 : 0.0, after_bps / after_n / 1e6, other.c_str(),
      empty);
  RecordProperty("longest_gap_ms", static_cast<int>(r.longest_gap_ms));
  RecordProperty("lost_datagrams", static_cast<int>(r.lost));
}

// A TCP transfer from A to D; two seconds in, the far link of the branch it uses is shaped to
// 10 Mbit/s (the agents are not told) and loaded with 20 Mbit/s of UDP from that branch's node
// to D. The agents see the queue and the loss in their probes, the controller moves A's traffic
// to the other branch and keeps it there. Reports the throughput before, right after the
// congestion, and once moved.
TEST_F(SystemTest, CongestedBranchLosesTheTransfer) {
  Up('g');
  if (IsSkipped() || HasFatalFailure()) return;
  absl::StatusOr<Child> server = IperfServer(5201);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Child> load_server = IperfServer(5202);
  ASSERT_TRUE(load_server.ok()) << load_server.status();
  const auto start = Clock::now();
  absl::StatusOr<Child> client =
      Iperf("A", {"-c", "10.77.0.4", "-p", "5201", "-t", "14", "-i", "0.5", "-J"}, "iperf3.json");
  ASSERT_TRUE(client.ok()) << client.status();

  // Wait for the transfer to run (16 MB through A, over a second), then see which branch
  // carries it.
  const uint64_t a0 = TxBytes("A", If(0, 'a')) + TxBytes("A", If(1, 'a'));
  ASSERT_TRUE(WaitFor(
      [&] { return TxBytes("A", If(0, 'a')) + TxBytes("A", If(1, 'a')) > a0 + (16 << 20); }));
  const std::string via = BusierBranch([&] {
    const uint64_t x = TxBytes("A", If(0, 'a')) + TxBytes("A", If(1, 'a'));
    WaitFor([&] { return TxBytes("A", If(0, 'a')) + TxBytes("A", If(1, 'a')) > x + (4 << 20); });
  });
  const std::string other = via == "B" ? "C" : "B";
  const double congested_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(Cli({"rate", via, "D", "10mbit", "--dir", dir_}).exit_code, 0);
  absl::StatusOr<Child> load =
      Iperf(via, {"-u", "-c", "10.77.0.4", "-p", "5202", "-b", "20M", "-t", "11"}, "load.txt");
  ASSERT_TRUE(load.ok()) << load.status();

  // The controller moves A's traffic to D off the congested branch, and keeps it off: from the
  // move on, what A sends on each branch is counted until the transfer ends. At most a tenth
  // may go the congested way: the marginal layer may move the branch's own load elsewhere
  // and then give A's traffic a small share of what the shaped link has left; A's routes are
  // sampled too, for the report.
  // Moved: the congested branch keeps under 5% of A's traffic to D (the marginal layer may
  // leave it a small share for a while; what A then sends each way is checked below).
  std::map<std::string, double> weights;
  ASSERT_TRUE(WaitFor(
      [&] {
        weights = NextHopWeightsAToD();
        return weights[other] > 0.5 && weights[via] < 0.05;
      },
      std::chrono::seconds(8)))
      << "A's weights toward D: " << nlohmann::json(weights).dump() << "\n"
      << Darctl({"show", "links"}).dump(1);
  const double moved_s = std::chrono::duration<double>(Clock::now() - start).count();
  // Why: the shaped link is found slow, and says until when.
  nlohmann::json shaped;
  EXPECT_TRUE(WaitFor(
      [&] {
        const nlohmann::json l = Darctl({"show", "links"});
        if (!l.is_object()) return false;
        for (const nlohmann::json& v : l["links"]) {
          if (v.value("src_name", "") == via && v.value("dst_name", "") == "D") shaped = v;
        }
        return shaped.value("slow", false);
      },
      std::chrono::seconds(8)))
      << shaped.dump(1);
  EXPECT_TRUE(shaped.value("why", "").starts_with("slow")) << shaped.dump(1);
  EXPECT_GT(shaped.value("slow_until_unix_ns", int64_t{0}), absl::ToUnixNanos(absl::Now()))
      << shaped.dump(1);
  const std::string via_if = If(via == "B" ? 0 : 1, 'a'), other_if = If(via == "B" ? 1 : 0, 'a');
  const uint64_t via0 = TxBytes("A", via_if), other0 = TxBytes("A", other_if);
  int samples = 0, back = 0;
  std::optional<int> exit;
  while (!(exit = client->Wait(std::chrono::milliseconds(250)))) {
    const std::vector<std::string> hops = NextHopsAToD();
    ++samples;
    back += std::find(hops.begin(), hops.end(), via) != hops.end();
  }
  ASSERT_EQ(exit, std::optional<int>(0)) << ReadFile(dir_ + "/iperf3.json");
  const double via_bytes = static_cast<double>(TxBytes("A", via_if) - via0);
  const double other_bytes = static_cast<double>(TxBytes("A", other_if) - other0);
  EXPECT_LE(via_bytes * 10, via_bytes + other_bytes)
      << "A sent " << via_bytes << " bytes through the congested " << via << " after the move, "
      << other_bytes << " through " << other << "; " << via << " was a next hop in " << back
      << " of " << samples << " samples";

  const nlohmann::json result =
      nlohmann::json::parse(ReadFile(dir_ + "/iperf3.json"), nullptr, false);
  ASSERT_TRUE(result.is_object());
  double before = 0, during = 0, after = 0;
  int nb = 0, nd = 0, na = 0;
  for (const nlohmann::json& i : result["intervals"]) {
    const double t = i["sum"]["start"].get<double>();
    const double bps = i["sum"]["bits_per_second"].get<double>();
    if (t + 0.5 <= congested_s) {
      before += bps, ++nb;
    } else if (t >= congested_s && t + 0.5 <= moved_s) {
      during += bps, ++nd;
    } else if (t >= moved_s + 1.0) {
      after += bps, ++na;
    }
  }
  ASSERT_GT(na, 0);
  const double after_mbps = after / na / 1e6;
  // Once moved, the transfer runs on an unshaped 100 Mbit/s branch: far above the 10 Mbit/s it
  // could have shared with the load.
  EXPECT_GT(after_mbps, 20.0);
  std::printf(
      "congested branch (%s-D shaped to 10 Mbit/s and loaded with 20 Mbit/s): TCP from A to D "
      "%.1f Mbit/s before, %.1f Mbit/s while congested (%.1f s until the controller moved it to "
      "%s), %.1f Mbit/s after, %.1f%% of A's bytes through %s; a next hop in %d of %d "
      "samples\n",
      via.c_str(), nb ? before / nb / 1e6 : 0.0, nd ? during / nd / 1e6 : 0.0,
      moved_s - congested_s, other.c_str(), after_mbps,
      100 * via_bytes / std::max(1.0, via_bytes + other_bytes), via.c_str(), back, samples);
  RecordProperty("before_mbps", static_cast<int>(nb ? before / nb / 1e6 : 0));
  RecordProperty("after_mbps", static_cast<int>(after_mbps));
  RecordProperty("move_ms", static_cast<int>((moved_s - congested_s) * 1000));
}

// The controller is killed (SIGKILL) under traffic and started again: the agents forward on
// their last tables meanwhile, reconnect, and take the new controller's tables (versions above
// theirs) without a gap in delivery.
TEST_F(SystemTest, ControllerKilledAndRestartedUnderTraffic) {
  Up('c');
  if (IsSkipped() || HasFatalFailure()) return;
  absl::StatusOr<std::unique_ptr<DatagramStream>> stream =
      DatagramStream::Open(Netns("A"), Netns("D"), "10.77.0.4", 9000);
  ASSERT_TRUE(stream.ok()) << stream.status();
  (*stream)->Start();
  ASSERT_TRUE((*stream)->WaitSent(1000));
  const std::map<std::string, uint64_t> before = AckedVersions();
  ASSERT_EQ(before.size(), 4u);
  uint64_t newest_before = 0;
  for (const auto& [node, v] : before) newest_before = std::max(newest_before, v);

  // The controller is away 1.5 s by the clock, well inside the agents' 3 s staleness timeout
  // with the restart and the reconnection on top. (Counted in datagrams, 1.5 s of a 1 ms
  // stream is 1.8–2 s on a busy machine: too close to the timeout for the agents to be sure
  // to stay on their tables.)
  const uint32_t killed_seq = (*stream)->sent();
  const auto killed_at = Clock::now();
  ASSERT_EQ(Cli({"stop", "ctl", "--kill", "--dir", dir_}).exit_code, 0);
  const uint32_t received_at_kill = (*stream)->received();
  std::this_thread::sleep_until(killed_at + std::chrono::milliseconds(1500));
  // Forwarding went on without the controller: every datagram sent meanwhile arrived but the
  // few in flight.
  EXPECT_GE((*stream)->received() + 20, (*stream)->sent());
  EXPECT_GT((*stream)->received(), received_at_kill + 500);
  const CommandResult start = Cli({"start", "ctl", "--dir", dir_});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const auto restarted_at = Clock::now();
  const int64_t away_ms = Ms(restarted_at - killed_at);
  ASSERT_TRUE(WaitFor([&] { return AllAgentsHaveTables(newest_before); }, std::chrono::seconds(30)))
      << "acked versions did not pass " << newest_before << ": "
      << Darctl({"show", "nodes"}).dump(1);
  const int64_t reconciled_ms = Ms(Clock::now() - restarted_at);
  ASSERT_TRUE((*stream)->WaitSent(1000));
  (*stream)->Stop();

  const DatagramStream::Report r = (*stream)->Analyse(killed_seq, (*stream)->sent());
  EXPECT_EQ(r.lost, 0u);
  // Nothing is lost; a pause in delivery without loss is the scheduler of a busy machine (the
  // bound only catches an outage that the buffers hid).
  EXPECT_LT(r.longest_gap_ms, 1000);
  // No agent refused a table of the new controller, and none fell back to its static table on
  // the way: they forwarded on the last tables until the new controller's came (each agent
  // says so in its hello, and the controller shows it).
  const nlohmann::json nodes = Darctl({"show", "nodes"});
  ASSERT_EQ(nodes["nodes"].size(), 4u) << nodes.dump(1);
  for (const nlohmann::json& n : nodes["nodes"]) {
    EXPECT_EQ(U64(n["refused_tables"]), 0u) << n.dump();
    EXPECT_FALSE(n.value("static_table", true)) << n.dump();
    EXPECT_EQ(U64(n["fallbacks"]), 0u)
        << n.dump() << " (the controller was away " << away_ms << " ms, then every agent had "
        << "a new table in " << reconciled_ms << " ms)";
  }
  std::printf(
      "controller killed for %lld ms under a 1 ms stream from A to D, then restarted: %u of %u "
      "datagrams lost, longest gap in delivery %lld ms, every agent on a new table %lld ms "
      "after the restart (versions above %llu)\n",
      static_cast<long long>(away_ms), r.lost, r.sent - killed_seq,
      static_cast<long long>(r.longest_gap_ms), static_cast<long long>(reconciled_ms),
      static_cast<unsigned long long>(newest_before));
  RecordProperty("lost_datagrams", static_cast<int>(r.lost));
  RecordProperty("longest_gap_ms", static_cast<int>(r.longest_gap_ms));
}

// The controller on DAR's marginal decision layer: the agents report what their TUNs send, and
// an 80 Mbit/s UDP stream from A to D, with C-D at 50 Mbit/s, is split by what each branch
// carries best: two thirds via B (utilisation 0.53 on both branches), where an even split
// would load C-D to 0.8. Every agent takes the tables (downhill by rank).
TEST_F(SystemTest, MarginalDecisionSplitsByWhatTheAgentsSend) {
  Up('m', "50mbit");
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_EQ(Cli({"stop", "ctl", "--dir", dir_}).exit_code, 0);
  {
    std::ofstream config(dir_ + "/controller.yaml", std::ios::app);
    config << "policy: {decision: marginal}\n";
  }
  const CommandResult start = Cli({"start", "ctl", "--dir", dir_});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  absl::StatusOr<Child> server = IperfServer(5203);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Child> client =
      Iperf("A", {"-u", "-c", "10.77.0.4", "-p", "5203", "-b", "80M", "-t", "10"}, "iperf3-m.txt");
  ASSERT_TRUE(client.ok()) << client.status();
  const auto weight_via = [&](const std::string& via) {
    const nlohmann::json r = Darctl({"show", "routes", "--node", "A", "--dest", "D"});
    if (!r.is_object()) return -1.0;
    for (const nlohmann::json& route : r.value("routes", nlohmann::json::array())) {
      for (const nlohmann::json& h : route.value("next_hops", nlohmann::json::array())) {
        if (h.value("neighbour", "") == via) return h.value("weight", 0.0);
      }
    }
    return 0.0;
  };
  double via_b = 0;
  EXPECT_TRUE(WaitFor(
      [&] {
        via_b = weight_via("B");
        return via_b > 0.58 && via_b < 0.76;
      },
      std::chrono::seconds(9)))
      << "A's weight toward D via B: " << via_b << "\n"
      << Darctl({"show", "routes", "--node", "A"}).dump(1);
  EXPECT_EQ(client->Wait(std::chrono::seconds(20)), std::optional<int>(0));
  const nlohmann::json nodes = Darctl({"show", "nodes"});
  ASSERT_EQ(nodes["nodes"].size(), 4u) << nodes.dump(1);
  for (const nlohmann::json& n : nodes["nodes"]) {
    EXPECT_EQ(U64(n["refused_tables"]), 0u) << n.dump();
  }
  std::printf(
      "marginal decision, 80 Mbit/s from A to D, C-D at 50 Mbit/s: A sends %.0f%% via B "
      "(the optimum 67%%)\n",
      100 * via_b);
  RecordProperty("via_b_percent", static_cast<int>(100 * via_b));
}

// A data-plane key rotation under a 1 ms stream: the new key is announced, then seals, then the
// old one is retired, each step pushed to every agent; not one datagram is refused on the way.
// Then an agent restarted while the controller is down still has the new key.
TEST_F(SystemTest, KeyRotationUnderTrafficLosesNothing) {
  Up('k');
  if (IsSkipped() || HasFatalFailure()) return;
  // The controller first rotates away from the bootstrap key of the agents' config files.
  const std::optional<uint32_t> before = WaitForSteadyKeyOtherThan(kLabInitialKeyId);
  ASSERT_TRUE(before.has_value());
  EXPECT_THAT(ReadFile(dir_ + "/controller.log"), HasSubstr("rotation step"));
  const uint32_t old_id = *before;

  absl::StatusOr<std::unique_ptr<DatagramStream>> stream =
      DatagramStream::Open(Netns("A"), Netns("D"), "10.77.0.4", 9000);
  ASSERT_TRUE(stream.ok()) << stream.status();
  (*stream)->Start();
  ASSERT_TRUE((*stream)->WaitSent(500));
  const uint32_t first = (*stream)->sent();
  const nlohmann::json started = Darctl({"keys", "rotate"});
  ASSERT_TRUE(started.is_object());
  EXPECT_TRUE(started.value("rotation_started", false));
  EXPECT_EQ(started.value("phase", ""), "announced");
  // Announced, activated, retired: one rollout (5 s in the lab) between steps.
  ASSERT_TRUE(WaitForSteadyKeyOtherThan(old_id).has_value());
  ASSERT_TRUE((*stream)->WaitSent(500));
  (*stream)->Stop();
  const DatagramStream::Report r = (*stream)->Analyse(first, (*stream)->sent());
  EXPECT_EQ(r.lost, 0u);
  // Every agent was handed each step.
  for (const std::string node : {"A", "B", "C", "D"}) {
    EXPECT_THAT(ReadFile(fmt::format("{}/{}.log", dir_, node)),
                HasSubstr(fmt::format("\"keys\":[\"{}\",\"{}*\"]", old_id, old_id + 1)))
        << node;
  }
  std::printf(
      "key rotation %u -> %u under a 1 ms stream from A to D: %u of %u datagrams lost, "
      "longest gap in delivery %lld ms\n",
      old_id, old_id + 1, r.lost, r.sent - first, static_cast<long long>(r.longest_gap_ms));
  RecordProperty("lost_datagrams", static_cast<int>(r.lost));

  // The controller dies, then D's agent restarts: it comes back with the rotated keys it saved
  // (its config file names the retired initial key) and its last table, and delivers again
  // without a controller.
  ASSERT_EQ(Cli({"stop", "ctl", "--kill", "--dir", dir_}).exit_code, 0);
  ASSERT_EQ(Cli({"stop", "D", "--dir", dir_}).exit_code, 0);
  ASSERT_EQ(Cli({"start", "D", "--dir", dir_}).exit_code, 0);
  const auto restarted_at = Clock::now();
  // Its TUN (D's overlay address) is back once the agent is up.
  absl::StatusOr<std::unique_ptr<DatagramStream>> again;
  WaitFor([&] {
    again = DatagramStream::Open(Netns("A"), Netns("D"), "10.77.0.4", 9001);
    return again.ok();
  });
  ASSERT_TRUE(again.ok()) << again.status();
  (*again)->Start();
  const bool delivers =
      WaitFor([&] { return (*again)->received() >= 200; }, std::chrono::seconds(10));
  const int64_t back_ms = Ms(Clock::now() - restarted_at);
  (*again)->Stop();
  const std::string d_log = ReadFile(dir_ + "/D.log");
  EXPECT_TRUE(delivers) << "D delivers nothing after its restart: " << d_log;
  EXPECT_THAT(d_log, HasSubstr("data-plane keys read from the state dir"));
  std::printf(
      "D restarted with the controller down: delivering again %lld ms after its start (the rotated "
      "keys from its state dir)\n",
      static_cast<long long>(back_ms));
}

// The operator's commands, through the darctl binary against the lab's controller: every view
// in JSON and as text, a policy change (and bad ones refused with the reason), a link drained
// (A's routes to D leave it) and undrained.
TEST_F(SystemTest, DarctlShowsAndChangesWhatTheControllerRuns) {
  Up('o');
  if (IsSkipped() || HasFatalFailure()) return;
  const nlohmann::json topology = Darctl({"show", "topology"});
  ASSERT_TRUE(topology.is_object()) << "darctl show topology -j failed";
  EXPECT_EQ(topology["nodes"].size(), 4u);
  ASSERT_EQ(topology["links"].size(), 8u);  // both directions of the diamond's 4 links
  std::set<std::string> names;
  for (const nlohmann::json& l : topology["links"]) {
    names.insert(l.value("src_name", "") + "->" + l.value("dst_name", ""));
  }
  EXPECT_THAT(names, ::testing::ElementsAre("A->B", "A->C", "B->A", "B->D", "C->A", "C->D", "D->B",
                                            "D->C"));
  // Every link measured by its agent: up, with an RTT.
  ASSERT_TRUE(WaitFor([&] {
    const nlohmann::json links = Darctl({"show", "links"});
    if (!links.is_object() || links["links"].size() != 8) return false;
    return std::all_of(links["links"].begin(), links["links"].end(), [](const nlohmann::json& l) {
      return l.value("up", false) && l.value("rtt_ms", 0.0) > 0;
    });
  })) << Darctl({"show", "links"}).dump(1);

  // The text views name what the JSON has.
  const CommandResult nodes_text = DarctlRun({"show", "nodes"});
  ASSERT_EQ(nodes_text.exit_code, 0) << nodes_text.err;
  EXPECT_THAT(nodes_text.out, HasSubstr("fallbacks"));
  for (const std::string n : {"A", "B", "C", "D"}) EXPECT_THAT(nodes_text.out, HasSubstr(n));
  EXPECT_THAT(nodes_text.out, HasSubstr("controller"));  // each forwards on the controller's
  const CommandResult links_text = DarctlRun({"show", "links"});
  ASSERT_EQ(links_text.exit_code, 0) << links_text.err;
  EXPECT_THAT(links_text.out, HasSubstr("B->D"));
  const CommandResult routes_text = DarctlRun({"show", "routes", "--node", "A", "--dest", "D"});
  ASSERT_EQ(routes_text.exit_code, 0) << routes_text.err;
  EXPECT_THAT(routes_text.out, HasSubstr("table version"));
  const nlohmann::json events = Darctl({"show", "events"});
  ASSERT_TRUE(events.is_object());
  std::set<std::string> connected;
  for (const nlohmann::json& e : events["events"]) {
    if (e.value("kind", "") == "agent_connected") connected.insert(e.value("node", ""));
  }
  EXPECT_EQ(connected, (std::set<std::string>{"A", "B", "C", "D"}));

  // Policy: a change is applied and shown; an unknown key and a bad value are refused.
  const CommandResult set = DarctlRun({"policy", "set", "temperature=0.25", "hysteresis=0.1"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  const nlohmann::json policy = Darctl({"policy", "show"});
  ASSERT_TRUE(policy.is_object());
  EXPECT_DOUBLE_EQ(policy.value("temperature", 0.0), 0.25);
  EXPECT_DOUBLE_EQ(policy.value("hysteresis", 0.0), 0.1);
  const CommandResult policy_text = DarctlRun({"policy", "show"});
  ASSERT_EQ(policy_text.exit_code, 0) << policy_text.err;
  EXPECT_THAT(policy_text.out, HasSubstr("temperature: 0.25\n"));
  EXPECT_THAT(policy_text.out, HasSubstr("cycle_ms: 100\n"));
  EXPECT_THAT(policy_text.out, HasSubstr("learned:\n  active: analytic\n"));
  const CommandResult unknown = DarctlRun({"policy", "set", "tempreature=1"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("unknown setting 'tempreature'"));
  const CommandResult bad = DarctlRun({"policy", "set", "temperature=warm"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("'warm' is not a valid value for temperature"));
  const CommandResult refused = DarctlRun({"policy", "set", "temperature=-1"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("temperature"));
  const nlohmann::json after_refusals = Darctl({"policy", "show"});
  ASSERT_TRUE(after_refusals.is_object());
  EXPECT_DOUBLE_EQ(after_refusals.value("temperature", 0.0), 0.25);

  // Drain B-D: both directions show it, and A's routes to D go through C only.
  const CommandResult drain = DarctlRun({"link", "drain", "B", "D"});
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_THAT(drain.out, HasSubstr("link B-D drained"));
  int drained = 0;
  const nlohmann::json links = Darctl({"show", "links"});
  ASSERT_TRUE(links.is_object());
  for (const nlohmann::json& l : links["links"]) {
    const std::string name = l.value("src_name", "") + "->" + l.value("dst_name", "");
    EXPECT_EQ(l.value("drained", false), name == "B->D" || name == "D->B") << name;
    drained += l.value("drained", false);
  }
  EXPECT_EQ(drained, 2);
  ASSERT_TRUE(WaitFor([&] { return NextHopsAToD() == std::vector<std::string>{"C"}; }))
      << Darctl({"show", "routes", "--node", "A", "--dest", "D"}).dump(1);
  const CommandResult again = DarctlRun({"link", "drain", "D", "B"});
  EXPECT_THAT(again.out, HasSubstr("(no change)"));
  const CommandResult undrain = DarctlRun({"link", "undrain", "B", "D"});
  ASSERT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_THAT(undrain.out, HasSubstr("link B-D undrained"));
  const nlohmann::json undrained = Darctl({"show", "links"});
  ASSERT_TRUE(undrained.is_object());
  for (const nlohmann::json& l : undrained["links"]) EXPECT_FALSE(l.value("drained", true)) << l;
  const CommandResult nowhere = DarctlRun({"link", "drain", "A", "D"});
  EXPECT_NE(nowhere.exit_code, 0);
  EXPECT_THAT(nowhere.err, HasSubstr("no link A-D in the configuration"));
  std::set<std::string> kinds;
  const nlohmann::json later = Darctl({"show", "events"});
  ASSERT_TRUE(later.is_object());
  for (const nlohmann::json& e : later["events"]) {
    kinds.insert(e.value("kind", ""));
  }
  for (const std::string k : {"policy_changed", "link_drained", "link_undrained"}) {
    EXPECT_TRUE(kinds.contains(k)) << k;
  }
}

// What an operator watches: the controller's and an agent's /metrics (names, labels and values
// against the lab), the lab's darctl without flags, typed JSON, flags anywhere, and the
// explanations (`explain route`, the `why` of `show links`) before and after a drain.
TEST_F(SystemTest, MetricsAndExplanationsShowTheLab) {
  Up('m');
  if (IsSkipped() || HasFatalFailure()) return;
  // Every sample of a /metrics page by its printed name and labels.
  const auto scrape = [&](const std::string& url) {
    std::map<std::string, double> out;
    absl::StatusOr<CommandResult> r =
        SubprocessRunner(Seconds(20))
            .Execute({"ip", "netns", "exec", Netns("ctl"), "curl", "-sf", url});
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << url;
    if (!r.ok()) return out;
    std::istringstream lines(r->out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
    return out;
  };
  const auto link = [](const std::string& name, const std::string& src, const std::string& dst,
                       const std::string& cls = "") {
    return fmt::format("{}{{{}dst=\"{}\",src=\"{}\"}}", name,
                       cls.empty() ? "" : fmt::format("class=\"{}\",", cls), dst, src);
  };
  std::map<std::string, double> m;
  ASSERT_TRUE(WaitFor([&] {
    m = scrape("http://10.255.255.1:9090/metrics");
    return m[link("dar_link_up", "B", "D")] == 1 && m["dar_node_connected{node=\"D\"}"] == 1;
  })) << "no per-link or per-node metrics";
  const std::vector<std::pair<std::string, std::string>> links = {
      {"A", "B"}, {"B", "A"}, {"A", "C"}, {"C", "A"},
      {"B", "D"}, {"D", "B"}, {"C", "D"}, {"D", "C"}};
  for (const auto& [a, b] : links) {
    EXPECT_EQ(m[link("dar_link_up", a, b)], 1) << a << "->" << b;
    EXPECT_TRUE(m.contains(link("dar_link_slow", a, b))) << a << "->" << b;
    EXPECT_TRUE(m.contains(link("dar_link_rtt_seconds", a, b))) << a << "->" << b;
    EXPECT_TRUE(m.contains(link("dar_link_route_share_ratio", a, b, "bulk"))) << a << "->" << b;
  }
  // Each of A's rows sends everything somewhere: its links' shares add up to 1.
  EXPECT_NEAR(m[link("dar_link_route_share_ratio", "A", "B", "latency")] +
                  m[link("dar_link_route_share_ratio", "A", "C", "latency")],
              1.0, 1e-6);
  for (const std::string n : {"A", "B", "C", "D"}) {
    EXPECT_EQ(m[fmt::format("dar_node_connected{{node=\"{}\"}}", n)], 1) << n;
    EXPECT_GT(m[fmt::format("dar_node_table_version{{node=\"{}\"}}", n)], 0) << n;
  }
  EXPECT_GT(m["dar_controller_cycle_decision_seconds_count"], 0);
  EXPECT_EQ(std::count_if(m.begin(), m.end(),
                          [](const auto& e) {
                            return e.first.starts_with("dar_build_info{") &&
                                   e.first.find("program=\"dar-controller\"") !=
                                       std::string::npos &&
                                   e.second == 1;
                          }),
            1);

  // A's agent, from the controller's namespace over A's management link.
  std::map<std::string, double> a;
  ASSERT_TRUE(WaitFor([&] {
    a = scrape("http://10.255.1.2:9091/metrics");
    return a["dar_agent_controller_connected"] == 1 && a["dar_agent_table_version"] > 0;
  })) << "agent A's metrics";
  for (const std::string n : {"B", "C"}) {
    EXPECT_EQ(a[fmt::format("dar_agent_neighbour_up{{neighbour=\"{}\"}}", n)], 1) << n;
    EXPECT_GT(a[fmt::format("dar_agent_neighbour_probes_sent_total{{neighbour=\"{}\"}}", n)], 0);
    EXPECT_GT(a[fmt::format("dar_agent_neighbour_rtt_seconds{{neighbour=\"{}\"}}", n)], 0);
  }
  EXPECT_GT(a["dar_agent_dataplane_probes_sent_total"], 0);
  EXPECT_TRUE(a.contains("dar_agent_drops_total{reason=\"no_route\"}"));

  // Every metric the Grafana dashboard in the repository queries is one the lab exports.
  std::set<std::string> exported;
  for (const auto* page : {&m, &a}) {
    for (const auto& [sample, value] : *page) {
      std::string name = sample.substr(0, sample.find('{'));
      for (const std::string suffix : {"_bucket", "_count", "_sum"}) {
        if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
      }
      exported.insert(name);
    }
  }
  const nlohmann::json dashboard = nlohmann::json::parse(
      ReadFile(std::string(DAR_SOURCE_DIR) + "/configs/grafana/dar-dashboard.json"), nullptr,
      false);
  ASSERT_TRUE(dashboard.is_object()) << "configs/grafana/dar-dashboard.json is not JSON";
  int queried = 0;
  for (const nlohmann::json& panel : dashboard["panels"]) {
    for (const nlohmann::json& target : panel["targets"]) {
      const std::string expr = target.value("expr", "");
      static const std::regex kMetric("dar_[a-z_]+");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kMetric);
           it != std::sregex_iterator(); ++it) {
        std::string name = it->str();
        for (const std::string suffix : {"_bucket", "_count", "_sum"}) {
          if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
        }
        ++queried;
        EXPECT_TRUE(exported.contains(name))
            << panel.value("title", "") << ": " << name << " is not exported";
      }
    }
  }
  EXPECT_GT(queried, 20);

  // The lab's darctl needs no address or TLS flags; integers are JSON numbers.
  const CommandResult ctl = Cli({"ctl", "--dir", dir_, "show", "nodes", "-j"});
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  const nlohmann::json nodes = nlohmann::json::parse(ctl.out, nullptr, false);
  ASSERT_TRUE(nodes.is_object()) << ctl.out;
  ASSERT_EQ(nodes["nodes"].size(), 4u);
  EXPECT_TRUE(nodes["nodes"][0]["acked_version"].is_number_unsigned()) << ctl.out;
  EXPECT_TRUE(nodes["nodes"][0]["last_seen_unix_ns"].is_number_integer()) << ctl.out;
  // Flags before, between and after the subcommands.
  for (const std::vector<std::string>& order : {std::vector<std::string>{"-j", "show", "links"},
                                                {"show", "-j", "links"},
                                                {"show", "links", "-j"}}) {
    std::vector<std::string> args = {"ctl", "--dir", dir_};
    args.insert(args.end(), order.begin(), order.end());
    const CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << fmt::format("{}", fmt::join(order, " ")) << r.err;
    EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_object()) << r.out;
  }

  // --watch runs a view again and again; with -j, one JSON document a line. The first three
  // lines are read, then the pipe closes (however long each turn takes here).
  absl::StatusOr<CommandResult> watched =
      SubprocessRunner(Seconds(60))
          .Execute({"sh", "-c",
                    fmt::format("{} ctl --dir {} show nodes -j -w 0.2 | head -n 3", Bin("dar-lab"),
                                dir_)});
  ASSERT_TRUE(watched.ok()) << watched.status();
  int documents = 0;
  std::istringstream watch_lines(watched->out);
  for (std::string line; std::getline(watch_lines, line);) {
    documents += nlohmann::json::parse(line, nullptr, false).contains("nodes");
  }
  EXPECT_EQ(documents, 3) << watched->out << watched->err;

  // Why A splits toward D as it does: both branches, weights adding up, the rule said.
  const nlohmann::json why = Darctl({"explain", "route", "A", "D", "--class", "bulk"});
  ASSERT_TRUE(why.is_object()) << "darctl explain route failed";
  EXPECT_EQ(why["traffic_class"], 1);
  double sum = 0;
  for (const nlohmann::json& h : why["next_hops"]) {
    sum += h.value("weight", 0.0);
    EXPECT_FALSE(h.value("link_why", "").empty()) << why.dump(1);
    EXPECT_GE(h.value("path_cost", -1.0), h.value("link_cost", 0.0)) << why.dump(1);
  }
  EXPECT_NEAR(sum, 1.0, 1e-6) << why.dump(1);
  EXPECT_FALSE(why["notes"].empty());
  const CommandResult why_text = DarctlRun({"explain", "route", "A", "D"});
  ASSERT_EQ(why_text.exit_code, 0) << why_text.err;
  EXPECT_THAT(why_text.out, HasSubstr("next hop"));
  EXPECT_NE(DarctlRun({"explain", "route", "A", "Z"}).exit_code, 0);

  // A drained link says so: in `show links`, in the metrics, and A's routes to D leave B.
  ASSERT_EQ(DarctlRun({"link", "drain", "B", "D"}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] {
    const nlohmann::json l = Darctl({"show", "links"});
    if (!l.is_object()) return false;
    for (const nlohmann::json& v : l["links"]) {
      if (v.value("src_name", "") == "B" && v.value("dst_name", "") == "D") {
        return v.value("why", "").starts_with("drained");
      }
    }
    return false;
  })) << Darctl({"show", "links"}).dump(1);
  EXPECT_EQ(scrape("http://10.255.255.1:9090/metrics")[link("dar_link_drained", "B", "D")], 1);
  ASSERT_TRUE(WaitFor([&] {
    const nlohmann::json w = Darctl({"explain", "route", "A", "D"});
    return w.is_object() && w["next_hops"].size() == 1 && w["next_hops"][0]["neighbour"] == "C";
  })) << Darctl({"explain", "route", "A", "D"}).dump(1);
}

// A reload through the real signal: a bad file is refused with the file and the key, and the
// running configuration stays (the agents keep their tables); a good one applies. An agent
// sent SIGHUP logs it and keeps running.
TEST_F(SystemTest, SighupReloadRefusesABadFileAndAppliesAGoodOne) {
  Up('r');
  if (IsSkipped() || HasFatalFailure()) return;
  const int pid = Process("controller").value("pid", 0);
  const nlohmann::json agent = Process("agent");
  const int agent_pid = agent.value("pid", 0);
  const std::string agent_log = agent.value("log", "");
  ASSERT_GT(pid, 0);
  ASSERT_GT(agent_pid, 0);
  // An agent takes SIGHUP as a no-op and says so; the checks below that every agent is still
  // connected and gets tables cover that it kept running.
  ASSERT_EQ(::kill(agent_pid, SIGHUP), 0);
  EXPECT_TRUE(WaitFor([&] {
    return ReadFile(agent_log).find("SIGHUP ignored") != std::string::npos;
  })) << agent_log;
  const std::string file = dir_ + "/controller.yaml";
  const std::string good = ReadFile(file);
  ASSERT_THAT(good, Not(HasSubstr("cycle_ms")));
  // The events of `kind` so far, newest first.
  const auto events_of = [&](const std::string& kind) {
    std::vector<nlohmann::json> out;
    const nlohmann::json events = Darctl({"show", "events", "--limit", "0"});
    if (!events.is_object()) return out;
    for (const nlohmann::json& e : events["events"]) {
      if (e.value("kind", "") == kind) out.push_back(e);
    }
    return out;
  };
  // Writes `text`, sends SIGHUP, and returns the event of `kind` it caused (null if none).
  const auto reload_with = [&](const std::string& text, const std::string& kind) {
    const size_t before = events_of(kind).size();
    std::ofstream(file) << text;
    EXPECT_EQ(::kill(pid, SIGHUP), 0);
    nlohmann::json found;
    WaitFor([&] {
      const std::vector<nlohmann::json> now = events_of(kind);
      if (now.size() > before) found = now.front();
      return !found.is_null();
    });
    return found;
  };
  const auto cycle_ms = [&] {
    const nlohmann::json policy = Darctl({"policy", "show"});
    return policy.is_object() ? policy.value("cycle_ms", 0u) : 0u;
  };

  const nlohmann::json refused = reload_with(good + "cycle_ms: -5\n", "config_refused");
  ASSERT_FALSE(refused.is_null()) << "no config_refused event";
  EXPECT_THAT(refused.value("detail", ""), HasSubstr("controller.yaml"));
  EXPECT_THAT(refused.value("detail", ""), HasSubstr("cycle"));
  // Still running, on the configuration it had: every agent connected, the cycle 100 ms.
  EXPECT_EQ(AckedVersions().size(), 4u);
  EXPECT_EQ(cycle_ms(), 100u);

  const nlohmann::json reloaded = reload_with(good + "cycle_ms: 50\n", "config_reloaded");
  ASSERT_FALSE(reloaded.is_null()) << "no config_reloaded event";
  EXPECT_EQ(cycle_ms(), 50u);
  const uint64_t newest = [&] {
    uint64_t v = 0;
    for (const auto& [node, version] : AckedVersions()) v = std::max(v, version);
    return v;
  }();
  EXPECT_TRUE(WaitFor([&] { return AllAgentsHaveTables(newest); }))
      << "tables stopped after the reload";
  std::ofstream(file) << good;
}

// An operator revokes node A's certificate and an admin's with darctl, then sends the
// controller SIGHUP: A's open stream ends and its reconnections are refused, the other agents
// keep taking tables, and the admin's calls are refused; other admins are not.
TEST_F(SystemTest, RevokedCertificatesAreRefusedAfterSighup) {
  Up('v');
  if (IsSkipped() || HasFatalFailure()) return;
  const int pid = Process("controller").value("pid", 0);
  const std::string a_log = Process("agent", "A").value("log", "");
  ASSERT_GT(pid, 0);
  ASSERT_FALSE(a_log.empty());
  const auto darctl_certs = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {Bin("darctl"), "certs"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<CommandResult> r = SubprocessRunner(Seconds(30)).Execute(argv);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
  };
  darctl_certs({"issue", "--dir", dir_ + "/certs", "--admin", "eve"});
  ASSERT_EQ(DarctlRun({"show", "nodes", "--admin", "eve"}).exit_code, 0);

  const std::string initial_list = ReadFile(dir_ + "/certs/ca.crl");
  darctl_certs({"revoke", "--dir", dir_ + "/certs", "--node", "1"});
  darctl_certs({"revoke", "--dir", dir_ + "/certs", "--admin", "eve"});
  const std::string newer_list = ReadFile(dir_ + "/certs/ca.crl");
  const std::map<std::string, uint64_t> before = AckedVersions();
  ASSERT_EQ(::kill(pid, SIGHUP), 0);
  // A is cut off: its stream ends and every reconnection is refused.
  EXPECT_TRUE(WaitFor([&] { return AckedVersions().count("A") == 0; }))
      << Darctl({"show", "nodes"}).dump(1);
  EXPECT_TRUE(WaitFor([&] {
    return ReadFile(a_log).find("(serial") != std::string::npos &&
           ReadFile(a_log).find("is revoked") != std::string::npos;
  })) << ReadFile(a_log);
  const std::string events = Darctl({"show", "events", "--limit", "0"}).dump();
  EXPECT_THAT(events, HasSubstr("revocations_loaded"));
  EXPECT_THAT(events, HasSubstr("spiffe://" + name_ + ".dar/node/1"));
  // The others go on taking tables.
  EXPECT_TRUE(WaitFor([&] {
    const std::map<std::string, uint64_t> now = AckedVersions();
    return now.size() == 3 && std::all_of(now.begin(), now.end(), [&](const auto& e) {
             return e.second > before.at(e.first);
           });
  }));
  // The revoked admin is refused; the lab's admin is not.
  const CommandResult eve = DarctlRun({"show", "nodes", "--admin", "eve"});
  EXPECT_NE(eve.exit_code, 0);
  EXPECT_THAT(eve.err, HasSubstr("revoked"));
  EXPECT_EQ(DarctlRun({"show", "nodes"}).exit_code, 0);

  // The CA's older list put back (it verifies, and revokes nothing) is refused on SIGHUP, and
  // so is a list that does not verify (here: not a list at all); the running one stays: eve
  // is still refused.
  const auto refused_on_sighup = [&](const std::string& list, const std::string& why) {
    std::ofstream(dir_ + "/certs/ca.crl") << list;
    EXPECT_EQ(::kill(pid, SIGHUP), 0);
    EXPECT_TRUE(WaitFor([&] {
      return Darctl({"show", "events", "--limit", "0"}).dump().find(why) != std::string::npos;
    })) << why;
    EXPECT_NE(DarctlRun({"show", "nodes", "--admin", "eve"}).exit_code, 0);
  };
  refused_on_sighup(initial_list, "is older than the list running");
  refused_on_sighup("not a list\n", "not a PEM certificate revocation list");

  // Across a restart too: the controller keeps the newest list's number in its state_dir and
  // does not start on the older one; on the newer one it does, and eve is still refused.
  std::ofstream(dir_ + "/certs/ca.crl") << initial_list;
  ASSERT_EQ(Cli({"stop", "ctl", "--dir", dir_}).exit_code, 0);
  const CommandResult old_start = Cli({"start", "ctl", "--dir", dir_});
  EXPECT_TRUE(WaitFor([&] {
    return ReadFile(dir_ + "/controller.log").find("older than the list this controller ran") !=
           std::string::npos;
  })) << old_start.out
      << old_start.err;
  EXPECT_NE(DarctlRun({"show", "nodes"}).exit_code, 0);  // it did not start
  (void)Cli({"stop", "ctl", "--dir", dir_});
  std::ofstream(dir_ + "/certs/ca.crl") << newer_list;
  const CommandResult start = Cli({"start", "ctl", "--dir", dir_});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  EXPECT_TRUE(WaitFor([&] { return DarctlRun({"show", "nodes"}).exit_code == 0; }));
  EXPECT_NE(DarctlRun({"show", "nodes", "--admin", "eve"}).exit_code, 0);
}

// A node with a valid certificate floods the controller with valid samples of its own links
// (dar_flood_agent, in A's namespace, with A's certificate, A's own agent stopped): the
// controller drops A's excess and nothing of B's, C's or D's, declares no link down, and the
// others keep taking tables.
TEST_F(SystemTest, AFloodingNodeLosesOnlyItsOwnSamples) {
  Up('f');
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_EQ(Cli({"stop", "A", "--dir", dir_}).exit_code, 0);
  const std::map<std::string, uint64_t> before = AckedVersions();
  ASSERT_EQ(before.size(), 3u);
  absl::StatusOr<CommandResult> flood =
      SubprocessRunner(Seconds(60))
          .Execute({"ip", "netns", "exec", Netns("A"),
                    std::string(DAR_BINARY_DIR) + "/src/control/dar_flood_agent", "--controller",
                    "10.255.255.1:50051", "--tls-dir", dir_ + "/certs", "--node", "1",
                    "--neighbours", "2,3", "--seconds", "5"});
  ASSERT_TRUE(flood.ok()) << flood.status();
  ASSERT_EQ(flood->exit_code, 0) << flood->err;
  std::printf("%s", flood->out.c_str());

  const nlohmann::json nodes = Darctl({"show", "nodes"});
  ASSERT_TRUE(nodes.is_object());
  uint64_t dropped_a = 0;
  for (const nlohmann::json& n : nodes["nodes"]) {
    const uint64_t dropped = n.contains("samples_dropped") ? U64(n["samples_dropped"]) : 0;
    if (n.value("name", "") == "A") {
      dropped_a = dropped;
    } else {
      EXPECT_EQ(dropped, 0u) << n.dump();
    }
  }
  EXPECT_GT(dropped_a, 100'000u);
  const std::string events = Darctl({"show", "events", "--limit", "0"}).dump();
  EXPECT_THAT(events, HasSubstr("samples_dropped"));
  EXPECT_THAT(events, Not(HasSubstr("link_down")));
  EXPECT_TRUE(WaitFor([&] {
    const std::map<std::string, uint64_t> now = AckedVersions();
    return now.size() == 3 && std::all_of(now.begin(), now.end(), [&](const auto& e) {
             return e.second > before.at(e.first);
           });
  }));
  std::printf("controller dropped %llu of A's samples and none of the others'\n",
              static_cast<unsigned long long>(dropped_a));
  ASSERT_EQ(Cli({"start", "A", "--dir", dir_}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return AllAgentsHaveTables(); }, std::chrono::seconds(30)));
}

// An attacker on a link captures four overlay datagrams of a 1 ms stream from A to D and
// re-sends them to D's agent from the sending neighbour's namespace, from a port of its own, as
// fast as it can for two seconds: D's agent drops every copy (replayed), the application sees no
// duplicate, and the stream loses nothing.
TEST_F(SystemTest, ReplayedDatagramsAreNotDelivered) {
  Up('p');
  if (IsSkipped() || HasFatalFailure()) return;
  absl::StatusOr<std::unique_ptr<DatagramStream>> stream =
      DatagramStream::Open(Netns("A"), Netns("D"), "10.77.0.4", 9000);
  ASSERT_TRUE(stream.ok()) << stream.status();
  (*stream)->Start();
  ASSERT_TRUE((*stream)->WaitSent(300));

  // Capture in D's namespace: IP packets to the data port that carry an overlay data datagram.
  net::ScopedFd sniffer;
  ASSERT_TRUE(net::RunInNamespace(Netns("D"), [&]() -> absl::Status {
                sniffer.Reset(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP)));
                return sniffer.valid() ? absl::OkStatus() : absl::ErrnoToStatus(errno, "socket");
              }).ok());
  struct Captured {
    std::vector<uint8_t> payload;
    sockaddr_in to{};
    in_addr from{};  // the neighbour that sent it, on the link it came over
    net::ScopedFd attacker;
  };
  std::vector<Captured> captured;
  const auto capture_until = Clock::now() + std::chrono::seconds(10);
  while (captured.size() < 4 && Clock::now() < capture_until) {
    pollfd p{sniffer.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    uint8_t frame[2048];
    const ssize_t n = ::recv(sniffer.get(), frame, sizeof frame, 0);
    if (n < 28 || (frame[0] >> 4) != 4 || frame[9] != IPPROTO_UDP) continue;
    const size_t ihl = static_cast<size_t>(frame[0] & 0xf) * 4;
    if (static_cast<size_t>(n) < ihl + 8 + net::kOverlayOverheadBytes) continue;
    const uint8_t* udp = frame + ihl;
    if (((udp[2] << 8) | udp[3]) != kLabDataPort) continue;
    const uint8_t* overlay = udp + 8;
    if (overlay[1] != net::kOverlayVersion ||
        overlay[net::kOverlayTypeOffset] != static_cast<uint8_t>(net::OverlayType::kData)) {
      continue;
    }
    Captured c;
    c.payload.assign(overlay, static_cast<const uint8_t*>(frame + n));
    c.to.sin_family = AF_INET;
    c.to.sin_port = htons(kLabDataPort);
    std::memcpy(&c.to.sin_addr, frame + 16, 4);
    std::memcpy(&c.from, frame + 12, 4);
    captured.push_back(std::move(c));
  }
  ASSERT_EQ(captured.size(), 4u) << "no overlay datagrams seen on D's links";
  sniffer.Reset(-1);

  // Replay from the namespace of the neighbour each datagram came from (the only one with a
  // route to D's address on that link; the stream may take either branch), from a socket of
  // the attacker's own, not the agent's port.
  for (Captured& c : captured) {
    for (const char* node : {"A", "B", "C"}) {
      const absl::Status owns = net::RunInNamespace(Netns(node), [&]() -> absl::Status {
        net::ScopedFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
        sockaddr_in local{};
        local.sin_family = AF_INET;
        local.sin_addr = c.from;
        if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
          return absl::ErrnoToStatus(errno, "bind");
        }
        c.attacker = std::move(fd);
        return absl::OkStatus();
      });
      if (owns.ok()) break;
    }
    char from[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &c.from, from, sizeof from);
    ASSERT_TRUE(c.attacker.valid()) << "no namespace sends from " << from;
  }
  const uint32_t first = (*stream)->sent();
  uint64_t replayed = 0;
  const auto replay_start = Clock::now();
  while (Clock::now() - replay_start < std::chrono::seconds(2)) {
    for (const Captured& c : captured) {
      replayed += ::sendto(c.attacker.get(), c.payload.data(), c.payload.size(), 0,
                           reinterpret_cast<const sockaddr*>(&c.to), sizeof c.to) > 0;
    }
  }
  const double replay_s = std::chrono::duration<double>(Clock::now() - replay_start).count();
  const uint32_t end = (*stream)->sent();
  ASSERT_TRUE((*stream)->WaitSent(200));
  (*stream)->Stop();
  const DatagramStream::Report r = (*stream)->Analyse(first, end);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_LE(r.lost, (end - first) / 100) << "of " << end - first;

  // D's agent counted the copies it dropped (its counters are logged when it stops).
  ASSERT_EQ(Cli({"stop", "D", "--dir", dir_}).exit_code, 0);
  uint64_t dropped_replays = 0;
  std::istringstream log(ReadFile(dir_ + "/D.log"));
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("msg", "") == "stopped") {
      dropped_replays = j["drops"].value("replayed", uint64_t{0});
    }
  }
  EXPECT_GT(dropped_replays, replayed / 2) << "of " << replayed << " replayed";
  std::printf(
      "replayed 4 captured datagrams %llu times in %.1f s (%.0f k/s) to D: D's agent "
      "dropped %llu as replays, the application saw %u duplicates; the 1 ms stream lost %u of "
      "%u meanwhile, longest gap %lld ms\n",
      static_cast<unsigned long long>(replayed), replay_s, replayed / replay_s / 1000,
      static_cast<unsigned long long>(dropped_replays), r.duplicates, r.lost, end - first,
      static_cast<long long>(r.longest_gap_ms));
  RecordProperty("replayed_per_s", static_cast<int>(replayed / replay_s));
  RecordProperty("duplicates", static_cast<int>(r.duplicates));
}

// Per-pair keys. Once the controller has rotated away from the bootstrap key (which every
// agent's config file holds), B's agent holds its own row of pair keys and nothing more (what
// it saved). With all of it, B still cannot speak as another node to D, its neighbour on link
// 2: a datagram claiming A as its source and a probe reply claiming C (what kept a dead
// neighbour "up" with one cluster key) fail D's end-to-end check, and one sealed with the
// bootstrap key is refused as a key no one holds any more; the same datagram as B's own is
// delivered.
TEST_F(SystemTest, ANodeCanSpeakOnlyAsItself) {
  Up('n');
  if (IsSkipped() || HasFatalFailure()) return;
  const std::optional<uint32_t> steady = WaitForSteadyKeyOtherThan(kLabInitialKeyId);
  ASSERT_TRUE(steady.has_value());
  const uint32_t epoch = *steady;
  absl::StatusOr<agent::AgentConfig> b = agent::LoadAgentConfig(dir_ + "/B.yaml");
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::vector<agent::KeyUpdate>> saved;
  ASSERT_TRUE(WaitFor([&] {
    saved = agent::LoadKeys(b->state_dir);
    return saved.ok() && saved->size() == 1 && (*saved)[0].id == epoch;
  })) << saved.status();
  const agent::KeyUpdate& row = (*saved)[0];
  ASSERT_EQ(row.peers.size(), 3u);  // A, C, D: no secret
  // B's ring, by node index (the wire ids of the lab's config).
  net::OverlayKeyRing ring;
  std::vector<net::OverlayPairKey> pairs;
  for (const agent::PeerKey& p : row.peers) {
    pairs.push_back({static_cast<uint32_t>(b->FindNode(p.node_id)), p.key});
  }
  ASSERT_TRUE(ring.Add(epoch, pairs).ok());
  const uint32_t kA = 0, kB = 1, kC = 2, kD = 3;
  ASSERT_EQ(b->FindNode(b->self_node().id), static_cast<NodeId>(kB));
  const agent::NeighbourConfig* to_d = nullptr;
  for (const agent::NeighbourConfig& n : b->neighbours) {
    if (n.node == static_cast<NodeId>(kD)) to_d = &n;
  }
  ASSERT_NE(to_d, nullptr);
  // From B's namespace, B's address on the link, a port of its own.
  net::ScopedFd sock;
  ASSERT_TRUE(net::RunInNamespace(Netns("B"), [&]() -> absl::Status {
                sock.Reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
                return sock.valid() ? absl::OkStatus() : absl::ErrnoToStatus(errno, "socket");
              }).ok());
  sockaddr_in d_end{};
  d_end.sin_family = AF_INET;
  d_end.sin_port = htons(kLabDataPort);
  d_end.sin_addr.s_addr = htonl(to_d->peer_address.value);
  const auto send = [&](const std::vector<uint8_t>& d) {
    ASSERT_EQ(::sendto(sock.get(), d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&d_end),
                       sizeof d_end),
              static_cast<ssize_t>(d.size()));
  };
  // A UDP packet for D's overlay address, as the inner packet.
  const auto datagram = [&](uint32_t source, const net::OverlayKey& key, uint16_t port) {
    std::vector<uint8_t> inner(net::kIpv4HeaderBytes + net::kUdpHeaderBytes + 8);
    const net::Ipv4Endpoint from{{(10u << 24) | (77u << 16) | (source + 1)}, 40000};
    const net::Ipv4Endpoint to{{(10u << 24) | (77u << 16) | 4u}, port};
    const absl::StatusOr<size_t> built =
        net::BuildUdpIpv4Packet(from, to, std::vector<uint8_t>(8, 0), absl::MakeSpan(inner));
    EXPECT_TRUE(built.ok()) << built.status();
    net::OverlayHeader h;
    h.source = source;
    h.destination = kD;
    h.hop_limit = 8;
    // Above anything B has sent D (B's own later datagrams to D look old after this one: B can
    // spoil only its own traffic).
    h.sequence = (uint64_t{1} << 62) + port;
    std::vector<uint8_t> out(net::OverlayDatagramSize(inner.size()));
    const absl::StatusOr<size_t> n = net::SealOverlay(h, inner, key, kD, absl::MakeSpan(out));
    EXPECT_TRUE(n.ok()) << n.status();
    return out;
  };
  // The bootstrap key, from the lab's file that every agent's config names.
  absl::StatusOr<net::OverlayKeyBytes> bootstrap =
      security::LoadKeyFile(dir_ + "/" + std::string(kLabOverlayKeyFile));
  ASSERT_TRUE(bootstrap.ok()) << bootstrap.status();
  std::vector<uint32_t> wire;
  for (const agent::AgentNodeConfig& n : b->nodes) wire.push_back(n.id);
  net::OverlayKeyRing old;
  ASSERT_TRUE(old.Add(kLabInitialKeyId, net::PairKeysFromSecret(*bootstrap, wire, kB)).ok());

  // D's applications: one UDP socket per datagram's port.
  std::map<uint16_t, net::ScopedFd> apps;
  for (const uint16_t port : {1001, 1002, 1003}) {
    ASSERT_TRUE(net::RunInNamespace(Netns("D"), [&]() -> absl::Status {
                  net::ScopedFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
                  sockaddr_in a{};
                  a.sin_family = AF_INET;
                  a.sin_port = htons(port);
                  a.sin_addr.s_addr = htonl(INADDR_ANY);
                  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
                    return absl::ErrnoToStatus(errno, "bind");
                  }
                  apps[port] = std::move(fd);
                  return absl::OkStatus();
                }).ok());
  }
  const auto received = [&](uint16_t port, int timeout_ms) {
    pollfd p{apps[port].get(), POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
  };
  send(datagram(kA, *ring.current(), 1001));  // B as A: its end-to-end tag is B's and D's
  send(datagram(kB, *old.current(), 1002));   // under the retired bootstrap key
  net::OverlayHeader reply;
  reply.type = net::OverlayType::kProbeReply;
  reply.source = kC;  // C's reply, on B's link
  reply.destination = kD;
  reply.hop_limit = 1;
  reply.sequence = uint64_t{1} << 62;
  const auto body = net::EncodeProbeReply(net::ProbeReplyBody{1, Time(1), Time(2), Time(3)});
  std::vector<uint8_t> forged_reply(net::OverlayDatagramSize(body.size()));
  ASSERT_TRUE(
      net::SealOverlay(reply, body, *ring.current(), kD, absl::MakeSpan(forged_reply)).ok());
  send(forged_reply);
  send(datagram(kB, *ring.current(), 1003));  // B as itself: delivered
  EXPECT_TRUE(received(1003, 5000));
  EXPECT_FALSE(received(1001, 0));
  EXPECT_FALSE(received(1002, 0));
  ASSERT_EQ(Cli({"stop", "D", "--dir", dir_}).exit_code, 0);
  nlohmann::json drops, stopped;
  std::istringstream log(ReadFile(dir_ + "/D.log"));
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("msg", "") == "stopped") stopped = j;
  }
  ASSERT_TRUE(stopped.is_object()) << "D logged no counters";
  drops = stopped["drops"];
  std::printf("D, after B's forgeries: drops %s\n", drops.dump().c_str());
  EXPECT_EQ(drops.value("bad_tag", uint64_t{0}), 2u);  // B as A; C's reply (end to end)
  EXPECT_EQ(drops.value("unknown_key_id", uint64_t{0}), 1u);
  EXPECT_EQ(drops.value("bad_probe", uint64_t{0}), 0u);  // none reached the probe code
}

// 1,100 TCP connections to the controller that never start TLS (more than the 1,024
// descriptors a service is often given). The controller holds at most max_connections at once
// (72 for the lab's four nodes: 2 x nodes + 64), the agents' among them: the rest are closed at
// once, before any TLS, and those it holds are closed after its handshake timeout (5 s). The
// agents keep their streams and tables throughout, and a new client (darctl) gets in once the
// stalled connections are closed.
TEST_F(SystemTest, StalledHandshakesDoNotLockClientsOut) {
  Up('h');
  if (IsSkipped() || HasFatalFailure()) return;
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max < 2000) GTEST_SKIP() << "needs a file limit of 2,000";
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  std::vector<net::ScopedFd> stalled(1100);
  ASSERT_TRUE(net::RunInNamespace(Netns("ctl"), [&]() -> absl::Status {
                for (net::ScopedFd& fd : stalled) {
                  fd.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
                  sockaddr_in a{};
                  a.sin_family = AF_INET;
                  a.sin_port = htons(50051);
                  inet_pton(AF_INET, "10.255.255.1", &a.sin_addr);
                  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
                    return absl::ErrnoToStatus(errno, "connect");
                  }
                }
                return absl::OkStatus();
              }).ok());
  const auto opened = Clock::now();
  // Closed at once beyond the cap; the held ones after the handshake timeout.
  size_t closed = 0, closed_at_once = 0;
  const auto deadline = opened + std::chrono::seconds(20);
  std::vector<bool> seen(stalled.size(), false);
  while (closed < stalled.size() && Clock::now() < deadline) {
    const bool early = Clock::now() - opened < std::chrono::seconds(2);
    for (size_t i = 0; i < stalled.size(); ++i) {
      if (seen[i]) continue;
      pollfd p{stalled[i].get(), POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) {
        seen[i] = true;
        ++closed;
        closed_at_once += early;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t took_ms = Ms(Clock::now() - opened);
  EXPECT_EQ(closed, stalled.size());
  // At most 72 held, 4 of them the agents'.
  EXPECT_GE(closed_at_once, stalled.size() - (72 - 4));
  EXPECT_LT(closed_at_once, stalled.size());  // some were held until the timeout
  EXPECT_GE(took_ms, 4000);
  EXPECT_TRUE(AllAgentsHaveTables());
  // The agents' streams were never cut: each still has one acked version newer than before.
  const nlohmann::json nodes = Darctl({"show", "nodes"});
  ASSERT_TRUE(nodes.is_object());
  EXPECT_EQ(nodes["nodes"].size(), 4u);
  for (const nlohmann::json& n : nodes["nodes"]) EXPECT_TRUE(n.value("connected", false)) << n;
  std::printf(
      "1,100 stalled TCP connections: %zu closed at once (the cap of 72 held), all closed by "
      "the controller %lld ms after they opened; the agents kept their streams, darctl got in "
      "after\n",
      closed_at_once, static_cast<long long>(took_ms));
}

// Impostors against the real controller: an agent with another CA's certificate, an agent
// whose certificate names another node than its config, and a TLS 1.2 client are refused; the
// genuine agent then joins again.
TEST_F(SystemTest, ImpostorsAreRefused) {
  if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "needs openssl";
  Up('i');
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_EQ(Cli({"stop", "A", "--dir", dir_}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return AckedVersions().size() == 3; }));
  const std::string a_config = ReadFile(dir_ + "/A.yaml");
  ASSERT_THAT(a_config, HasSubstr("certs/node-1.crt"));

  // Runs an agent for A with `config` until the controller has seen it `attempts` times or it
  // exits; returns its log.
  const auto run_agent = [&](const std::string& name, const std::string& config,
                             const std::function<bool(const std::string& log)>& done) {
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << config;
    absl::StatusOr<Child> agent =
        Child::Spawn({"ip", "netns", "exec", Netns("A"), Bin("dar-agent"), "--config", path},
                     dir_ + "/" + name + ".log");
    EXPECT_TRUE(agent.ok()) << agent.status();
    const bool seen = WaitFor([&] { return done(ReadFile(dir_ + "/" + name + ".log")); },
                              std::chrono::seconds(20));
    EXPECT_TRUE(seen) << name << ": " << ReadFile(dir_ + "/" + name + ".log");
    // It never got in.
    EXPECT_EQ(AckedVersions().count("A"), 0u) << name;
    return ReadFile(dir_ + "/" + name + ".log");
  };
  const auto attempts = [](int n) {
    return [n](const std::string& log) {
      size_t count = 0, at = 0;
      while ((at = log.find("cannot connect to the controller", at)) != std::string::npos) {
        ++count;
        ++at;
      }
      return count >= static_cast<size_t>(n);
    };
  };

  // A certificate of node 2 (B) for node A: the hello is refused.
  const std::string spoofed =
      run_agent("spoofed",
                absl::StrReplaceAll(a_config, {{"certs/node-1.crt", "certs/node-2.crt"},
                                               {"certs/node-1.key", "certs/node-2.key"},
                                               {"state_dir: state/A", "state_dir: state/spoofed"}}),
                attempts(2));
  EXPECT_THAT(spoofed, HasSubstr("certificate"));
  EXPECT_THAT(Darctl({"show", "events"}).dump(), HasSubstr("hello_refused"));

  // A certificate for node 1 from a CA of its own: the handshake fails.
  const std::string other_ca = dir_ + "/other-ca";
  absl::StatusOr<CommandResult> init =
      SubprocessRunner(Seconds(30))
          .Execute({Bin("darctl"), "certs", "init", "--dir", other_ca, "--domain", name_ + ".dar"});
  ASSERT_TRUE(init.ok() && init->exit_code == 0) << (init.ok() ? init->err : "");
  absl::StatusOr<CommandResult> issue =
      SubprocessRunner(Seconds(30))
          .Execute({Bin("darctl"), "certs", "issue", "--dir", other_ca, "--node", "1"});
  ASSERT_TRUE(issue.ok() && issue->exit_code == 0) << (issue.ok() ? issue->err : "");
  // The impostor trusts both CAs, so its own checks pass and the controller must refuse it.
  std::ofstream(dir_ + "/both-cas.crt")
      << ReadFile(dir_ + "/certs/ca.crt") << ReadFile(other_ca + "/ca.crt");
  const std::string foreign =
      run_agent("foreign",
                absl::StrReplaceAll(a_config, {{"certs/node-1.crt", other_ca + "/node-1.crt"},
                                               {"certs/node-1.key", other_ca + "/node-1.key"},
                                               {"certs/ca.crt", dir_ + "/both-cas.crt"},
                                               {"state_dir: state/A", "state_dir: state/foreign"}}),
                attempts(2));
  EXPECT_THAT(foreign, Not(HasSubstr("does not chain")));

  // TLS 1.2 with a valid certificate: refused; the same client at TLS 1.3 completes the
  // handshake.
  const auto s_client = [&](const std::string& version) {
    absl::StatusOr<CommandResult> r =
        SubprocessRunner(Seconds(20))
            .Execute({"ip", "netns", "exec", Netns("A"), "openssl", "s_client", "-connect",
                      "10.255.255.1:50051", version, "-cert", dir_ + "/certs/node-1.crt", "-key",
                      dir_ + "/certs/node-1.key", "-CAfile", dir_ + "/certs/ca.crt", "-brief"});
    return r.ok() ? *r : CommandResult{-1, "", std::string(r.status().message())};
  };
  const CommandResult tls12 = s_client("-tls1_2");
  EXPECT_NE(tls12.exit_code, 0) << tls12.out << tls12.err;
  EXPECT_THAT(tls12.out + tls12.err, Not(HasSubstr("Protocol version: TLSv1.2")));
  const CommandResult tls13 = s_client("-tls1_3");
  EXPECT_THAT(tls13.out + tls13.err, HasSubstr("TLSv1.3"));

  // A's own certificate, with saved tables claiming a version near 2^64 (as a hostile node
  // would say it holds): the controller refuses the claim rather than continue above it, where
  // the counter would wrap and every agent would refuse every table.
  const std::string hostile_state = dir_ + "/state/hostile";
  ASSERT_TRUE(WriteHugeVersionTable(dir_ + "/state/A/tables.bin", hostile_state + "/tables.bin"));
  const std::map<std::string, uint64_t> others = AckedVersions();
  const std::string hostile =
      run_agent("hostile",
                absl::StrReplaceAll(a_config, {{"state_dir: state/A", "state_dir: state/hostile"}}),
                attempts(2));
  EXPECT_THAT(hostile, HasSubstr("not taken"));
  EXPECT_THAT(Darctl({"show", "events"}).dump(), HasSubstr("claims installed table version"));
  // The other agents go on taking tables, with versions that grow from where they were.
  ASSERT_TRUE(WaitFor([&] {
    const std::map<std::string, uint64_t> now = AckedVersions();
    return now.size() == 3 && std::all_of(now.begin(), now.end(), [&](const auto& e) {
             return e.second > others.at(e.first) && e.second < others.at(e.first) + 100'000;
           });
  }));

  // The genuine agent joins again.
  ASSERT_EQ(Cli({"start", "A", "--dir", dir_}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return AllAgentsHaveTables(); }, std::chrono::seconds(30)));
}

}  // namespace
}  // namespace dar::lab
