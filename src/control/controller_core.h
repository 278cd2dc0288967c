// The controller's state and decisions, without the network: which agents are connected, what
// they reported, which links are up or drained, the policy, the events, and the decision
// cycle that turns all that into tables (core/route_computer.h) and offers them to the
// agents' streams. controller_service.h and admin_service.h put gRPC in front of it;
// controller.h runs the cycle on a thread.
//
// Liveness. A link end (the directed link from a node to its neighbour) is up while its
// node's newest sample for it is fresh (younger than sample_timeout) and says up. A cable is
// up while either end is up: it goes down when both ends say so, when one says down and the
// other is silent, or when samples stop from both. A node silent on every link while its
// stream is open is taken to be behind, for up to ten sample timeouts, and its links keep
// their state meanwhile (core/link_liveness.h, CableUp). Links start up (from the
// configuration) and go down one timeout later if nobody reports them.
//
// Learned policy. A configuration may name a model file (policy.policy_model); the core loads
// it (at construction and on Reload) and hands it to the route computer, which asks it for the
// weights of every row with a choice and keeps the engine's weights for a cycle where it fails.
// A model refused at construction leaves the analytic engine running; one refused on Reload
// refuses the whole reload, so the running model (or engine) stays. Either way the refusal is
// logged with the file and the reason, counted and a "policy_model_refused" event.
//
// Thread-safe. Lock order: the cycle lock, then the state lock; no lock is held while calling
// into an AgentLink.
#ifndef DAR_CONTROL_CONTROLLER_CORE_H_
#define DAR_CONTROL_CONTROLLER_CORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/executor.h"
#include "base/json_log.h"
#include "base/mutex.h"
#include "base/state_store.h"
#include "control/controller_config.h"
#include "control/controller_metrics.h"
#include "control/controller_session.h"
#include "control/controller_tables.h"
#include "control/table_versions.h"
#include "core/marginal_decision.h"
#include "core/route_computer.h"
#include "dar/v1/admin.pb.h"
#include "dar/v1/agent.pb.h"
#include "security/identity.h"
#include "security/key_ring.h"
#include "security/revocation.h"

namespace dar::control {

// A connected agent's stream as the core sees it. Implementations must not call back into
// the core from these methods.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // The newest tables; the stream sends the node's rows when it can.
  virtual void OfferSnapshot(std::shared_ptr<const RouteSnapshot> snapshot) = 0;
  // New configuration for the agent.
  virtual void OfferConfig(std::shared_ptr<const v1::AgentConfig> config) = 0;
  // Ends the stream with `status`.
  virtual void Close(const absl::Status& status) = 0;
};

// What one cycle did.
struct CycleReport {
  uint64_t version = 0;
  bool full = false;
  // Samples applied, liveness, costs, engines and the snapshot of the tables (steady clock).
  Duration decision{0};
  // Offering the snapshot to every stream; 0 when a publisher thread does that.
  Duration publish{0};
  int64_t route_changes = 0;
  int changed_links = 0;       // cost changes the engines saw, both classes
  int classes_recomputed = 0;  // classes computed whole
  int samples_applied = 0;
  int links_down = 0;  // directed
  // Why the learned policy's weights were not used (RouteCycle::policy_error); empty if they
  // were, or there is no learned policy.
  std::string policy_error;
};

class ControllerCore {
 public:
  // `config` must be valid (ParseControllerConfig) with a trust domain filled in. The clock,
  // log and metrics must outlive the core. `keys` are the data-plane keys it hands out and
  // rotates (KeyRingFor); none: a random key in memory (tests). `versions` is where table
  // versions come from (TableVersions::Load in the state directory); none: from the clock,
  // persisted nowhere (tests).
  // A learned policy the configuration names is loaded here; if it is refused, the analytic
  // engine runs (see the top comment).
  // With `publish_thread`, each cycle's snapshot is offered to the streams by a thread of the
  // core's own (an idle stream serialises and encrypts its next write in the offer), so the
  // cycle thread is free for the next decision; a newer snapshot replaces one not yet
  // offered. Without it, RunCycle offers before it returns.
  // `state` is where the operator's state is kept (RestoreOperatorState); none: the state dir,
  // if the configuration names one.
  ControllerCore(const ControllerConfig& config, const Clock& clock, JsonLog& log,
                 ControllerMetrics& metrics, bool publish_thread = false,
                 std::optional<security::KeyRing> keys = std::nullopt,
                 std::optional<TableVersions> versions = std::nullopt,
                 std::shared_ptr<StateStore> state = nullptr);
  ~ControllerCore();
  ControllerCore(const ControllerCore&) = delete;
  ControllerCore& operator=(const ControllerCore&) = delete;

