#include "cli/loads.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/demand.h"
#include "core/fluid.h"
#include "core/marginal_routing.h"
#include "core/registry.h"
#include "core/routing.h"
#include "core/te_lp.h"
#include "core/te_metrics.h"
#include "core/topology_json.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace dar::cli {
namespace {

constexpr char kDemandHelp[] =
    "Traffic matrix: uniform (one unit between every ordered pair), gravity (w(s)*w(d), w the "
    "node's \"weight\" if every node has one, else its degree; scaled to the uniform total "
    "N*(N-1)), or a JSON matrix FILE: {\"SRC\": {\"DST\": X, ...}, ...} at the top level or "
    "as graph.demands of a topohub node-link file, or [{\"src\": SRC, \"dst\": DST, "
    "\"demand\": X}, ...]; ids as in the topology file, X >= 0 in demand units";

// The demand matrix and a description of it for the table's header.
struct NamedDemand {
  std::vector<Demand> demands;
  std::string description;
};

absl::StatusOr<NamedDemand> MakeDemand(const std::string& spec, const Topology& topo) {
  const size_t n = topo.Endpoints().size();
  if (spec == "uniform") {
    return NamedDemand{UniformDemand(topo), "uniform, 1 unit per ordered pair"};
  }
  if (spec == "gravity") {
    ASSIGN_OR_RETURN(std::vector<Demand> demands, GravityDemand(topo));
    const std::vector<NodeId> endpoints = topo.Endpoints();
    const bool weights = std::all_of(endpoints.begin(), endpoints.end(),
                                     [&](NodeId v) { return topo.node(v).weight.has_value(); });
    return NamedDemand{std::move(demands),
                       fmt::format("gravity, w = node {}, total normalised to N*(N-1) = {} units",
                                   weights ? "weight" : "degree", n * (n - 1))};
  }
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown demand '", spec, "': not uniform, gravity or an existing matrix file"));
  }
  ASSIGN_OR_RETURN(std::vector<Demand> demands, LoadDemandMatrix(spec, topo));
  const std::string description = fmt::format("matrix {}, {} pairs", spec, demands.size());
  return NamedDemand{std::move(demands), description};
}

// How a policy routes the demand: the link loads and every pair's route.
struct Routing {
  std::vector<double> loads;
  std::vector<PairRoute> routes;
  std::optional<MarginalRoutingResult> dar;  // its tables moved out
  std::optional<TeLpResult> lp;
};

absl::StatusOr<Routing> Route(const LoadsOptions& options, const Topology& topo,
                              const std::vector<Demand>& demand, const TablePolicy* policy) {
  const double unit_bps = options.unit_gbps * 1e9;
  Routing routing;
  if (options.policy == "lp") {
    ASSIGN_OR_RETURN(TeLpResult lp,
                     SolveMinMaxUtilization(topo, demand, unit_bps,
                                            TeLpOptions{.minimise_delay = options.lp_delay_stage}));
    ASSIGN_OR_RETURN(routing.routes, PairRoutesFromSourceFlows(topo, demand, lp.flows));
    routing.loads = lp.loads;
    routing.lp = std::move(lp);
    return routing;
  }
  RoutingTables tables;
  if (options.policy == "dar") {
    // DAR's tables are those that minimise its objective for this demand.
    MarginalRoutingConfig config;
    config.objective.power = options.objective_power;
    config.objective.length_weight = options.objective_length_weight;
    ASSIGN_OR_RETURN(MarginalRoutingResult settled,
                     MinimiseRoutingObjective(topo, demand, unit_bps, config));
    tables = std::move(settled.tables);
    routing.dar = std::move(settled);
  } else {
    ASSIGN_OR_RETURN(tables, (*policy)(topo));
  }
  ASSIGN_OR_RETURN(routing.loads, ComputeLinkLoads(topo, tables, demand));
  ASSIGN_OR_RETURN(routing.routes, ComputePairRoutes(topo, tables, demand));
  return routing;
}

double Ms(Duration d) { return ToSeconds(d) * 1e3; }

