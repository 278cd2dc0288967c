// `dar-sim run SCENARIO --out DIR`: runs every policy of a scenario on the same workload and
// seed, prints the comparison table and writes DIR/results.json.
#ifndef DAR_CLI_RUN_H_
#define DAR_CLI_RUN_H_

#include "CLI/CLI.hpp"

namespace dar::cli {

void AddRunCommand(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_RUN_H_
