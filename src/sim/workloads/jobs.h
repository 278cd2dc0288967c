// Jobs of a collective workload (allreduce, alltoall): which hosts each job runs on. Internal
// to the workloads in this directory.
//
// YAML, either one group (the original allreduce form):
//   hosts: [h0, h1, ...]  | group_size: G (the first G hosts) | group: all   (default: all)
// or several jobs placed on a pool of hosts:
//   jobs: 4               number of concurrent jobs (default 1)
//   job_size: 16          hosts per job (required in this form, >= 2)
//   placement: packed     packed | spread | random (default packed)
//   hosts: [...]          the pool to place on (default: every host)
//
// A rack is the switch a host hangs off (a leaf or edge switch). Racks are ordered by their
// first host in the pool, hosts within a rack in pool order. Placement, job j taking the next
// job_size hosts of an ordering of the pool:
//   packed  rack by rack: a job fills a rack before it uses the next (fewest racks per job);
//   spread  round-robin over the racks (one host of each rack, then a second of each, ...):
//           every job spans as many racks as it can, and consecutive ranks sit in different
//           racks;
//   random  a uniformly random permutation of the pool, drawn from the workload's seeded
//           random stream when it starts.
// A job's rank order (the ring order, the halving-doubling partners) is the order its hosts
// were taken in.
#ifndef DAR_SIM_WORKLOADS_JOBS_H_
#define DAR_SIM_WORKLOADS_JOBS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config_reader.h"
#include "core/random.h"
#include "core/topology.h"
#include "nlohmann/json.hpp"

namespace dar::sim::workloads {

enum class Placement { kPacked, kSpread, kRandom };

struct JobsSpec {
  // The jobs/job_size form was used (reports then carry per-job metrics).
  bool multi = false;
  std::vector<NodeId> pool;  // one group: the group itself, in rank order
  int jobs = 1;
  int job_size = 0;
  Placement placement = Placement::kPacked;
};

// Reads the keys above. `key_for_size` receives the key that fixed the job size (for errors
// about it: "job_size", "hosts", "group_size" or "group").
absl::StatusOr<JobsSpec> ReadJobs(YamlReader& r, const Topology& topo, std::string* key_for_size);

// The hosts of every job, in rank order. Draws from `rng` only for random placement.
std::vector<std::vector<NodeId>> PlaceJobs(const JobsSpec& spec, const Topology& topo, Random& rng);

// `slow_hosts` (default none): hosts that must be in spec.pool; errors name the element.
absl::StatusOr<std::vector<NodeId>> ReadSlowHosts(YamlReader& r, const Topology& topo,
                                                  const JobsSpec& spec);
// By rank of `group`: whether the host is one of `slow_hosts`.
std::vector<bool> SlowFlags(const std::vector<NodeId>& group,
                            const std::vector<NodeId>& slow_hosts);

// The switch `host` hangs off. REQUIRES: host has exactly one link.
NodeId RackOf(const Topology& topo, NodeId host);
// The number of distinct racks among `hosts`.
int RacksSpanned(const Topology& topo, const std::vector<NodeId>& hosts);

// {"job0": ..., "job1": ...} from per-job values.
template <typename T>
nlohmann::json ByJob(const std::vector<T>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t j = 0; j < values.size(); ++j) out["job" + std::to_string(j)] = values[j];
  return out;
}

}  // namespace dar::sim::workloads

#endif  // DAR_SIM_WORKLOADS_JOBS_H_
