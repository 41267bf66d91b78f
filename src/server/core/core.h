// server::Core: the protocol-independent inference server. It owns the model
// repository (scan, load/unload/reload, versions), one scheduler per loaded
// model version, and the statistics/metrics. The HTTP and gRPC front ends
// translate their protocol into these calls and nothing else; they know
// nothing of batching, backends or kernels (docs/architecture.md).
//
// Thread safety: every method may be called from any thread at any time.
// Infer() never blocks on inference: the callback runs later, exactly once,
// on a scheduler thread (or inline, for errors found before queueing).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "base/tensor.h"
#include "plan/signature.h"
#include "server/core/instance_rate_limiter.h"
#include "server/core/shared_memory.h"
#include "server/core/trace.h"
#include "server/repository/model_config.h"

namespace sampan::server {

//! KServe v2 datatype name <-> DType ("FP32" <-> kFloat32, "BOOL", "INT64", "FP16", "BF16", ...;
//! "BYTES" <-> kString: a string tensor, server/core/bytes_format.h gives its wire form).
//! kUndefined / "" when there is no mapping.
DType DTypeFromKServe(const std::string& datatype);
const char* KServeDatatype(DType dtype);

//! One named tensor of a request or response. `data` is contiguous in
//! row-major order and may wrap the front end's receive buffer (zero copy):
//! the request's `keepalive` owns that memory.
struct InferTensor {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  Tensor data;
};

//! Parameters a front end passes through (KServe "parameters" objects).
using Parameters = std::map<std::string, std::string>;

//! A request's place in a sequence (sequence models, Triton's sequence batcher): the
//! correlation ID, a number or a string, and the START / END flags.
struct SequenceRef {
  uint64_t number = 0;  //!< 0: none (unless `text` is set)
  std::string text;     //!< a string correlation ID
  bool start = false;
  bool end = false;
  bool given() const { return number != 0 || !text.empty(); }
  bool any() const { return given() || start || end; }
};

struct InferRequest {
  std::string model_name;
  std::string model_version;  //!< "" = the newest ready version allowed by the version policy
  std::string id;             //!< echoed in the response
  std::vector<InferTensor> inputs;
  //! Outputs wanted, in order; empty = every model output in config order.
  std::vector<std::string> outputs;
  uint32_t priority = 0;    //!< 0 = the model's default_priority_level
  uint64_t timeout_us = 0;  //!< 0 = the queue policy's default (if allow_timeout_override)
  SequenceRef sequence;     //!< sequence_id, sequence_start, sequence_end
  Parameters parameters;
  //! Set by the front end when the client cancels or disconnects; the
  //! scheduler drops the request if it has not run yet (callback: kCancelled).
  std::shared_ptr<std::atomic<bool>> cancelled;
  //! Keeps alive whatever the input tensors wrap.
  std::shared_ptr<void> keepalive;
  //! When the front end received the first byte (for request-duration stats).
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
  //! The front end that took it ("http", "grpc", "grpc-stream"; "" for requests made inside the
  //! server, an ensemble's steps): named in the access log, which only logs front-end requests.
  const char* protocol = "";
  //! Set by the front end when the tracer samples this request (trace.h): the stages record
  //! their timestamps in it; the front end completes it once the answer is sent.
  std::shared_ptr<RequestTrace> trace;
};

struct InferResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<InferTensor> outputs;  //!< in the order requested
  Parameters parameters;
  //! From a decoupled model (model_transaction_policy): the streaming front end sends each
  //! row of the outputs' leading dimension as a response of its own (0 rows: none).
  bool decoupled = false;
};

//! Called exactly once per Infer() call.
using InferCallback = std::function<void(Result<InferResponse>)>;

struct TensorMetadata {
  std::string name;
  std::string datatype;        //!< KServe name, "FP32"
  std::vector<int64_t> shape;  //!< -1 for variable dims; includes the batch dim (-1) when max_batch_size > 0
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;  //!< ready versions, ascending
  std::string platform;               //!< "onnxruntime_onnx" for ONNX, "sampan_plan" for plans
  std::vector<TensorMetadata> inputs;
  std::vector<TensorMetadata> outputs;
};

struct ServerMetadata {
  std::string name = "sampan";
  std::string version;
  std::vector<std::string> extensions;
};

//! Model states, as Triton's repository index names them.
enum class ModelState { kUnknown, kLoading, kReady, kUnloading, kUnavailable };
const char* ModelStateName(ModelState s);  //!< "READY", "UNAVAILABLE", "LOADING", "UNLOADING", "UNKNOWN"

