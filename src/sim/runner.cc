#include "sim/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "fmt/format.h"
#include "sim/control_plane.h"
#include "sim/records.h"
#include "sim/workload.h"

namespace dar::sim {
namespace {

// Background load on one link: full-size filler packets at a rate that follows the ramp.
// Fillers share the link's queue with real traffic and leave the network at its far end.
class LinkLoadGenerator {
 public:
  static constexpr int32_t kPacketBytes = 1500;

  LinkLoadGenerator(Network& net, LinkId link, const TimedEvent& e)
      : net_(net), link_(link), event_(e), timer_(net.loop(), [this] { Emit(); }), last_(e.at) {
    timer_.ScheduleAt(e.at);
  }

 private:
  double LoadAt(Time t) const {
    if (t >= event_.until || event_.until <= event_.at) return event_.load_to;
    const double x = static_cast<double>((t - event_.at).count()) /
                     static_cast<double>((event_.until - event_.at).count());
    return event_.load_from + (event_.load_to - event_.load_from) * x;
  }

  // Every at most 100 us, adds the bytes the load allows for the time since the last call
  // and sends whole packets of them, so a low or ramping rate is followed closely.
  void Emit() {
    const Time now = net_.loop().now();
    if (now >= event_.hold) return;
    const double load = std::clamp(LoadAt(now), 0.0, 1.0);
    const double bps = static_cast<double>(net_.current().link(link_).params.capacity.bps()) * load;
    credit_ += bps / 8 * ToSeconds(now - last_);
    last_ = now;
    while (credit_ >= kPacketBytes) {
      credit_ -= kPacketBytes;
      PacketPtr p = net_.pool().Allocate();
      p->kind = PacketKind::kFiller;
      p->src = net_.current().link(link_).src;
      p->dst = net_.current().link(link_).dst;
      p->size_bytes = kPacketBytes;
      net_.SendOnLink(link_, std::move(p));
    }
    Duration next = Microseconds(100);
    if (bps > 0)
      next = std::min(next,
                      Duration(static_cast<int64_t>((kPacketBytes - credit_) * 8 / bps * 1e9) + 1));
    timer_.ScheduleIn(next);
  }

