#include "base/version.h"

#include "fmt/format.h"

namespace dar {

std::string_view Version() { return DAR_VERSION; }

std::string VersionLine(std::string_view program) {
  return fmt::format("{} {} (commit {})", program, Version(), BuildCommit());
}

}  // namespace dar