struct RepositoryEntry {
  std::string name;
  std::string version;  //!< "" for a model never loaded
  ModelState state = ModelState::kUnknown;
  std::string reason;  //!< why UNAVAILABLE (load error, unloaded); for a READY version, its devices out of service
};

//! Triton's statistics extension (v2/models/stats), cumulative since load.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};
struct InferStats {
  DurationStat success, fail, queue, compute_input, compute_infer, compute_output, cache_hit, cache_miss;
};
//! A decoupled model's responses, by index within a request (Triton's response_stats).
struct ResponseStat {
  DurationStat compute_infer, compute_output, success, fail, empty_response, cancel;
};
struct BatchStat {
  uint64_t batch_size = 0;
  DurationStat compute_input, compute_infer, compute_output;
};
//! Triton's statistics memory_usage entry: memory a loaded version holds.
struct MemoryUsage {
  std::string type;  //!< "CPU", "CPU_PINNED" or "GPU"
  int64_t id = 0;    //!< the device (0 for CPU)
  uint64_t byte_size = 0;
};

//! The SLO batcher's state and choices (a model with sampan.latency_slo_ms and no batching knobs):
//! the HTTP statistics' "slo_batcher" object (Triton's gRPC message has no field for it; the
//! sampan_slo_* metrics carry the same figures).
struct SloStats {
  double latency_slo_ms = 0;
  int64_t target_batch_size = 0;  //!< what the arrival rate asked for at the last decision
  int64_t max_batch_size = 0;     //!< the largest bucket that fits the SLO (the cap)
  double arrival_per_s = 0;       //!< inferences per second arriving
  double capacity_per_s = 0;      //!< inferences per second the instances complete at the cap
  uint64_t shed = 0;              //!< requests taken out of the queue as unable to meet the SLO
  uint64_t late = 0;              //!< requests that ran but ended after arrival + SLO
  uint64_t waits = 0;             //!< decisions to wait for a larger batch
  struct Bucket {
    int64_t batch_size = 0;
    double mean_us = 0, stddev_us = 0;  //!< estimated execution time
    uint64_t samples = 0;               //!< executions measured (warm-up included)
    uint64_t executions = 0;            //!< batches the batcher ran in this bucket
  };
  std::vector<Bucket> buckets;
};

struct ModelStats {
  std::string name;
  std::string version;
  uint64_t last_inference_ms = 0;  //!< ms since the epoch
  uint64_t inference_count = 0;    //!< samples (batch dims) inferred
  uint64_t execution_count = 0;    //!< backend executions (batches)
  InferStats inference_stats;
  std::vector<BatchStat> batch_stats;
  //! Decoupled models only: response k of the requests (a row each); index N, the
  //! end-of-request response, counts as empty_response. Failures and cancels at index 0.
  std::map<uint64_t, ResponseStat> response_stats;
  //! What the version's engines and instances hold, per place (memory_account.h: weights, arenas,
  //! workspaces, staging; VersionMemoryUsage).
  std::vector<MemoryUsage> memory_usage;
  std::optional<SloStats> slo;  //!< set when the SLO batcher schedules the version
};

struct CoreOptions {
  std::string repository;
  enum class ControlMode { kNone, kPoll, kExplicit } control_mode = ControlMode::kNone;
  int poll_secs = 15;
  //! Models to load at start in explicit mode ("*" = all); ignored otherwise (all are loaded).
  std::vector<std::string> startup_models;
  bool strict_readiness = true;
  //! Backend for models whose config does not choose one: "" = the best in this build
  //! (cuda when a GPU is present and KIND_GPU, else cpu, else reference).
  std::string default_backend;
  int threads_per_instance = 0;  //!< CPU threads per instance's engine; 0 = cores / instances
  //! The response cache's size (--cache-config local,size=N); 0: no cache, and a model whose
  //! config enables response_cache fails to load.
  size_t response_cache_bytes = 0;
  //! --plan-trust: when set, a model's plan file loads only with a valid signature by one of these
  //! keys (plan/signature.h). Plans this server builds from ONNX and caches are its own.
  std::shared_ptr<const std::vector<plan::TrustedKey>> plan_trust;
  //! --model-load-thread-count: models loaded at once at start-up (each model's loads and unloads
  //! stay serialised; explicit loads of different models run in parallel whatever this is).
  int model_load_threads = 4;
  //! --max-request-elements: a request whose inputs hold more elements in all is refused
  //! (kInvalidArgument naming both counts) before it reaches a model; 0 = no limit.
  int64_t max_request_elements = 0;
  //! --rate-limit / --rate-limit-resource: Triton's rate limiter over every model's instances
  //! (instance_rate_limiter.h); off by default.
  RateLimiterOptions rate_limiter;
  //! --gpu-health-rule values (gpu_health.h: ParseGpuHealthRules; empty: the defaults), how often
  //! NVML is read (0: never, no GPU health), and the NVML library ("": SAMPAN_NVML_LIBRARY, else
  //! libnvidia-ml.so.1). A tripped rule makes Ready() false with NotReadyReason().
  std::vector<std::string> gpu_health_rules;
  int gpu_health_interval_ms = 1000;
  std::string nvml_library;
  //! --model-health-rule values (model_health.h: ParseModelHealthRules; empty: off): a model
  //! failing at or above the error rate over the window makes Ready() false with NotReadyReason().
  std::vector<std::string> model_health_rules;
};