  // --- Agents (called by the stream of each agent) ---

  // What an admitted agent starts with.
  struct Admission {
    std::shared_ptr<const v1::AgentConfig> config;
    std::shared_ptr<const RouteSnapshot> snapshot;  // null before the first cycle
    Duration ack_timeout{0};
    // The longest the agent goes without a table while its rows stay the same (AgentSession).
    Duration refresh{0};
  };
  // Checks a Hello from the authenticated `peer` and registers `link` as the node's stream.
  // An older stream of the same node is closed (ABORTED). Table versions continue above the
  // Hello's installed_version.
  // Errors: PermissionDenied if the peer is not that node (kind, trust domain or id differ),
  // NotFound for a node not in the configuration, FailedPrecondition for a link the
  // configuration does not have.
  absl::StatusOr<Admission> Admit(const security::SpiffeId& peer, const v1::Hello& hello,
                                  std::shared_ptr<AgentLink> link);
  // Whether the relay `relay` (its certificate's identity) may carry the stream of node
  // `member`: both nodes of this trust domain, and the member's one configured link goes to
  // the relay (a host of the relay's rack). PermissionDenied says why not; NotFound for a
  // member not in the configuration.
  absl::Status CheckRelay(const security::SpiffeId& relay, uint32_t member) const;
  // The stream `link` of node `wire_id` ended.
  void Detach(uint32_t wire_id, const AgentLink* link);
  // Samples from node `wire_id`, queued for the next cycle. All or nothing. A link end newly
  // reported down (its last sample said up, or none came yet) asks for a cycle at once
  // (SetEarlyCycleRequest), so that routes leave a failed link within milliseconds, not at the
  // next tick.
  // Errors: PermissionDenied for a link that is not the node's own, InvalidArgument for a bad
  // value (naming the sample and field), FailedPrecondition if the node is no longer
  // configured.
  absl::Status OnSamples(uint32_t wire_id, const v1::LinkSamples& samples);
  // Called (outside the core's locks) when samples ask for a cycle at once; the cycle thread's
  // owner runs one. Set before agents connect. Null: no early cycles.
  void SetEarlyCycleRequest(std::function<void()> request) { early_cycle_ = std::move(request); }
  // Closes every agent's stream with `status` (the controller is stopping).
  void CloseAll(const absl::Status& status);
  // Which table node `wire_id` forwards with (also in its Hello). A fallback to static newer
  // than the last one heard of is an event "fallback"; back on a controller table after
  // one, "fallback_recovered".
  void OnTableStatus(uint32_t wire_id, const v1::TableStatus& status);
  // An acknowledgement from node `wire_id` and what its session made of it.
  void OnAck(uint32_t wire_id, const v1::TableAck& ack, AckOutcome outcome);
  // A table went out to node `wire_id`.
  void OnTableSent(uint32_t wire_id, const v1::RouteTable& table);
  // A stream was ended for a protocol error (`kind`: "hello_refused", "samples_refused", ...).
  void OnStreamRefused(const std::string& kind, const std::string& node,
                       const absl::Status& status);

  // --- The cycle ---

  // Applies queued samples and drains, decides liveness, computes the next tables and offers
  // them to every connected agent.
  CycleReport RunCycle();
  // Empty when a cycle finished recently (within 3 cycles, at least 1 s), else why not.
  std::string HealthProblem() const;
  // Empty when the controller is ready to serve: healthy, and at least one agent connected;
  // else why not.
  std::string ReadinessProblem() const;
  // The cycle period of the current policy.
  Duration cycle_period() const;

  // --- Replicas (control/leadership.h) ---

