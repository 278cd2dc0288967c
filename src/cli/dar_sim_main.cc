// dar-sim: the packet-level simulator and fluid analysis on the command line.
#include "CLI/CLI.hpp"
#include "cli/loads.h"
#include "cli/run.h"
#include "cli/table.h"

int main(int argc, char** argv) {
  CLI::App app{"dar-sim: compare routing policies in a packet-level simulation"};
  app.require_subcommand(1);
  dar::cli::AddRunCommand(app);
  dar::cli::AddLoadsCommand(app);
  dar::cli::AddTableCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