  Network& net_;
  LinkId link_;
  TimedEvent event_;
  Timer timer_;
  double credit_ = 0;  // bytes allowed and not yet sent
  Time last_{0};
};

uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t x = seed * 0x100000001b3ULL + stream;
  return Random::SplitMix64(x);
}

// Both directions of the cable a-b (or just a->b).
std::vector<LinkId> CableLinks(const Topology& topo, const TimedEvent& e) {
  std::vector<LinkId> out;
  const LinkId ab = topo.FindLink(e.a, e.b);
  if (ab != kNoLink) out.push_back(ab);
  if (e.both_directions) {
    const LinkId ba = topo.FindLink(e.b, e.a);
    if (ba != kNoLink) out.push_back(ba);
  }
  return out;
}

// Empty records named after the workloads' types, "#<index>" added where a type repeats.
std::vector<WorkloadRecords> RecordNames(const YAML::Node& workloads) {
  std::vector<std::string> types;
  for (const YAML::Node& w : workloads) types.push_back(w["type"].as<std::string>(""));
  std::vector<WorkloadRecords> out;
  for (size_t i = 0; i < types.size(); ++i) {
    const bool repeated = std::count(types.begin(), types.end(), types[i]) > 1;
    out.push_back(WorkloadRecords{repeated ? fmt::format("{}#{}", types[i], i) : types[i], {}});
  }
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunPolicy(const Scenario& scenario, const PolicySpec& policy,
                                         const RunOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  EventLoop loop;
  Random net_rng(StreamSeed(scenario.seed, 1));
  Random control_rng(StreamSeed(scenario.seed, 2));
  Network net(loop, net_rng, scenario.topology, scenario.network);
  net.set_forwarding(policy.forwarding);
  Transport transport(net, scenario.transport);

  ConfigContext cfg{fmt::format("{}: policies.{}", scenario.path, policy.name), scenario.base_dir,
                    &scenario.topology, options.weight_policy, options.policy_loader};
  ASSIGN_OR_RETURN(ControlPlanePtr control, CreatePolicyControlPlane(policy, cfg));

  std::vector<WorkloadPtr> workloads;
  std::vector<Random> workload_rngs;
  for (size_t i = 0; i < scenario.workloads.size(); ++i) {
    ConfigContext wcfg{fmt::format("{}: workloads[{}]", scenario.path, i), scenario.base_dir,
                       &scenario.topology};
    ASSIGN_OR_RETURN(WorkloadPtr w, CreateWorkload(scenario.workloads[i], wcfg));
    workloads.push_back(std::move(w));
    workload_rngs.emplace_back(StreamSeed(scenario.seed, 100 + i));
  }

  ControlContext cctx{loop, net, control_rng, &transport};
  control->Start(cctx);

  std::vector<std::unique_ptr<Timer>> event_timers;
  std::vector<std::unique_ptr<LinkLoadGenerator>> generators;
  for (const TimedEvent& e : scenario.events) {
    const std::vector<LinkId> links = CableLinks(scenario.topology, e);
    if (e.kind == TimedEvent::Kind::kLoadRamp) {
      for (LinkId l : links) generators.push_back(std::make_unique<LinkLoadGenerator>(net, l, e));
      continue;
    }
    auto apply = [&net, &control, &scenario, links, e] {
      if (e.kind == TimedEvent::Kind::kSilentFailure ||
          e.kind == TimedEvent::Kind::kSilentRecovery) {
        for (LinkId l : links) {
          net.SetLinkSilentFailure(l, e.kind == TimedEvent::Kind::kSilentFailure);
        }
        return;  // carrier stays: no control plane hears of it
      }
      for (LinkId l : links) {
        if (e.kind == TimedEvent::Kind::kCapacity) {
          net.SetLinkCapacity(
              l, scenario.topology.link(l).params.capacity.Scaled(e.capacity_fraction));
        } else {
          net.SetLinkUp(l, e.kind == TimedEvent::Kind::kLinkUp);
        }
      }
      for (LinkId l : links) control->OnLinkChange(l);
    };
    event_timers.push_back(std::make_unique<Timer>(loop, std::move(apply)));
    event_timers.back()->ScheduleAt(e.at);
  }

  const Time end_time = Time(0) + scenario.duration;
  const bool keep_records = static_cast<bool>(options.on_records);
  std::vector<WorkloadRecords> records =
      keep_records ? RecordNames(scenario.workloads) : std::vector<WorkloadRecords>();
  std::vector<WorkloadContext> contexts;
  contexts.reserve(workloads.size());
  for (size_t i = 0; i < workloads.size(); ++i) {
    contexts.push_back(WorkloadContext{loop, transport, scenario.topology, workload_rngs[i],
                                       end_time, keep_records ? &records[i].records : nullptr});
  }
  for (size_t i = 0; i < workloads.size(); ++i) workloads[i]->Start(contexts[i]);

  // Stop as soon as every workload is done; check every 100 us of simulated time.
  bool all_done = false;
  Timer check(loop, [&] {
    all_done = std::all_of(workloads.begin(), workloads.end(),
                           [](const WorkloadPtr& w) { return w->Done(); });
    if (all_done) {
      loop.Stop();
    } else {
      check.ScheduleIn(Microseconds(100));
    }
  });
  check.ScheduleAt(Time(0));
  const Time limit = end_time + scenario.drain_limit;
  std::optional<LinkSampler> sampler;
  if (keep_records) sampler.emplace(net, loop.now(), SampleInterval(scenario.duration));
  while (!all_done && loop.now() < limit) {
    loop.RunUntil(std::min(limit, loop.now() + Milliseconds(1)));
    if (sampler) sampler->Advance(loop.now());
    if (options.on_progress) {
      options.on_progress(
          RunProgress{policy.name, loop.now(), scenario.duration, loop.events_run()});
    }
  }

  nlohmann::json metrics = nlohmann::json::object();
  for (const WorkloadPtr& w : workloads) w->Report(metrics);
  control->Report(metrics);
  const TransportCounters& tc = transport.counters();
  metrics["packets_dropped"] = net.total_drops();
  nlohmann::json drops = nlohmann::json::object();
  for (int r = 0; r < static_cast<int>(DropReason::kCount); ++r) {
    drops[std::string(DropReasonName(static_cast<DropReason>(r)))] =
        net.drops(static_cast<DropReason>(r));
  }
  metrics["drops_by_reason"] = drops;
  metrics["retransmissions"] = tc.retransmissions;
  metrics["spurious_retransmissions"] = tc.spurious_retransmissions;
  metrics["timeouts"] = tc.timeouts;
  metrics["messages_completed"] = tc.messages_completed;
  metrics["messages_incomplete"] = transport.active();
  metrics["routing_loops"] =
      metrics.value("routing_loops", int64_t{0}) + net.drops(DropReason::kHopLimit);
  metrics["completed"] = all_done;
  metrics["events"] = loop.events_run();
  metrics["sim_time_s"] = ToSeconds(loop.now());
  metrics["wall_time_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  if (keep_records) {
    sampler->Finish(loop.now());
    options.on_records(policy, PolicyRecords{FlowsCsv(policy.name, records), sampler->Csv()});
  }

  nlohmann::json out;
  out["name"] = policy.name;
  out["routing"] = policy.routing;
  out["forwarding"] = std::string(ForwardingModeName(policy.forwarding.mode));
  out["metrics"] = std::move(metrics);
  return out;
}

absl::StatusOr<nlohmann::json> RunScenario(const Scenario& scenario, const RunOptions& options) {
  nlohmann::json results;
  results["scenario"] = scenario.name;
  results["seed"] = scenario.seed;
  results["topology"] = scenario.topology.Summary();
  results["duration_s"] = ToSeconds(scenario.duration);
  results["policies"] = nlohmann::json::array();
  const size_t n = scenario.policies.size();
  std::vector<absl::StatusOr<nlohmann::json>> runs(n, absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      runs[i] = RunPolicy(scenario, scenario.policies[i], options);
    }
  };
  std::vector<std::thread> threads;
  const size_t jobs = std::clamp<size_t>(static_cast<size_t>(std::max(options.jobs, 1)), 1, n);
  for (size_t j = 1; j < jobs; ++j) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (absl::StatusOr<nlohmann::json>& r : runs) {
    if (!r.ok()) return r.status();
    results["policies"].push_back(*std::move(r));
  }
  return results;
}

namespace {

// Numbers and flags of `metrics`, nested objects' as "key.inner", in order.
void FlattenMetrics(const nlohmann::json& metrics, const std::string& prefix,
                    std::vector<std::pair<std::string, nlohmann::json>>& out) {
  for (const auto& [k, v] : metrics.items()) {
    if (v.is_number() || v.is_boolean()) {
      out.emplace_back(prefix + k, v);
    } else if (v.is_object() && prefix.empty()) {
      FlattenMetrics(v, k + ".", out);
    }
  }
}

}  // namespace

std::string FormatComparison(const nlohmann::json& results) {
  const nlohmann::json& policies = results.at("policies");
  std::vector<std::vector<std::pair<std::string, nlohmann::json>>> flat(policies.size());
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < policies.size(); ++i) {
    FlattenMetrics(policies[i].at("metrics"), "", flat[i]);
    for (const auto& [k, v] : flat[i]) {
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  size_t width = 28;
  for (const std::string& k : keys) width = std::max(width, k.size() + 2);
  std::string out = fmt::format("{:<{}}", "metric", width);
  for (const auto& p : policies) out += fmt::format("{:>16}", p.at("name").get<std::string>());
  out += "\n";
  for (const std::string& k : keys) {
    out += fmt::format("{:<{}}", k, width);
    for (const auto& metrics : flat) {
      auto it = std::find_if(metrics.begin(), metrics.end(),
                             [&](const auto& kv) { return kv.first == k; });
      if (it == metrics.end()) {
        out += fmt::format("{:>16}", "-");
      } else if (it->second.is_boolean()) {
        out += fmt::format("{:>16}", it->second.get<bool>() ? "yes" : "no");
      } else if (it->second.is_number_integer()) {
        out += fmt::format("{:>16}", it->second.get<int64_t>());
      } else {
        out += fmt::format("{:>16.6g}", it->second.get<double>());
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace dar::sim
