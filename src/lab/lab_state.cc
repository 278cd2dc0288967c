#include "lab/lab_state.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/status_macros.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace dar::lab {
namespace {

using nlohmann::json;

constexpr int kStateVersion = 1;

// Typed access to one JSON object of the state file; errors name the file and the field.
class JsonIn {
 public:
  JsonIn(const json& j, std::string where, std::string path)
      : j_(j), where_(std::move(where)), path_(std::move(path)) {}

  absl::Status Error(std::string_view key, std::string_view problem) const {
    return absl::InvalidArgumentError(fmt::format("{}: {}: {}", where_, Path(key), problem));
  }
  // For keys that older state files lack.
  bool Has(std::string_view key) const { return j_.is_object() && j_.contains(key); }

  absl::Status Get(std::string_view key, std::string& out) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_string()) return Error(key, "must be a string");
    out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Get(std::string_view key, int64_t& out) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_number_integer()) return Error(key, "must be an integer");
    out = v->get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Get(std::string_view key, int& out) const {
    int64_t wide = 0;
    RETURN_IF_ERROR(Get(key, wide));
    if (wide < INT32_MIN || wide > INT32_MAX) return Error(key, "out of range");
    out = static_cast<int>(wide);
    return absl::OkStatus();
  }
  absl::Status Get(std::string_view key, bool& out) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_boolean()) return Error(key, "must be true or false");
    out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status Get(std::string_view key, std::vector<std::string>& out) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_array()) return Error(key, "must be a list");
    out.clear();
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return Error(fmt::format("{}[{}]", key, i), "must be a string");
      out.push_back((*v)[i].get<std::string>());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<JsonIn> Object(std::string_view key) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_object()) return Error(key, "must be an object");
    return JsonIn(*v, where_, Path(key));
  }
  absl::StatusOr<std::vector<JsonIn>> List(std::string_view key) const {
    ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_array()) return Error(key, "must be a list");
    std::vector<JsonIn> out;
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string element = fmt::format("{}[{}]", key, i);
      if (!(*v)[i].is_object()) return Error(element, "must be an object");
      out.emplace_back((*v)[i], where_, Path(element));
    }
    return out;
  }
  bool IsNull(std::string_view key) const {
    auto it = j_.find(std::string(key));
    return it == j_.end() || it->is_null();
  }

 private:
  std::string Path(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }
  absl::StatusOr<const json*> Find(std::string_view key) const {
    auto it = j_.find(std::string(key));
    if (it == j_.end()) return Error(key, "missing");
    return &*it;
  }

  const json& j_;
  std::string where_;
  std::string path_;
};

json EndToJson(const LinkEnd& end) {
  return {{"node", end.node}, {"ifname", end.ifname}, {"address", end.address}};
}

absl::StatusOr<LinkEnd> EndFromJson(const JsonIn& in, size_t num_nodes) {
  LinkEnd end;
  RETURN_IF_ERROR(in.Get("node", end.node));
  if (end.node < 0 || static_cast<size_t>(end.node) >= num_nodes) {
    return in.Error("node", fmt::format("{} is not a node index", end.node));
  }
  RETURN_IF_ERROR(in.Get("ifname", end.ifname));
  RETURN_IF_ERROR(in.Get("address", end.address));
  return end;
}

absl::StatusOr<LabLayout> LayoutFromJson(const JsonIn& in) {
  LabLayout layout;
  RETURN_IF_ERROR(in.Get("name", layout.name));
  RETURN_IF_ERROR(in.Get("ctl_netns", layout.ctl_netns));
  RETURN_IF_ERROR(in.Get("controller_ip", layout.controller_ip));
  RETURN_IF_ERROR(in.Get("controller_port", layout.controller_port));
  if (in.Has("controller_replicas")) {
    RETURN_IF_ERROR(in.Get("controller_replicas", layout.controller_replicas));
  }
  ASSIGN_OR_RETURN(const std::vector<JsonIn> nodes, in.List("nodes"));
  for (const JsonIn& n : nodes) {
    NodeLayout node;
    RETURN_IF_ERROR(n.Get("id", node.id));
    RETURN_IF_ERROR(n.Get("name", node.name));
    RETURN_IF_ERROR(n.Get("netns", node.netns));
    RETURN_IF_ERROR(n.Get("mgmt_ifname", node.mgmt_ifname));
    RETURN_IF_ERROR(n.Get("mgmt_address", node.mgmt_address));
    RETURN_IF_ERROR(n.Get("ctl_ifname", node.ctl_ifname));
    RETURN_IF_ERROR(n.Get("ctl_address", node.ctl_address));
    layout.nodes.push_back(std::move(node));
  }
  ASSIGN_OR_RETURN(const std::vector<JsonIn> links, in.List("links"));
  for (size_t i = 0; i < links.size(); ++i) {
    const JsonIn& l = links[i];
    LinkLayout link;
    link.index = static_cast<int>(i);
    ASSIGN_OR_RETURN(const JsonIn a, l.Object("a"));
    ASSIGN_OR_RETURN(link.a, EndFromJson(a, layout.nodes.size()));
    ASSIGN_OR_RETURN(const JsonIn b, l.Object("b"));
    ASSIGN_OR_RETURN(link.b, EndFromJson(b, layout.nodes.size()));
    RETURN_IF_ERROR(l.Get("prefix_length", link.prefix_length));
    if (!l.IsNull("rate_bps")) {
      int64_t bps = 0;
      RETURN_IF_ERROR(l.Get("rate_bps", bps));
      if (bps <= 0) return l.Error("rate_bps", "must be > 0 or null");
      link.rate = DataRate::BitsPerSecond(bps);
    }
    RETURN_IF_ERROR(l.Get("up", link.up));
    layout.links.push_back(std::move(link));
  }
  return layout;
}

}  // namespace

