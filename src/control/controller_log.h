// The controller's structured log: one JSON object per line,
//   {"time":"2025-01-02T03:04:05.678Z","level":"info","msg":"agent connected","node":"A",...}
// to a file (appended) or to stderr. Thread-safe; a line is written whole.
#ifndef DAR_CONTROL_CONTROLLER_LOG_H_
#define DAR_CONTROL_CONTROLLER_LOG_H_

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "control/controller_clock.h"
#include "nlohmann/json.hpp"

namespace dar::control {

enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn", "error"; InvalidArgument otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);
std::string_view LogLevelName(LogLevel level);

class ControllerLog {
 public:
  // Appends to `path` (created if missing), or writes to stderr if `path` is empty.
  // `clock` must outlive the log. Errors: the file cannot be opened, naming it.
  static absl::StatusOr<std::unique_ptr<ControllerLog>> Open(const std::string& path,
                                                             LogLevel level,
                                                             const ControllerClock& clock);
  ~ControllerLog();
  ControllerLog(const ControllerLog&) = delete;
  ControllerLog& operator=(const ControllerLog&) = delete;

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
  ControllerLog(std::FILE* out, bool owned, LogLevel level, const ControllerClock& clock)
      : out_(out), owned_(owned), level_(level), clock_(clock) {}

  std::mutex mu_;
  std::FILE* out_;
  bool owned_;
  std::atomic<LogLevel> level_;
  const ControllerClock& clock_;
};

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_LOG_H_
