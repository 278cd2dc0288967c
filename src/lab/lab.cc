#include "lab/lab.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/time/clock.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "lab/lab_files.h"
#include "lab/process.h"

namespace dar::lab {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(fmt::format("{}: cannot write", path));
  return absl::OkStatus();
}

std::string ConfigPath(const std::string& dir, const std::string& who) {
  return fmt::format("{}/{}.yaml", dir, who);
}
std::string LogPath(const std::string& dir, const std::string& who) {
  return fmt::format("{}/{}.log", dir, who);
}

// tbf's bucket: 10 ms at the rate, at least 64 KiB: a packet larger than the bucket never
// passes, and GSO hands the shaper datagrams of up to 64 KiB. Replaced in place with a smaller
// bucket while such a datagram is queued, a tbf would otherwise wedge for good.
int64_t TbfBurstBytes(DataRate rate) {
  return std::max<int64_t>(rate.BytesIn(Milliseconds(10)), int64_t{64} * 1024);
}

}  // namespace

std::vector<std::string> TbfCommand(const std::string& netns, const std::string& ifname,
                                    DataRate rate) {
  return {"tc",
          "-n",
          netns,
          "qdisc",
          "replace",
          "dev",
          ifname,
          "root",
          "tbf",
          "rate",
          fmt::format("{}bit", rate.bps()),
          "burst",
          std::to_string(TbfBurstBytes(rate)),
          "latency",
          "50ms"};
}

// Every replica's address, comma-separated (darctl asks them in turn for the leader).
std::string ControllerAddrs(const LabLayout& layout) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(layout.controller_replicas));
  for (int r = 0; r < layout.controller_replicas; ++r) out.push_back(layout.controller_addr(r));
  return fmt::format("{}", fmt::join(out, ","));
}

std::string DescribeLab(const LabState& state, const std::string& dir) {
  const LabLayout& layout = state.layout;
  std::map<std::string, const ProcessRecord*> process_of;  // by node name; "" = controller
  for (const ProcessRecord& p : state.processes) process_of[p.node] = &p;
  const auto process = [&](const std::string& who) -> std::string {
    auto it = process_of.find(who);
    if (it == process_of.end()) return "not started";
    return fmt::format("pid {} {}", it->second->id.pid,
                       IsRunning(it->second->id) ? "running" : "exited");
  };
  std::string out = fmt::format("lab {} in {}: {}\n", layout.name, dir, PhaseName(state.phase));
  if (layout.controller_replicas == 1) {
    out += fmt::format("controller {} in netns {}  config {}  log {}  ({})\n",
                       layout.controller_addr(), layout.ctl_netns, ConfigPath(dir, "controller"),
                       LogPath(dir, "controller"), process(""));
  } else {
    out += fmt::format("controller: {} replicas in netns {}, one leads (etcd {}, log {}: {})\n",
                       layout.controller_replicas, layout.ctl_netns, kLabEtcdClient,
                       LogPath(dir, "etcd"), process("etcd"));
    for (int r = 0; r < layout.controller_replicas; ++r) {
      const std::string name = layout.controller_name(r);
      out += fmt::format("  {} {}  http://{}/  config {}  log {}  ({})\n", name,
                         layout.controller_addr(r), LabControllerHttpAddr(layout, r),
                         ConfigPath(dir, name), LogPath(dir, name), process(name));
    }
  }
  out += fmt::format(
      "  metrics and web view http://{0}/  (from its namespace: dar-lab exec --dir {1} ctl curl "
      "-s http://{0}/metrics)\n  darctl: dar-lab ctl --dir {1} show links  (dar-lab ctl --dir "
      "{1} --help)\n",
      LabControllerHttpAddr(layout), dir);
  out += "nodes:\n";
  for (const NodeLayout& n : layout.nodes) {
    out += fmt::format(
        "  {:>3} {:<8} netns {}  mgmt {} ({})  metrics http://{}/metrics  config {}  log {}  "
        "({})\n",
        n.id, n.name, n.netns, n.mgmt_address, n.mgmt_ifname, LabAgentHttpAddr(n),
        ConfigPath(dir, n.name), LogPath(dir, n.name), process(n.name));
  }
  out += "links:\n";
  for (const LinkLayout& l : layout.links) {
    out += fmt::format("  {:>3} {}-{}  {} {}/{} <-> {} {}/{}  {}  {}\n", l.index,
                       layout.nodes.at(l.a.node).name, layout.nodes.at(l.b.node).name, l.a.ifname,
                       l.a.address, l.prefix_length, l.b.ifname, l.b.address, l.prefix_length,
                       l.rate ? FormatRate(*l.rate) : "unlimited", l.up ? "up" : "down");
  }
  return out;
}