  // Makes this core one of several replicas: while `leading()` is false it admits no agent
  // (FailedPrecondition naming `leader()`, where the leading replica is, if known), runs no
  // cycle and offers no table; it is healthy, and not ready. Set before agents connect.
  struct Replica {
    std::function<bool()> leading;
    std::function<std::string()> leader;
  };
  void SetReplica(Replica replica) { replica_ = std::move(replica); }
  // This replica leads from now on, in `term`: it reads the shared key ring and operator state
  // from the store again (another replica may have changed them), and numbers its tables by the
  // term (TableVersions::ForTerm). Errors: the key ring or the operator state cannot be read.
  absl::Status Lead(uint64_t term);
  // It no longer does (`why`): every agent's stream is closed (UNAVAILABLE), so that the agents
  // go to the replica that leads now.
  void StepDown(const std::string& why);
  // Empty while this core may act (a single controller, or the leading replica); else why not,
  // naming the leader (which may ask etcd).
  std::string NotLeading() const;
  // Whether it may act: NotLeading() is empty, without asking who leads.
  bool Acts() const { return !replica_.leading || replica_.leading(); }

  // --- Admin API ---

  // OK if `peer` is an admin of the trust domain, else PermissionDenied.
  absl::Status CheckAdmin(const security::SpiffeId& peer) const;

  // --- Revocation (security/revocation.h) ---

  // The certificates to refuse from now on; null: none. Streams of a certificate it lists end
  // at their next message (an agent sends samples ten times a second).
  void SetRevocations(std::shared_ptr<const security::RevocationList> list);
  std::shared_ptr<const security::RevocationList> revocations() const;
  // OK unless the certificate with serial number `serial` (who: its identity) is revoked:
  // PermissionDenied, counted with the refusals of its kind by the caller.
  absl::Status CheckNotRevoked(const std::string& serial, const std::string& who) const;
  // An admin call from `who` was refused: counted, and an "admin_refused" event.
  void OnAdminRefused(const std::string& who, const absl::Status& status);
  v1::TopologyView GetTopology() const;
  std::vector<v1::NodeView> ListNodes() const;
  std::vector<v1::LinkView> ListLinks() const;
  // Errors: NotFound for an unknown node or destination, InvalidArgument for a class > 1,
  // Unavailable before the first cycle.
  absl::StatusOr<v1::GetRoutesResponse> GetRoutes(const v1::GetRoutesRequest& request) const;
  // Why `node` splits its traffic toward `destination` as the newest tables say: per next
  // hop, the cost of the path through it and its bottleneck (controller_explain.cc). Errors
  // as GetRoutes.
  absl::StatusOr<v1::RouteExplanation> ExplainRoute(const v1::ExplainRouteRequest& request) const;
  // Newest first; limit 0 = all kept.
  std::vector<v1::Event> ListEvents(uint32_t limit) const;
  // The events recorded since `*cursor` (a count of events recorded since start; 0: every one
  // still kept), at most the newest `limit` of them (0: no limit), oldest first, and moves the
  // cursor past every event recorded so far, in one step. Events the bounded log dropped
  // before they were read are skipped.
  std::vector<v1::Event> EventsSince(uint64_t* cursor, size_t limit = 0) const;

  // One link's recent history, about a sample a second over the last kLinkHistory seconds:
  // what was measured, forecast and planned (controller_explain.cc).
  struct LinkPoint {
    int64_t unix_ns = 0;
    double utilisation = 0;  // measured (the tail's last sample)
    double forecast = 0;     // horizon ahead
    double planned = 0;      // LinkView.planned_utilisation
    Duration rtt{0};
    Duration queueing{0};
  };
  static constexpr size_t kLinkHistory = 300;
  struct LinkSeries {
    std::string src, dst;
    Duration horizon{0};
    std::vector<LinkPoint> points;  // oldest first
  };
  // The newest tables' version and when they were computed (Unix ns); 0 and 0 before the first
  // cycle. Cheap.
  std::pair<uint64_t, int64_t> LatestVersion() const;
  // "marginal" or "diffusion": the layer that makes the tables.
  std::string DecisionLayer() const;
  // Errors: NotFound if no link runs from `src` to `dst` (names or ids).
  absl::StatusOr<LinkSeries> GetLinkSeries(const std::string& src, const std::string& dst) const;
  // The settings, and the learned policy's state in `learned`.
  v1::PolicySettings GetPolicy() const;
  // Replaces the policy's settings. An empty forwarding_mode or a cycle_ms of 0 keeps the
  // current one; `learned` is ignored (only a reload changes the model). Errors:
  // InvalidArgument naming the field. Until the next reload.
  absl::StatusOr<v1::PolicySettings> SetPolicy(const v1::PolicySettings& settings);
  // The data-plane key ring (ids and phases, never the keys themselves).
  v1::KeyRingView GetKeys() const;
  // Starts a key rotation (security/key_ring.h); the view says whether it started (not if one
  // is under way). Errors: the ring file cannot be written.
  absl::StatusOr<v1::KeyRingView> RotateKeys();
  // Drains (or undrains) both directions of the link a-b (names or ids) from the next cycle
  // on. Returns whether that changed anything. Errors: NotFound for an unknown node or link.
  absl::StatusOr<bool> Drain(const std::string& a, const std::string& b, bool drain);

