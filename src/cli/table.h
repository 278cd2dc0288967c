// `dar-sim table RESULTS --metric M [--metric M2 ...] [--policy P ...] [--baseline NAME]`: a
// Markdown table of a `dar-sim run --seeds` summary (DIR/results.json or DIR): per policy the mean
// of each metric with the half-width of its 95% interval, and the paired difference against the
// run's baseline with its interval, bold where it excludes zero (sim/seed_summary.h). With
// `--baseline NAME` the seed runs beside the summary (DIR/seed-N/results.json) are summarised
// afresh against NAME. For reports such as docs/results.md.
#ifndef DAR_CLI_TABLE_H_
#define DAR_CLI_TABLE_H_

#include "CLI/CLI.hpp"

namespace dar::cli {

void AddTableCommand(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_TABLE_H_
