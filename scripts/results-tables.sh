#!/usr/bin/env bash
# The tables of docs/results.md from `make evaluate`'s summaries (out/eval/NAME/results.json):
# per use case its headline metrics, every policy, means ± half the 95% interval and the
# paired differences against ECMP. Usage: scripts/results-tables.sh [EVAL_DIR] [DAR_SIM]
set -euo pipefail
dir=${1:-out/eval}
sim=${2:-./build/src/cli/dar-sim}
table() {  # scenario, then metrics
  local s=$1; shift
  local args=()
  for m in "$@"; do args+=(--metric "$m"); done
  echo "### $s"
  echo
  "$sim" table "$dir/$s" "${args[@]}" --baseline ecmp
  echo
}
table allreduce-fattree comm_time_s iteration_time_s fct_p99_s
table allreduce-multijob comm_time_s comm_time_max_s iteration_time_s
table moe-alltoall alltoall_time_s alltoall_time_p99_s alltoall_iteration_time_s
table inference-tail latency_p50_s latency_p99_s latency_p999_s latency_long_p99_s
table incast qct_mean_s qct_p99_s fct_p99_s
table replication-wan completion_mean_s completion_stddev_s completion_max_s
table replication-geant completion_mean_s completion_stddev_s completion_max_s
for load in 30 50 70 90; do
  table websearch-asym-$load fct_mean_s fct_p99_s packets_dropped
done
table allreduce-failing-spine comm_time_s comm_time_max_s iteration_time_s
table allreduce-failed-core comm_time_s comm_time_max_s iteration_time_s
table inference-rack-hotspot latency_p99_s latency_long_p99_s fct_mean_s
for s in gray-failure flapping-link websearch-sym-70 websearch-sym-90 hadoop-sym-70 hadoop-sym-90; do
  table $s fct_mean_s fct_p99_s spurious_retransmissions
done