class Core {
 public:
  virtual ~Core() = default;

  //! Scans the repository and loads models as the control mode says. A model
  //! that fails to load is UNAVAILABLE (with the reason); it does not fail Start.
  //! Fails only when the repository itself is unusable.
  static Result<std::unique_ptr<Core>> Start(const CoreOptions& options);

  //! Readiness goes false, new requests are refused (kUnavailable); in-flight
  //! ones finish. Returns false if some were still running after `timeout`.
  virtual bool Shutdown(std::chrono::milliseconds timeout) = 0;

  virtual bool Live() const = 0;
  //! Strict: every model that should be loaded is READY and healthy; else: live.
  virtual bool Ready() const = 0;
  //! From the first Shutdown() on: the server drains (not ready, refusing new requests).
  virtual bool ShuttingDown() const = 0;
  //! Why the server is not ready beyond its models' states: the GPU health rules tripped
  //! ("GPU 0 (GPU-...): XID 79 (GPU has fallen off the bus)"), a model's error-rate rule
  //! ("model 'm': 12 of 20 requests failed ..."); "" when none is.
  virtual std::string NotReadyReason() const { return ""; }
  //! The busiest serving version's ModelVersion::Saturation() (0 with none serving); ensembles
  //! are left out, their steps' load shows in their composing models. haproxy's agent check
  //! (agent_check.h) turns it into the server's weight.
  virtual double Saturation() const = 0;

  virtual ServerMetadata GetServerMetadata() const = 0;
  //! kNotFound for an unknown model/version.
  virtual Result<bool> ModelReady(const std::string& name, const std::string& version) const = 0;
  virtual Result<ModelMetadata> GetModelMetadata(const std::string& name, const std::string& version) const = 0;
  virtual Result<ModelConfig> GetModelConfig(const std::string& name, const std::string& version) const = 0;

  //! Validates the request against the model (names, dtypes, shapes, sizes;
  //! errors say which input and what was expected), queues it, and calls
  //! `done` with the outputs or the error. Errors: kNotFound (model/version),
  //! kInvalidArgument (bad inputs), kUnavailable (not ready, queue full,
  //! shutting down), kDeadlineExceeded (queue timeout), kCancelled.
  virtual void Infer(InferRequest request, InferCallback done) = 0;

  //! Empty name = every model; empty version = every loaded version.
  virtual Result<std::vector<ModelStats>> Statistics(const std::string& name, const std::string& version) const = 0;

  virtual std::vector<RepositoryEntry> RepositoryIndex(bool ready_only) const = 0;
  //! Loads (or reloads, when already loaded) a model; returns when READY or failed.
  //! kFailedPrecondition in control mode none.
  //! `config_json` (the repository extension's load parameter `config`): load with this config
  //! (Triton's JSON form) instead of the repository's config.pbtxt; empty: the repository's.
  virtual Status LoadModel(const std::string& name, const std::string& config_json = "") = 0;
  //! `unload_dependents` (Triton's unload parameter): an ensemble's composing models are
  //! unloaded with it.
  virtual Status UnloadModel(const std::string& name, bool unload_dependents = false) = 0;

  //! The Prometheus text exposition of every metric (/metrics).
  virtual std::string RenderMetrics() const = 0;

  //! System shared-memory regions registered by clients (one registry for
  //! both front ends; each front end decides whether it serves the extension).
  SharedMemoryRegistry& system_shared_memory() { return shm_; }

  //! Triton's trace extension (trace.h): the front ends sample requests and serve its settings.
  Tracer& tracer() { return *tracer_; }

 private:
  SharedMemoryRegistry shm_;
  std::shared_ptr<Tracer> tracer_ = std::make_shared<Tracer>();  // traces in flight share it
};

}  // namespace sampan::server
