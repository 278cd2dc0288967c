#include "core/topology_json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "core/config_reader.h"
#include "core/registry.h"
#include "core/topology_config.h"
#include "core/topology_gen.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace dar {
namespace {

using Json = nlohmann::json;

// A node id or edge endpoint as a string: strings as they are, integers in decimal.
bool IdToString(const Json& id, std::string& out) {
  if (id.is_string()) {
    out = id.get<std::string>();
  } else if (id.is_number_unsigned()) {
    out = std::to_string(id.get<uint64_t>());
  } else if (id.is_number_integer()) {
    out = std::to_string(id.get<int64_t>());
  } else if (id.is_number_float()) {
    out = id.dump();
  } else {
    return false;
  }
  return true;
}

class Importer {
 public:
  Importer(const std::string& name, const JsonImportOptions& options)
      : name_(name), options_(options) {}

  absl::StatusOr<Topology> Import(const Json& doc) {
    if (!doc.is_object()) return Error("", "top level must be an object");
    bool directed = false;
    if (doc.contains("directed")) {
      if (!doc["directed"].is_boolean()) return Error("directed", "must be true or false");
      directed = doc["directed"].get<bool>();
    }
    RETURN_IF_ERROR(ImportNodes(doc));
    const char* key = doc.contains("edges") ? "edges" : "links";
    if (!doc.contains(key)) return std::move(topo_);
    const Json& edges = doc[key];
    if (!edges.is_array()) return Error(key, "must be an array");
    for (size_t i = 0; i < edges.size(); ++i) {
      RETURN_IF_ERROR(ImportEdge(edges[i], absl::StrCat(key, "[", i, "]"), directed));
    }
    return std::move(topo_);
  }

 private:
  absl::Status Error(const std::string& where, const std::string& message) const {
    if (where.empty()) return absl::InvalidArgumentError(absl::StrCat(name_, ": ", message));
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", where, ": ", message));
  }

