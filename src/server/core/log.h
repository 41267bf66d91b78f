// The server's log, with Triton's levels and settings: error, warning and info lines each on or
// off, verbose lines up to a level, to stderr or a file, in a format — "default" ("[serve] ..."),
// "ISO8601" (a UTC timestamp and the level first) or "json" (one object per line: time, level,
// message and any fields, e.g. the access log's). Every setting can change while the server runs
// (Triton's logging API: HTTP /v2/logging, gRPC LogSettings).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sampan::server {

enum class LogLevel { kError, kWarning, kInfo, kVerbose };

struct LogSettings {
  std::string file;  //!< "" = stderr
  bool info = true, warning = true, error = true;
  uint32_t verbose_level = 0;
  std::string format = "default";  //!< default | ISO8601 | json
  //! One info line per inference request (protocol, model, version, outcome, microseconds).
  bool access = false;
};

class Log {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  static Log& Get();
  LogSettings settings() const;
  //! Replaces the settings; refuses an unknown format or a file that cannot be opened for
  //! appending (the settings before stay).
  Status Update(const LogSettings& s);
  bool Enabled(LogLevel level, uint32_t verbose_level = 1) const;
  //! LogSettings::access and info lines on (without taking the lock: asked once per request).
  bool AccessEnabled() const { return access_.load(std::memory_order_relaxed); }
  //! Writes one line when `level` is enabled. `fields` go into json lines as their own keys and
  //! after the message as key=value otherwise.
  void Write(LogLevel level, std::string_view message, const Fields& fields = {}, uint32_t verbose_level = 1);

 private:
  Log() = default;
  mutable std::mutex mu_;
  LogSettings settings_;
  std::FILE* out_ = nullptr;  //!< the open log file; nullptr: stderr
  std::atomic<bool> access_{false};
};

//! One setting of Triton's logging API by name (log_file, log_info, log_warning, log_error,
//! log_verbose_level, log_format; and log_access), as the protocols carry it: a bool, an unsigned
//! integer or a string. Errors name the setting and the type it takes.
struct LogSettingValue {
  enum class Kind { kBool, kUint, kString } kind = Kind::kBool;
  bool b = false;
  uint64_t u = 0;
  std::string s;
};
Status ApplyLogSetting(LogSettings& settings, const std::string& name, const LogSettingValue& value);
//! Every setting by name, for the API's answers.
std::vector<std::pair<std::string, LogSettingValue>> LogSettingValues(const LogSettings& settings);

template <class... A>
void LogInfo(const A&... a) {
  if (Log::Get().Enabled(LogLevel::kInfo)) Log::Get().Write(LogLevel::kInfo, StrCat(a...));
}
template <class... A>
void LogWarning(const A&... a) {
  if (Log::Get().Enabled(LogLevel::kWarning)) Log::Get().Write(LogLevel::kWarning, StrCat(a...));
}
template <class... A>
void LogError(const A&... a) {
  if (Log::Get().Enabled(LogLevel::kError)) Log::Get().Write(LogLevel::kError, StrCat(a...));
}
template <class... A>
void LogVerbose(uint32_t level, const A&... a) {
  if (Log::Get().Enabled(LogLevel::kVerbose, level)) Log::Get().Write(LogLevel::kVerbose, StrCat(a...), {}, level);
}

}  // namespace sampan::server