// How far DAR's objective may be above its optimum, relative.
double RelativeGap(const MarginalRoutingResult& d) {
  return d.objective > 0 ? std::max(0.0, d.objective - d.lower_bound) / d.objective : 0;
}

}  // namespace

absl::Status RunLoads(const LoadsOptions& options, std::ostream& out) {
  const TablePolicy* policy = Registry<TablePolicy>::Find(options.policy);
  if (policy == nullptr && options.policy != "dar" && options.policy != "lp") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown policy '", options.policy, "' (known: dar, lp, ",
                     absl::StrJoin(Registry<TablePolicy>::Names(), ", "), ")"));
  }
  if (!(options.capacity_gbps > 0) || !(options.unit_gbps > 0)) {
    return absl::InvalidArgumentError("--capacity-gbps and --unit-gbps must be positive");
  }
  JsonImportOptions import;
  import.capacity = DataRate::Gbps(options.capacity_gbps);
  ASSIGN_OR_RETURN(const Topology topo, LoadNodeLinkJson(options.topology, import));
  ASSIGN_OR_RETURN(const NamedDemand demand, MakeDemand(options.demand, topo));
  ASSIGN_OR_RETURN(const Routing routing, Route(options, topo, demand.demands, policy));

  const double unit_bps = options.unit_gbps * 1e9;
  const std::vector<double>& loads = routing.loads;
  std::vector<double> bps(loads.size());
  std::transform(loads.begin(), loads.end(), bps.begin(),
                 [&](double load) { return load * unit_bps; });
  const double max_load = loads.empty() ? 0 : *std::max_element(loads.begin(), loads.end());
  const double max_utilization = MaxUtilization(topo, bps);
  const StretchReport stretch = ComputeStretch(topo, routing.routes);
  const AdmissionReport admission = MaxMinAdmission(topo, routing.routes, unit_bps);
  const auto utilization = [&](LinkId l) {
    return bps[l] / static_cast<double>(topo.link(l).params.capacity.bps());
  };

  if (options.json) {
    nlohmann::ordered_json doc;
    doc["policy"] = options.policy;
    doc["demand"] = options.demand;
    doc["demand_total"] = TotalDemand(demand.demands);
    doc["unit_gbps"] = options.unit_gbps;
    doc["links"] = nlohmann::ordered_json::array();
    for (LinkId l = 0; l < topo.num_links(); ++l) {
      doc["links"].push_back({{"src", topo.node(topo.link(l).src).name},
                              {"dst", topo.node(topo.link(l).dst).name},
                              {"load", loads[l]},
                              {"utilisation", utilization(l)}});
    }
    doc["max_link_load"] = max_load;
    doc["max_utilisation"] = max_utilization;
    doc["stretch"] = stretch.total;
    doc["admitted_fraction"] = admission.admitted_fraction;
    doc["min_pair_admitted"] = admission.min_pair_fraction;
    doc["pairs"] = nlohmann::ordered_json::array();
    for (size_t p = 0; p < routing.routes.size(); ++p) {
      const PairRoute& r = routing.routes[p];
      nlohmann::ordered_json pair = {{"src", topo.node(r.src).name},
                                     {"dst", topo.node(r.dst).name},
                                     {"demand", r.demand},
                                     {"delay_ms", Ms(stretch.path_delay[p])},
                                     {"shortest_delay_ms", Ms(stretch.shortest_delay[p])},
                                     {"stretch", nullptr},
                                     {"admitted", admission.pair_fraction[p]}};
      if (stretch.stretch[p] > 0) pair["stretch"] = stretch.stretch[p];
      if (stretch.shortest_delay[p] == Duration::max()) pair["shortest_delay_ms"] = nullptr;
      doc["pairs"].push_back(std::move(pair));
    }
    if (routing.dar) {
      const MarginalRoutingResult& d = *routing.dar;
      doc["dar"] = {{"settled", d.settled},
                    {"iterations", d.iterations},
                    {"oscillated", d.oscillated},
                    {"objective", d.objective},
                    {"lower_bound", d.lower_bound},
                    {"gap", RelativeGap(d)},
                    {"power", options.objective_power},
                    {"length_weight", options.objective_length_weight}};
    }
    if (routing.lp) {
      doc["lp"] = {{"lambda", routing.lp->lambda},
                   {"delay_stage", options.lp_delay_stage},
                   {"simplex_iterations", routing.lp->iterations}};
    }
    out << doc.dump(2) << "\n";
    return absl::OkStatus();
  }
  out << fmt::format("{} ({}), policy {}, demand {} ({:.4g} units of {} Gbps)\n", options.topology,
                     topo.Summary(), options.policy, demand.description,
                     TotalDemand(demand.demands), options.unit_gbps);
  out << fmt::format("{:>12} {:>12} {:>12} {:>12}\n", "src", "dst", "load", "utilisation");
  for (LinkId l = 0; l < topo.num_links(); ++l) {
    const Link& link = topo.link(l);
    out << fmt::format("{:>12} {:>12} {:>12.4f} {:>12.4f}\n", topo.node(link.src).name,
                       topo.node(link.dst).name, loads[l], utilization(l));
  }
  out << fmt::format("max link load {:.4f}, max utilisation {:.4f}\n", max_load, max_utilization);
  out << fmt::format("path stretch {:.4f} (demand-weighted mean over {} pairs)\n", stretch.total,
                     routing.routes.size());
  out << fmt::format(
      "admitted {:.4f} of the demand, least pair {:.4f} (max-min fair along the policy's "
      "paths)\n",
      admission.admitted_fraction, admission.min_pair_fraction);
  if (routing.dar) {
    const MarginalRoutingResult& d = *routing.dar;
    out << fmt::format(
        "dar objective {:.6g} (p {}, length weight {}), at most {:.3g}% above its optimum; {} "
        "after {} iterations{}\n",
        d.objective, options.objective_power, options.objective_length_weight, 100 * RelativeGap(d),
        d.settled ? "settled" : "stopped", d.iterations, d.oscillated ? ", oscillated" : "");
  }
  if (routing.lp) {
    out << fmt::format("lp optimum {:.6f}{}, {} simplex iterations\n", routing.lp->lambda,
                       options.lp_delay_stage ? " (then least delay within 1e-4 of it)" : "",
                       routing.lp->iterations);
  }
  return absl::OkStatus();
}

