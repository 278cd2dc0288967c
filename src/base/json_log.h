// The daemons' structured log (controller and agent alike): one JSON object per line,
//   {"time":"2025-01-02T03:04:05.678Z","level":"info","msg":"table accepted","version":12}
// to a file (appended), to stderr, or to a sink (tests). The fields of a message are merged
// into its object after time, level and msg. Thread-safe; a line is written whole.
#ifndef DAR_BASE_JSON_LOG_H_
#define DAR_BASE_JSON_LOG_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "nlohmann/json.hpp"

namespace dar {

enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn", "error"; InvalidArgument otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);
std::string_view LogLevelName(LogLevel level);

class JsonLog {
 public:
  // Receives each line, without the newline.
  using Sink = std::function<void(std::string_view line)>;
  // Nanoseconds since the Unix epoch, for the "time" field.
  using UnixClock = std::function<int64_t()>;

  // Appends to `path` (created if missing), or writes to stderr if `path` is empty.
  // Errors: the file cannot be opened, naming it.
  static absl::StatusOr<std::unique_ptr<JsonLog>> Open(const std::string& path, LogLevel level,
                                                       UnixClock clock = nullptr);
  // Writes to `sink`; `clock` defaults to the system clock.
  JsonLog(Sink sink, LogLevel level, UnixClock clock = nullptr);
  ~JsonLog();
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;

  // Writes `msg` with `fields` (a JSON object, or null) if `level` is enabled.
  void Write(LogLevel level, std::string_view msg, const nlohmann::json& fields = nullptr);
  void Debug(std::string_view msg, const nlohmann::json& fields = nullptr) {
    Write(LogLevel::kDebug, msg, fields);
  }
  void Info(std::string_view msg, const nlohmann::json& fields = nullptr) {
    Write(LogLevel::kInfo, msg, fields);
  }
  void Warn(std::string_view msg, const nlohmann::json& fields = nullptr) {
    Write(LogLevel::kWarn, msg, fields);
  }
  void Error(std::string_view msg, const nlohmann::json& fields = nullptr) {
    Write(LogLevel::kError, msg, fields);
  }

  bool enabled(LogLevel level) const { return level >= level_.load(); }
  void set_level(LogLevel level) { level_ = level; }

 private:
  JsonLog(std::FILE* out, bool owned, LogLevel level, UnixClock clock);

  Mutex mu_;  // one line at a time
  std::FILE* out_ = nullptr;
  bool owned_ = false;
  Sink sink_;
  std::atomic<LogLevel> level_;
  UnixClock clock_;
};

}  // namespace dar

#endif  // DAR_BASE_JSON_LOG_H_
