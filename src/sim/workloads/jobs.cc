#include "sim/workloads/jobs.h"

#include <algorithm>
#include <set>
#include <utility>

#include "fmt/format.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {

absl::StatusOr<JobsSpec> ReadJobs(YamlReader& r, const Topology& topo, std::string* key_for_size) {
  const std::vector<NodeId> all = SendingHosts(topo);
  JobsSpec s;
  s.multi = r.Has("jobs") || r.Has("job_size") || r.Has("placement");
  if (s.multi) {
    if (r.Has("group_size") || r.Has("group")) {
      return r.Error(r.Has("group_size") ? "group_size" : "group",
                     "give jobs/job_size (with hosts as the pool), or one group, not both");
    }
    ASSIGN_OR_RETURN(s.pool, r.OptionalHosts("hosts", topo, all));
    ASSIGN_OR_RETURN(s.jobs, r.Optional<int>("jobs", 1, Bounds::AtLeast(1)));
    ASSIGN_OR_RETURN(s.job_size, r.Required<int>("job_size", Bounds::AtLeast(2)));
    ASSIGN_OR_RETURN(const std::string placement,
                     r.OptionalChoice("placement", "packed", {"packed", "spread", "random"}));
    s.placement = placement == "spread"   ? Placement::kSpread
                  : placement == "random" ? Placement::kRandom
                                          : Placement::kPacked;
    const int64_t need = static_cast<int64_t>(s.jobs) * s.job_size;
    if (need > static_cast<int64_t>(s.pool.size())) {
      return r.Error(
          r.Has("jobs") ? "jobs" : "job_size",
          fmt::format("{} job(s) of {} hosts need {} hosts; {} has {}", s.jobs, s.job_size, need,
                      r.Has("hosts") ? "the hosts list" : "the topology", s.pool.size()));
    }
    *key_for_size = "job_size";
    return s;
  }
  const int ways = int{r.Has("hosts")} + int{r.Has("group_size")} + int{r.Has("group")};
  if (ways > 1) return r.Error("hosts", "give only one of hosts, group_size and group");
  if (r.Has("hosts")) {
    ASSIGN_OR_RETURN(s.pool, r.RequiredHosts("hosts", topo));
    if (s.pool.size() < 2) return r.Error("hosts", "needs at least 2 hosts");
    *key_for_size = "hosts";
  } else if (r.Has("group_size")) {
    ASSIGN_OR_RETURN(const int g, r.Required<int>("group_size", Bounds::AtLeast(2)));
    if (static_cast<size_t>(g) > all.size()) {
      return r.Error("group_size",
                     fmt::format("{} exceeds the topology's {} hosts", g, all.size()));
    }
    s.pool.assign(all.begin(), all.begin() + g);
    *key_for_size = "group_size";
  } else {
    ASSIGN_OR_RETURN(const std::string group, r.OptionalChoice("group", "all", {"all"}));
    s.pool = all;
    if (s.pool.size() < 2) return r.Error("group", "the topology has fewer than 2 hosts");
    *key_for_size = "group";
  }
  s.job_size = static_cast<int>(s.pool.size());
  return s;
}

absl::StatusOr<std::vector<NodeId>> ReadSlowHosts(YamlReader& r, const Topology& topo,
                                                  const JobsSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<NodeId> slow, r.OptionalHosts("slow_hosts", topo, {}));
  for (size_t i = 0; i < slow.size(); ++i) {
    if (std::find(spec.pool.begin(), spec.pool.end(), slow[i]) == spec.pool.end()) {
      return r.Error(fmt::format("slow_hosts[{}]", i),
                     fmt::format("'{}' is not in the {}", topo.node(slow[i]).name,
                                 spec.multi ? "pool" : "group"));
    }
  }
  return slow;
}

std::vector<bool> SlowFlags(const std::vector<NodeId>& group,
                            const std::vector<NodeId>& slow_hosts) {
  std::vector<bool> slow;
  slow.reserve(group.size());
  for (NodeId h : group) {
    slow.push_back(std::find(slow_hosts.begin(), slow_hosts.end(), h) != slow_hosts.end());
  }
  return slow;
}

NodeId RackOf(const Topology& topo, NodeId host) {
  return topo.link(topo.node(host).out_links[0]).dst;
}

int RacksSpanned(const Topology& topo, const std::vector<NodeId>& hosts) {
  std::set<NodeId> racks;
  for (NodeId h : hosts) racks.insert(RackOf(topo, h));
  return static_cast<int>(racks.size());
}

std::vector<std::vector<NodeId>> PlaceJobs(const JobsSpec& spec, const Topology& topo,
                                           Random& rng) {
  std::vector<NodeId> order;
  if (!spec.multi) {
    order = spec.pool;
  } else if (spec.placement == Placement::kRandom) {
    order = spec.pool;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  } else {
    std::vector<NodeId> rack_ids;
    std::vector<std::vector<NodeId>> racks;
    for (NodeId h : spec.pool) {
      const NodeId rack = RackOf(topo, h);
      auto it = std::find(rack_ids.begin(), rack_ids.end(), rack);
      if (it == rack_ids.end()) {
        rack_ids.push_back(rack);
        racks.emplace_back();
        it = rack_ids.end() - 1;
      }
      racks[it - rack_ids.begin()].push_back(h);
    }
    if (spec.placement == Placement::kPacked) {
      for (const std::vector<NodeId>& rack : racks)
        order.insert(order.end(), rack.begin(), rack.end());
    } else {
      for (size_t k = 0; order.size() < spec.pool.size(); ++k) {
        for (const std::vector<NodeId>& rack : racks) {
          if (k < rack.size()) order.push_back(rack[k]);
        }
      }
    }
  }
  std::vector<std::vector<NodeId>> jobs(spec.jobs);
  for (int j = 0; j < spec.jobs; ++j) {
    jobs[j].assign(order.begin() + static_cast<ptrdiff_t>(j) * spec.job_size,
                   order.begin() + static_cast<ptrdiff_t>(j + 1) * spec.job_size);
  }
  return jobs;
}

}  // namespace dar::sim::workloads