  absl::Status ImportNodes(const Json& doc) {
    if (!doc.contains("nodes")) return Error("", "no \"nodes\" array");
    const Json& nodes = doc["nodes"];
    if (!nodes.is_array()) return Error("nodes", "must be an array");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string where = absl::StrCat("nodes[", i, "]");
      const Json& node = nodes[i];
      if (!node.is_object()) return Error(where, "must be an object");
      if (!node.contains("id")) return Error(where, "has no \"id\"");
      std::string id;
      if (!IdToString(node["id"], id)) {
        return Error(where,
                     absl::StrCat("id must be a string or a number, got ", node["id"].dump()));
      }
      if (ids_.contains(id)) return Error(where, absl::StrCat("duplicate id '", id, "'"));
      const NodeId n = topo_.AddNode(id, NodeKind::kSwitch);
      ids_.emplace(id, n);
      if (node.contains("name")) {
        if (!node["name"].is_string()) return Error(where, "name must be a string");
        topo_.mutable_node(n).label = node["name"].get<std::string>();
      }
      if (node.contains("pos")) {
        const Json& pos = node["pos"];
        if (!pos.is_array() || pos.size() != 2 || !pos[0].is_number() || !pos[1].is_number()) {
          return Error(where, absl::StrCat("pos must be [longitude, latitude], got ", pos.dump()));
        }
        topo_.mutable_node(n).position = {pos[0].get<double>(), pos[1].get<double>()};
      }
      if (node.contains("weight")) {
        const Json& weight = node["weight"];
        if (!weight.is_number() || !std::isfinite(weight.get<double>()) ||
            weight.get<double>() < 0) {
          return Error(where,
                       absl::StrCat("weight must be a non-negative number, got ", weight.dump()));
        }
        topo_.mutable_node(n).weight = weight.get<double>();
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<NodeId> Endpoint(const Json& edge, const std::string& where, const char* key) {
    if (!edge.contains(key)) return Error(where, absl::StrCat("has no \"", key, "\""));
    std::string id;
    if (!IdToString(edge[key], id)) {
      return Error(where,
                   absl::StrCat(key, " must be a string or a number, got ", edge[key].dump()));
    }
    auto it = ids_.find(id);
    if (it == ids_.end()) return Error(where, absl::StrCat(key, " '", id, "' is not a node"));
    return it->second;
  }

  absl::Status ImportEdge(const Json& edge, const std::string& where, bool directed) {
    if (!edge.is_object()) return Error(where, "must be an object");
    ASSIGN_OR_RETURN(const NodeId src, Endpoint(edge, where, "source"));
    ASSIGN_OR_RETURN(const NodeId dst, Endpoint(edge, where, "target"));
    if (src == dst) return Error(where, absl::StrCat("self loop at '", topo_.node(src).name, "'"));

    LinkParams params;
    params.capacity = options_.capacity;
    params.queue_bytes = options_.queue_bytes;
    params.delay = options_.default_delay;
    const auto& src_pos = topo_.node(src).position;
    const auto& dst_pos = topo_.node(dst).position;
    if (edge.contains("dist")) {
      const Json& dist = edge["dist"];
      if (!dist.is_number() || !std::isfinite(dist.get<double>()) || dist.get<double>() < 0) {
        return Error(where,
                     absl::StrCat("dist must be a non-negative number of km, got ", dist.dump()));
      }
      params.delay = SecondsF(dist.get<double>() / kFibreKmPerSecond);
    } else if (src_pos && dst_pos) {
      params.delay = SecondsF(GreatCircleKm(*src_pos, *dst_pos) / kFibreKmPerSecond);
    }
    if (edge.contains("capacity")) {
      const Json& capacity = edge["capacity"];
      if (!capacity.is_number() ||
          !(capacity.get<double>() >= static_cast<double>(kMinLinkCapacity.bps()) &&
            capacity.get<double>() <= static_cast<double>(kMaxLinkCapacity.bps()))) {
        return Error(
            where,
            absl::StrCat("capacity must be a number of bits per second from 1e3 to 1e15, got ",
                         capacity.dump()));
      }
      params.capacity = DataRate::BitsPerSecond(static_cast<int64_t>(capacity.get<double>()));
    }
    if (directed) {
      topo_.AddLink(src, dst, params);
    } else {
      topo_.AddDuplexLink(src, dst, params);
    }
    return absl::OkStatus();
  }

  const std::string& name_;
  const JsonImportOptions& options_;
  Topology topo_;
  std::unordered_map<std::string, NodeId> ids_;
};

// The `node_link_json` topology type: a WAN file, optionally with hosts on every router.
absl::StatusOr<Topology> BuildNodeLinkJson(YamlReader& config, const std::string& base_dir) {
  ASSIGN_OR_RETURN(const std::string file, config.Required<std::string>("file"));
  JsonImportOptions options;
  ASSIGN_OR_RETURN(const double gbps,
                   config.Optional<double>("capacity_gbps", options.capacity.gbps(),
                                           Bounds::InRange(kMinLinkGbps, kMaxLinkGbps)));
  options.capacity = DataRate::Gbps(gbps);
  ASSIGN_OR_RETURN(options.queue_bytes, config.OptionalSize("queue", options.queue_bytes,
                                                            Bounds::Positive(), kMaxQueueBytes));
  ASSIGN_OR_RETURN(
      options.default_delay,
      config.OptionalDuration("default_delay", options.default_delay, Bounds::Positive()));
  ASSIGN_OR_RETURN(
      const int hosts_per_node,
      config.Optional<int>("hosts_per_node", 0,
                           Bounds::InRange(0, static_cast<double>(kMaxGeneratedNodes))));
  ASSIGN_OR_RETURN(const LinkParams host_link, ReadLinkParams(config, "host_link", LinkParams()));

  std::filesystem::path path(file);
  if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
  ASSIGN_OR_RETURN(Topology topo, LoadNodeLinkJson(path.string(), options));
  if (static_cast<int64_t>(topo.num_nodes()) * (1 + hosts_per_node) > kMaxGeneratedNodes) {
    return config.Error("hosts_per_node",
                        fmt::format("{} hosts on each of {} nodes are too many: at most {} nodes",
                                    hosts_per_node, topo.num_nodes(), kMaxGeneratedNodes));
  }
  AttachHosts(topo, hosts_per_node, host_link);
  return topo;
}

const Registration<TopologyFactory> kNodeLinkJson("node_link_json", &BuildNodeLinkJson);

}  // namespace

double GreatCircleKm(std::pair<double, double> a, std::pair<double, double> b) {
  constexpr double kEarthRadiusKm = 6371.0;
  constexpr double kRad = M_PI / 180.0;
  const double lat1 = a.second * kRad;
  const double lat2 = b.second * kRad;
  const double dlat = lat2 - lat1;
  const double dlon = (b.first - a.first) * kRad;
  const double h = std::sin(dlat / 2) * std::sin(dlat / 2) +
                   std::cos(lat1) * std::cos(lat2) * std::sin(dlon / 2) * std::sin(dlon / 2);
  return 2 * kEarthRadiusKm * std::asin(std::min(1.0, std::sqrt(h)));
}

absl::StatusOr<Topology> ParseNodeLinkJson(std::string_view text, const std::string& name,
                                           const JsonImportOptions& options) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON: ", e.what()));
  }
  try {
    return Importer(name, options).Import(doc);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", e.what()));
  }
}

absl::StatusOr<Topology> LoadNodeLinkJson(const std::string& path,
                                          const JsonImportOptions& options) {
  // A file that cannot be read is bad input like any other (InvalidArgument, naming it).
  absl::StatusOr<std::string> read = ReadFile(path);
  if (!read.ok()) return absl::InvalidArgumentError(read.status().message());
  const std::string text = std::move(*read);
  return ParseNodeLinkJson(text, path, options);
}

}  // namespace dar
