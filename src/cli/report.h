// `dar-sim report DIR`: draws what `dar-sim run --out DIR` wrote (one run, or a --seeds
// directory with its seed-N/ runs and their summary) as SVG charts in DIR/report/, with an
// index.html that shows them with a caption each: completion-time CDFs, slowdown (or
// completion time) by size, the links' utilisation, queues and route changes over time, a
// collective's step times, and with several seeds each policy's key metrics with 95%
// intervals. docs/simulator.md lists the files.
#ifndef DAR_CLI_REPORT_H_
#define DAR_CLI_REPORT_H_

#include "CLI/CLI.hpp"

namespace dar::cli {

void AddReportCommand(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_REPORT_H_
