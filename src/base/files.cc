#include "base/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "nlohmann/json.hpp"

namespace dar {

absl::Status ErrnoStatus(int err, std::string_view what, const std::string& path) {
  const std::string text = fmt::format("{} '{}': {}", what, path, std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    case EEXIST:
      return absl::AlreadyExistsError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(fmt::format("'{}' is a directory, not a file", path));
  }
  std::string contents;
  absl::Status status;
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ErrnoStatus(errno, "cannot read", path);
      break;
    }
    contents.append(buf, static_cast<size_t>(n));
    if (contents.size() > max_bytes) {
      status =
          absl::InvalidArgumentError(fmt::format("'{}' is larger than {} bytes", path, max_bytes));
      break;
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return contents;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode,
                                 bool overwrite) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0 && errno == EEXIST) {
    // Left by a process with this pid that died before it could remove it (a container's
    // process 1 after a power loss has the same pid every time): it holds nothing of ours.
    unlink(tmp.c_str());
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  }
  if (fd < 0) return ErrnoStatus(errno, "cannot create", tmp);
  absl::Status status;
  for (size_t done = 0; done < contents.size() && status.ok();) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      status = ErrnoStatus(n == 0 ? EIO : errno, "cannot write", tmp);
    }
  }
  // open() applied the umask; the mode must be exactly `mode`.
  if (status.ok() && fchmod(fd, mode) != 0) status = ErrnoStatus(errno, "cannot chmod", tmp);
  if (status.ok() && fsync(fd) != 0) status = ErrnoStatus(errno, "cannot sync", tmp);
  if (close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "cannot close", tmp);
  if (status.ok()) {
    if (overwrite) {
      if (rename(tmp.c_str(), path.c_str()) != 0) {
        status = ErrnoStatus(errno, "cannot rename into", path);
      }
    } else if (link(tmp.c_str(), path.c_str()) != 0) {
      status = errno == EEXIST ? absl::AlreadyExistsError(fmt::format(
                                     "'{}' exists; remove it or pass --force to replace it", path))
                               : ErrnoStatus(errno, "cannot create", path);
    }
  }
  unlink(tmp.c_str());
  return status;
}

absl::StatusOr<std::optional<uint64_t>> ReadCounterFile(const std::string& path,
                                                        std::string_view format,
                                                        std::string_view key, uint64_t bound) {
  absl::StatusOr<std::string> text = ReadFile(path, 4096);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const std::string k(key);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != format || !j.contains(k) || !j[k].is_number_unsigned() ||
      j[k].get<uint64_t>() >= bound) {
    return absl::InvalidArgumentError(
        fmt::format("{}: not a JSON object with format \"{}\" and \"{}\" a number below {}", path,
                    format, key, bound));
  }
  return j[k].get<uint64_t>();
}

absl::Status WriteCounterFile(const std::string& path, std::string_view format,
                              std::string_view key, uint64_t value, mode_t mode) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  nlohmann::json j;
  j["format"] = format;
  j[std::string(key)] = value;
  return WriteFileAtomically(path, j.dump() + "\n", mode);
}

}  // namespace dar
