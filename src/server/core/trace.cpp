#include "server/core/trace.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/file_util.h"
#include "base/report_util.h"
#include "server/core/core.h"
#include "server/core/log.h"
#include "server/core/otlp_export.h"

namespace sampan::server {
namespace {

int64_t SteadyNs(RequestTrace::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

template <class T>
bool ParseInt(std::string_view s, T* out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && !s.empty();
}

// The one value of a single-valued setting.
Result<std::string> One(const std::string& name, const std::vector<std::string>& values) {
  if (values.size() != 1) return InvalidArgument("trace setting '", name, "' takes one value, got ", values.size());
  return values[0];
}

Result<uint64_t> Rate(const std::string& v, std::string_view what) {
  uint64_t r = 0;
  if (!ParseInt(v, &r) || r == 0) return InvalidArgument(what, " '", v, "' must be a whole number >= 1");
  return r;
}
Result<int64_t> Count(const std::string& v, std::string_view what) {
  int64_t c = 0;
  if (!ParseInt(v, &c) || c < -1)
    return InvalidArgument(what, " '", v, "' must be a whole number >= -1 (-1: no limit)");
  return c;
}
Result<uint64_t> Frequency(const std::string& v, std::string_view what) {
  uint64_t f = 0;
  if (!ParseInt(v, &f)) return InvalidArgument(what, " '", v, "' must be a whole number >= 0 (0: at shutdown)");
  return f;
}
Result<TraceLevels> Level(const std::vector<std::string>& levels, std::string_view what) {
  if (levels.empty()) return InvalidArgument(what, " needs at least one level (OFF, TIMESTAMPS, TENSORS)");
  TraceLevels l;
  bool off = false;
  for (const std::string& v : levels) {
    if (v == "TIMESTAMPS")
      l.timestamps = true;
    else if (v == "TENSORS")
      l.tensors = true;
    else if (v == "OFF")
      off = true;
    else
      return InvalidArgument(what, " '", v, "' is not a trace level (OFF, TIMESTAMPS, TENSORS)");
  }
  if (off && l.on()) return InvalidArgument(what, ": OFF cannot go with another level");
  return l;
}

std::vector<std::string> LevelNames(const TraceLevels& l) {
  std::vector<std::string> out;
  if (l.timestamps) out.push_back("TIMESTAMPS");
  if (l.tensors) out.push_back("TENSORS");
  if (out.empty()) out.push_back("OFF");
  return out;
}

// Every element of `t` as text, comma-separated (BYTES elements as JSON strings), for a trace's
// "data" (itself a JSON string: quoted once more by the caller).
std::string ElementsText(const Tensor& t) {
  std::string out;
  const int64_t n = t.numel();
  char buf[40];
  for (int64_t i = 0; i < n; ++i) {
    if (i) out.push_back(',');
    switch (t.dtype()) {
      case DType::kString:
        out += JsonQuote(t.data<std::string>()[i]);
        continue;
      case DType::kBool:
        out.push_back(t.data<bool>()[i] ? '1' : '0');
        continue;
      case DType::kFloat32:
        std::snprintf(buf, sizeof(buf), "%.9g", t.data<float>()[i]);
        break;
      case DType::kFloat64:
        std::snprintf(buf, sizeof(buf), "%.17g", t.data<double>()[i]);
        break;
      default: {
        const double v = ElementAsDouble(t, i);
        if (IsFloatDType(t.dtype()))
          std::snprintf(buf, sizeof(buf), "%.6g", v);
        else if (t.dtype() == DType::kUInt64)
          std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(t.data<uint64_t>()[i]));
        else if (t.dtype() == DType::kInt64)
          std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(t.data<int64_t>()[i]));
        else
          std::snprintf(buf, sizeof(buf), "%.0f", v);
      }
    }
    out += buf;
  }
  return out;
}

std::string RandomHex(size_t bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < bytes; ++j, v >>= 8) {
      out.push_back(kHex[(v >> 4) & 15]);
      out.push_back(kHex[v & 15]);
    }
  }
  return out;
}

