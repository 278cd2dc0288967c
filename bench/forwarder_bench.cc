// Forwarder throughput: the DAR overlay against plain kernel IP forwarding, over the same veths
// and in the same run. Three network namespaces src -- mid -- dst:
//   kernel: src routes dst's underlay subnet via mid, which forwards (net.ipv4.ip_forward=1);
//   DAR:    a Dataplane in each namespace; the sender writes to dst's overlay address, so every
//           packet goes src TUN -> src data plane -> mid data plane -> dst data plane -> dst TUN.
// A UDP sender blasts datagrams (sendmmsg) from src for a fixed time and a receiver in dst counts
// what arrives (recvmmsg); TCP is measured with iperf3. That is the whole system end to end
// (the TUN at both ends included). The forwarder alone, the intermediate hop the issue names,
// is measured too (--no-transit skips it): only mid runs a data plane, src blasts overlay
// datagrams sealed beforehand at mid's link socket, and dst verifies every datagram it gets
// (as an egress agent would) and counts the good ones; the kernel side forwards plain UDP
// datagrams of the same size on the wire. Reported: goodput (UDP or TCP payload)
// in Gbit/s and packets/s, the median of the runs, DAR / kernel, and the CPU share of the mid
// data-plane thread (the forwarder under test runs on one thread, i.e. at most one core).
// On a machine with fewer cores than the end-to-end case has busy threads (an application's
// sender and receiver, three data planes, the kernel), throughput compares the machine, not
// the work: so CPU time per delivered Gbit is reported as well for both, i.e. the CPU of this
// process (sender, receiver, data planes, and the kernel work done in their system calls and
// softirqs), of iperf3 (client and server) and of the kernel's ksoftirqd threads during the
// run.
// Needs root. Every namespace and veth is named with the process id and removed on exit.
//   sudo ./build/bench/forwarder_bench [--seconds 2] [--runs 3] [--no-tcp] [--no-transit]
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent/dataplane.h"
#include "base/status_macros.h"
#include "core/routing.h"
#include "fmt/format.h"
#include "net/ip_packet.h"
#include "net/netns.h"
#include "net/udp_socket.h"
#include "nlohmann/json.hpp"

