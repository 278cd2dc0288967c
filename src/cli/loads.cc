#include "cli/loads.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dar_fluid.h"
#include "core/fluid.h"
#include "core/registry.h"
#include "core/routing.h"
#include "core/status_macros.h"
#include "core/topology_json.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace dar::cli {
namespace {

constexpr const char* kDemands[] = {"uniform"};

absl::StatusOr<std::vector<Demand>> MakeDemand(const std::string& name, const Topology& topo) {
  if (name == "uniform") return UniformDemand(topo);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown demand '", name, "' (known: ", absl::StrJoin(kDemands, ", "), ")"));
}

}  // namespace

absl::Status RunLoads(const LoadsOptions& options, std::ostream& out) {
  const TablePolicy* policy = Registry<TablePolicy>::Find(options.policy);
  const bool dar = options.policy == "dar";
  if (policy == nullptr && !dar) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown policy '", options.policy, "' (known: dar, ",
                     absl::StrJoin(Registry<TablePolicy>::Names(), ", "), ")"));
  }
  if (!(options.capacity_gbps > 0) || !(options.unit_gbps > 0)) {
    return absl::InvalidArgumentError("--capacity-gbps and --unit-gbps must be positive");
  }
  JsonImportOptions import;
  import.capacity = DataRate::Gbps(options.capacity_gbps);
  ASSIGN_OR_RETURN(const Topology topo, LoadNodeLinkJson(options.topology, import));
  ASSIGN_OR_RETURN(const std::vector<Demand> demand, MakeDemand(options.demand, topo));
  RoutingTables tables;
  int cycles = 0;
  if (dar) {
    // DAR's tables are what its control loop settles on for this demand.
    ASSIGN_OR_RETURN(DarFluidResult settled,
                     SettleDarTables(topo, demand, options.unit_gbps * 1e9));
    tables = std::move(settled.tables);
    cycles = settled.cycles;
  } else {
    ASSIGN_OR_RETURN(tables, (*policy)(topo));
  }
  ASSIGN_OR_RETURN(const std::vector<double> loads, ComputeLinkLoads(topo, tables, demand));

  std::vector<double> bps(loads.size());
  std::transform(loads.begin(), loads.end(), bps.begin(),
                 [&](double load) { return load * options.unit_gbps * 1e9; });
  const double max_load = loads.empty() ? 0 : *std::max_element(loads.begin(), loads.end());
  const double max_utilization = MaxUtilization(topo, bps);

  if (options.json) {
    nlohmann::ordered_json doc;
    doc["policy"] = options.policy;
    doc["links"] = nlohmann::ordered_json::array();
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      doc["links"].push_back({{"src", topo.node(topo.link(l).src).name},
                              {"dst", topo.node(topo.link(l).dst).name},
                              {"load", loads[l]}});
    }
    doc["max_link_load"] = max_load;
    doc["max_utilization"] = max_utilization;
    if (dar) {
      doc["control_cycles"] = cycles;
      doc["settled"] = cycles < DarFluidConfig().max_cycles;
    }
    out << doc.dump(2) << "\n";
    return absl::OkStatus();
  }
  out << fmt::format("{} ({}), policy {}, demand {}\n", options.topology, topo.Summary(),
                     options.policy, options.demand);
  out << fmt::format("{:>12} {:>12} {:>12} {:>12}\n", "src", "dst", "load", "utilization");
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const Link& link = topo.link(l);
    out << fmt::format("{:>12} {:>12} {:>12.4f} {:>12.4f}\n", topo.node(link.src).name,
                       topo.node(link.dst).name, loads[l],
                       bps[l] / static_cast<double>(link.params.capacity.bps()));
  }
  out << fmt::format("max link load {:.4f}, max utilization {:.4f}\n", max_load, max_utilization);
  return absl::OkStatus();
}

void AddLoadsCommand(CLI::App& app) {
  auto options = std::make_shared<LoadsOptions>();
  CLI::App* cmd = app.add_subcommand("loads", "Fluid link loads of a topology under a policy");
  cmd->add_option("--topology", options->topology, "Node-link JSON topology file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--demand", options->demand, "Traffic matrix: uniform")->capture_default_str();
  cmd->add_option(
         "--policy", options->policy,
         absl::StrCat("Routing policy: ", absl::StrJoin(Registry<TablePolicy>::Names(), "|")))
      ->capture_default_str();
  cmd->add_option("--capacity-gbps", options->capacity_gbps, "Capacity of every link")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--unit-gbps", options->unit_gbps, "Rate of one demand unit")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print JSON instead of a table");
  cmd->callback([options] {
    const absl::Status status = RunLoads(*options, std::cout);
    if (!status.ok()) {
      std::cerr << "dar-sim loads: " << status.message() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace dar::cli
