#include "control/controller_log.h"

#include <cerrno>
#include <cstring>

#include "absl/time/time.h"
#include "fmt/format.h"

namespace dar::control {

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      fmt::format("unknown log level '{}' (debug, info, warn, error)", name));
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<ControllerLog>> ControllerLog::Open(const std::string& path,
                                                                   LogLevel level,
                                                                   const ControllerClock& clock) {
  if (path.empty()) {
    return std::unique_ptr<ControllerLog>(new ControllerLog(stderr, false, level, clock));
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("log file {}: cannot open for appending: {}", path, std::strerror(errno)));
  }
  return std::unique_ptr<ControllerLog>(new ControllerLog(f, true, level, clock));
}

ControllerLog::~ControllerLog() {
  if (owned_) std::fclose(out_);
}

void ControllerLog::Write(LogLevel level, std::string_view msg, const nlohmann::json& fields) {
  if (!enabled(level)) return;
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixNanos(clock_.UnixNanos()),
                                  absl::UTCTimeZone());
  line["level"] = LogLevelName(level);
  line["msg"] = msg;
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) line[key] = value;
  }
  // Replace invalid UTF-8 (a peer's string) rather than throw.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
}

}  // namespace dar::control
