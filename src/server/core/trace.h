// Triton's trace extension: which requests are traced (per server and per model: level, rate,
// count), the timestamps each traced request collects on its way (front end, Core, scheduler,
// execution), and where finished traces go: Triton's JSON trace file (`--trace-config
// triton,file=PATH`, every `log_frequency` traces to PATH.N, or all to PATH at shutdown) or an
// OpenTelemetry collector over OTLP/HTTP JSON (`--trace-config mode=opentelemetry`, otlp_export.h).
//
// The settings API (HTTP /v2/trace/setting and /v2/models/{m}/trace/setting, gRPC TraceSetting)
// uses Triton's names and string values: trace_level (a list: OFF, or TIMESTAMPS and/or TENSORS:
// each traced request's input and output tensors, in the trace file), trace_rate
// (one request in N is traced), trace_count (traces left to take; -1 = no limit), log_frequency,
// trace_file and trace_mode (both fixed at start-up: a network client never picks a path the
// server writes to).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace sampan::server {

//! What a traced request records: timestamps, tensors (Triton's TIMESTAMPS, TENSORS), or both.
struct TraceLevels {
  bool timestamps = false;
  bool tensors = false;
  bool on() const { return timestamps || tensors; }
  bool operator==(const TraceLevels& o) const { return timestamps == o.timestamps && tensors == o.tensors; }
};

class Tracer;
class OtlpExporter;

//! One traced request: its identity and named timestamps (steady clock).
class RequestTrace {
 public:
  using Clock = std::chrono::steady_clock;
  RequestTrace(std::shared_ptr<Tracer> tracer, uint64_t id, std::string model, std::string request_id,
               const char* protocol, TraceLevels levels = {true, false})
      : tracer_(std::move(tracer)),
        id_(id),
        model_(std::move(model)),
        request_id_(std::move(request_id)),
        protocol_(protocol),
        levels_(levels) {}

  //! `name` must be a string literal (Triton's names: HTTP_RECV_START, QUEUE_START, ...).
  void Record(const char* name, Clock::time_point t);
  //! Whether tensors are recorded (trace_level TENSORS): callers skip RecordTensor otherwise.
  bool tensors() const { return levels_.tensors; }
  //! A tensor at `activity` (a string literal: TENSOR_QUEUE_INPUT, TENSOR_BACKEND_OUTPUT), as Triton's
  //! trace file holds it: name, every element in one comma-separated string, shape and datatype.
  void RecordTensor(const char* activity, const std::string& name, const Tensor& value);
  //! The version that answered (the route may pick it: canaries, the newest version).
  void SetVersion(std::string version);
  //! The front end is done with the request: the trace goes to its file or collector.
  void Complete();

  uint64_t id() const { return id_; }
  const std::string& model() const { return model_; }
  //! Triton's trace-file objects for this trace: identity, timestamps (TIMESTAMPS), then one
  //! object per tensor (TENSORS).
  std::string TritonJson() const;
  //! OTLP spans (JSON objects) for this trace: the request, and its compute when it ran.
  std::string OtlpSpans(int64_t unix_minus_steady_ns, size_t* spans) const;

 private:
  std::shared_ptr<Tracer> tracer_;
  uint64_t id_;
  std::string model_, version_, request_id_;
  const char* protocol_;
  const TraceLevels levels_;
  mutable std::mutex mu_;  // stamps come from the front end's, Core's and the scheduler's threads
  std::vector<std::pair<const char*, int64_t>> stamps_;  // ns of the steady clock
  std::vector<std::string> tensors_;                     // Triton JSON objects, one per recorded tensor
  bool completed_ = false;
};

//! A scope's settings (the server's, or a model's with its overrides applied).
struct TraceSettings {
  TraceLevels levels;  //!< trace_level (none: OFF)
  uint64_t rate = 1000;
  int64_t count = -1;
  uint64_t log_frequency = 0;
};