namespace dar::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Overlay datagrams of full-size packets fill 1,500 B frames on the veths (with 28 B of IPv4
// and UDP headers); the largest UDP payload an application sends end to end fills the TUN.
constexpr int kTunMtu = 1500 - 28 - static_cast<int>(net::kOverlayOverheadBytes);
constexpr size_t kFullUdpPayload = kTunMtu - 28;
constexpr uint16_t kPort = 9000;

net::Ipv4Address Addr(const std::string& s) { return *net::ParseIpv4Address(s); }

// src (0) -- mid (1) -- dst (2), with data planes ready but idle until traffic arrives.
struct Bench {
  Topology topology;
  std::vector<net::NetNamespace> ns;
  std::vector<net::VethPair> veths;
  std::vector<std::unique_ptr<Dataplane>> dps;  // by node; null where none runs (transit)
  net::OverlayKeyBytes key{};                   // the data planes' cluster key (id 1)
};

std::string Underlay(int edge, int end) { return fmt::format("10.89.{}.{}", edge, end); }
net::Ipv4Address Overlay(NodeId n) { return Addr(fmt::format("10.77.0.{}", n + 1)); }

// The veth end of edge `e` in namespace e (first) or e + 1.
std::string VethName(int pid, bool transit, int e, bool first) {
  return fmt::format("fb{}{}e{}{}", pid, transit ? "t" : "", e, first ? 'a' : 'b');
}

// Namespaces, veths, kernel routes and data planes. `transit`: mid's data plane only (no
// TUN), probing so rarely that the generator and the sink, which do not answer probes, never
// make it take a link down.
absl::Status Build(Bench& b, bool gso, bool transit) {
  const int pid = ::getpid();
  for (const char* name : {"src", "mid", "dst"}) {
    ASSIGN_OR_RETURN(net::NetNamespace n, net::NetNamespace::Create(fmt::format(
                                              "dar-fb{}{}-{}", pid, transit ? "t" : "", name)));
    b.ns.push_back(std::move(n));
  }
  for (int e = 0; e < 2; ++e) {
    ASSIGN_OR_RETURN(
        net::VethPair v,
        net::VethPair::Create(
            {VethName(pid, transit, e, true), b.ns[e].name(), Underlay(e, 1) + "/24"},
            {VethName(pid, transit, e, false), b.ns[e + 1].name(), Underlay(e, 2) + "/24"}));
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
  links.reserve(2);
  for (int e = 0; e < 2; ++e) links.push_back(b.topology.AddDuplexLink(e, e + 1, LinkParams{}));
  net::OverlayKeyBytes key = net::GenerateOverlayKey();
  const RoutingTables routing = ComputeStaticTables(b.topology);
  for (NodeId n = 0; n < 3; ++n) {
    if (transit && n != 1) {
      b.dps.push_back(nullptr);
      continue;
    }
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
      l.interface = VethName(pid, transit, e, first);
      c.neighbours.push_back(l);
    }
    if (transit) {
      c.probe_interval = Seconds(3600);
    } else {
      c.tun.name = "dtun0";
      c.tun.address = Overlay(n);
      c.tun.prefix_length = 24;
      c.tun.mtu = kTunMtu;
    }
    c.initial_keys = {KeyUpdate{1, key, true}};
    c.batch_size = 64;
    c.queue_packets = 1024;
    c.udp_gso = gso;
    std::unique_ptr<Dataplane> dp;
    // The TUN's transmit queue: net::TunConfig's default (4096 packets; this benchmark set
    // that by hand before the data plane did).
    RETURN_IF_ERROR(net::RunInNamespace(b.ns[n], [&]() -> absl::Status {
      ASSIGN_OR_RETURN(dp, Dataplane::Create(c));
      return absl::OkStatus();
    }));
    dp->InstallTables(AgentTablesFromRouting(routing, n, /*is_static=*/true));
    RETURN_IF_ERROR(dp->Start());
    b.dps.push_back(std::move(dp));
  }
  b.key = key;
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
  // CPU seconds everything involved used per Gbit delivered (CpuMeter); 0: not measured.
  double cpu_per_gbit = 0;
  double mid_cpu() const { return cpu[1]; }
};

// CPU seconds from a /proc/<pid>/stat line: utime + stime (fields 14 and 15); 0 if unreadable.
double ProcStatCpuSeconds(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  // After ") ": state is field 3, so utime (14) and stime (15) are the 12th and 13th after it.
  std::vector<std::string> f;
  size_t at = paren + 2;
  while (at < line.size() && f.size() < 13) {
    const size_t end = line.find(' ', at);
    f.push_back(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (f.size() < 13) return 0;
  return (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The kernel's softirq threads: where packet processing goes when it is not done in the
// context of the system call that caused it.
std::vector<std::string> KsoftirqdStatPaths() {
  std::vector<std::string> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream comm(fmt::format("/proc/{}/comm", e->d_name));
    std::string name;
    if (std::getline(comm, name) && name.rfind("ksoftirqd/", 0) == 0) {
      out.push_back(fmt::format("/proc/{}/stat", e->d_name));
    }
  }
  ::closedir(dir);
  return out;
}

// CPU seconds used by this process (all threads, user and system), its waited-for children
// (the iperf3 client) and the ksoftirqd threads. A run's cost is the difference of two reads.
double CpuSeconds() {
  static const std::vector<std::string> softirq_threads = KsoftirqdStatPaths();
  double total = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    ::getrusage(who, &u);
    total += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  for (const std::string& path : softirq_threads) total += ProcStatCpuSeconds(path);
  return total;
}

// The data-plane threads' CPU times, to take differences of.
std::array<Duration, 3> CpuTimes(const Bench& b) {
  std::array<Duration, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    if (b.dps[i] != nullptr) out[i] = b.dps[i]->thread_cpu_time();
  }
  return out;
}
void SetCpu(const Bench& b, Result& r, const std::array<Duration, 3>& before,
            const std::array<Duration, 3>& after, double elapsed) {
  for (size_t i = 0; i < 3; ++i) {
    if (b.dps[i] != nullptr) r.cpu[i] = ToSeconds(after[i] - before[i]) / elapsed;
  }
}

// One UDP measurement: what src sends, over and over, and how dst counts.
struct UdpRun {
  net::Ipv4Endpoint from;         // src's socket
  net::Ipv4Endpoint to;           // where src sends
  net::Ipv4Endpoint sink;         // dst's socket
  std::vector<uint8_t> datagram;  // the UDP payload src sends
  size_t goodput_bytes = 0;       // of which goodput, per datagram received
  // If set, dst counts only overlay data datagrams that pass ParseOverlay with these keys.
  const net::OverlayKeyRing* verify = nullptr;
  bool overlay = false;  // a DAR run: measure the data planes' CPU
};

// Blasts run.datagram from src for `seconds` (after a short warm-up) and counts what dst
// receives.
absl::StatusOr<Result> BlastUdp(Bench& b, const UdpRun& run, double seconds) {
  ASSIGN_OR_RETURN(net::UdpSocket tx, SocketIn(b.ns[0], run.from));
  ASSIGN_OR_RETURN(net::UdpSocket rx, SocketIn(b.ns[2], run.sink));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::thread receiver([&] {
    ::pthread_setname_np(::pthread_self(), "fb-recv");
    constexpr size_t kSlots = 64, kSlotBytes = 2048;
    std::vector<uint8_t> bufs(kSlots * kSlotBytes);
    std::vector<net::RecvSlot> slots;
    slots.reserve(kSlots);
    for (size_t i = 0; i < kSlots; ++i) {
      slots.emplace_back(absl::MakeSpan(bufs.data() + i * kSlotBytes, kSlotBytes));
    }
    while (!stop.load(std::memory_order_relaxed)) {
      pollfd p{rx.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      absl::StatusOr<int> n = rx.RecvBatch(absl::MakeSpan(slots));
      if (!n.ok()) continue;
      int good = *n;
      if (run.verify != nullptr) {
        good = 0;
        for (int i = 0; i < *n; ++i) {
          net::OverlayPacket pkt;
          // The sink is node 2, and what reaches it comes from node 1.
          good += net::ParseOverlay(slots[i].buffer.subspan(0, slots[i].size), *run.verify, 2, 1,
                                    &pkt) == net::OverlayStatus::kOk &&
                  pkt.header.type == net::OverlayType::kData;
        }
      }
      received.fetch_add(static_cast<uint64_t>(good), std::memory_order_relaxed);
    }
  });
  std::thread sender([&] {
    ::pthread_setname_np(::pthread_self(), "fb-send");
    const std::vector<net::SendItem> items(64, net::SendItem{run.datagram, run.to});
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
  const double all0 = CpuSeconds();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t r1 = received.load();
  const std::array<Duration, 3> cpu1 = CpuTimes(b);
  const double all1 = CpuSeconds();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  stop.store(true);
  sender.join();
  receiver.join();
  Result r;
  r.pps = static_cast<double>(r1 - r0) / elapsed;
  r.gbps = r.pps * static_cast<double>(run.goodput_bytes) * 8 / 1e9;
  if (r.gbps > 0) r.cpu_per_gbit = (all1 - all0) / (r.gbps * elapsed);
  if (run.overlay) SetCpu(b, r, cpu0, cpu1, elapsed);
  return r;
}

// End to end: `payload`-byte datagrams from an application in src to one in dst, through
// the TUNs and all three data planes (overlay) or through the kernel.
absl::StatusOr<Result> RunUdp(Bench& b, bool overlay, size_t payload, double seconds) {
  UdpRun run;
  run.from = {overlay ? Overlay(0) : Addr(Underlay(0, 1)), 0};
  run.to = {overlay ? Overlay(2) : Addr(Underlay(1, 2)), kPort};
  run.sink = run.to;
  run.datagram.assign(payload, 0x5a);
  run.goodput_bytes = payload;
  run.overlay = overlay;
  return BlastUdp(b, run, seconds);
}

// The forwarder alone (a Build with `transit`): overlay datagrams carrying `payload` bytes,
// sealed once by src (as src's data plane would, from src's link socket), through mid's data
// plane to dst, which verifies them; or the same bytes as plain UDP through kernel forwarding.
absl::StatusOr<Result> RunTransit(Bench& b, bool overlay, size_t payload, double seconds) {
  // Node 0's row to seal with, node 2's to verify (wire ids are node ids).
  const std::array<uint32_t, 3> wire = {0, 1, 2};
  net::OverlayKeyRing keys, sink_keys;
  RETURN_IF_ERROR(keys.Add(1, net::PairKeysFromSecret(b.key, wire, 0)));
  RETURN_IF_ERROR(sink_keys.Add(1, net::PairKeysFromSecret(b.key, wire, 2)));
  net::OverlayHeader h;
  h.type = net::OverlayType::kData;
  h.traffic_class = net::TrafficClass::kBulk;
  h.source = 0;
  h.destination = 2;
  h.flow_hash = 0x12345678;
  UdpRun run;
  run.datagram.resize(net::OverlayDatagramSize(payload));
  const std::vector<uint8_t> inner(payload, 0x5a);
  RETURN_IF_ERROR(
      net::SealOverlay(h, inner, *keys.current(), 1, absl::MakeSpan(run.datagram)).status());
  run.from = {Addr(Underlay(0, 1)), overlay ? uint16_t{7000} : uint16_t{0}};
  run.to = overlay ? net::Ipv4Endpoint{Addr(Underlay(0, 2)), 7000}
                   : net::Ipv4Endpoint{Addr(Underlay(1, 2)), kPort};
  run.sink = overlay ? net::Ipv4Endpoint{Addr(Underlay(1, 2)), 7000} : run.to;
  run.goodput_bytes = payload;
  run.verify = overlay ? &sink_keys : nullptr;
  run.overlay = overlay;
  return BlastUdp(b, run, seconds);
}

// `streams` iperf3 TCP streams (one by default) from src to dst for `seconds`.
absl::StatusOr<Result> RunTcp(Bench& b, bool overlay, int seconds, int streams) {
  const std::string server = overlay ? net::ToString(Overlay(2)) : Underlay(1, 2);
  // A daemon (so that Run returns), stopped below by its pid once its CPU time is read.
  const std::string pidfile = fmt::format("/tmp/fb-iperf3-{}.pid", ::getpid());
  RETURN_IF_ERROR(
      b.ns[2].Run({"iperf3", "-s", "-D", "-I", pidfile, "-B", server, "-p", "5299"}).status());
  int server_pid = 0;
  for (int attempt = 0; attempt < 50 && server_pid <= 0; ++attempt) {
    std::ifstream in(pidfile);
    if (!(in >> server_pid)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Without its pid the server's CPU would be left out of the CPU per Gbit unsaid.
  if (server_pid <= 0) {
    std::remove(pidfile.c_str());
    return absl::InternalError(
        fmt::format("iperf3 -s wrote no pid to {} within 1 s: its CPU cannot be counted", pidfile));
  }
  const std::string server_stat = fmt::format("/proc/{}/stat", server_pid);
  struct StopServer {
    int pid;
    std::string pidfile;
    ~StopServer() {
      if (pid > 0) ::kill(pid, SIGTERM);
      std::remove(pidfile.c_str());
    }
  } stop_server{server_pid, pidfile};
  const std::array<Duration, 3> cpu0 = CpuTimes(b);
  const double all0 = CpuSeconds() + ProcStatCpuSeconds(server_stat);
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
  const double all1 = CpuSeconds() + ProcStatCpuSeconds(server_stat);
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
  // The client's run includes the omitted first second: counted at the measured rate.
  if (r.gbps > 0) r.cpu_per_gbit = (all1 - all0) / (r.gbps * elapsed);
  if (overlay) SetCpu(b, r, cpu0, cpu1, elapsed);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PrintHeader(const std::string& title) {
  std::printf("%s\n", title.c_str());
  std::printf("%-12s %10s %10s %10s %10s %9s %8s %14s %8s %8s\n", "workload", "kern Gb/s",
              "kern kpps", "DAR Gb/s", "DAR kpps", "DAR/kern", "mid CPU", "mid kpps/core",
              "src CPU", "dst CPU");
}

// Runs `measure` (kernel, then DAR) `runs` times and prints the medians as one row; false
// (after printing why) if a run failed.
bool MeasureRow(const std::string& name, bool tcp, int runs, const std::string& only,
                const std::function<absl::StatusOr<Result>(bool overlay)>& measure) {
  std::vector<double> kg, kp, dg, dpps, cpu, src_cpu, dst_cpu, kretx, dretx, kcost, dcost;
  for (int r = 0; r < runs; ++r) {
    for (bool overlay : {false, true}) {
      if (!only.empty() && overlay != (only == "dar")) continue;
      absl::StatusOr<Result> res = measure(overlay);
      if (!res.ok()) {
        std::fprintf(stderr, "forwarder_bench: %s (%s): %s\n", name.c_str(),
                     overlay ? "DAR" : "kernel", std::string(res.status().message()).c_str());
        return false;
      }
      (overlay ? dg : kg).push_back(res->gbps);
      (overlay ? dpps : kp).push_back(res->pps);
      (overlay ? dretx : kretx).push_back(res->retransmits);
      (overlay ? dcost : kcost).push_back(res->cpu_per_gbit);
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
  // A CPU share of a data plane that does not run (the forwarder-alone runs): "-".
  auto share = [](const std::vector<double>& v) {
    const double m = Median(v);
    return m < 0 ? std::string("-") : fmt::format("{:.0f}%", 100 * m);
  };
  const double kgm = Median(kg), dgm = Median(dg);
  std::printf("%-12s %10.2f %10.1f %10.2f %10.1f %8.0f%% %8s %14.0f %8s %8s\n", name.c_str(), kgm,
              Median(kp) / 1e3, dgm, Median(dpps) / 1e3, kgm > 0 ? 100 * dgm / kgm : 0,
              share(cpu).c_str(), Median(per_core) / 1e3, share(src_cpu).c_str(),
              share(dst_cpu).c_str());
  const double kc = Median(kcost), dc = Median(dcost);
  std::printf(
      "%-12s CPU per delivered Gbit (all processes and ksoftirqd): kernel %.0f ms, "
      "DAR %.0f ms, DAR/kernel %.2f\n",
      "", 1e3 * kc, 1e3 * dc, kc > 0 ? dc / kc : 0);
  if (tcp) {
    std::printf("%-12s TCP retransmits per run (median): kernel %.0f, DAR %.0f\n", "",
                Median(kretx), Median(dretx));
  }
  return true;
}

// The data planes' counters after a set of runs: batching, offloads, drops by reason.
void PrintCounters(const Bench& b) {
  const char* names[] = {"src", "mid", "dst"};
  const DataplaneCounters mid = b.dps[1]->counters();
  std::printf(
      "mid data plane: %llu forwarded, %llu dropped (queue_full %llu), %.1f datagrams per "
      "recvmmsg, %.1f per sendmmsg, %llu GSO messages, %llu GRO receive slots\n",
      static_cast<unsigned long long>(mid.forwarded),
      static_cast<unsigned long long>(mid.total_dropped()),
      static_cast<unsigned long long>(mid.dropped(DropReason::kQueueFull)),
      static_cast<double>(mid.received) / std::max<double>(1, mid.receive_batches),
      static_cast<double>(mid.sent) / std::max<double>(1, mid.send_batches),
      static_cast<unsigned long long>(mid.gso_messages),
      static_cast<unsigned long long>(mid.gro_slots));
  if (b.dps[0] != nullptr && b.dps[2] != nullptr) {
    std::printf("offloads: %llu TCP super-packets read by src, %llu super-packets written by dst\n",
                static_cast<unsigned long long>(b.dps[0]->counters().tun_super_reads),
                static_cast<unsigned long long>(b.dps[2]->counters().tun_super_writes));
    // What the sending application's kernel routed to src's TUN and found its queue full for.
    const absl::StatusOr<std::string> dropped =
        b.ns[0].Run({"cat", "/sys/class/net/dtun0/statistics/tx_dropped"});
    if (dropped.ok()) {
      std::printf("src TUN (dtun0) queue overflows, all end-to-end runs: %s", dropped->c_str());
    }
  }
  for (size_t node = 0; node < 3; ++node) {
    if (b.dps[node] == nullptr) continue;
    const DataplaneCounters c = b.dps[node]->counters();
    if (c.liveness_changes > 0) {
      std::printf("  %s: %llu liveness changes (probes lost in overload take a link down)\n",
                  names[node], static_cast<unsigned long long>(c.liveness_changes));
    }
    for (size_t r = 0; r < kDropReasons; ++r) {
      if (c.drops[r] == 0) continue;
      std::printf("  %s dropped %llu: %s\n", names[node],
                  static_cast<unsigned long long>(c.drops[r]),
                  std::string(DropReasonName(static_cast<DropReason>(r))).c_str());
    }
  }
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
  bool no_udp = false;
  app.add_flag("--no-udp", no_udp, "skip the end-to-end UDP workloads");
  int streams = 1;
  app.add_option("--tcp-streams", streams, "parallel iperf3 TCP streams")->check(CLI::Range(1, 16));
  app.add_flag("--no-gso", no_gso, "data planes send without UDP GSO");
  bool no_transit = false;
  app.add_flag("--no-transit", no_transit, "skip the forwarder-alone measurement");
  app.add_option("--only", only, "measure one side only (for profiling)")
      ->check(CLI::IsMember({"kernel", "dar"}));
  CLI11_PARSE(app, argc, argv);
  if (no_udp && no_tcp && no_transit) {
    std::fprintf(stderr, "forwarder_bench: --no-udp, --no-tcp and --no-transit leave nothing\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "forwarder_bench: needs root (network namespaces, veths, TUN)\n");
    return 2;
  }
  Bench b;
  if (absl::Status s = Build(b, !no_gso, /*transit=*/false); !s.ok()) {
    std::fprintf(stderr, "forwarder_bench: setup failed: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  struct Workload {
    std::string name;
    bool tcp;
    size_t payload;
  };
  std::vector<Workload> workloads;
  if (!no_udp) {
    workloads = {{fmt::format("UDP {} B", kFullUdpPayload), false, kFullUdpPayload},
                 {"UDP 64 B", false, 64}};
  }
  if (!no_tcp) workloads.push_back({"TCP iperf3", true, 0});

  std::printf(
      "forwarder_bench: src -- mid -- dst over veths, median of %d runs of %.1f s, UDP GSO %s\n",
      runs, seconds, no_gso ? "off" : "on");
  PrintHeader("end to end: application in src -> TUN -> src, mid, dst data planes -> TUN");
  for (const Workload& w : workloads) {
    const bool ok = MeasureRow(w.name, w.tcp, runs, only, [&](bool overlay) {
      return w.tcp ? RunTcp(b, overlay, static_cast<int>(std::max(1.0, seconds)), streams)
                   : RunUdp(b, overlay, w.payload, seconds);
    });
    if (!ok) return 1;
  }
  PrintCounters(b);
  if (!no_transit) {
    Bench t;
    if (absl::Status s = Build(t, !no_gso, /*transit=*/true); !s.ok()) {
      std::fprintf(stderr, "forwarder_bench: transit setup failed: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    PrintHeader(
        "the forwarder alone: sealed overlay datagrams from src -> mid data plane -> dst, "
        "which verifies them");
    for (size_t payload : {size_t{1400}, size_t{64}}) {
      const bool ok =
          MeasureRow(fmt::format("fwd {} B", payload), false, runs, only,
                     [&](bool overlay) { return RunTransit(t, overlay, payload, seconds); });
      if (!ok) return 1;
    }
    PrintCounters(t);
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
