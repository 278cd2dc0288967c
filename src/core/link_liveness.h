// When a link is up. The one rule, in the two places it is judged:
//   - LinkLiveness: one end's verdict from its own probes. The agent's data plane and the
//     simulator's agents both run it (agent/dataplane.h, sim/agents.h); the forwarder at that
//     end stops choosing the link the moment it goes down (fast failover).
//   - CableUp: the controller's verdict for a cable from the reports of its two ends. The
//     controller (control/controller_cycle.cc) and the simulator's controller both apply it.
//
// Pure logic: no clock, no I/O. Not thread-safe.
#ifndef DAR_CORE_LINK_LIVENESS_H_
#define DAR_CORE_LINK_LIVENESS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/units.h"

namespace dar {

// The rule's two numbers, the same defaults in the agent and the simulator: down about 300 ms
// after a failure at the default 100 ms probe interval, up again after two probes in a row
// come back (one lucky reply through a flapping link does not bring it back).
struct LinkLivenessConfig {
  int missed_probes = 3;    // unanswered probes in a row before the link is down
  int recover_replies = 2;  // replies to consecutive probes before it is up again

  // OK, or InvalidArgument naming the field and its bound.
  absl::Status Validate() const;
};

// The liveness of one link as its prober sees it. Starts up (so that a restarted agent
// forwards at once). Goes down when `missed_probes` probes in a row have had a full probe
// interval without a reply, or at once when sending on the link fails; comes back up after
// replies to `recover_replies` consecutive probes sent since it went down (a late reply to a
// probe sent before does not prove the link works again).
class LinkLiveness {
 public:
  // REQUIRES: config.Validate().ok().
  explicit LinkLiveness(const LinkLivenessConfig& config);

  bool up() const { return up_; }

  // Probe `seq` is about to leave (seqs increase by one per probe). First judges the probes
  // sent before it: each has had a full interval. Returns true if up() changed.
  bool OnProbeSent(uint64_t seq);
  // A reply to probe `seq` arrived (and was counted by the loss window: not a duplicate, and
  // for a probe still in it). Returns true if up() changed.
  bool OnReply(uint64_t seq);
  // Sending on the link failed because the network is down or unreachable. Returns true if
  // up() changed.
  bool OnSendError();

  // Probes sent since the last reply arrived.
  int unanswered() const { return unanswered_; }
  // From the next judgement on. REQUIRES: missed_probes >= 1.
  void set_missed_probes(int missed_probes) { missed_probes_ = missed_probes; }

 private:
  void GoDown();

  int missed_probes_;
  int recover_replies_;
  bool up_ = true;
  int unanswered_ = 0;
  uint64_t last_sent_ = 0;     // newest probe seq sent; 0 before the first
  uint64_t down_after_ = 0;    // replies to probes up to this seq do not count toward recovery
  uint64_t last_replied_ = 0;  // newest probe seq answered since going down
  int streak_ = 0;             // replies to consecutive probes since going down
};

// What the controller knows of one end of a cable: the newest report of the node that sends on
// that direction.
struct CableEnd {
  bool exists = true;   // false for the missing reverse of a one-way link
  bool heard = false;   // a report arrived since the controller started
  bool fresh = false;   // ... and the newest is within the staleness timeout
  bool says_up = true;  // what the newest report says (LinkLiveness at that end)
  Duration age{0};      // since the newest report
  // Its node is behind as a whole, not this link: the node's stream to the controller is
  // open, none of its links has a fresh report, and not for long (the controller's grace).
  bool lagging = false;
};

// A cable is up if a fresh end says so; down if a fresh end says so, or if its ends went
// silent. An end never heard from since the controller started tells nothing: a restarted
// controller must not take links down because their agents have not reconnected yet (the
// neighbours' reports say down if a node is really gone).
//
// While a silent end is `lagging`, silence does not decide: the cable stays as it was
// (`was_up`). A node whose reports of every link stopped at once while its stream stays open
// is most likely behind (the network or the controller backlogged), and a node whose link
// fails says so over that stream. Without this, a controller behind on its samples would take
// down healthy links by the hundred and flood the agents with tables that route around them.
// A fresh word still decides at once, and the grace is short: a node that hangs or dies with
// its stream open still loses its links once the grace is over.
bool CableUp(const CableEnd& a, const CableEnd& b, bool was_up);

// For events and the operator: "up", "says down", "silent for 420 ms", "not heard from yet",
// "(no reverse)".
std::string DescribeCableEnd(const CableEnd& end);

}  // namespace dar

#endif  // DAR_CORE_LINK_LIVENESS_H_
