// The controller's configuration file: where it listens, its TLS files, the nodes and links of
// the overlay, the cycle, the policy and what agents are told. Parsed and validated in one
// place; errors name the file, the line and the field ("ctl.yaml:12: links[2].b: unknown node
// 'X'").
//
//   listen: 127.0.0.1:50051          # gRPC, agents and admin (mutual TLS 1.3)
//   tls: {cert: controller.crt, key: controller.key, ca: ca.crt}   # relative to the file
//                                    # and optionally crl: ca.crl (revoked certificates)
//   trust_domain: dar.test           # optional: the controller certificate's domain
//   http: 127.0.0.1:9100             # optional: /metrics, /healthz, /readyz (plain HTTP)
//   health: 127.0.0.1:9101           # optional: /healthz and /readyz alone, apart from the
//                                    # clients of `http`
//   log: controller.jsonl            # optional: JSON lines; default stderr
//   log_level: info                  # debug | info | warn | error
//   cycle_ms: 100                    # decision cycle
//   table_stale_ms: 3000             # agents fall back to static after this without a table
//   sample_timeout_ms: 300           # a link end silent this long counts as down
//   hello_timeout_ms: 5000           # a stream without a hello this long is closed
//   max_connections: 2 x nodes + 64  # gRPC connections held at once; more are closed at once
//   forecast_horizon_s: 30
//   events_kept: 1000
//   probe: {interval_ms: 100, missed_probes: 3}
//   state_dir: state                 # optional: kept across restarts (data-plane keys, table
//                                    # versions, drains and policy)
//   initial_key: {id: 0, file: overlay.key}   # optional: the key agents start with
//   keys: {rotate_every_s: 86400, rollout_ms: 5000}   # optional; rotate_every 0: on request
//   replicas:                        # optional: one of several replicas, one of which leads
//     etcd: 127.0.0.1:2379           # (docs/high-availability.md; control/leadership.h)
//     advertise: 10.0.0.1:50051      # where agents reach this replica
//     lease_ms: 2000                 # a killed leader is replaced after about this long
//     prefix: /dar/<trust domain>/   # optional: its keys in etcd
//     etcd_tls: {ca: etcd-ca.crt, cert: etcd.crt, key: etcd.key}   # optional; none: plaintext
//   stub_hosts: false                # true: a node on a single link is reached through its
//                                    # neighbour, and decided with it (ControllerConfig)
//   nodes:
//     - {id: 1, name: A, overlay: 10.77.0.1}    # id > 0: the certificate's node/<id>
//   links:
//     - {a: A, b: B, capacity_mbps: 100}        # capacity_bps | _mbps | _gbps; delay_us opt.
//   policy:
//     temperature: 0.5                 # soft-min temperature (core/diffusion.h)
//     hysteresis: 0.3
//     min_weight: 0.001
//     min_cost_change: 0.05
//     full_every: 50
//     cycle_threads: 2                 # 1..64: the cycle's parts (each class's engines,
//                                      # policy features, refined tables) on a pool of this
//                                      # many threads (2, the default), or all on one
//     forwarding_mode: per_flowlet     # per_flow | per_flowlet | per_packet | per_packet_p2c
//     reference_delay_ms: 1            # cost scale of delay (_us/_ms/_s)
//     latency_weights: {hop: 1, latency: 0.3, loss: 1, utilisation: 0.3, capacity: 0}
//     bulk_weights: {hop: 1, latency: 0, loss: 1, utilisation: 0.5, capacity: 1}
//     policy_model: dar-policy.json    # optional: the learned policy's model, relative to
//                                      # the file; absent: the analytic engine alone
//     policy_precision: int8           # int8 | float: how the model runs
//     decision: diffusion              # marginal (the default without a policy_model: DAR's
//                                      # objective for the demand the agents report,
//                                      # core/marginal_decision.h) | diffusion (the default
//                                      # with one; marginal beside a model is refused)
//     publish_gain: 0.02               # marginal: the utilisation norm new tables must gain
//     max_link_scans: 500000           # marginal: a cycle's work at most
//     policy_refresh_cycles: 4         # 1..1000: the model weighs each destination at least
//                                      # every this many cycles, and at once where its next
//                                      # hops change (RouteComputerConfig)
//
// The model file is not read here (a refused model must not stop a controller from starting):
// LoadLearnedPolicy reads it, at start, on reload and for --check-config.
//
// Every node is a router and an application endpoint: each is a destination of the tables.
// A link without `delay_us` takes half the smallest RTT its agents measure as its base delay.
#ifndef DAR_CONTROL_CONTROLLER_CONFIG_H_
#define DAR_CONTROL_CONTROLLER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine_settings.h"
#include "core/marginal_decision.h"
#include "core/next_hop_chooser.h"
#include "core/route_computer.h"
#include "core/topology.h"
#include "core/units.h"
#include "learn/policy_model.h"
#include "security/tls.h"

