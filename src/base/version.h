// The version of this build, for --version, start-up logs and results files.
#ifndef DAR_BASE_VERSION_H_
#define DAR_BASE_VERSION_H_

#include <string>
#include <string_view>

namespace dar {

// The project's release (CMake's PROJECT_VERSION), e.g. "0.9.0".
std::string_view Version();
// The git commit the build was made from, 12 hex digits, "-dirty" appended when tracked files
// differed from it; "unknown" when built outside a git checkout. Read at build time, not
// configure time, so it follows every commit.
std::string_view BuildCommit();
// "<program> <version> (commit <commit>)": what --version prints.
std::string VersionLine(std::string_view program);

}  // namespace dar

#endif  // DAR_BASE_VERSION_H_