std::string StatePath(const std::string& dir) { return dir + "/state.json"; }

std::string PhaseName(LabPhase phase) {
  switch (phase) {
    case LabPhase::kCreating:
      return "creating";
    case LabPhase::kUp:
      return "up";
    case LabPhase::kDown:
      return "down";
  }
  return "?";
}

std::string SerializeLabState(const LabState& state) {
  json layout = {{"name", state.layout.name},
                 {"ctl_netns", state.layout.ctl_netns},
                 {"controller_ip", state.layout.controller_ip},
                 {"controller_port", state.layout.controller_port},
                 {"controller_replicas", state.layout.controller_replicas},
                 {"nodes", json::array()},
                 {"links", json::array()}};
  for (const NodeLayout& n : state.layout.nodes) {
    layout["nodes"].push_back({{"id", n.id},
                               {"name", n.name},
                               {"netns", n.netns},
                               {"mgmt_ifname", n.mgmt_ifname},
                               {"mgmt_address", n.mgmt_address},
                               {"ctl_ifname", n.ctl_ifname},
                               {"ctl_address", n.ctl_address}});
  }
  for (const LinkLayout& l : state.layout.links) {
    layout["links"].push_back({{"a", EndToJson(l.a)},
                               {"b", EndToJson(l.b)},
                               {"prefix_length", l.prefix_length},
                               {"rate_bps", l.rate ? json(l.rate->bps()) : json(nullptr)},
                               {"up", l.up}});
  }
  json out = {{"version", kStateVersion},
              {"phase", PhaseName(state.phase)},
              {"file", state.file},
              {"layout", std::move(layout)},
              {"namespaces", state.namespaces},
              {"interfaces", json::array()},
              {"processes", json::array()}};
  for (const InterfaceRecord& i : state.interfaces) {
    out["interfaces"].push_back({{"netns", i.netns}, {"name", i.name}});
  }
  for (const ProcessRecord& p : state.processes) {
    out["processes"].push_back({{"role", p.role},
                                {"node", p.node},
                                {"netns", p.netns},
                                {"pid", p.id.pid},
                                {"start_time", p.id.start_time},
                                {"log", p.log},
                                {"argv", p.argv}});
  }
  return out.dump(2) + "\n";
}

absl::StatusOr<LabState> ParseLabState(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(fmt::format("{}: not an object", where));
  const JsonIn in(j, where, "");
  int version = 0;
  RETURN_IF_ERROR(in.Get("version", version));
  if (version != kStateVersion) {
    return in.Error("version", fmt::format("{} is not supported (this dar-lab writes {})", version,
                                           kStateVersion));
  }
  LabState state;
  std::string phase;
  RETURN_IF_ERROR(in.Get("phase", phase));
  if (phase == "creating") {
    state.phase = LabPhase::kCreating;
  } else if (phase == "up") {
    state.phase = LabPhase::kUp;
  } else if (phase == "down") {
    state.phase = LabPhase::kDown;
  } else {
    return in.Error("phase", fmt::format("'{}' is not creating, up or down", phase));
  }
  RETURN_IF_ERROR(in.Get("file", state.file));
  ASSIGN_OR_RETURN(const JsonIn layout, in.Object("layout"));
  ASSIGN_OR_RETURN(state.layout, LayoutFromJson(layout));
  RETURN_IF_ERROR(in.Get("namespaces", state.namespaces));
  ASSIGN_OR_RETURN(const std::vector<JsonIn> interfaces, in.List("interfaces"));
  for (const JsonIn& i : interfaces) {
    InterfaceRecord record;
    RETURN_IF_ERROR(i.Get("netns", record.netns));
    RETURN_IF_ERROR(i.Get("name", record.name));
    state.interfaces.push_back(std::move(record));
  }
  ASSIGN_OR_RETURN(const std::vector<JsonIn> processes, in.List("processes"));
  for (const JsonIn& p : processes) {
    ProcessRecord record;
    RETURN_IF_ERROR(p.Get("role", record.role));
    RETURN_IF_ERROR(p.Get("node", record.node));
    RETURN_IF_ERROR(p.Get("netns", record.netns));
    int64_t pid = 0;
    RETURN_IF_ERROR(p.Get("pid", pid));
    if (pid <= 0 || pid > INT32_MAX) return p.Error("pid", fmt::format("{} is not a pid", pid));
    record.id.pid = static_cast<pid_t>(pid);
    int64_t start_time = 0;
    RETURN_IF_ERROR(p.Get("start_time", start_time));
    if (start_time < 0) return p.Error("start_time", "must be >= 0");
    record.id.start_time = static_cast<uint64_t>(start_time);
    RETURN_IF_ERROR(p.Get("log", record.log));
    RETURN_IF_ERROR(p.Get("argv", record.argv));
    state.processes.push_back(std::move(record));
  }
  return state;
}

absl::Status SaveLabState(const LabState& state, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << SerializeLabState(state);
    out.flush();
    if (!out) return absl::InternalError(fmt::format("{}: cannot write", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(fmt::format("{}: cannot replace with {}", path, tmp));
  }
  return absl::OkStatus();
}

absl::StatusOr<LabState> LoadLabState(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseLabState(text, path);
}

}  // namespace dar::lab
