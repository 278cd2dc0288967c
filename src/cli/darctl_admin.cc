#include "cli/darctl_admin.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dar/v1/admin.grpc.pb.h"
#include "fmt/format.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"
#include "security/identity.h"
#include "security/tls.h"
#include "wire/proto_json.h"

namespace dar::cli {
namespace {

// Where the controller is and who we are. Defaults come from the environment, so that a lab
// (which writes them into its env file) needs no flags: DAR_CONTROLLER, DAR_TLS_DIR,
// DAR_ADMIN, DAR_SERVER_NAME.
struct Connection {
  std::string controller = "127.0.0.1:50051";
  std::string tls_dir;  // holds ca.crt and admin-<name>.crt/.key (darctl certs)
  std::string admin = "admin";
  std::string cert, key, ca;  // explicit files override tls_dir
  std::string server_name;    // the name to dial the controller by (TLS SNI)
  std::string controller_id;  // its certificate's identity; empty: the admin's domain's
  bool json = false;
  int timeout_s = 5;
  double watch_s = 0;  // > 0: run a show command again every watch_s seconds
};

[[noreturn]] void Fail(const std::string& what) {
  std::cerr << "darctl: " << what << "\n";
  throw CLI::RuntimeError(1);
}

void AddConnectionFlags(CLI::App* cmd, Connection& c) {
  cmd->add_option("--controller", c.controller,
                  "Controller admin address host:port, or its replicas' host:port,host:port,... "
                  "(the one that leads answers)")
      ->envname("DAR_CONTROLLER")
      ->capture_default_str();
  cmd->add_option("--tls-dir", c.tls_dir, "Directory with ca.crt and the admin certificate")
      ->envname("DAR_TLS_DIR");
  cmd->add_option("--admin", c.admin, "Admin name: uses admin-<NAME>.crt/.key in --tls-dir")
      ->envname("DAR_ADMIN")
      ->capture_default_str();
  cmd->add_option("--cert", c.cert, "Admin certificate (overrides --tls-dir)");
  cmd->add_option("--key", c.key, "Admin key (overrides --tls-dir)");
  cmd->add_option("--ca", c.ca, "CA bundle (overrides --tls-dir)");
  cmd->add_option("--server-name", c.server_name,
                  "Name to dial the controller by, for TLS (default: the address's host)")
      ->envname("DAR_SERVER_NAME");
  cmd->add_option("--controller-id", c.controller_id,
                  "Identity the controller's certificate must carry (default: "
                  "spiffe://<the admin certificate's domain>/controller)")
      ->envname("DAR_CONTROLLER_ID");
  cmd->add_flag("-j,--json", c.json, "Print JSON (integers as numbers)");
}

// -w/--watch, for the views (show, explain) only.
void AddWatchFlag(CLI::App* cmd, Connection& c) {
  cmd->add_option("-w,--watch", c.watch_s,
                  "run again every SECONDS until interrupted (JSON: one document a line)")
      ->check(CLI::Range(0.1, 86400.0));
}

std::unique_ptr<dar::v1::AdminService::Stub> Dial(const Connection& c, const std::string& address) {
  security::ChannelTlsOptions options;
  if (!c.tls_dir.empty()) {
    // Admin files are named like every other identity's (security/certs.h).
    const security::SpiffeId id = security::SpiffeId::Admin("unused", c.admin);
    options.files.cert_file = c.tls_dir + "/" + security::CertFileName(id);
    options.files.key_file = c.tls_dir + "/" + security::KeyFileName(id);
    options.files.ca_file = c.tls_dir + "/" + std::string(security::kCaCertFile);
  }
  if (!c.cert.empty()) options.files.cert_file = c.cert;
  if (!c.key.empty()) options.files.key_file = c.key;
  if (!c.ca.empty()) options.files.ca_file = c.ca;
  if (options.files.cert_file.empty() || options.files.key_file.empty() ||
      options.files.ca_file.empty()) {
    Fail("no TLS files: give --tls-dir (or DAR_TLS_DIR), or --cert, --key and --ca");
  }
  options.server_name = c.server_name;
  // The controller is who its certificate's identity says, not whichever certificate of the
  // cluster's CA lists its host name.
  options.server_is_own_controller = true;
  if (!c.controller_id.empty()) {
    absl::StatusOr<security::SpiffeId> id = security::ParseSpiffeId(c.controller_id);
    if (id.ok() && id->kind != security::PeerKind::kController) {
      id = absl::InvalidArgumentError(
          fmt::format("the identity of {}, not of a controller", id->ToString()));
    }
    if (!id.ok()) {
      Fail(fmt::format("--controller-id {}: {}", c.controller_id,
                       std::string(id.status().message())));
    }
    options.server_identity = *std::move(id);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::CreateSecureChannel(address, options, absl::Now());
  if (!channel.ok()) Fail(std::string(channel.status().message()));
  return dar::v1::AdminService::NewStub(*channel);
}

// Runs one unary admin call with a deadline; exits with the controller's error on failure.
// With replicas (--controller a,b,c), a replica that does not lead answers FAILED_PRECONDITION
// naming the one that does (control/controller_core.h): that one is asked next, else the next
// in the list; one that cannot be reached is skipped too.
template <typename Request, typename Response, typename Method>
Response Call(const Connection& c, Method method, const Request& request) {
  std::vector<std::string> addresses = absl::StrSplit(c.controller, ',', absl::SkipWhitespace());
  if (addresses.empty()) Fail("--controller: no address");
  constexpr std::string_view kHint = "the leading replica is at ";
  std::string tried;
  std::vector<bool> asked(addresses.size(), false);
  for (size_t i = 0; !asked[i];) {
    asked[i] = true;
    const std::string& address = addresses[i];
    auto stub = Dial(c, address);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(c.timeout_s));
    Response response;
    const grpc::Status status = ((*stub).*method)(&ctx, request, &response);
    if (status.ok()) return response;
    const std::string& message = status.error_message();
    const bool follower = status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                          message.find("does not lead") != std::string::npos;
    const bool away = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (addresses.size() == 1 || (!follower && !away)) {
      Fail(fmt::format("controller {}: {} ({})", address, message,
                       static_cast<int>(status.error_code())));
    }
    tried += fmt::format("\n  {}: {}", address, message);
    const size_t at = message.find(kHint);
    const auto hinted = at == std::string::npos ? addresses.end()
                                                : std::find(addresses.begin(), addresses.end(),
                                                            message.substr(at + kHint.size()));
    if (hinted != addresses.end() && !asked[hinted - addresses.begin()]) {
      i = static_cast<size_t>(hinted - addresses.begin());
    } else {
      // The next one not asked yet, round the list; none left ends the loop.
      for (size_t step = 1; step < addresses.size(); ++step) {
        if (!asked[(i + step) % addresses.size()]) {
          i = (i + step) % addresses.size();
          break;
        }
      }
    }
  }
  Fail(fmt::format("no replica of the controller leads:{}", tried));
}

// Pretty JSON, or one line per document while watching (JSON lines).
void PrintJson(const google::protobuf::Message& m, bool one_line = false) {
  std::cout << wire::ToJson(m).dump(one_line ? -1 : 2, ' ', false,
                                    nlohmann::json::error_handler_t::replace)
            << "\n";
}

std::string Age(int64_t unix_ns) {
  if (unix_ns <= 0) return "-";
  const double s = absl::ToDoubleSeconds(absl::Now() - absl::FromUnixNanos(unix_ns));
  return s < 0 ? "0s" : fmt::format("{:.1f}s", s);
}

void PrintNodes(const google::protobuf::RepeatedPtrField<dar::v1::NodeView>& nodes) {
  std::cout << fmt::format("{:<6}{:<14}{:<16}{:<11}{:>15}{:>9}{:>12}{:>11}{:>10}{:>10}\n", "id",
                           "name", "overlay", "connected", "version", "refused", "table",
                           "fallbacks", "dropped", "seen");
  for (const auto& n : nodes) {
    std::cout << fmt::format("{:<6}{:<14}{:<16}{:<11}{:>15}{:>9}{:>12}{:>11}{:>10}{:>10}\n",
                             n.node_id(), n.name(), n.overlay_address(),
                             n.connected() ? "yes" : "no", n.acked_version(), n.refused_tables(),
                             n.static_table() ? "static" : "controller", n.fallbacks(),
                             n.samples_dropped(), Age(n.last_seen_unix_ns()));
  }
}

void PrintLinks(const google::protobuf::RepeatedPtrField<dar::v1::LinkView>& links) {
  std::cout << fmt::format("{:<18}{:<6}{:>9}{:>8}{:>7}{:>7}{:>10}{:>7}{:>9}{:>9}{:>8}  {}\n",
                           "link", "state", "rtt_ms", "loss", "util", "plan", "queue_B", "share",
                           "c_lat", "c_bulk", "seen", "why");
  for (const auto& l : links) {
    const std::string state =
        l.drained() ? "drain" : (!l.up() ? "DOWN" : (l.slow() ? "slow" : "up"));
    std::cout << fmt::format(
        "{:<18}{:<6}{:>9.3f}{:>8.3f}{:>7.2f}{:>7.2f}{:>10}{:>6.0f}%{:>9.3g}{:>9.3g}{:>8}  {}\n",
        l.src_name() + "->" + l.dst_name(), state, l.rtt_ms(), l.loss(), l.utilisation(),
        l.planned_utilisation(), l.queue_bytes(), 100 * l.share_latency(), l.cost_latency(),
        l.cost_bulk(), Age(l.last_sample_unix_ns()), l.why());
  }
}

void ShowTopology(const Connection& c) {
  const auto r = Call<dar::v1::GetTopologyRequest, dar::v1::TopologyView>(
      c, &dar::v1::AdminService::Stub::GetTopology, dar::v1::GetTopologyRequest());
  if (c.json) return PrintJson(r, c.watch_s > 0);
  PrintNodes(r.nodes());
  std::cout << "\n";
  PrintLinks(r.links());
}

void ShowNodes(const Connection& c) {
  const auto r = Call<dar::v1::ListNodesRequest, dar::v1::ListNodesResponse>(
      c, &dar::v1::AdminService::Stub::ListNodes, dar::v1::ListNodesRequest());
  if (c.json) return PrintJson(r, c.watch_s > 0);
  PrintNodes(r.nodes());
}

void ShowLinks(const Connection& c) {
  const auto r = Call<dar::v1::ListLinksRequest, dar::v1::ListLinksResponse>(
      c, &dar::v1::AdminService::Stub::ListLinks, dar::v1::ListLinksRequest());
  if (c.json) return PrintJson(r, c.watch_s > 0);
  PrintLinks(r.links());
}

struct RoutesFlags {
  std::string node, destination;
  unsigned traffic_class = 0;
};

void ShowRoutes(const Connection& c, const RoutesFlags& f) {
  dar::v1::GetRoutesRequest request;
  request.set_node(f.node);
  request.set_destination(f.destination);
  request.set_traffic_class(f.traffic_class);
  const auto r = Call<dar::v1::GetRoutesRequest, dar::v1::GetRoutesResponse>(
      c, &dar::v1::AdminService::Stub::GetRoutes, request);
  if (c.json) return PrintJson(r, c.watch_s > 0);
  std::cout << fmt::format("table version {}, class {}\n", r.version(),
                           f.traffic_class == 0 ? "latency" : "bulk");
  std::cout << fmt::format("{:<12}{:<12}{:>11}  {}\n", "node", "dest", "potential", "next hops");
  for (const auto& route : r.routes()) {
    std::string hops;
    for (const auto& h : route.next_hops()) {
      hops +=
          fmt::format("{}{} {:.0f}%", hops.empty() ? "" : ", ", h.neighbour(), 100 * h.weight());
    }
    std::cout << fmt::format("{:<12}{:<12}{:>11.4g}  {}\n", route.node(), route.destination(),
                             route.potential(), hops.empty() ? "-" : hops);
  }
}

void ExplainRoute(const Connection& c, const RoutesFlags& f) {
  dar::v1::ExplainRouteRequest request;
  request.set_node(f.node);
  request.set_destination(f.destination);
  request.set_traffic_class(f.traffic_class);
  const auto r = Call<dar::v1::ExplainRouteRequest, dar::v1::RouteExplanation>(
      c, &dar::v1::AdminService::Stub::ExplainRoute, request);
  if (c.json) return PrintJson(r, c.watch_s > 0);
  std::cout << fmt::format("{} -> {}, class {}, tables v{} ({} layer)\n", r.node(), r.destination(),
                           r.traffic_class() == 0 ? "latency" : "bulk", r.version(), r.decision());
  if (r.decision() == "marginal") {
    std::cout << fmt::format(
        "demand {} -> {}: {:.3g} Mb/s; distance (marginal cost of one more "
        "unit): {:.4g}\n",
        r.node(), r.destination(), r.demand_bps() / 1e6, r.distance());
  } else {
    std::cout << fmt::format("potential: {:.4g}\n", r.distance());
  }
  std::cout << fmt::format("{:<12}{:>7}{:>11}{:>11}{:>11}  {:<22}{}\n", "next hop", "weight",
                           "link cost", "+ distance", "= path", "bottleneck (planned)", "link");
  for (const auto& h : r.next_hops()) {
    std::cout << fmt::format(
        "{:<12}{:>6.0f}%{:>11.4g}{:>11.4g}{:>11.4g}  {:<22}{}\n", h.neighbour(), 100 * h.weight(),
        h.link_cost(), h.neighbour_distance(), h.path_cost(),
        fmt::format("{} ({:.0f}%)", h.bottleneck(), 100 * h.bottleneck_utilisation()),
        h.link_why());
  }
  for (const auto& note : r.notes()) std::cout << "- " << note << "\n";
}

void ShowEvents(const Connection& c, unsigned limit) {
  dar::v1::ListEventsRequest request;
  request.set_limit(limit);
  const auto r = Call<dar::v1::ListEventsRequest, dar::v1::ListEventsResponse>(
      c, &dar::v1::AdminService::Stub::ListEvents, request);
  if (c.json) return PrintJson(r, c.watch_s > 0);
  for (const auto& e : r.events()) {
    std::cout << fmt::format("{}  {:<18}{:<10}{}\n",
                             absl::FormatTime("%H:%M:%E3S", absl::FromUnixNanos(e.time_unix_ns()),
                                              absl::LocalTimeZone()),
                             e.kind(), e.node(), e.detail());
  }
}

struct PolicyFlags {
  std::vector<std::string> set;  // key=value
};

// `m`'s fields one per line ("temperature: 0.5"), zero values too, a message's fields
// indented under its name.
void PrintFields(const google::protobuf::Message& m, int indent) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;  // none in the policy views
    std::string value;
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE:
        std::cout << fmt::format("{:{}}{}:\n", "", indent, f->name());
        PrintFields(r->GetMessage(m, f), indent + 2);
        continue;
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        value = r->GetString(m, f);
        break;
      default:
        google::protobuf::TextFormat::PrintFieldValueToString(m, f, -1, &value);
    }
    std::cout << fmt::format("{:{}}{}: {}\n", "", indent, f->name(), value);
  }
}

