// Forwarder throughput: the DAR overlay against plain kernel IP forwarding, over the same veths
// and in the same run. Three network namespaces src -- mid -- dst:
//   kernel: src routes dst's underlay subnet via mid, which forwards (net.ipv4.ip_forward=1);
//   DAR:    a Dataplane in each namespace; the sender writes to dst's overlay address, so every
//           packet goes src TUN -> src data plane -> mid data plane -> dst data plane -> dst TUN.
// A UDP sender blasts datagrams (sendmmsg) from src for a fixed time and a receiver in dst counts
// what arrives (recvmmsg); TCP is measured with iperf3. Reported: goodput (UDP or TCP payload)
// in Gbit/s and packets/s, the median of the runs, DAR / kernel, and the CPU share of the mid
// data-plane thread (the forwarder under test runs on one thread, i.e. at most one core).
// Needs root. Every namespace and veth is named with the process id and removed on exit.
//   sudo ./build/bench/forwarder_bench [--seconds 2] [--runs 3] [--no-tcp]
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent/dataplane.h"
#include "core/routing.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "net/ip_packet.h"
#include "net/netns.h"
#include "net/udp_socket.h"
#include "nlohmann/json.hpp"

namespace dar::agent {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTunMtu = 1432;  // 1400 B of UDP payload + 28 B headers; 1500 B on the veths
constexpr uint16_t kPort = 9000;

net::Ipv4Address Addr(const std::string& s) { return *net::ParseIpv4Address(s); }

// src (0) -- mid (1) -- dst (2), with data planes ready but idle until traffic arrives.
struct Bench {
  Topology topology;
  std::vector<net::NetNamespace> ns;
  std::vector<net::VethPair> veths;
  std::vector<std::unique_ptr<Dataplane>> dps;
};

std::string Underlay(int edge, int end) { return fmt::format("10.89.{}.{}", edge, end); }
net::Ipv4Address Overlay(NodeId n) { return Addr(fmt::format("10.77.0.{}", n + 1)); }

absl::Status Build(Bench& b, bool gso) {
  const int pid = ::getpid();
  for (const char* name : {"src", "mid", "dst"}) {
    ASSIGN_OR_RETURN(net::NetNamespace n,
                     net::NetNamespace::Create(fmt::format("dar-fb{}-{}", pid, name)));
    b.ns.push_back(std::move(n));
  }
  for (int e = 0; e < 2; ++e) {
    ASSIGN_OR_RETURN(
        net::VethPair v,
        net::VethPair::Create(
            {fmt::format("fb{}e{}a", pid, e), b.ns[e].name(), Underlay(e, 1) + "/24"},
            {fmt::format("fb{}e{}b", pid, e), b.ns[e + 1].name(), Underlay(e, 2) + "/24"}));
    b.veths.push_back(std::move(v));
  }
  // Kernel forwarding.
  RETURN_IF_ERROR(
      b.ns[0].Run({"ip", "route", "add", "10.89.1.0/24", "via", Underlay(0, 2)}).status());
  RETURN_IF_ERROR(
      b.ns[2].Run({"ip", "route", "add", "10.89.0.0/24", "via", Underlay(1, 1)}).status());
  RETURN_IF_ERROR(b.ns[1].Run({"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"}).status());

  // The overlay.
  for (const char* name : {"src", "mid", "dst"}) b.topology.AddNode(name, NodeKind::kSwitch);
  std::vector<std::pair<LinkId, LinkId>> links;
  for (int e = 0; e < 2; ++e) links.push_back(b.topology.AddDuplexLink(e, e + 1, LinkParams{}));
  net::OverlayKeyBytes key = net::GenerateOverlayKey();
  const RoutingTables routing = ComputeStaticTables(b.topology);
  for (NodeId n = 0; n < 3; ++n) {
    DataplaneConfig c;
    c.node = n;
    c.topology = &b.topology;
    for (NodeId m = 0; m < 3; ++m) c.overlay_addresses.push_back(Overlay(m));
    for (int e = 0; e < 2; ++e) {
      if (n != e && n != e + 1) continue;
      const bool first = n == e;
      NeighbourLinkConfig l;
      l.neighbour = first ? e + 1 : e;
      l.link = first ? links[e].first : links[e].second;
      l.local = {Addr(Underlay(e, first ? 1 : 2)), 7000};
      l.peer = {Addr(Underlay(e, first ? 2 : 1)), 7000};
      l.interface = fmt::format("fb{}e{}{}", pid, e, first ? 'a' : 'b');
      c.neighbours.push_back(l);
    }
    c.tun.name = "dtun0";
    c.tun.address = Overlay(n);
    c.tun.prefix_length = 24;
    c.tun.mtu = kTunMtu;
    c.initial_keys = {KeyUpdate{1, key, true}};
    c.batch_size = 64;
    c.queue_packets = 1024;
    c.udp_gso = gso;
    std::unique_ptr<Dataplane> dp;
    RETURN_IF_ERROR(net::RunInNamespace(b.ns[n], [&]() -> absl::Status {
      ASSIGN_OR_RETURN(dp, Dataplane::Create(c));
      // A TUN's transmit queue (toward the data plane) of 500 packets is short for a burst.
      return b.ns[n].Run({"ip", "link", "set", "dev", "dtun0", "txqueuelen", "4096"}).status();
    }));
    dp->InstallTables(AgentTablesFromRouting(routing, n, /*is_static=*/true));
    RETURN_IF_ERROR(dp->Start());
    b.dps.push_back(std::move(dp));
  }
  return absl::OkStatus();
}

absl::StatusOr<net::UdpSocket> SocketIn(const net::NetNamespace& ns, net::Ipv4Endpoint at) {
  std::optional<net::UdpSocket> out;
  RETURN_IF_ERROR(net::RunInNamespace(ns, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(net::UdpSocket s, net::UdpSocket::Bind(at, 64));
    RETURN_IF_ERROR(s.SetBufferBytes(8 << 20, 8 << 20));
    const int bytes = 8 << 20;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
    ::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes));
    out.emplace(std::move(s));
    return absl::OkStatus();
  }));
  return std::move(*out);
}

