// Whole files in and out, as every part of DAR reads its inputs (configurations, topologies,
// scenarios, models, keys, saved tables) and writes its state: one place for the size bound,
// the errors and the atomic replace.
#ifndef DAR_BASE_FILES_H_
#define DAR_BASE_FILES_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dar {

// The default bound on an input file: far above any topology, scenario or model DAR reads, far
// below what would exhaust memory.
inline constexpr size_t kMaxInputFileBytes = size_t{256} << 20;
// The bound on a daemon's configuration, certificate or key file.
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;

// Reads the whole file at `path`, of at most `max_bytes`. Errors name `path`: NotFound,
// PermissionDenied, InvalidArgument (a directory, or larger than `max_bytes`) or Internal.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     size_t max_bytes = kMaxInputFileBytes);

// Writes `contents` to `path` with exactly `mode`, through a temporary file in the same
// directory (synced, then renamed), so that a reader never sees a partial file. Without
// `overwrite` an existing `path` is an AlreadyExists error (link() refuses to replace it).
// Errors name the path and the failing step.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode,
                                 bool overwrite = true);

// A counter a daemon reserves ahead and keeps in a small JSON file, {"format": `format`, `key`:
// N} (control/table_versions.h, agent/sequence_floor.h).
// ReadCounterFile: N, or nullopt if there is no file. Errors name the file: InvalidArgument if it
// is not such an object or N is not below `bound`; those of ReadFile.
absl::StatusOr<std::optional<uint64_t>> ReadCounterFile(const std::string& path,
                                                        std::string_view format,
                                                        std::string_view key, uint64_t bound);
// WriteCounterFile: writes it atomically with `mode`, creating its directory.
absl::Status WriteCounterFile(const std::string& path, std::string_view format,
                              std::string_view key, uint64_t value, mode_t mode);

// "`what` '`path`': strerror(err)", as NotFound (ENOENT), PermissionDenied (EACCES, EPERM),
// AlreadyExists (EEXIST) or Internal.
absl::Status ErrnoStatus(int err, std::string_view what, const std::string& path);

}  // namespace dar

#endif  // DAR_BASE_FILES_H_