// The settings as text, or with -j as JSON.
void PrintPolicy(const Connection& c, const dar::v1::PolicySettings& p) {
  if (c.json) return PrintJson(p, c.watch_s > 0);
  PrintFields(p, 0);
}

void Policy(const Connection& c, const PolicyFlags& f) {
  if (f.set.empty()) {
    const auto r = Call<dar::v1::GetPolicyRequest, dar::v1::PolicySettings>(
        c, &dar::v1::AdminService::Stub::GetPolicy, dar::v1::GetPolicyRequest());
    return PrintPolicy(c, r);
  }
  auto current = Call<dar::v1::GetPolicyRequest, dar::v1::PolicySettings>(
      c, &dar::v1::AdminService::Stub::GetPolicy, dar::v1::GetPolicyRequest());
  // Changes are applied to the current settings by field name, as JSON would.
  dar::v1::PolicySettings next = current;
  for (const std::string& kv : f.set) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) Fail(fmt::format("policy set: '{}' is not KEY=VALUE", kv));
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    // `learned` (the model's state) is shown, not set: a reload changes the model.
    const auto settable = [](const google::protobuf::FieldDescriptor* f) {
      return f != nullptr && f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE;
    };
    const auto* field = next.GetDescriptor()->FindFieldByName(key);
    if (!settable(field)) {
      std::string known;
      for (int i = 0; i < next.GetDescriptor()->field_count(); ++i) {
        if (!settable(next.GetDescriptor()->field(i))) continue;
        known += (known.empty() ? "" : ", ") + next.GetDescriptor()->field(i)->name();
      }
      Fail(fmt::format("policy set: unknown setting '{}' (known: {})", key, known));
    }
    const auto* refl = next.GetReflection();
    try {
      switch (field->cpp_type()) {
        case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
          refl->SetDouble(&next, field, std::stod(value));
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
          refl->SetUInt32(&next, field, static_cast<uint32_t>(std::stoul(value)));
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
          refl->SetString(&next, field, value);
          break;
        default:
          Fail(fmt::format("policy set: cannot set '{}'", key));
      }
    } catch (const std::logic_error&) {
      Fail(fmt::format("policy set: '{}' is not a valid value for {}", value, key));
    }
  }
  const auto r = Call<dar::v1::PolicySettings, dar::v1::PolicySettings>(
      c, &dar::v1::AdminService::Stub::SetPolicy, next);
  PrintPolicy(c, r);
}