  // --- Configuration ---

  // The operator's changes (drains, SetPolicy), and the newest fallback to static each agent
  // reported (so that a restarted controller does not report it again), are kept in
  // <state_dir>/operator.json, written on every change, so they survive a restart; a reload drops
  // the policy override (the file's policy wins), as it does in memory. RestoreOperatorState
  // applies that file at start-up: drains of links no longer configured, or a policy the core
  // refuses, are skipped with a warning. Errors: an unreadable or malformed file (naming it; it is
  // not replaced).
  absl::Status RestoreOperatorState();

  // Applies a new, valid configuration: nodes, links, policy (SetPolicy changes are
  // dropped), probe and table settings, which agents are told at once. Agents of removed
  // nodes are disconnected; drains of links that remain are kept. Settings that need a
  // restart (listen, tls, trust_domain, http, log) keep their running values, with a
  // warning and a "config_restart_needed" event. The learned policy's model is read again
  // (a new file at the same path replaces the running model). Errors: the model is refused
  // ("<file>: policy.policy_model: <why>"); then nothing is applied, and the running
  // configuration and policy stay.
  absl::Status Reload(const ControllerConfig& config);
  // Records an event (also logged and counted).
  void RecordEvent(const std::string& kind, const std::string& node, const std::string& detail);
  ControllerConfig config() const;

 private:
  struct Agent {
    std::shared_ptr<AgentLink> link;  // null while disconnected
    uint64_t acked_version = 0;
    uint64_t refused_tables = 0;
    int64_t last_seen_unix_ns = 0;
    v1::TableStatus table_status;       // as last reported
    uint64_t samples_dropped = 0;       // its samples and reports past its share of the buffer
    int64_t dropped_event_unix_ns = 0;  // when that was last an event (once a minute)
  };
  struct PendingSample {
    LinkId link;
    LinkSample sample;
    Time received;
    int64_t received_unix_ns;
  };
  struct LinkEnd {
    Time heard{0};  // when its node last reported it
    bool up = true;
    int64_t heard_unix_ns = 0;  // 0 until a real sample
  };