namespace dar::control {

struct ControllerNodeConfig {
  uint32_t id = 0;  // > 0; the agent's certificate says spiffe://<domain>/node/<id>
  std::string name;
  std::string overlay_address;  // IPv4 dotted quad
};

struct ControllerLinkConfig {
  std::string a;  // node names
  std::string b;
  DataRate capacity;              // > 0, both directions
  std::optional<Duration> delay;  // one-way base delay; none: measured
};

// The tunable part: what SetPolicy may change at run time.
struct ControllerPolicy {
  RouteComputerConfig routes;  // with the controller's defaults (see ParseControllerConfig)
  // The threads of the pool a cycle's parts run on (EngineSettings::cycle_threads): the
  // classes side by side by default, since a controller has the cores and a cycle with the
  // learned policy on a large fabric needs them (docs/learned-policy.md).
  int cycle_threads = 2;
  // The decision layer (core/engine_settings.h): true (decision: marginal, the default),
  // DAR's objective minimised for the demand the agents report (core/marginal_decision.h;
  // its period is the cycle); false (decision: diffusion, and always with a policy_model),
  // the route computer's diffusion engine.
  bool marginal = true;
  MarginalDecisionConfig marginal_config;
  ForwardingMode forwarding_mode = ForwardingMode::kPerFlowlet;
  Duration cycle = Milliseconds(100);
  // The learned policy's model file (learn/policy_model.h), resolved against the
  // configuration file's directory; empty (the default): the analytic engine alone.
  std::string policy_model;
  learn::LearnedPolicy::Precision policy_precision = learn::LearnedPolicy::Precision::kInt8;
};

// The default of max_connections for an overlay of `nodes` nodes: two for each node's agent
// (one reconnecting while the old one closes) and 64 for operators and tools.
inline int DefaultMaxConnections(int nodes) { return 2 * nodes + 64; }

struct ControllerConfig {
  std::string file;  // where it was read from; "" if built in code
  std::string listen = "127.0.0.1:50051";
  security::TlsFiles tls;
  // The CA's revocation list (security/revocation.h), read at start and on SIGHUP; empty: none.
  std::string crl_file;
  std::string trust_domain;  // empty: the controller certificate's
  std::string http;          // empty: no HTTP server
  std::string health;        // /healthz and /readyz alone, on a listener of their own; empty: none
  std::string log_file;      // empty: stderr
  std::string log_level = "info";
  Duration table_stale = Seconds(3);
  Duration sample_timeout = Milliseconds(300);
  // A stream that has not sent its hello this long after it opened is closed.
  Duration hello_timeout = Seconds(5);
  // gRPC connections held at once (ConnectionLimiter); more are closed at once. Default
  // DefaultMaxConnections(nodes); at least nodes + 1.
  int max_connections = 64;
  Duration forecast_horizon = Seconds(30);
  int events_kept = 1000;
  Duration probe_interval = Milliseconds(100);
  int missed_probes = 3;
  // Where the data-plane key ring (security/key_ring.h), the table-version counter
  // (control/table_versions.h) and the operator's drains and policy are kept; empty: in memory
  // only, so a restart makes new keys and versions continue from the clock.
  std::string state_dir;
  struct InitialKey {
    uint32_t id = 0;
    std::string file;  // 64 hexadecimal digits
  };
  std::optional<InitialKey> initial_key;
  Duration key_rotate_every{0};  // 0: only on request
  Duration key_rollout = Seconds(5);
  // One replica of several coordinated through etcd (control/leadership.h). Its key ring and
  // the operator's state are then kept in etcd, not in state_dir.
  struct Replicas {
    std::string etcd;       // host:port
    std::string advertise;  // host:port
    Duration lease = Seconds(2);
    std::string prefix;                        // ends in '/'; default "/dar/<trust domain>/"
    std::string etcd_ca, etcd_cert, etcd_key;  // empty: plaintext
    bool operator==(const Replicas&) const = default;
  };
  std::optional<Replicas> replicas;
  std::vector<ControllerNodeConfig> nodes;
  std::vector<ControllerLinkConfig> links;
  // A node with a single link, to a node with more (a host under its switch), is reached
  // through that node: the engines compute no field toward it and no row at it, and its rows
  // are derived (RouteSnapshot), so that the cycle's work follows the switches.
  bool stub_hosts = false;
  ControllerPolicy policy;
};

// The controller's defaults for the route computer: the deployed engine's
// (DeployedEngineSettings), with a 1 ms delay scale, a class
// recomputed whole when over a quarter of the links changed cost, costs that fall over 4
// cycles (cost_decay_periods), and links judged by what they are measured to do
// (measured_links: queueing from the RTT, delivery capacity, slow links suppressed).
RouteComputerConfig DefaultControllerRoutes();

// Parses configuration text; `file` names it in errors and anchors relative TLS and log paths
// (its directory). Errors: InvalidArgument "<file>:<line>: <field>: <problem>".
absl::StatusOr<ControllerConfig> ParseControllerConfig(const std::string& text,
                                                       const std::string& file);
// Reads and parses a file. Errors also: NotFound etc. naming the path.
absl::StatusOr<ControllerConfig> LoadControllerConfig(const std::string& path);

// Loads the learned policy config.policy names. REQUIRES: !config.policy.policy_model.empty().
// Errors (the model is refused): "<file>: policy.policy_model: <why>", where the reason names
// the model file (missing, unreadable, corrupt, another format or version, other features).
absl::StatusOr<std::unique_ptr<learn::LearnedPolicy>> LoadLearnedPolicy(
    const ControllerConfig& config);
// "int8" or "float".
const char* PrecisionName(learn::LearnedPolicy::Precision precision);

// The overlay as a Topology: node i is config.nodes[i] (a switch: router and endpoint), every
// link both directions with its capacity (and delay, or 1 us until measured).
Topology BuildTopology(const ControllerConfig& config);

// The number of probe periods in the forecast horizon (at least 1).
int HorizonPeriods(const ControllerConfig& config);

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_CONFIG_H_