void Drain(const Connection& c, const std::string& a, const std::string& b, bool drain) {
  dar::v1::DrainLinkRequest request;
  request.set_a(a);
  request.set_b(b);
  request.set_drain(drain);
  const auto r = Call<dar::v1::DrainLinkRequest, dar::v1::DrainLinkResponse>(
      c, &dar::v1::AdminService::Stub::DrainLink, request);
  if (c.json) return PrintJson(r, c.watch_s > 0);
  std::cout << fmt::format("link {}-{} {}{}\n", a, b, drain ? "drained" : "undrained",
                           r.changed() ? "" : " (no change)");
}

void Keys(const Connection& c, bool rotate) {
  const auto r =
      rotate ? Call<dar::v1::RotateKeysRequest, dar::v1::KeyRingView>(
                   c, &dar::v1::AdminService::Stub::RotateKeys, dar::v1::RotateKeysRequest())
             : Call<dar::v1::GetKeysRequest, dar::v1::KeyRingView>(
                   c, &dar::v1::AdminService::Stub::GetKeys, dar::v1::GetKeysRequest());
  if (c.json) return PrintJson(r, c.watch_s > 0);
  if (rotate) {
    std::cout << (r.rotation_started() ? "rotation started: the new key is announced now and "
                                         "seals after one rollout period\n"
                                       : "a rotation is already under way\n");
  }
  std::string ids;
  for (const auto& k : r.keys()) {
    ids += fmt::format("{}{}{}", ids.empty() ? "" : ", ", k.key_id(), k.active() ? " (seals)" : "");
  }
  std::cout << fmt::format("keys: {}\nphase: {} for {}\n", ids, r.phase(),
                           Age(r.phase_since_unix_ns()));
}