  // REQUIRES: mu_ held.
  void OnTableStatusLocked(uint32_t wire_id, const v1::TableStatus& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REQUIRES: mu_ held.
  void RecordEventLocked(const std::string& kind, const std::string& node,
                         const std::string& detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::KeyRingView KeyRingViewLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes <state_dir>/operator.json (if there is a state dir); a failure is an event.
  void SaveOperatorStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new agent config and the streams to offer it to, outside mu_.
  struct ConfigPush {
    std::shared_ptr<const v1::AgentConfig> config;
    std::vector<std::shared_ptr<AgentLink>> links;
    void Send() const {
      for (const auto& link : links) link->OfferConfig(config);
    }
  };
  // After the key ring changed: rebuilds the agents' config, records a "keys" event saying
  // `why`, and returns the push for every connected agent.
  ConfigPush KeysChangedLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The configuration every agent is sent. Its keys are the epochs' secrets, which never leave
  // the controller: AgentSession sends each agent its own row of pair keys instead.
  std::shared_ptr<const v1::AgentConfig> BuildAgentConfigLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::shared_ptr<AgentLink>> ConnectedLinksLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::NodeView NodeViewLocked(NodeId n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The learned policy a configuration names, loaded, or why it was refused.
  struct LoadedModel {
    std::shared_ptr<WeightPolicy> policy;  // null: the analytic engine alone
    v1::LearnedPolicyView view;
    absl::Status status;  // not OK: refused
  };
  // Loads the model `config` names (none: the analytic engine). A refusal is logged (with
  // `outcome`: what runs instead), counted and recorded as an event. Takes mu_ briefly.
  LoadedModel LoadModel(const ControllerConfig& config, const char* outcome);
  void ResetComputer(Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_, mu_);
  // Runs the computer's cycles on a pool of `threads` threads (a new pool only if the present
  // one has another size).
  void UsePool(int threads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Adds the computer's policy counts since the last call to the metrics and logs a policy
  // failure, at most once a minute.
  void CountPolicy(const RouteCycle& cycle, Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Offers `snapshot` to every connected stream; returns how long that took.
  Duration OfferToAll(const std::shared_ptr<const RouteSnapshot>& snapshot);
  void PublishLoop();
  // REQUIRES: cycle_mu_ held. "a-b" keys of the links drained, by link.
  std::vector<bool> DrainedLinks(
      const Overlay& overlay, const std::set<std::pair<std::string, std::string>>& drained) const;
  // The overlay's topology as the marginal layer decides over it: the links down or drained
  // marked down, each link at what it is measured to deliver (at most its configured capacity).
  Topology KnownTopologyLocked(const std::vector<bool>& drained_links) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Adds a point to every link's history if a second has passed (`now`, monotonic) since the
  // last.
  void RecordHistoryLocked(const RouteSnapshot* snapshot, Time now, int64_t unix_now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // What the decision layer sees of each link and why (controller_explain.cc), in two steps:
  // the inputs, copied under cycle_mu_ (per link, and the demand estimate: cheap), and the
  // plan made from them with no lock held (the demand routed, the objective's derivatives, the
  // route shares: the costly part), so that a scrape or a view does not hold up the cycle.
  struct LinkInputs;
  struct LinkPlan;
  // The inputs; takes mu_ briefly for the drains and the probe interval, and hands out the
  // newest tables in `snapshot` (if not null) from the same moment.
  LinkInputs GatherLinksLocked(std::shared_ptr<const RouteSnapshot>* snapshot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // What a plan holds: all of it for the views, or only what the history keeps (planned,
  // marginal cost, slow), without the route shares (a pass over every row of the tables: a
  // quarter of a second on a 1,344-node fabric) and the reasons.
  enum class PlanDetail { kHistory, kViews };
  static LinkPlan PlanLinks(const LinkInputs& in, const RouteSnapshot* snapshot, int64_t unix_now,
                            PlanDetail detail = PlanDetail::kViews);

  const Clock& clock_;
  JsonLog& log_;
  ControllerMetrics& metrics_;
  // Where the operator's state is kept; null: nowhere (in memory only).
  const std::shared_ptr<StateStore> state_;
  Replica replica_;  // empty: a single controller

  // The decision loop; cycle_mu_ guards it.
  mutable Mutex cycle_mu_;
  // The threads a cycle's parts run on (policy.cycle_threads), started once: a new pool only
  // when a policy change asks for another number.
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(cycle_mu_);
  std::unique_ptr<RouteComputer> computer_ ABSL_GUARDED_BY(cycle_mu_);
  std::shared_ptr<const Overlay> computer_overlay_ ABSL_GUARDED_BY(cycle_mu_);
  // The marginal decision layer, over computer_overlay_'s topology, while the policy says
  // `decision: marginal`; null otherwise.
  std::unique_ptr<MarginalDecision> marginal_ ABSL_GUARDED_BY(cycle_mu_);
  MarginalDecisionConfig marginal_config_ ABSL_GUARDED_BY(cycle_mu_);  // marginal_'s
  std::vector<LinkEnd> ends_ ABSL_GUARDED_BY(cycle_mu_);               // by link
  std::vector<bool> cable_down_ ABSL_GUARDED_BY(cycle_mu_);            // by link, as last decided
  // The learned policy; null: none.
  std::shared_ptr<WeightPolicy> weight_policy_ ABSL_GUARDED_BY(cycle_mu_);
  // computer_'s counts already in the metrics.
  RouteComputerStats policy_counted_ ABSL_GUARDED_BY(cycle_mu_);
  // When a policy failure was last logged.
  std::optional<Time> policy_failure_logged_ ABSL_GUARDED_BY(cycle_mu_);
  int64_t policy_failures_unlogged_ ABSL_GUARDED_BY(cycle_mu_) = 0;  // failures since then
  // The decision times since the last summary in the log.
  int64_t cycles_since_summary_ ABSL_GUARDED_BY(cycle_mu_) = 0;
  std::vector<double> recent_decisions_ms_ ABSL_GUARDED_BY(cycle_mu_);
  // Every link's recent points (GetLinkSeries), by LinkId of history_overlay_.
  std::vector<std::deque<LinkPoint>> history_ ABSL_GUARDED_BY(cycle_mu_);
  std::shared_ptr<const Overlay> history_overlay_ ABSL_GUARDED_BY(cycle_mu_);
  std::optional<Time> history_at_ ABSL_GUARDED_BY(cycle_mu_);  // the last point's (monotonic)

  // Everything else; mu_ guards it.
  mutable Mutex mu_;
  ControllerConfig config_ ABSL_GUARDED_BY(mu_);
  ControllerPolicy policy_ ABSL_GUARDED_BY(mu_);
  v1::LearnedPolicyView learned_ ABSL_GUARDED_BY(mu_);  // without the counts (GetPolicy adds them)
  std::string policy_last_failure_ ABSL_GUARDED_BY(mu_);
  bool policy_dirty_ ABSL_GUARDED_BY(mu_) = false;
  // The last SetPolicy since a reload.
  std::optional<v1::PolicySettings> policy_override_ ABSL_GUARDED_BY(mu_);
  // RestoreOperatorState runs: it saves once, at the end.
  bool restoring_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const Overlay> overlay_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::AgentConfig> agent_config_ ABSL_GUARDED_BY(mu_);
  security::KeyRing keys_ ABSL_GUARDED_BY(mu_);
  // By wire id; entries stay after a disconnect.
  std::map<uint32_t, Agent> agents_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingSample> pending_ ABSL_GUARDED_BY(mu_);
  // Samples of each node (by NodeId of `reported_overlay_`) in pending_: each node has a share
  // of the buffer of its own, so that one flooding node loses its own samples, not others'.
  std::vector<uint32_t> pending_by_node_ ABSL_GUARDED_BY(mu_);
  // The same for the entries of pending_sent_.
  std::vector<uint32_t> pending_sent_by_node_ ABSL_GUARDED_BY(mu_);
  struct PendingSent {
    NodeId src, dst;
    uint64_t bytes;
  };
  // What agents sent, for the marginal layer.
  std::vector<PendingSent> pending_sent_ ABSL_GUARDED_BY(mu_);
  // (wire id, destination id) of sent-bytes entries already reported as ignored.
  std::set<std::pair<uint32_t, uint32_t>> sent_ignored_ ABSL_GUARDED_BY(mu_);
  // More than a node sends in one report at 10 Tb/s for a minute: not a count.
  static constexpr uint64_t kMaxSentBytesPerReport = uint64_t{75} << 40;
  // What each link end's newest sample said (kUnheard, kUp, kDown), by LinkId of
  // `reported_overlay_`; reset when the overlay changes.
  enum class Reported : uint8_t { kUnheard, kUp, kDown };
  std::vector<Reported> reported_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Overlay> reported_overlay_ ABSL_GUARDED_BY(mu_);
  std::function<void()> early_cycle_;
  // (name, name), ordered pair.
  std::set<std::pair<std::string, std::string>> drained_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Event> events_ ABSL_GUARDED_BY(mu_);  // newest at the back
  uint64_t events_recorded_ ABSL_GUARDED_BY(mu_) = 0;  // since start (EventsSince)
  std::shared_ptr<const RouteSnapshot> latest_ ABSL_GUARDED_BY(mu_);
  TableVersions versions_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const security::RevocationList> revoked_ ABSL_GUARDED_BY(mu_);
  bool cycled_ ABSL_GUARDED_BY(mu_) = false;
  Time last_cycle_ ABSL_GUARDED_BY(mu_) = Time{0};

  // The publisher thread, if any; pub_mu_ guards its slot.
  Mutex pub_mu_;
  CondVar pub_cv_;
  std::shared_ptr<const RouteSnapshot> pub_pending_ ABSL_GUARDED_BY(pub_mu_);
  bool pub_stop_ ABSL_GUARDED_BY(pub_mu_) = false;
  std::thread publisher_;
};

// The key of a drained cable: its two ends' names, in order.
std::pair<std::string, std::string> CableKey(const std::string& a, const std::string& b);

// The key ring a controller with `config` starts with: the ring kept in `store`, or the
// initial key (read from its file) or a random key. Errors: a bad initial key file, and those
// of security::KeyRing::Load.
absl::StatusOr<security::KeyRing> KeyRingFor(const ControllerConfig& config, int64_t now_unix_ns,
                                             std::shared_ptr<StateStore> store);
// The store of a single controller: its state dir, if the configuration names one.
std::shared_ptr<StateStore> StateDirStore(const ControllerConfig& config);

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_CORE_H_
