// dar-lab: a network of namespaces and veth links from a lab file, with the controller and the
// agents running in it (src/lab/lab.h). Needs root.
//
//   dar-lab up FILE [--dir D] [--no-services] [-v]
//   dar-lab down [--dir D] [--name LAB]
//   dar-lab link down|up A B [--dir D]
//   dar-lab rate A B RATE|none [--dir D]
//   dar-lab exec NODE [--dir D] [--] CMD...
//   dar-lab ctl [--dir D] ARGS...         darctl ARGS in the lab's controller namespace
//   dar-lab stop ctl|ctlN|etcd|NODE [--kill] [--dir D]   (ctlN: replica N; etcd: theirs)
//   dar-lab start ctl|ctlN|etcd|NODE [--dir D]
//   dar-lab status [--dir D]
//
// D defaults to $DAR_LAB_DIR, else /tmp/dar-lab.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/version.h"
#include "fmt/format.h"
#include "lab/command.h"
#include "lab/lab.h"
#include "lab/lab_config.h"

namespace {

using dar::lab::Lab;

int Fail(const absl::Status& status) {
  fmt::print(stderr, "dar-lab: {}\n", std::string(status.message()));
  return 1;
}

// Replaces this process with `argv` (its first word looked up on PATH); returns only if that
// fails, with 127 as a shell would.
int Exec(std::vector<std::string> argv) {
  absl::StatusOr<std::string> program = dar::lab::FindExecutable(argv.front());
  if (!program.ok()) return Fail(program.status());
  std::vector<char*> c_args;
  c_args.reserve(argv.size() + 1);
  for (std::string& arg : argv) c_args.push_back(arg.data());
  c_args.push_back(nullptr);
  execv(program->c_str(), c_args.data());
  fmt::print(stderr, "dar-lab: cannot run {}: {}\n", *program, std::strerror(errno));
  return 127;
}

void AddDir(CLI::App* command, std::string& dir) {
  command->add_option("--dir", dir, "lab directory: state, configs, logs")
      ->envname("DAR_LAB_DIR")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dar-lab: a network of namespaces and veth links, with DAR's services in it"};
  app.set_version_flag("--version", dar::VersionLine("dar-lab"));
  app.require_subcommand(1);
  std::string dir = "/tmp/dar-lab";

  CLI::App* up = app.add_subcommand("up", "build the lab of FILE and start its services");
  std::string file;
  bool no_services = false;
  bool verbose = false;
  up->add_option("file", file, "lab file (YAML)")->required();
  up->add_flag("--no-services", no_services, "build the network only");
  up->add_flag("-v,--verbose", verbose, "print every command");
  AddDir(up, dir);

  CLI::App* down = app.add_subcommand("down", "stop the services and remove the lab");
  std::string name;
  int grace_ms = 5000;
  down->add_option("--name", name, "sweep by this lab name (when the state file is lost)");
  down->add_option("--grace-ms", grace_ms, "time between SIGTERM and SIGKILL")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddDir(down, dir);

  CLI::App* link = app.add_subcommand("link", "set a link administratively down or up");
  std::string link_state;
  std::string a;
  std::string b;
  link->add_option("state", link_state, "down or up")
      ->required()
      ->check(CLI::IsMember({"down", "up"}));
  link->add_option("a", a, "node")->required();
  link->add_option("b", b, "node")->required();
  AddDir(link, dir);

  CLI::App* rate = app.add_subcommand("rate", "set the rate limit of a link (both ends)");
  std::string rate_text;
  rate->add_option("a", a, "node")->required();
  rate->add_option("b", b, "node")->required();
  rate->add_option("rate", rate_text, "e.g. 100mbit; none removes the limit")->required();
  AddDir(rate, dir);

  CLI::App* exec = app.add_subcommand("exec",
                                      "run a command in a node's namespace (ctl: the "
                                      "controller's); exits with its exit code");
  std::string node;
  exec->add_option("node", node, "node name or id, or ctl")->required();
  // Everything after the node (or after `--`) is the command, options included.
  exec->prefix_command()->allow_extras();
  AddDir(exec, dir);

  CLI::App* ctl = app.add_subcommand(
      "ctl",
      "run darctl in the lab's controller namespace, told the controller's address and the "
      "lab's admin certificate (e.g. dar-lab ctl show links); exits with its exit code");
  // Everything after dar-lab's own options is darctl's.
  ctl->prefix_command()->allow_extras();
  AddDir(ctl, dir);

  CLI::App* stop = app.add_subcommand(
      "stop",
      "stop a service (ctl: the controller, ctl1, ctl2, ...: its replicas, etcd: theirs; NODE: "
      "its agent); `start` runs it again");
  std::string who;
  bool kill_now = false;
  stop->add_option("service", who, "ctl, ctlN, etcd, or a node name or id")->required();
  stop->add_flag("--kill", kill_now, "SIGKILL at once, as a crash (default: SIGTERM first)");
  stop->add_option("--grace-ms", grace_ms, "time between SIGTERM and SIGKILL")
      ->capture_default_str();
  AddDir(stop, dir);
  CLI::App* start = app.add_subcommand("start", "start a stopped service again, as `up` did");
  start->add_option("service", who, "ctl, ctlN, etcd, or a node name or id")->required();
  AddDir(start, dir);

  CLI::App* status = app.add_subcommand("status", "show the lab and whether its services run");
  AddDir(status, dir);

  // `exec NODE -- CMD...`: CLI11 would hand the words after `--` to the top-level app and reject
  // them, so they are split off first. Without `--`, everything after NODE is the command.
  std::vector<char*> args(argv, argv + argc);
  std::vector<std::string> command;
  if (argc > 1 && std::string_view(argv[1]) == "exec") {
    auto dashes = std::find_if(args.begin() + 2, args.end(),
                               [](const char* a) { return std::string_view(a) == "--"; });
    if (dashes != args.end()) {
      command.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  dar::lab::SubprocessRunner runner;
  Lab lab(runner, dir);

  if (*up) {
    absl::StatusOr<dar::lab::LabConfig> config = dar::lab::LoadLabConfig(file);
    if (!config.ok()) return Fail(config.status());
    dar::lab::UpOptions options;
    options.file = std::filesystem::absolute(file).lexically_normal().string();
    options.start_services = !no_services;
    if (verbose)
      options.on_step = [](const std::string& step) { fmt::print(stderr, "+ {}\n", step); };
    absl::StatusOr<dar::lab::LabState> state = lab.Up(*config, options);
    if (!state.ok()) return Fail(state.status());
    fmt::print("{}", dar::lab::DescribeLab(*state, lab.dir()));
    return 0;
  }
  if (*down) {
    dar::lab::DownOptions options;
    options.name = name;
    options.grace = dar::Milliseconds(grace_ms);
    absl::StatusOr<dar::lab::DownReport> report = lab.Down(options);
    if (!report.ok()) return Fail(report.status());
    if (!report->note.empty()) fmt::print(stderr, "dar-lab: {}\n", report->note);
    if (!report->name.empty()) {
      fmt::print(
          "lab {} is down: {} processes stopped, {} namespaces and {} stray interfaces "
          "deleted\n",
          report->name, report->processes_signalled, report->namespaces_deleted.size(),
          report->interfaces_deleted.size());
    }
    return 0;
  }
  if (*link) {
    const absl::Status s = lab.SetLinkUp(a, b, link_state == "up");
    return s.ok() ? 0 : Fail(s);
  }
  if (*rate) {
    std::optional<dar::DataRate> limit;
    if (rate_text != "none" && rate_text != "unlimited") {
      absl::StatusOr<dar::DataRate> parsed = dar::lab::ParseRate(rate_text);
      if (!parsed.ok()) {
        return Fail(absl::InvalidArgumentError(
            fmt::format("rate: {}", std::string(parsed.status().message()))));
      }
      limit = *parsed;
    }
    const absl::Status s = lab.SetRate(a, b, limit);
    return s.ok() ? 0 : Fail(s);
  }
  if (*exec) {
    if (command.empty()) command = exec->remaining();
    absl::StatusOr<std::vector<std::string>> exec_args = lab.ExecArgv(node, command);
    if (!exec_args.ok()) return Fail(exec_args.status());
    return Exec(*exec_args);
  }
  if (*ctl) {
    // The darctl of this build, beside dar-lab; else the one on PATH.
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    std::string darctl = "darctl";
    if (!error && std::filesystem::exists(self.parent_path() / "darctl")) {
      darctl = (self.parent_path() / "darctl").string();
    }
    absl::StatusOr<std::vector<std::string>> ctl_args = lab.CtlArgv(darctl, ctl->remaining());
    if (!ctl_args.ok()) return Fail(ctl_args.status());
    return Exec(*ctl_args);
  }
  if (*stop) {
    const absl::Status s =
        lab.StopService(who, kill_now ? dar::Duration(0) : dar::Milliseconds(grace_ms));
    return s.ok() ? 0 : Fail(s);
  }
  if (*start) {
    absl::StatusOr<dar::lab::ProcessRecord> p = lab.StartService(who);
    if (!p.ok()) return Fail(p.status());
    fmt::print("{} started: pid {}, log {}\n", p->node.empty() ? p->role : p->node, p->id.pid,
               p->log);
    return 0;
  }
  if (*status) {
    absl::StatusOr<dar::lab::LabState> state = lab.LoadState();
    if (!state.ok()) return Fail(state.status());
    fmt::print("{}", dar::lab::DescribeLab(*state, lab.dir()));
    return 0;
  }
  return 0;
}