// Runs `show` once, or with --watch again every watch_s seconds until interrupted: on a
// terminal the screen is cleared first and a header says when; a failed call is reported and
// tried again at the next turn.
std::function<void()> Watched(const std::shared_ptr<Connection>& c, std::function<void()> show) {
  return [c, show = std::move(show)] {
    if (c->watch_s <= 0) return show();
    const bool screen = isatty(STDOUT_FILENO) != 0 && !c->json;
    for (;;) {
      if (screen) {
        std::cout << "\033[H\033[2J"
                  << fmt::format("every {}s, {}\n\n", c->watch_s,
                                 absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()));
      }
      try {
        show();
      } catch (const CLI::RuntimeError&) {
        // Fail() said what; the controller may be back at the next turn.
      }
      std::cout << std::flush;
      std::this_thread::sleep_for(std::chrono::duration<double>(c->watch_s));
    }
  };
}

}  // namespace

void AddAdminCommands(CLI::App& app) {
  auto conn = std::make_shared<Connection>();
  // The connection flags belong to darctl itself, and may come anywhere on the line (`darctl -j
  // show links`, `darctl show links -j`): every admin command falls through to it.
  AddConnectionFlags(&app, *conn);

  CLI::App* show = app.add_subcommand("show", "Show the controller's view");
  show->require_subcommand(1);
  AddWatchFlag(show, *conn);
  show->add_subcommand("topology", "Nodes and links")->callback(Watched(conn, [conn] {
    ShowTopology(*conn);
  }));
  show->add_subcommand("nodes", "Agents: connected, table versions")
      ->callback(Watched(conn, [conn] { ShowNodes(*conn); }));
  show->add_subcommand("links", "Links: state, measurements, plan, share, costs, and why")
      ->callback(Watched(conn, [conn] { ShowLinks(*conn); }));
  const auto add_class = [](CLI::App* cmd, unsigned& cls) {
    cmd->add_option("--class", cls, "latency (or 0), bulk (or 1); default latency")
        ->transform(CLI::CheckedTransformer(std::map<std::string, int>{{"latency", 0}, {"bulk", 1}},
                                            CLI::ignore_case));
  };
  auto routes = std::make_shared<RoutesFlags>();
  CLI::App* routes_cmd = show->add_subcommand("routes", "Next hops per node and destination");
  routes_cmd->add_option("--node", routes->node, "Only this node (name or id)");
  routes_cmd->add_option("--dest", routes->destination, "Only this destination (name or id)");
  add_class(routes_cmd, routes->traffic_class);
  routes_cmd->callback(Watched(conn, [conn, routes] { ShowRoutes(*conn, *routes); }));
  auto limit = std::make_shared<unsigned>(50);
  CLI::App* events = show->add_subcommand("events", "Failures, fallbacks, refusals, newest first");
  events->add_option("--limit", *limit, "How many (0 = all kept)")->capture_default_str();
  events->callback(Watched(conn, [conn, limit] { ShowEvents(*conn, *limit); }));

  CLI::App* explain = app.add_subcommand("explain", "Say why the controller decided as it did");
  explain->require_subcommand(1);
  AddWatchFlag(explain, *conn);
  auto why = std::make_shared<RoutesFlags>();
  CLI::App* why_route = explain->add_subcommand(
      "route",
      "Why NODE splits its traffic toward DEST as it does: each next hop's path cost, "
      "its bottleneck, and what its link's cost comes from");
  why_route->add_option("node", why->node, "The node (name or id)")->required();
  why_route->add_option("dest", why->destination, "The destination (name or id)")->required();
  add_class(why_route, why->traffic_class);
  why_route->callback(Watched(conn, [conn, why] { ExplainRoute(*conn, *why); }));

  auto policy = std::make_shared<PolicyFlags>();
  CLI::App* policy_cmd = app.add_subcommand(
      "policy", "Show (with the learned policy's model and state) or change the routing policy");
  policy_cmd->add_subcommand("show", "Current settings and the learned policy's state")
      ->callback([conn, policy] { Policy(*conn, PolicyFlags()); });
  CLI::App* set = policy_cmd->add_subcommand("set", "Change settings: KEY=VALUE ...");
  set->add_option("settings", policy->set, "e.g. temperature=0.3 forwarding_mode=per_flowlet")
      ->required();
  set->callback([conn, policy] { Policy(*conn, *policy); });
  policy_cmd->require_subcommand(1);

  CLI::App* link = app.add_subcommand("link", "Drain or undrain a link (both directions)");
  link->require_subcommand(1);
  auto ends = std::make_shared<std::pair<std::string, std::string>>();
  for (const bool drain : {true, false}) {
    CLI::App* cmd = link->add_subcommand(drain ? "drain" : "undrain",
                                         drain ? "Move traffic off the link" : "Use it again");
    cmd->add_option("a", ends->first, "One end (name or id)")->required();
    cmd->add_option("b", ends->second, "The other end")->required();
    cmd->callback([conn, ends, drain] { Drain(*conn, ends->first, ends->second, drain); });
  }
  CLI::App* keys = app.add_subcommand("keys", "The data-plane keys: ids and rotation phase");
  keys->require_subcommand(1);
  keys->add_subcommand("show", "Key ids, which one seals, the phase")->callback([conn] {
    Keys(*conn, false);
  });
  keys->add_subcommand("rotate", "Start a rotation (announce, then seal, then retire)")
      ->callback([conn] { Keys(*conn, true); });

  for (CLI::App* group : {show, explain, policy_cmd, link, keys}) {
    group->fallthrough();
    for (CLI::App* leaf : group->get_subcommands([](CLI::App*) { return true; })) {
      leaf->fallthrough();
    }
  }
}

}  // namespace dar::cli