struct Result {
  double gbps = 0;
  double pps = 0;
  // Share of one core used by each data-plane thread (src, mid, dst); -1: not measured.
  std::array<double, 3> cpu{-1, -1, -1};
  double retransmits = 0;  // TCP segments the sender sent again
  double mid_cpu() const { return cpu[1]; }
};

// The data-plane threads' CPU times, to take differences of.
std::array<Duration, 3> CpuTimes(const Bench& b) {
  return {b.dps[0]->thread_cpu_time(), b.dps[1]->thread_cpu_time(), b.dps[2]->thread_cpu_time()};
}
void SetCpu(Result& r, const std::array<Duration, 3>& before, const std::array<Duration, 3>& after,
            double elapsed) {
  for (size_t i = 0; i < 3; ++i) r.cpu[i] = ToSeconds(after[i] - before[i]) / elapsed;
}

// Blasts `payload`-byte datagrams from src to `to` for `seconds` (after a short warm-up) and
// counts what dst receives.
absl::StatusOr<Result> RunUdp(Bench& b, bool overlay, size_t payload, double seconds) {
  const net::Ipv4Endpoint from{overlay ? Overlay(0) : Addr(Underlay(0, 1)), 0};
  const net::Ipv4Endpoint to{overlay ? Overlay(2) : Addr(Underlay(1, 2)), kPort};
  ASSIGN_OR_RETURN(net::UdpSocket tx, SocketIn(b.ns[0], from));
  ASSIGN_OR_RETURN(net::UdpSocket rx, SocketIn(b.ns[2], to));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::thread receiver([&] {
    ::pthread_setname_np(::pthread_self(), "fb-recv");
    std::vector<uint8_t> bufs(64 * 2048);
    std::vector<net::RecvSlot> slots;
    for (int i = 0; i < 64; ++i) slots.emplace_back(absl::MakeSpan(bufs.data() + i * 2048, 2048));
    while (!stop.load(std::memory_order_relaxed)) {
      pollfd p{rx.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      absl::StatusOr<int> n = rx.RecvBatch(absl::MakeSpan(slots));
      if (n.ok()) received.fetch_add(static_cast<uint64_t>(*n), std::memory_order_relaxed);
    }
  });
  std::thread sender([&] {
    ::pthread_setname_np(::pthread_self(), "fb-send");
    const std::vector<uint8_t> data(payload, 0x5a);
    const std::vector<net::SendItem> items(64, net::SendItem{data, to});
    while (!stop.load(std::memory_order_relaxed)) {
      absl::StatusOr<int> n = tx.SendBatch(items);
      if (!n.ok() || *n == 0) {
        pollfd p{tx.fd(), POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // warm-up, then measure
  const uint64_t r0 = received.load();
  const std::array<Duration, 3> cpu0 = CpuTimes(b);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t r1 = received.load();
  const std::array<Duration, 3> cpu1 = CpuTimes(b);
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  stop.store(true);
  sender.join();
  receiver.join();
  Result r;
  r.pps = static_cast<double>(r1 - r0) / elapsed;
  r.gbps = r.pps * static_cast<double>(payload) * 8 / 1e9;
  if (overlay) SetCpu(r, cpu0, cpu1, elapsed);
  return r;
}

// `streams` iperf3 TCP streams (one by default) from src to dst for `seconds`.
absl::StatusOr<Result> RunTcp(Bench& b, bool overlay, int seconds, int streams) {
  const std::string server = overlay ? net::ToString(Overlay(2)) : Underlay(1, 2);
  RETURN_IF_ERROR(b.ns[2].Run({"iperf3", "-s", "-1", "-D", "-B", server, "-p", "5299"}).status());
  const std::array<Duration, 3> cpu0 = CpuTimes(b);
  const auto t0 = Clock::now();
  absl::StatusOr<std::string> out = absl::UnknownError("not run");
  // The daemonised server may need a moment to listen: retry the client briefly.
  for (int attempt = 0; attempt < 20; ++attempt) {
    out = b.ns[0].Run({"iperf3", "-c", server, "-p", "5299", "-t", std::to_string(seconds), "-O",
                       "1", "-J", "-P", std::to_string(streams)});
    if (out.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!out.ok()) return out.status();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::array<Duration, 3> cpu1 = CpuTimes(b);
  const nlohmann::json j = nlohmann::json::parse(*out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("end")) {
    return absl::InternalError(fmt::format("iperf3: unexpected output: {}", out->substr(0, 200)));
  }
  Result r;
  r.gbps = j["end"]["sum_received"]["bits_per_second"].get<double>() / 1e9;
  const nlohmann::json retransmits =
      j.value(nlohmann::json::json_pointer("/end/sum_sent/retransmits"), nlohmann::json());
  if (retransmits.is_number()) r.retransmits = retransmits.get<double>();
  // Segments of one MSS (MTU less IPv4, TCP and timestamp option headers); with GSO the
  // kernel path moves fewer, larger packets, so this is the payload rate in MSS units.
  r.pps = r.gbps * 1e9 / 8 / ((overlay ? kTunMtu : 1500) - 52);
  if (overlay) SetCpu(r, cpu0, cpu1, elapsed);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app("DAR overlay forwarding vs kernel IP forwarding, src -- mid -- dst namespaces");
  double seconds = 2;
  int runs = 3;
  bool no_tcp = false;
  std::string only;
  bool no_gso = false;
  app.add_option("--seconds", seconds, "measured time per run")->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "runs per workload (the median is reported)")
      ->check(CLI::Range(1, 99));
  app.add_flag("--no-tcp", no_tcp, "skip the iperf3 TCP workload");
  int streams = 1;
  app.add_option("--tcp-streams", streams, "parallel iperf3 TCP streams")->check(CLI::Range(1, 16));
  app.add_flag("--no-gso", no_gso, "data planes send without UDP GSO");
  app.add_option("--only", only, "measure one side only (for profiling)")
      ->check(CLI::IsMember({"kernel", "dar"}));
  CLI11_PARSE(app, argc, argv);
  if (::geteuid() != 0) {
    std::fprintf(stderr, "forwarder_bench: needs root (network namespaces, veths, TUN)\n");
    return 2;
  }
  Bench b;
  if (absl::Status s = Build(b, !no_gso); !s.ok()) {
    std::fprintf(stderr, "forwarder_bench: setup failed: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  struct Workload {
    std::string name;
    bool tcp;
    size_t payload;
  };
  std::vector<Workload> workloads = {{"UDP 1400 B", false, 1400}, {"UDP 64 B", false, 64}};
  if (!no_tcp) workloads.push_back({"TCP iperf3", true, 0});

  std::printf(
      "forwarder_bench: src -- mid -- dst over veths, median of %d runs of %.1f s, UDP GSO %s\n",
      runs, seconds, no_gso ? "off" : "on");
  std::printf("%-12s %10s %10s %10s %10s %9s %8s %14s %8s %8s\n", "workload", "kern Gb/s",
              "kern kpps", "DAR Gb/s", "DAR kpps", "DAR/kern", "mid CPU", "mid kpps/core",
              "src CPU", "dst CPU");
  for (const Workload& w : workloads) {
    std::vector<double> kg, kp, dg, dpps, cpu, src_cpu, dst_cpu, kretx, dretx;
    for (int r = 0; r < runs; ++r) {
      for (bool overlay : {false, true}) {
        if (!only.empty() && overlay != (only == "dar")) continue;
        absl::StatusOr<Result> res =
            w.tcp ? RunTcp(b, overlay, static_cast<int>(std::max(1.0, seconds)), streams)
                  : RunUdp(b, overlay, w.payload, seconds);
        if (!res.ok()) {
          std::fprintf(stderr, "forwarder_bench: %s (%s): %s\n", w.name.c_str(),
                       overlay ? "DAR" : "kernel", std::string(res.status().message()).c_str());
          return 1;
        }
        (overlay ? dg : kg).push_back(res->gbps);
        (overlay ? dpps : kp).push_back(res->pps);
        (overlay ? dretx : kretx).push_back(res->retransmits);
        if (overlay) {
          cpu.push_back(res->mid_cpu());
          src_cpu.push_back(res->cpu[0]);
          dst_cpu.push_back(res->cpu[2]);
        }
      }
    }
    // The mid forwarder's packets per second of its own CPU time: what one core would carry.
    std::vector<double> per_core;
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (cpu[i] > 0) per_core.push_back(dpps[i] / cpu[i]);
    }
    const double kgm = Median(kg), dgm = Median(dg);
    std::printf("%-12s %10.2f %10.1f %10.2f %10.1f %8.0f%% %7.0f%% %14.0f %7.0f%% %7.0f%%\n",
                w.name.c_str(), kgm, Median(kp) / 1e3, dgm, Median(dpps) / 1e3,
                kgm > 0 ? 100 * dgm / kgm : 0, 100 * Median(cpu), Median(per_core) / 1e3,
                100 * Median(src_cpu), 100 * Median(dst_cpu));
    if (w.tcp) {
      std::printf("%-12s TCP retransmits per run (median): kernel %.0f, DAR %.0f\n", "",
                  Median(kretx), Median(dretx));
    }
  }
  const DataplaneCounters mid = b.dps[1]->counters();
  std::printf(
      "mid data plane: %llu forwarded, %llu dropped (queue_full %llu), %.1f datagrams per "
      "recvmmsg, %.1f per sendmmsg, %llu GSO messages\n",
      static_cast<unsigned long long>(mid.forwarded),
      static_cast<unsigned long long>(mid.total_dropped()),
      static_cast<unsigned long long>(mid.dropped(DropReason::kQueueFull)),
      static_cast<double>(mid.received) / std::max<double>(1, mid.receive_batches),
      static_cast<double>(mid.sent) / std::max<double>(1, mid.send_batches),
      static_cast<unsigned long long>(mid.gso_messages));
  const DataplaneCounters src = b.dps[0]->counters();
  const DataplaneCounters dst = b.dps[2]->counters();
  std::printf(
      "offloads: %llu GRO receive slots at mid, %llu TCP super-packets read by src, %llu "
      "super-packets written by dst\n",
      static_cast<unsigned long long>(mid.gro_slots),
      static_cast<unsigned long long>(src.tun_super_reads),
      static_cast<unsigned long long>(dst.tun_super_writes));
  for (size_t node = 0; node < 3; ++node) {
    const DataplaneCounters c = b.dps[node]->counters();
    if (c.liveness_changes > 0) {
      std::printf("  %s: %llu liveness changes (probes lost in overload take a link down)\n",
                  node == 0   ? "src"
                  : node == 1 ? "mid"
                              : "dst",
                  static_cast<unsigned long long>(c.liveness_changes));
    }
    for (size_t r = 0; r < kDropReasons; ++r) {
      if (c.drops[r] == 0) continue;
      std::printf("  %s dropped %llu: %s\n",
                  node == 0   ? "src"
                  : node == 1 ? "mid"
                              : "dst",
                  static_cast<unsigned long long>(c.drops[r]),
                  std::string(DropReasonName(static_cast<DropReason>(r))).c_str());
    }
  }
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) > 0) {
    std::printf("load average %.2f on %u CPUs (other work on the machine skews the figures)\n",
                load[0], std::thread::hardware_concurrency());
  }
  return 0;
}

}  // namespace
}  // namespace dar::agent

int main(int argc, char** argv) { return dar::agent::Main(argc, argv); }
