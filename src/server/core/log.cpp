#include "server/core/log.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "base/report_util.h"

namespace sampan::server {
namespace {

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kVerbose:
      return "VERBOSE";
  }
  return "INFO";
}

std::string Iso8601Now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us));
  return buf;
}

}  // namespace

Log& Log::Get() {
  static Log* log = new Log();  // never destroyed: threads may log while the process exits
  return *log;
}

LogSettings Log::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

Status Log::Update(const LogSettings& s) {
  if (s.format != "default" && s.format != "ISO8601" && s.format != "json")
    return InvalidArgument("log format '", s.format, "': one of default, ISO8601, json");
  std::FILE* f = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (s.file != settings_.file && !s.file.empty()) {
    f = std::fopen(s.file.c_str(), "a");
    if (f == nullptr) return IoError("log file '", s.file, "' cannot be opened for appending");
  }
  if (s.file != settings_.file) {
    if (out_ != nullptr) std::fclose(out_);
    out_ = f;
  }
  settings_ = s;
  access_.store(s.access && s.info, std::memory_order_relaxed);
  return Status::Ok();
}

bool Log::Enabled(LogLevel level, uint32_t verbose_level) const {
  std::lock_guard<std::mutex> lock(mu_);
  switch (level) {
    case LogLevel::kError:
      return settings_.error;
    case LogLevel::kWarning:
      return settings_.warning;
    case LogLevel::kInfo:
      return settings_.info;
    case LogLevel::kVerbose:
      return verbose_level > 0 && settings_.verbose_level >= verbose_level;
  }
  return false;
}

void Log::Write(LogLevel level, std::string_view message, const Fields& fields, uint32_t verbose_level) {
  std::string line;
  std::lock_guard<std::mutex> lock(mu_);
  if (settings_.format == "json") {
    line = "{\"time\":";
    line += JsonQuote(Iso8601Now());
    line += ",\"level\":";
    line += JsonQuote(LevelName(level));
    if (level == LogLevel::kVerbose) line += ",\"verbose_level\":" + std::to_string(verbose_level);
    line += ",\"message\":";
    line += JsonQuote(message);
    for (const auto& [k, v] : fields) {
      line += ',';
      line += JsonQuote(k);
      line += ':';
      line += JsonQuote(v);
    }
    line += "}\n";
  } else {
    if (settings_.format == "ISO8601")
      line = Iso8601Now() + " " + LevelName(level) + " ";
    else
      line = level == LogLevel::kWarning ? "[serve] warning: "
             : level == LogLevel::kError ? "[serve] error: "
                                         : "[serve] ";
    line.append(message.data(), message.size());
    for (const auto& [k, v] : fields) line += " " + k + "=" + v;
    line += '\n';
  }
  std::FILE* out = out_ != nullptr ? out_ : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

Status ApplyLogSetting(LogSettings& s, const std::string& name, const LogSettingValue& v) {
  using K = LogSettingValue::Kind;
  auto want = [&](K kind, const char* what) -> Status {
    if (v.kind != kind) return InvalidArgument("log setting '", name, "' takes ", what);
    return Status::Ok();
  };
  if (name == "log_file") {
    SP_RETURN_IF_ERROR(want(K::kString, "a string (a file path; \"\" for stderr)"));
    s.file = v.s;
  } else if (name == "log_info" || name == "log_warning" || name == "log_error" || name == "log_access") {
    SP_RETURN_IF_ERROR(want(K::kBool, "a boolean"));
    (name == "log_info" ? s.info : name == "log_warning" ? s.warning : name == "log_error" ? s.error : s.access) = v.b;
  } else if (name == "log_verbose_level") {
    SP_RETURN_IF_ERROR(want(K::kUint, "a non-negative integer"));
    if (v.u > UINT32_MAX) return InvalidArgument("log setting 'log_verbose_level' ", v.u, " is too large");
    s.verbose_level = static_cast<uint32_t>(v.u);
  } else if (name == "log_format") {
    SP_RETURN_IF_ERROR(want(K::kString, "a string (default, ISO8601 or json)"));
    s.format = v.s;
  } else {
    return InvalidArgument("unknown log setting '", name,
                           "' (one of log_file, log_info, log_warning, log_error, log_verbose_level, log_format, "
                           "log_access)");
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, LogSettingValue>> LogSettingValues(const LogSettings& s) {
  using K = LogSettingValue::Kind;
  auto b = [](bool x) { return LogSettingValue{K::kBool, x, 0, {}}; };
  auto str = [](const std::string& x) { return LogSettingValue{K::kString, false, 0, x}; };
  return {{"log_file", str(s.file)},
          {"log_info", b(s.info)},
          {"log_warning", b(s.warning)},
          {"log_error", b(s.error)},
          {"log_verbose_level", LogSettingValue{K::kUint, false, s.verbose_level, {}}},
          {"log_format", str(s.format)},
          {"log_access", b(s.access)}};
}

}  // namespace sampan::server
