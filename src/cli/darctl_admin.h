// darctl's commands that talk to a running controller over its admin API (mutual TLS 1.3, an
// admin identity): `show topology|nodes|links|routes|events`, `policy show|set`,
// `link drain|undrain`. Every `show` prints a table, or JSON with -j.
#ifndef DAR_CLI_DARCTL_ADMIN_H_
#define DAR_CLI_DARCTL_ADMIN_H_

#include "CLI/CLI.hpp"

namespace dar::cli {

void AddAdminCommands(CLI::App& app);

}  // namespace dar::cli

#endif  // DAR_CLI_DARCTL_ADMIN_H_