void AddLoadsCommand(CLI::App& app) {
  auto options = std::make_shared<LoadsOptions>();
  CLI::App* cmd = app.add_subcommand("loads", "Fluid link loads of a topology under a policy");
  cmd->add_option("--topology", options->topology, "Node-link JSON topology file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--demand", options->demand, kDemandHelp)->capture_default_str();
  cmd->add_option("--policy", options->policy,
                  absl::StrCat("Routing policy: lp (the TE optimum), dar, ",
                               absl::StrJoin(Registry<TablePolicy>::Names(), "|")))
      ->capture_default_str();
  cmd->add_option("--capacity-gbps", options->capacity_gbps,
                  "Capacity of every link without a \"capacity\" (bps) in the file")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--unit-gbps", options->unit_gbps, "Rate of one demand unit")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--objective-power", options->objective_power,
                  "dar: p of the utilisation term of DAR's objective (core/marginal_routing.h)")
      ->check(CLI::Range(2.0, 64.0))
      ->capture_default_str();
  cmd->add_option("--objective-length-weight", options->objective_length_weight,
                  "dar: weight of path length in DAR's objective")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto max_util_only = std::make_shared<bool>(false);
  cmd->add_flag("--lp-max-util-only", *max_util_only,
                "lp: stop at the least max utilisation (skip the least-delay second stage)");
  cmd->add_flag("--json", options->json, "Print JSON instead of a table");
  cmd->callback([options, max_util_only] {
    options->lp_delay_stage = !*max_util_only;
    const absl::Status status = RunLoads(*options, std::cout);
    if (!status.ok()) {
      std::cerr << "dar-sim loads: " << status.message() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace dar::cli