Lab::Lab(CommandRunner& runner, const std::string& dir)
    : runner_(runner), dir_(std::filesystem::absolute(dir).lexically_normal().string()) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

absl::StatusOr<LabState> Lab::LoadState() const { return LoadLabState(StatePath(dir_)); }

absl::StatusOr<LabState> Lab::LoadUpState() const {
  absl::StatusOr<LabState> state = LoadState();
  if (absl::IsNotFound(state.status())) {
    return absl::FailedPreconditionError(fmt::format(
        "no lab in {} (no state.json); start one with `dar-lab up FILE --dir {}`", dir_, dir_));
  }
  if (!state.ok()) return state.status();
  if (state->phase != LabPhase::kUp) {
    return absl::FailedPreconditionError(fmt::format(
        "lab {} in {} is {}, not up", state->layout.name, dir_, PhaseName(state->phase)));
  }
  return state;
}

absl::Status Lab::Save(const LabState& state) const { return SaveLabState(state, StatePath(dir_)); }

absl::Status Lab::Step(const std::vector<std::string>& argv, const UpOptions& options) {
  if (options.on_step) options.on_step(FormatCommand(argv));
  return runner_.Run(argv).status();
}

absl::StatusOr<std::vector<std::string>> Lab::ListNamespaces() {
  ASSIGN_OR_RETURN(const std::string out, runner_.Run({"ip", "netns", "list"}));
  std::vector<std::string> names;
  for (const std::string& line : Lines(out)) {
    // "name" or "name (id: 3)".
    names.push_back(line.substr(0, line.find(' ')));
  }
  return names;
}

absl::StatusOr<std::vector<std::string>> Lab::ListRootInterfaces() {
  ASSIGN_OR_RETURN(const std::string out, runner_.Run({"ip", "-o", "link", "show"}));
  std::vector<std::string> names;
  for (const std::string& line : Lines(out)) {
    // "7: name@peer: <BROADCAST,...> ..." or "1: lo: <LOOPBACK,...> ...".
    const size_t start = line.find(": ");
    if (start == std::string::npos) continue;
    const size_t end = line.find_first_of("@:", start + 2);
    if (end == std::string::npos) continue;
    names.push_back(line.substr(start + 2, end - start - 2));
  }
  return names;
}