std::string Attribute(std::string_view key, std::string_view value) {
  return StrCat("{\"key\":", JsonQuote(key), ",\"value\":{\"stringValue\":", JsonQuote(value), "}}");
}

}  // namespace

// ---------------------------------------------------------------- RequestTrace

void RequestTrace::Record(const char* name, Clock::time_point t) {
  std::lock_guard<std::mutex> lock(mu_);
  stamps_.emplace_back(name, SteadyNs(t));
}

void RequestTrace::RecordTensor(const char* activity, const std::string& name, const Tensor& value) {
  if (!levels_.tensors) return;
  std::string shape;
  for (size_t i = 0; i < value.shape().size(); ++i) shape += StrCat(i ? "," : "", value.shape()[i]);
  std::string json = StrCat("{\"id\":", id_, ",\"activity\":\"", activity, "\",\"tensor\":{\"name\":", JsonQuote(name),
                            ",\"data\":", JsonQuote(ElementsText(value)), ",\"shape\":", JsonQuote(shape),
                            ",\"dtype\":", JsonQuote(KServeDatatype(value.dtype())), "}}");
  std::lock_guard<std::mutex> lock(mu_);
  tensors_.push_back(std::move(json));
}

void RequestTrace::SetVersion(std::string version) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = std::move(version);
}

void RequestTrace::Complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_) return;
    completed_ = true;
  }
  tracer_->Collect(*this);
}

std::string RequestTrace::TritonJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = StrCat("{\"id\":", id_, ",\"model_name\":", JsonQuote(model_), ",\"model_version\":");
  int64_t v = 0;
  out += ParseInt(std::string_view(version_), &v) ? std::to_string(v) : JsonQuote(version_);
  out += StrCat(",\"request_id\":", JsonQuote(request_id_), ",\"parent_id\":0}");
  if (levels_.timestamps) {
    out += StrCat(",\n{\"id\":", id_, ",\"timestamps\":[");
    for (size_t i = 0; i < stamps_.size(); ++i)
      out += StrCat(i ? "," : "", "{\"name\":\"", stamps_[i].first, "\",\"ns\":", stamps_[i].second, "}");
    out += "]}";
  }
  for (const std::string& t : tensors_) out += ",\n" + t;
  return out;
}

std::string RequestTrace::OtlpSpans(int64_t unix_minus_steady_ns, size_t* spans) const {
  std::lock_guard<std::mutex> lock(mu_);
  *spans = 0;
  if (stamps_.empty()) return "";
  *spans = 1;
  int64_t first = stamps_[0].second, last = first, compute_start = -1, compute_end = -1;
  for (const auto& [name, ns] : stamps_) {
    first = std::min(first, ns);
    last = std::max(last, ns);
    if (std::strcmp(name, "COMPUTE_START") == 0) compute_start = ns;
    if (std::strcmp(name, "COMPUTE_END") == 0) compute_end = ns;
  }
  auto unix_ns = [&](int64_t ns) { return StrCat("\"", ns + unix_minus_steady_ns, "\""); };
  const std::string trace_id = RandomHex(16), span_id = RandomHex(8);
  std::string out = StrCat(
      "{\"traceId\":\"", trace_id, "\",\"spanId\":\"", span_id,
      "\",\"name\":\"InferRequest\",\"kind\":2,\"startTimeUnixNano\":", unix_ns(first),
      ",\"endTimeUnixNano\":", unix_ns(last), ",\"attributes\":[", Attribute("triton.model_name", model_), ",",
      Attribute("triton.model_version", version_), ",", Attribute("triton.trace_id", std::to_string(id_)), ",",
      Attribute("triton.request_id", request_id_), ",", Attribute("sampan.protocol", protocol_), "],\"events\":[");
  for (size_t i = 0; i < stamps_.size(); ++i)
    out +=
        StrCat(i ? "," : "", "{\"name\":\"", stamps_[i].first, "\",\"timeUnixNano\":", unix_ns(stamps_[i].second), "}");
  out += "]}";
  if (compute_start >= 0 && compute_end >= compute_start && ++*spans)
    out += StrCat(",{\"traceId\":\"", trace_id, "\",\"spanId\":\"", RandomHex(8), "\",\"parentSpanId\":\"", span_id,
                  "\",\"name\":\"compute\",\"kind\":1,\"startTimeUnixNano\":", unix_ns(compute_start),
                  ",\"endTimeUnixNano\":", unix_ns(compute_end), ",\"attributes\":[",
                  Attribute("triton.model_name", model_), ",", Attribute("triton.model_version", version_), "]}");
  return out;
}

