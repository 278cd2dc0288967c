#include "base/state_store.h"

#include <filesystem>
#include <system_error>

#include "base/files.h"
#include "fmt/format.h"

namespace dar {

absl::StatusOr<std::optional<std::string>> DirectoryStateStore::Read(const std::string& name) {
  absl::StatusOr<std::string> text = ReadFile(Where(name), kMaxDocumentBytes);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) return text.status();
  return std::optional<std::string>(std::move(*text));
}

absl::Status DirectoryStateStore::Write(const std::string& name, std::string_view text) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("{}: cannot create {}: {}", Where(name), dir_, ec.message()));
  }
  return WriteFileAtomically(Where(name), text, 0600);
}

}  // namespace dar