absl::Status Lab::CheckNameFree(const std::string& prefix) {
  ASSIGN_OR_RETURN(const std::vector<std::string> namespaces, ListNamespaces());
  ASSIGN_OR_RETURN(const std::vector<std::string> interfaces, ListRootInterfaces());
  for (const auto& [kind, names] :
       {std::pair{"namespace", &namespaces}, std::pair{"interface", &interfaces}}) {
    for (const std::string& name : *names) {
      if (StartsWith(name, prefix)) {
        const std::string lab = prefix.substr(0, prefix.size() - 1);
        return absl::FailedPreconditionError(fmt::format(
            "lab name '{}' is in use: {} {} exists (remove that lab with `dar-lab down --name "
            "{}`, or rename this one)",
            lab, kind, name, lab));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LabState> Lab::Up(const LabConfig& config, const UpOptions& options) {
  LabState state;
  state.file = options.file;
  state.layout = MakeLayout(config);

  absl::StatusOr<LabState> existing = LoadState();
  if (existing.ok() && existing->phase != LabPhase::kDown) {
    return absl::FailedPreconditionError(
        fmt::format("lab {} is {} in {}; run `dar-lab down --dir {}` first", existing->layout.name,
                    PhaseName(existing->phase), dir_, dir_));
  }
  if (!existing.ok() && !absl::IsNotFound(existing.status())) {
    return absl::FailedPreconditionError(
        fmt::format("{} (remove it if no lab is running from {})", Msg(existing.status()), dir_));
  }
  RETURN_IF_ERROR(CheckNameFree(state.layout.prefix()));
  if (options.start_services) {
    for (const auto& [role, service] :
         {std::pair{"controller", &config.controller}, std::pair{"agent", &config.agent}}) {
      if (!service->has_value()) continue;
      const std::string& program = (*service)->command.front();
      if (program.find('{') != std::string::npos) continue;  // known only once expanded
      absl::StatusOr<std::string> found = FindExecutable(program);
      if (!found.ok()) {
        return absl::NotFoundError(
            fmt::format("services.{}.command[0]: {}", role, Msg(found.status())));
      }
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return absl::InternalError(fmt::format("{}: cannot create: {}", dir_, ec.message()));
  RETURN_IF_ERROR(Save(state));

  const absl::Status built = Build(config, options, state);
  if (!built.ok()) {
    DownOptions down;
    down.name = state.layout.name;
    down.grace = Seconds(2);
    absl::StatusOr<DownReport> rolled_back = Down(down);
    return absl::Status(built.code(),
                        fmt::format("{} ({})", Msg(built),
                                    rolled_back.ok() ? "everything created was removed again"
                                                     : "removing what was created failed too: " +
                                                           Msg(rolled_back.status())));
  }
  state.phase = LabPhase::kUp;
  RETURN_IF_ERROR(Save(state));
  return state;
}

absl::Status Lab::Build(const LabConfig& config, const UpOptions& options, LabState& state) {
  const LabLayout& layout = state.layout;
  const auto record = [&](auto&& change) {
    change();
    return Save(state);
  };

  // Namespaces, loopback up.
  std::vector<std::string> namespaces = {layout.ctl_netns};
  for (const NodeLayout& n : layout.nodes) namespaces.push_back(n.netns);
  for (const std::string& ns : namespaces) {
    RETURN_IF_ERROR(record([&] { state.namespaces.push_back(ns); }));
    RETURN_IF_ERROR(Step({"ip", "netns", "add", ns}, options));
    RETURN_IF_ERROR(Step({"ip", "-n", ns, "link", "set", "lo", "up"}, options));
  }

  // A veth pair created directly in its two namespaces, addressed and up.
  const auto veth = [&](const std::string& ns_a, const std::string& if_a, const std::string& ip_a,
                        const std::string& ns_b, const std::string& if_b, const std::string& ip_b,
                        int prefix_length) -> absl::Status {
    RETURN_IF_ERROR(record([&] {
      state.interfaces.push_back({ns_a, if_a});
      state.interfaces.push_back({ns_b, if_b});
    }));
    RETURN_IF_ERROR(Step({"ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name",
                          if_b, "netns", ns_b},
                         options));
    for (const auto& [ns, ifname, ip] :
         {std::tuple{ns_a, if_a, ip_a}, std::tuple{ns_b, if_b, ip_b}}) {
      RETURN_IF_ERROR(Step(
          {"ip", "-n", ns, "addr", "add", fmt::format("{}/{}", ip, prefix_length), "dev", ifname},
          options));
      RETURN_IF_ERROR(Step({"ip", "-n", ns, "link", "set", ifname, "up"}, options));
    }
    return absl::OkStatus();
  };

  // Underlay links.
  for (const LinkLayout& l : layout.links) {
    const NodeLayout& a = layout.nodes.at(l.a.node);
    const NodeLayout& b = layout.nodes.at(l.b.node);
    RETURN_IF_ERROR(
        veth(a.netns, l.a.ifname, l.a.address, b.netns, l.b.ifname, l.b.address, l.prefix_length));
    if (l.rate) {
      RETURN_IF_ERROR(Step(TbfCommand(a.netns, l.a.ifname, *l.rate), options));
      RETURN_IF_ERROR(Step(TbfCommand(b.netns, l.b.ifname, *l.rate), options));
    }
  }

  // Management: the controller's address on its loopback, a veth to every node, and a route
  // from every node to the controller's address.
  RETURN_IF_ERROR(Step({"ip", "-n", layout.ctl_netns, "addr", "add",
                        fmt::format("{}/32", layout.controller_ip), "dev", "lo"},
                       options));
  for (const NodeLayout& n : layout.nodes) {
    RETURN_IF_ERROR(veth(n.netns, n.mgmt_ifname, n.mgmt_address, layout.ctl_netns, n.ctl_ifname,
                         n.ctl_address, 30));
    RETURN_IF_ERROR(
        Step({"ip", "-n", n.netns, "route", "add", fmt::format("{}/32", layout.controller_ip),
              "via", n.ctl_address, "dev", n.mgmt_ifname},
             options));
  }

  // Credentials and config files.
  RETURN_IF_ERROR(CreateLabCredentials(layout, dir_, absl::Now()));
  for (int r = 0; r < layout.controller_replicas; ++r) {
    RETURN_IF_ERROR(
        WriteFile(ConfigPath(dir_, layout.controller_name(r)), ControllerConfigYaml(layout, r)));
  }
  for (size_t i = 0; i < layout.nodes.size(); ++i) {
    RETURN_IF_ERROR(WriteFile(ConfigPath(dir_, layout.nodes[i].name),
                              NodeConfigYaml(layout, static_cast<int>(i))));
  }

  // Services: the controller first, so agents find it.
  if (!options.start_services) return absl::OkStatus();
  Placeholders values = {{"lab", layout.name},
                         {"lab_dir", dir_},
                         {"controller_addr", layout.controller_addr()},
                         {"controller_ip", layout.controller_ip},
                         {"controller_port", std::to_string(layout.controller_port)}};
  if (config.controller && layout.controller_replicas > 1) {
    // The replicas' etcd first, serving before they start: a connection made to an etcd that
    // does not serve yet hangs for seconds.
    RETURN_IF_ERROR(SpawnService("etcd", "etcd", layout.ctl_netns, LabEtcdCommand(layout, dir_),
                                 options, state));
    const std::string log = LogPath(dir_, "etcd");
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    const auto serving = [&] {
      absl::StatusOr<std::string> text = ReadFile(log);
      return text.ok() && text->find("serving insecure client requests") != std::string::npos;
    };
    while (!serving()) {
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            fmt::format("etcd did not serve within 20 s; its log: {}", log));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (config.controller) {
    values["netns"] = layout.ctl_netns;
    for (int r = 0; r < layout.controller_replicas; ++r) {
      values["config"] = ConfigPath(dir_, layout.controller_name(r));
      values["controller_addr"] = layout.controller_addr(r);
      values["controller_port"] = std::to_string(layout.controller_port + r);
      ASSIGN_OR_RETURN(const std::vector<std::string> command,
                       ExpandCommand(config.controller->command, values));
      RETURN_IF_ERROR(SpawnService("controller",
                                   layout.controller_replicas == 1 ? "" : layout.controller_name(r),
                                   layout.ctl_netns, command, options, state));
    }
    values["controller_addr"] = layout.controller_addr();
    values["controller_port"] = std::to_string(layout.controller_port);
  }
  if (config.agent) {
    for (const NodeLayout& n : layout.nodes) {
      values["netns"] = n.netns;
      values["config"] = ConfigPath(dir_, n.name);
      values["node"] = std::to_string(n.id);
      values["node_name"] = n.name;
      ASSIGN_OR_RETURN(const std::vector<std::string> command,
                       ExpandCommand(config.agent->command, values));
      RETURN_IF_ERROR(SpawnService("agent", n.name, n.netns, command, options, state));
    }
  }
  return absl::OkStatus();
}

absl::Status Lab::SpawnService(const std::string& role, const std::string& node,
                               const std::string& netns, const std::vector<std::string>& command,
                               const UpOptions& options, LabState& state) {
  std::vector<std::string> argv = {"ip", "netns", "exec", netns};
  argv.insert(argv.end(), command.begin(), command.end());
  const std::string who = node.empty() ? role : node;
  if (options.on_step) {
    options.on_step(
        fmt::format("start {}{}{}: {}", role, node.empty() ? "" : " ", node, FormatCommand(argv)));
  }
  const std::string log = LogPath(dir_, who);
  ASSIGN_OR_RETURN(HeldProcess process, SpawnHeld(argv, log));
  state.processes.push_back({role, node, netns, process.id(), log, command});
  RETURN_IF_ERROR(Save(state));
  return process.Release();
}

absl::StatusOr<DownReport> Lab::Down(const DownOptions& options) {
  DownReport report;
  absl::StatusOr<LabState> state = LoadState();
  std::string name = options.name;
  if (state.ok()) {
    if (name.empty()) name = state->layout.name;
    if (name != state->layout.name) {
      return absl::InvalidArgumentError(
          fmt::format("{} is for lab '{}', not '{}'", StatePath(dir_), state->layout.name, name));
    }
  } else if (absl::IsNotFound(state.status())) {
    if (name.empty()) {
      report.note = fmt::format(
          "no state file {}: nothing to do (give --name to sweep a lab whose state file was "
          "lost)",
          StatePath(dir_));
      return report;
    }
    report.note = fmt::format("no state file {}; swept by name", StatePath(dir_));
  } else {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          fmt::format("{} (give --name to sweep the lab by name)", Msg(state.status())));
    }
    report.note = fmt::format("{}; swept by name", Msg(state.status()));
  }
  report.name = name;
  const std::string prefix = name + "-";
  std::vector<std::string> problems;

  // Namespaces that exist and are ours: recorded, or named with our prefix.
  ASSIGN_OR_RETURN(const std::vector<std::string> listed, ListNamespaces());
  std::set<std::string> recorded;
  if (state.ok()) recorded.insert(state->namespaces.begin(), state->namespaces.end());
  std::vector<std::string> namespaces;
  for (const std::string& ns : listed) {
    if (StartsWith(ns, prefix) || recorded.contains(ns)) namespaces.push_back(ns);
  }

  // Processes: the recorded ones, and anything else still running in our namespaces.
  std::vector<ProcessId> processes;
  if (state.ok()) {
    for (const ProcessRecord& p : state->processes) processes.push_back(p.id);
  }
  for (const std::string& ns : namespaces) {
    absl::StatusOr<std::string> pids = runner_.Run({"ip", "netns", "pids", ns});
    if (!pids.ok()) {
      problems.push_back(Msg(pids.status()));
      continue;
    }
    for (const std::string& line : Lines(*pids)) {
      const pid_t pid = static_cast<pid_t>(std::strtol(line.c_str(), nullptr, 10));
      if (pid <= 0) continue;
      absl::StatusOr<uint64_t> start = ProcessStartTime(pid);
      if (start.ok()) processes.push_back({pid, *start});
    }
  }
  for (const ProcessId& p : processes) report.processes_signalled += IsRunning(p) ? 1 : 0;
  if (absl::Status s = StopProcesses(processes, options.grace, options.kill_wait); !s.ok()) {
    problems.push_back(Msg(s));
  }

  for (const std::string& ns : namespaces) {
    if (absl::Status s = runner_.Run({"ip", "netns", "del", ns}).status(); !s.ok()) {
      problems.push_back(Msg(s));
    } else {
      report.namespaces_deleted.push_back(ns);
    }
  }

  // Leftovers in the root namespace (the lab creates none there, but an interrupted older run or
  // a hand-made test interface may have). Deleting one end of a veth deletes the other, so list
  // again before calling a failed deletion a problem.
  absl::StatusOr<std::vector<std::string>> interfaces = ListRootInterfaces();
  if (!interfaces.ok()) {
    problems.push_back(Msg(interfaces.status()));
  } else {
    for (const std::string& ifname : *interfaces) {
      if (!StartsWith(ifname, prefix)) continue;
      const absl::Status s = runner_.Run({"ip", "link", "del", ifname}).status();
      if (s.ok()) {
        report.interfaces_deleted.push_back(ifname);
        continue;
      }
      absl::StatusOr<std::vector<std::string>> now = ListRootInterfaces();
      if (now.ok() && std::find(now->begin(), now->end(), ifname) == now->end()) continue;
      problems.push_back(Msg(s));
    }
  }

  if (!problems.empty()) {
    return absl::InternalError(
        fmt::format("lab {} not completely removed: {}", name, fmt::join(problems, "; ")));
  }
  if (state.ok()) {
    state->phase = LabPhase::kDown;
    state->namespaces.clear();
    state->interfaces.clear();
    state->processes.clear();
    RETURN_IF_ERROR(Save(*state));
  }
  return report;
}

absl::Status Lab::SetLinkUp(std::string_view a, std::string_view b, bool up) {
  ASSIGN_OR_RETURN(LabState state, LoadUpState());
  ASSIGN_OR_RETURN(const int index, state.layout.FindLink(a, b));
  LinkLayout& link = state.layout.links[index];
  for (const LinkEnd* end : {&link.a, &link.b}) {
    const std::string& ns = state.layout.nodes.at(end->node).netns;
    RETURN_IF_ERROR(
        runner_.Run({"ip", "-n", ns, "link", "set", end->ifname, up ? "up" : "down"}).status());
  }
  link.up = up;
  return Save(state);
}

absl::Status Lab::ApplyRate(const std::string& netns, const std::string& ifname,
                            std::optional<DataRate> rate, bool had_rate) {
  if (rate) return runner_.Run(TbfCommand(netns, ifname, *rate)).status();
  if (!had_rate) return absl::OkStatus();
  return runner_.Run({"tc", "-n", netns, "qdisc", "del", "dev", ifname, "root"}).status();
}

absl::Status Lab::SetRate(std::string_view a, std::string_view b, std::optional<DataRate> rate) {
  ASSIGN_OR_RETURN(LabState state, LoadUpState());
  ASSIGN_OR_RETURN(const int index, state.layout.FindLink(a, b));
  LinkLayout& link = state.layout.links[index];
  for (const LinkEnd* end : {&link.a, &link.b}) {
    RETURN_IF_ERROR(ApplyRate(state.layout.nodes.at(end->node).netns, end->ifname, rate,
                              link.rate.has_value()));
  }
  link.rate = rate;
  return Save(state);
}

absl::StatusOr<size_t> Lab::FindService(const LabState& state, std::string_view who) {
  // A replica of the controller ("ctl2"), or the replicas' etcd.
  for (size_t i = 0; i < state.processes.size(); ++i) {
    const ProcessRecord& p = state.processes[i];
    if ((p.role == "controller" || p.role == "etcd") && !p.node.empty() && p.node == who) return i;
  }
  std::string node;  // "" for the controller (the first replica)
  if (who != "ctl" && who != "controller") {
    ASSIGN_OR_RETURN(const int index, state.layout.FindNode(who));
    node = state.layout.nodes[index].name;
  }
  for (size_t i = 0; i < state.processes.size(); ++i) {
    const ProcessRecord& p = state.processes[i];
    if (node.empty() ? p.role == "controller" : (p.role == "agent" && p.node == node)) return i;
  }
  return absl::NotFoundError(
      fmt::format("{} has no service in this lab", node.empty() ? "the controller" : node));
}

absl::Status Lab::StopService(std::string_view who, Duration grace) {
  ASSIGN_OR_RETURN(const LabState state, LoadUpState());
  ASSIGN_OR_RETURN(const size_t index, FindService(state, who));
  const ProcessRecord& p = state.processes[index];
  if (!IsRunning(p.id)) {
    return absl::FailedPreconditionError(
        fmt::format("{} (pid {}) is not running", p.node.empty() ? p.role : p.node, p.id.pid));
  }
  if (grace <= Duration(0)) {
    ::kill(p.id.pid, SIGKILL);
    grace = Duration(0);
  }
  return StopProcesses({p.id}, grace, Seconds(5));
}

absl::StatusOr<ProcessRecord> Lab::StartService(std::string_view who) {
  ASSIGN_OR_RETURN(LabState state, LoadUpState());
  ASSIGN_OR_RETURN(const size_t index, FindService(state, who));
  const ProcessRecord old = state.processes[index];
  if (IsRunning(old.id)) {
    return absl::FailedPreconditionError(fmt::format("{} is running (pid {}): stop it first",
                                                     old.node.empty() ? old.role : old.node,
                                                     old.id.pid));
  }
  // SpawnService appends the new record and saves; the record then takes the old one's place.
  RETURN_IF_ERROR(SpawnService(old.role, old.node, old.netns, old.argv, UpOptions{}, state));
  state.processes[index] = state.processes.back();
  state.processes.pop_back();
  RETURN_IF_ERROR(Save(state));
  return state.processes[index];
}

absl::StatusOr<std::vector<std::string>> Lab::ExecArgv(
    std::string_view node, const std::vector<std::string>& command) const {
  if (command.empty()) return absl::InvalidArgumentError("exec: no command given");
  ASSIGN_OR_RETURN(const LabState state, LoadUpState());
  std::string netns;
  const bool ctl_service =
      std::any_of(state.processes.begin(), state.processes.end(), [&](const ProcessRecord& p) {
        return p.role != "agent" && !p.node.empty() && p.node == node;
      });
  if (node == "ctl" || node == "controller" || ctl_service) {
    netns = state.layout.ctl_netns;
  } else {
    ASSIGN_OR_RETURN(const int index, state.layout.FindNode(node));
    netns = state.layout.nodes[index].netns;
  }
  std::vector<std::string> argv = {"ip", "netns", "exec", netns};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> Lab::CtlArgv(const std::string& darctl,
                                                      const std::vector<std::string>& args) const {
  ASSIGN_OR_RETURN(const LabState state, LoadUpState());
  std::vector<std::string> argv = {"ip",
                                   "netns",
                                   "exec",
                                   state.layout.ctl_netns,
                                   "env",
                                   fmt::format("DAR_CONTROLLER={}", ControllerAddrs(state.layout)),
                                   fmt::format("DAR_TLS_DIR={}/{}", dir_, kLabCertDir),
                                   fmt::format("DAR_ADMIN={}", kLabAdminName),
                                   darctl};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace dar::lab
