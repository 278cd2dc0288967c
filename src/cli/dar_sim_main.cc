// dar-sim: the packet-level simulator and fluid analysis on the command line.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "base/version.h"
#include "cli/loads.h"
#include "cli/report.h"
#include "cli/run.h"
#include "cli/table.h"

int main(int argc, char** argv) {
  // A line at a time through a pipe too, so that what a run prints is seen as it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"dar-sim: compare routing policies in a packet-level simulation"};
  app.set_version_flag("--version", dar::VersionLine("dar-sim"));
  app.require_subcommand(1);
  dar::cli::AddRunCommand(app);
  dar::cli::AddLoadsCommand(app);
  dar::cli::AddTableCommand(app);
  dar::cli::AddReportCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command ran and ended with its own code (docs/simulator.md)
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; a bad command line is a usage error, exit 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
