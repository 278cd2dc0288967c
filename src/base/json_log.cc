#include "base/json_log.h"

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"

namespace dar {

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

absl::StatusOr<std::unique_ptr<JsonLog>> JsonLog::Open(const std::string& path, LogLevel level,
                                                       UnixClock clock) {
  if (path.empty())
    return std::unique_ptr<JsonLog>(new JsonLog(stderr, false, level, std::move(clock)));
  std::FILE* f = std::fopen(path.c_str(), "ae");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("{}: cannot open the log: {}", path, std::strerror(errno)));
  }
  return std::unique_ptr<JsonLog>(new JsonLog(f, true, level, std::move(clock)));
}

JsonLog::JsonLog(std::FILE* out, bool owned, LogLevel level, UnixClock clock)
    : out_(out), owned_(owned), level_(level), clock_(std::move(clock)) {}

JsonLog::JsonLog(Sink sink, LogLevel level, UnixClock clock)
    : sink_(std::move(sink)), level_(level), clock_(std::move(clock)) {}

JsonLog::~JsonLog() {
  if (owned_) std::fclose(out_);
}

void JsonLog::Write(LogLevel level, std::string_view msg, const nlohmann::json& fields) {
  if (!enabled(level)) return;
  const absl::Time t = clock_ ? absl::FromUnixNanos(clock_()) : absl::Now();
  nlohmann::json line = {{"time", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone())},
                         {"level", LogLevelName(level)},
                         {"msg", msg}};
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) {
      if (key != "time" && key != "level" && key != "msg") line[key] = value;
    }
  }
  // Invalid UTF-8 (e.g. from a peer's message) is replaced rather than thrown about.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MutexLock lock(&mu_);
  if (sink_) {
    sink_(text);
    return;
  }
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace dar