// ---------------------------------------------------------------- configuration

Status ParseTraceConfig(const std::string& value, TraceConfig* c) {
  const std::string what = StrCat("--trace-config '", value, "'");
  std::string_view rest(value);
  std::string section;
  if (const size_t comma = rest.find(','); comma != std::string_view::npos && comma < rest.find('=')) {
    section.assign(rest.substr(0, comma));
    rest.remove_prefix(comma + 1);
  }
  const size_t eq = rest.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return InvalidArgument(what, ": expected [triton,|opentelemetry,]SETTING=VALUE");
  const std::string key(rest.substr(0, eq)), v(rest.substr(eq + 1));
  if (section.empty()) {
    if (key == "level") {
      std::vector<std::string> levels;
      for (size_t start = 0;;) {  // "TIMESTAMPS" (a list may be comma-free only in this form)
        const size_t bar = v.find('|', start);
        levels.push_back(v.substr(start, bar - start));
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      SP_ASSIGN_OR_RETURN(TraceLevels l, Level(levels, what));
      // Triton's level may be given more than once (level=TIMESTAMPS, level=TENSORS): the levels
      // add up; OFF clears them.
      c->settings.levels =
          l.on() ? TraceLevels{c->settings.levels.timestamps || l.timestamps, c->settings.levels.tensors || l.tensors}
                 : TraceLevels{};
      return Status::Ok();
    }
    if (key == "rate") {
      SP_ASSIGN_OR_RETURN(c->settings.rate, Rate(v, what));
      return Status::Ok();
    }
    if (key == "count") {
      SP_ASSIGN_OR_RETURN(c->settings.count, Count(v, what));
      return Status::Ok();
    }
    if (key == "mode") {
      if (v != "triton" && v != "opentelemetry")
        return InvalidArgument(what, ": mode is triton (a trace file) or opentelemetry (OTLP/HTTP)");
      c->mode = v;
      return Status::Ok();
    }
    return InvalidArgument(what, ": unknown setting '", key,
                           "' (level, rate, count, mode; triton,file=...; "
                           "opentelemetry,url=...)");
  }
  if (section == "triton") {
    if (key == "file") {
      if (v.empty()) return InvalidArgument(what, ": the trace file path is empty");
      c->file = v;
      return Status::Ok();
    }
    if (key == "log-frequency" || key == "log_frequency") {
      SP_ASSIGN_OR_RETURN(c->settings.log_frequency, Frequency(v, what));
      return Status::Ok();
    }
    return InvalidArgument(what, ": unknown triton setting '", key, "' (file, log-frequency)");
  }
  if (section == "opentelemetry") {
    if (key == "url") {
      SP_RETURN_IF_ERROR(ParseOtlpUrl(v).status().WithContext(what));
      c->otlp_url = v;
      return Status::Ok();
    }
    if (key == "resource") {
      const size_t eq2 = v.find('=');
      if (eq2 == std::string::npos || eq2 == 0) return InvalidArgument(what, ": resource is KEY=VALUE");
      c->resource.emplace_back(v.substr(0, eq2), v.substr(eq2 + 1));
      return Status::Ok();
    }
    return InvalidArgument(what, ": unknown opentelemetry setting '", key, "' (url, resource)");
  }
  return InvalidArgument(what, ": unknown section '", section, "' (triton, opentelemetry)");
}

// ---------------------------------------------------------------- Tracer

Tracer::Tracer() {
  const auto unix_now = std::chrono::system_clock::now().time_since_epoch();
  const auto steady_now = std::chrono::steady_clock::now().time_since_epoch();
  unix_minus_steady_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(unix_now).count() -
                          std::chrono::duration_cast<std::chrono::nanoseconds>(steady_now).count();
}

Tracer::~Tracer() {
  Flush();
  exporter_.reset();
}

Status Tracer::Configure(const TraceConfig& config) {
  if (config.settings.rate == 0) return InvalidArgument("trace rate 0: one request in N is traced, N >= 1");
  if (config.settings.count < -1) return InvalidArgument("trace count ", config.settings.count, ": -1 or more");
  std::unique_ptr<OtlpExporter> exporter;
  if (config.mode == "opentelemetry") {
    if (config.otlp_url.empty())
      return InvalidArgument("--trace-config mode=opentelemetry needs --trace-config opentelemetry,url=URL");
    if (!config.file.empty())
      return InvalidArgument("--trace-config triton,file=... goes with mode=triton, not opentelemetry");
    if (config.settings.levels.tensors)
      return InvalidArgument(
          "--trace-config level=TENSORS: tensors are written to Triton's trace file only "
          "(mode=triton); OpenTelemetry spans carry timestamps");
    SP_ASSIGN_OR_RETURN(OtlpEndpoint endpoint, ParseOtlpUrl(config.otlp_url));
    exporter = std::make_unique<OtlpExporter>(std::move(endpoint), config.resource);
  } else {
    if (!config.otlp_url.empty() || !config.resource.empty())
      return InvalidArgument("--trace-config opentelemetry,... settings need --trace-config mode=opentelemetry");
    if (config.settings.levels.on() && config.file.empty())
      return InvalidArgument("--trace-config level=", LevelNames(config.settings.levels).front(),
                             " needs a trace file: --trace-config triton,file=PATH");
    if (!config.file.empty()) {
      // Written now so a path that cannot be written is named at start-up, not at shutdown.
      SP_RETURN_IF_ERROR(WriteFileAtomic(config.file, "[]\n").WithContext("--trace-config triton,file"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  config_ = config;
  server_ = config.settings;
  server_remaining_ = server_.count;
  server_seen_ = 0;
  models_.clear();
  exporter_ = std::move(exporter);
  RefreshEnabledLocked();
  return Status::Ok();
}

TraceSettings Tracer::EffectiveLocked(const Scope* m) const {
  TraceSettings s = server_;
  if (m == nullptr) return s;
  if (m->levels) s.levels = *m->levels;
  if (m->rate) s.rate = *m->rate;
  if (m->count) s.count = *m->count;
  return s;
}

TraceSettingValues Tracer::ValuesLocked(const Scope* m) const {
  const TraceSettings s = EffectiveLocked(m);
  int64_t remaining = server_remaining_;
  if (m != nullptr && m->count) remaining = m->remaining;
  return {{"trace_level", LevelNames(s.levels)},
          {"trace_rate", {std::to_string(s.rate)}},
          {"trace_count", {std::to_string(remaining)}},
          {"log_frequency", {std::to_string(server_.log_frequency)}},
          {"trace_file", {config_.file}},
          {"trace_mode", {config_.mode}}};
}

TraceSettingValues Tracer::Get(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  return ValuesLocked(model.empty() || it == models_.end() ? nullptr : &it->second);
}

Result<TraceSettingValues> Tracer::Update(const std::string& model, const TraceSettingUpdate& update) {
  std::unique_lock<std::mutex> lock(mu_);
  // Every change is checked on copies first: all or nothing.
  TraceSettings server = server_;
  int64_t server_remaining = server_remaining_;
  Scope scope;
  if (auto it = models_.find(model); !model.empty() && it != models_.end()) scope = it->second;
  for (const auto& [name, values] : update) {
    const std::string what = StrCat("trace setting '", name, "'");
    if (name == "trace_file" || name == "trace_mode")
      return InvalidArgument(what,
                             " is fixed at start-up (--trace-config): a client does not choose where the "
                             "server writes");
    if (name == "log_frequency" && !model.empty())
      return InvalidArgument(what, " belongs to the server's trace file: update it with no model name");
    if (name != "trace_level" && name != "trace_rate" && name != "trace_count" && name != "log_frequency")
      return InvalidArgument("unknown trace setting '", name,
                             "' (trace_level, trace_rate, trace_count, log_frequency; trace_file and trace_mode "
                             "are read-only)");
    if (!values) {  // cleared: the server's value again (for the server: its start-up value)
      const TraceSettings& start = config_.settings;
      if (name == "trace_level") {
        if (model.empty())
          server.levels = start.levels;
        else
          scope.levels.reset();
      } else if (name == "trace_rate") {
        if (model.empty())
          server.rate = start.rate;
        else
          scope.rate.reset();
      } else if (name == "trace_count") {
        if (model.empty())
          server.count = server_remaining = start.count;
        else
          scope.count.reset();
      } else {
        server.log_frequency = start.log_frequency;
      }
      continue;
    }
    if (name == "trace_level") {
      SP_ASSIGN_OR_RETURN(TraceLevels l, Level(*values, what));
      if (l.tensors && config_.mode != "triton")
        return InvalidArgument(what,
                               " TENSORS: tensors are written to Triton's trace file only (mode=triton); this "
                               "server exports OpenTelemetry spans");
      if (model.empty())
        server.levels = l;
      else
        scope.levels = l;
      continue;
    }
    SP_ASSIGN_OR_RETURN(std::string v, One(name, *values));
    if (name == "trace_rate") {
      SP_ASSIGN_OR_RETURN(uint64_t r, Rate(v, what));
      if (model.empty())
        server.rate = r;
      else
        scope.rate = r;
    } else if (name == "trace_count") {
      SP_ASSIGN_OR_RETURN(int64_t n, Count(v, what));
      if (model.empty())
        server.count = server_remaining = n;
      else
        scope.count = scope.remaining = n;
    } else {
      SP_ASSIGN_OR_RETURN(server.log_frequency, Frequency(v, what));
    }
  }
  const bool on = model.empty() ? server.levels.on() : scope.levels.value_or(server.levels).on();
  if (on && config_.mode == "triton" && config_.file.empty())
    return InvalidArgument(
        "tracing needs a trace file, and this server has none: start it with --trace-config "
        "triton,file=PATH");
  PendingWrite flushed;  // traces buffered under the old log_frequency: out before it changes
  if (server.log_frequency != server_.log_frequency && !buffered_.empty()) flushed = TakeBufferedLocked(true);
  server_ = server;
  server_remaining_ = server_remaining;
  const Scope* result = nullptr;
  if (!model.empty()) {
    if (!scope.levels && !scope.rate && !scope.count) {
      models_.erase(model);  // nothing of its own left: it follows the server again
    } else {
      Scope& kept = models_[model];
      const uint64_t seen = kept.seen;
      kept = scope;
      kept.seen = seen;
      result = &kept;
    }
  }
  RefreshEnabledLocked();
  TraceSettingValues values = ValuesLocked(result);
  lock.unlock();
  flushed.Write();
  return values;
}

void Tracer::RefreshEnabledLocked() {
  bool on = server_.levels.on() && server_remaining_ != 0;
  for (const auto& [name, m] : models_) {
    const bool ts = m.levels.value_or(server_.levels).on();
    const int64_t left = m.count ? m.remaining : server_remaining_;
    on = on || (ts && left != 0);
  }
  enabled_.store(on, std::memory_order_relaxed);
}

std::shared_ptr<RequestTrace> Tracer::Sample(const std::string& model, const std::string& request_id,
                                             const char* protocol) {
  if (!enabled_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  Scope* m = it == models_.end() ? nullptr : &it->second;
  const TraceSettings s = EffectiveLocked(m);
  if (!s.levels.on()) return nullptr;
  // The counters are the model's when it has its own rate or count, else the server's.
  const bool own_rate = m != nullptr && m->rate;
  uint64_t& seen = own_rate ? m->seen : server_seen_;
  const bool take = ++seen % s.rate == 0;  // Triton's: the rate-th request, then every rate-th
  if (!take) return nullptr;
  int64_t& left = m != nullptr && m->count ? m->remaining : server_remaining_;
  if (left == 0) return nullptr;
  if (left > 0 && --left == 0) RefreshEnabledLocked();
  ++sampled_;
  return std::make_shared<RequestTrace>(shared_from_this(), next_id_.fetch_add(1), model, request_id, protocol,
                                        s.levels);
}

void Tracer::Collect(const RequestTrace& trace) {
  completed_.fetch_add(1);
  // The text is made outside the tracer's lock (every Sample() waits on it), and so is the file.
  OtlpExporter* exporter = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exporter = exporter_.get();  // set by Configure, before any request
  }
  size_t spans = 0;
  std::string text = exporter != nullptr ? trace.OtlpSpans(unix_minus_steady_ns_, &spans) : trace.TritonJson();
  PendingWrite write;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++collected_;
    if (exporter != nullptr) {
      if (spans > 0) exporter->Add(std::move(text), spans);
      return;
    }
    if (config_.file.empty()) return;  // (tracing was never given a file)
    buffered_.push_back(std::move(text));
    // Written every log_frequency traces, and (as Triton) once the trace count has run out and
    // every trace handed out is in.
    auto it = models_.find(trace.model());
    const int64_t left = it != models_.end() && it->second.count ? it->second.remaining : server_remaining_;
    const bool full = server_.log_frequency > 0 && buffered_.size() >= server_.log_frequency;
    const bool exhausted = left == 0 && collected_ == sampled_;
    if (full || exhausted) write = TakeBufferedLocked(true);
  }
  write.Write();
}

Tracer::PendingWrite Tracer::TakeBufferedLocked(bool indexed) {
  PendingWrite w;
  if (buffered_.empty() || config_.file.empty()) return w;
  w.json = "[\n";
  for (size_t i = 0; i < buffered_.size(); ++i) {
    if (i) w.json += ",\n";
    w.json += buffered_[i];
  }
  w.json += "\n]\n";
  w.traces = buffered_.size();
  buffered_.clear();
  if (!indexed && (server_.log_frequency > 0 || file_index_ > 0 || wrote_plain_file_)) indexed = true;
  if (indexed) {
    w.path = StrCat(config_.file, ".", file_index_++);
  } else {
    w.path = config_.file;
    wrote_plain_file_ = true;
  }
  return w;
}

void Tracer::PendingWrite::Write() const {
  if (traces == 0) return;
  if (Status st = WriteFileAtomic(path, json); !st.ok()) LogWarning("trace: ", traces, " traces lost: ", st.message());
}

void Tracer::Flush() {
  OtlpExporter* exporter = nullptr;
  PendingWrite write;
  {
    std::lock_guard<std::mutex> lock(mu_);
    write = TakeBufferedLocked(false);
    exporter = exporter_.get();
  }
  write.Write();
  if (exporter != nullptr) exporter->Flush();
}

}  // namespace sampan::server