//! Start-up configuration (`sampan serve --trace-config ...`, Triton's syntax).
struct TraceConfig {
  TraceSettings settings;
  std::string mode = "triton";  //!< or "opentelemetry"
  std::string file;             //!< triton mode: the trace file
  std::string otlp_url;         //!< opentelemetry mode: the collector's OTLP/HTTP traces endpoint
  std::vector<std::pair<std::string, std::string>> resource;  //!< OTLP resource attributes
};

//! Parses one --trace-config value into `config` ("level=TIMESTAMPS", "rate=100", "count=-1",
//! "mode=opentelemetry", "triton,file=PATH", "triton,log-frequency=N", "opentelemetry,url=URL",
//! "opentelemetry,resource=KEY=VALUE"); errors name the value.
Status ParseTraceConfig(const std::string& value, TraceConfig* config);

//! Settings as the API carries them: name -> values (one value, or trace_level's list).
//! `nullopt` in an update clears a model's override (the server's value applies again) or, for
//! the server, restores the start-up value.
using TraceSettingValues = std::map<std::string, std::vector<std::string>>;
using TraceSettingUpdate = std::map<std::string, std::optional<std::vector<std::string>>>;

//! Owned through a shared_ptr (Core's): every trace in flight keeps its tracer.
class Tracer : public std::enable_shared_from_this<Tracer> {
 public:
  Tracer();
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  //! Start-up configuration (before any request). Checks the file can be written and the URL parsed.
  Status Configure(const TraceConfig& config);
  //! The effective settings of `model` ("" = the server's).
  TraceSettingValues Get(const std::string& model) const;
  //! Changes settings all-or-nothing (errors name the setting and value); answers Get(model).
  Result<TraceSettingValues> Update(const std::string& model, const TraceSettingUpdate& update);

  //! A trace for this request when its model's settings sample it, else nullptr. Cheap when
  //! tracing is off everywhere (one relaxed load).
  std::shared_ptr<RequestTrace> Sample(const std::string& model, const std::string& request_id, const char* protocol);

  //! Writes what is buffered (log_frequency 0: everything to the trace file) and drains the
  //! exporter. Called at shutdown; later traces are buffered again.
  void Flush();

  //! Traces completed so far (tests and statistics).
  uint64_t completed() const { return completed_.load(); }

 private:
  friend class RequestTrace;
  struct Scope {
    // A model's overrides (the server's scope: none); its values win over the server's.
    std::optional<TraceLevels> levels;
    std::optional<uint64_t> rate;  // (log_frequency is the server's: one trace file)
    std::optional<int64_t> count;
    uint64_t seen = 0;       // requests offered to this scope
    int64_t remaining = -1;  // traces left (count), -1: no limit
  };
  TraceSettings EffectiveLocked(const Scope* model_scope) const;
  TraceSettingValues ValuesLocked(const Scope* model_scope) const;
  void RefreshEnabledLocked();
  void Collect(const RequestTrace& trace);
  //! A batch of buffered traces and the file it goes to, taken under mu_ and written after.
  struct PendingWrite {
    std::string path, json;
    size_t traces = 0;
    void Write() const;
  };
  //! Takes what is buffered: to FILE.<index> (`indexed`), else to FILE (the shutdown write of
  //! log_frequency 0; a second such write goes to an index, never over the first).
  PendingWrite TakeBufferedLocked(bool indexed);

  mutable std::mutex mu_;
  TraceConfig config_;    // start-up values (restored by a null update)
  TraceSettings server_;  // the server's current settings
  int64_t server_remaining_ = -1;
  uint64_t server_seen_ = 0;
  std::map<std::string, Scope> models_;
  std::atomic<bool> enabled_{false};  // some scope has a level on and traces left
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> completed_{0};
  std::vector<std::string> buffered_;  // Triton JSON of completed traces not yet written
  uint64_t file_index_ = 0;
  bool wrote_plain_file_ = false;
  uint64_t sampled_ = 0, collected_ = 0;  // traces handed out / completed (under mu_)
  int64_t unix_minus_steady_ns_ = 0;
  std::unique_ptr<OtlpExporter> exporter_;
};

}  // namespace sampan::server
