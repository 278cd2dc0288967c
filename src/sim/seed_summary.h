// The runs of one scenario under several seeds, summarised for a comparison that says how
// sure it is: per policy and metric the mean over the seeds with its 95% confidence interval,
// and per policy the paired per-seed difference against a reference policy, with its own 95%
// interval. Intervals are Student t (sim/stats.h, MeanCi95): seeds are independent runs of
// the same scenario, and the paired difference cancels what a seed does to every policy
// alike (the same workload draws, the same failures), so it is far tighter than the two
// means' intervals side by side.
//
// Pure functions; thread-compatible.
#ifndef DAR_SIM_SEED_SUMMARY_H_
#define DAR_SIM_SEED_SUMMARY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dar::sim {

// The runs of one scenario under several seeds (results as RunScenario gives them, the same
// policies in the same order) as one results object: every number of a policy's metrics is
// the mean over the runs that have it (nested objects alike), a flag is true if it is in every
// run, anything else is the first run's; "seeds" lists the seeds instead of "seed".
nlohmann::json MeanOfRuns(const std::vector<nlohmann::json>& runs);

// Summarises `runs` (results of RunScenario under different seeds: the same policies in the
// same order) against the policy named `baseline`. The result is MeanOfRuns(runs) (means in
// every policy's "metrics", "seeds" listing the seeds) plus
//   "baseline": NAME, "interval": "95% Student t",
//   per policy "ci95": the shape of "metrics" with every number replaced by [low, high] (null
//     ends with a single seed),
//   per policy but the baseline "vs_baseline": {metric: {"diff": mean of (policy - baseline)
//     over the seeds where both report the number, "ci95": [low, high], "relative": diff / the
//     baseline's mean (null where that mean is 0), "significant": the interval excludes 0}},
//     metrics flattened as "outer.inner".
//   per policy "missing_seeds": {metric: how many seeds lack it (or report null)}, where any
//     do, and "seeds_total"; such a metric is summarised over the seeds that have it,
//   "unfinished_seeds": the seeds in which a policy left work unfinished at the drain limit.
// Metrics are the union over the seeds. Booleans, strings and arrays get no interval. A paired
// difference within 1e-9 of the baseline's magnitude is never significant. InvalidArgument if
// `runs` is empty, the runs list different policies, or `baseline` is not one of them.
absl::StatusOr<nlohmann::json> SummarizeSeeds(const std::vector<nlohmann::json>& runs,
                                              const std::string& baseline);

// Two tables for a terminal: the means with their intervals' half-widths, then the paired
// differences against the baseline (relative where the baseline's mean is not 0), a `*`
// marking each whose interval excludes zero.
std::string FormatSeedSummary(const nlohmann::json& summary);

// A Markdown table of a summary for a report: a row per policy (`policies`, in that order;
// empty: all), for every metric of `metrics` (dotted paths) the mean with the half-width of
// its interval and the paired difference against the baseline, relative, with its interval;
// a difference whose interval excludes zero is bold; where the baseline's mean is 0, the
// difference is absolute. Seconds are shown in s, ms or µs by the baseline's magnitude; a
// mean over fewer than all seeds says "(n=K)". A metric the summary lacks shows "–".
// REQUIRES: `summary` is SummarizeSeeds' output; every name in `policies` is a policy of it.
std::string FormatSeedMarkdown(const nlohmann::json& summary,
                               const std::vector<std::string>& metrics,
                               const std::vector<std::string>& policies = {});

// Seeds from a command-line list: comma-separated numbers and inclusive ranges "A..B", e.g.
// "1..10" or "1,4,7..9". InvalidArgument naming the bad part, or a repeated or empty list.
absl::StatusOr<std::vector<uint64_t>> ParseSeedList(const std::string& text);

}  // namespace dar::sim

#endif  // DAR_SIM_SEED_SUMMARY_H_
