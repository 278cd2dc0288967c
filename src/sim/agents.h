// The agents of a simulated network: on every node, one LinkMonitor per outgoing link, fed by
// real probe packets that share the link's queue with data (so a congested link shows it),
// and by the port's byte counters. Every sampling period each agent samples its links; the
// batch reaches the controller `report_delay` later. The estimators are the same code the
// real agent runs (core/telemetry.h).
//
// Single-threaded; owns the Network's probe handler.
#ifndef DAR_SIM_AGENTS_H_
#define DAR_SIM_AGENTS_H_

#include <functional>
#include <memory>
#include <vector>

#include "core/link_liveness.h"
#include "core/telemetry.h"
#include "sim/delay_line.h"
#include "sim/event_loop.h"
#include "sim/network.h"

namespace dar::sim {

struct AgentConfig {
  Duration period = Milliseconds(100);      // probe and sample period (10 per second)
  Duration report_delay = Milliseconds(1);  // agent -> controller
  int32_t probe_bytes = 64;
  LinkMonitorConfig monitor;    // its sample_period and capacity are set per link
  LinkLivenessConfig liveness;  // the real agent's rule and defaults
};

class SimAgents {
 public:
  // Samples of every link (indexed by LinkId), all taken at the same instant.
  using SampleSink = std::function<void(const std::vector<LinkSample>&)>;
  // A link's liveness by its probes (LinkLiveness) changed. Called at the link's tail, at
  // once.
  using LivenessHandler = std::function<void(LinkId link, bool alive)>;

  // `net` and `loop` must outlive the agents.
  SimAgents(EventLoop& loop, Network& net, const AgentConfig& config, SampleSink sink);
  SimAgents(const SimAgents&) = delete;
  SimAgents& operator=(const SimAgents&) = delete;
  ~SimAgents();

  // Sends the first probes now; samples every period from then on.
  void Start();
  void set_liveness_handler(LivenessHandler h) { on_liveness_ = std::move(h); }
  const LinkMonitor& monitor(LinkId l) const { return monitors_[l]; }
  int64_t probes_sent() const { return probes_sent_; }

 private:
  void Tick();
  void OnProbe(NodeId at, LinkId in_link, PacketPtr p);

  EventLoop& loop_;
  Network& net_;
  AgentConfig config_;
  SampleSink sink_;
  std::vector<LinkMonitor> monitors_;
  std::vector<LinkLiveness> liveness_;  // by link
  LivenessHandler on_liveness_;
  uint32_t seq_ = 0;
  int64_t probes_sent_ = 0;
  Timer tick_;
  DelayLine<std::vector<LinkSample>> reports_;  // agent -> controller
};

// The controller's verdict on every link (CableUp, core/link_liveness.h) from one batch of
// SimAgents samples: every end reports each period, so every end is fresh. By LinkId, both
// directions of a cable alike.
std::vector<bool> CablesUp(const Topology& topo, const std::vector<LinkSample>& samples);

}  // namespace dar::sim

#endif  // DAR_SIM_AGENTS_H_
