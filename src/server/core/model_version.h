// One loaded version of a model: its completed config, engines (one per
// device), one runtime::Context per instance, its scheduler, and statistics.
//
// Shared ownership is the reference count that lets a reload swap versions
// without dropping requests: every queued request holds the version it was
// routed to, so an unloaded version lives until its last request is answered.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/core/core.h"
#include "server/core/ensemble.h"
#include "server/core/instance_rate_limiter.h"
#include "server/core/sequence_state.h"
#include "server/core/server_metrics.h"
#include "server/scheduler/scheduler.h"

namespace sampan::server {

//! What loading a version needs to know besides the files.
struct VersionLoadOptions {
  std::string default_backend;   //!< CoreOptions::default_backend
  int threads_per_instance = 0;  //!< 0 = cores / instances
  //! For ensembles: the configs of the composing models, and how a step's request is sent.
  ConfigLookup composing_config;
  Dispatch dispatch;
  //! CoreOptions::plan_trust (null: plan files are not checked for signatures).
  std::shared_ptr<const std::vector<plan::TrustedKey>> plan_trust;
  //! The server's rate limiter (--rate-limit); null or off: executions start when an instance is free.
  std::shared_ptr<InstanceRateLimiter> rate_limiter;
};

class ModelVersion;

//! dynamic_batching.preserve_ordering: responses leave in the order the
//! requests were queued, whichever instance finishes first. Each queued job
//! takes a ticket; its answer waits until every earlier ticket was answered.
class ResponseSequencer {
 public:
  uint64_t Ticket() { return next_ticket_.fetch_add(1); }
  //! Delivers `result` through `done` once every earlier ticket has been delivered.
  void Complete(uint64_t ticket, Result<InferResponse> result, InferCallback done);

 private:
  struct Entry {
    Result<InferResponse> result;
    InferCallback done;
  };
  std::atomic<uint64_t> next_ticket_{0};
  std::mutex mu_;
  std::map<uint64_t, Entry> waiting_;
  uint64_t next_delivery_ = 0;
  bool delivering_ = false;
};

//! A validated request on its way through the scheduler.
class InferJob final : public scheduler::Job {
 public:
  ~InferJob() override;
  void Fail(const Status& status) override;
  //! Completes the request with outputs (after the batch ran).
  void Succeed(InferResponse response);

  std::shared_ptr<ModelVersion> version;
  InferRequest request;
  InferCallback done;
  //! Model-side inputs (reshape applied), by model input name.
  std::map<std::string, Tensor> inputs;
  //! Indices into the config's outputs to return, in response order.
  std::vector<int> outputs;
  //! A decoupled model's answer: its rows (the responses it streams), set when it succeeds.
  int64_t response_rows = 0;
  //! An idle slot of a sequence batch (SequenceBatcher's direct strategy): its row is run, its outputs dropped.
  bool filler = false;
  //! Filled by the executor for the statistics.
  uint64_t queue_ns = 0, input_ns = 0, infer_ns = 0, output_ns = 0;

 private:
  void RecordTrace() const;
  void RecordTraceTensors(const InferResponse* response) const;
  bool completed_ = false;
};

class ModelVersion : public std::enable_shared_from_this<ModelVersion> {
 public:
  //! Loads version `version` of the model in `model_dir`, with `config` as
  //! read from config.pbtxt (or defaults when `has_config_file` is false).
  //! Builds ONNX into a plan, cached in <version>/.sampan/ and rebuilt when
  //! the ONNX bytes or the build options change. Starts the instance threads.
  static Result<std::shared_ptr<ModelVersion>> Load(const std::string& model_dir, int64_t version, ModelConfig config,
                                                    bool has_config_file, const VersionLoadOptions& options,
                                                    ServerMetrics* metrics);
  ~ModelVersion();

  const std::string& name() const { return config_.name(); }
  int64_t version() const { return version_; }
  const std::string& version_string() const { return version_string_; }
  const ModelConfig& config() const { return config_; }
  const std::string& platform() const { return platform_; }
  //! What the version was loaded from (config text + version files), to tell whether a reload changes it.
  const std::string& source_fingerprint() const { return source_fingerprint_; }
  void set_source_fingerprint(std::string f) { source_fingerprint_ = std::move(f); }

  //! Ok while at least one engine (device) is healthy; else why not, device by device.
  Status Health() const;
  //! "" while every engine is healthy; else which devices are out of service and why
  //! (their instances take no more batches; the others go on).
  std::string UnhealthyDevices() const;

  //! Checks the request against the config and turns it into a job (error: kInvalidArgument naming the input).
  Result<std::unique_ptr<InferJob>> Prepare(InferRequest& request);
  //! Queues a prepared job (kUnavailable when the queue is full or the version is unloading;
  //! the refused job is then handed back through `refused`, see Scheduler::Enqueue).
  //! With `run`, the scheduler may hand the job back there to be run by the caller (Run() it
  //! after releasing the locks held around this call; scheduler.h, "Inline runs").
  Status Enqueue(std::unique_ptr<InferJob> job, scheduler::JobPtr* refused, scheduler::InlineRun* run = nullptr);
  //! Refuses new requests and finishes the queued ones (blocks).
  void Drain();
  //! Requests waiting in the queue (not yet executing): nv_inference_pending_request_count.
  size_t queued() const { return scheduler_ ? scheduler_->queued() : 0; }
  //! Requests queued or executing (an ensemble: requests somewhere in its steps).
  size_t inflight() const {
    return scheduler_ ? scheduler_->pending() : static_cast<size_t>(ensemble_running_->load());
  }
  //! Set for an ensemble (platform "ensemble"): no engines, no scheduler; requests run its steps.
  const Ensemble* ensemble() const { return ensemble_.get(); }
  //! inflight() / the requests the instances complete within sampan.latency_slo_ms at the rate
  //! measured so far (rows per second of compute, from the batch statistics). Before the first
  //! execution, or without an SLO, the capacity is one full batch per instance.
  double Saturation() const;

  ModelStats Stats() const;
  //! Sets the SLO batcher's gauges (target batch, capacity, arrival rate) before a metrics render.
  void RefreshSloMetrics();
  //! Statistics and metrics of one finished request (called once per request).
  void RecordRequest(const Status& status, const InferJob& job);
  //! A request answered from the response cache (`lookup_ns`: the lookup), counted as a success.
  void RecordCacheHit(uint64_t lookup_ns, const InferRequest& request);
  //! A lookup that missed; `ns` covers the lookup and the insertion.
  void RecordCacheMiss(uint64_t ns);
  VersionMetrics& metrics() { return *metrics_; }

 private:
  ModelVersion() = default;
  Status Start();  // engines, contexts, scheduler
  //! Load() for platform "ensemble".
  static Result<std::shared_ptr<ModelVersion>> LoadEnsemble(std::shared_ptr<ModelVersion> v, ModelConfig config,
                                                            const VersionLoadOptions& options, ServerMetrics* metrics);
  //! Statistics name, metrics and SLO gauge: the part of loading every version shares.
  void InitMetrics(ServerMetrics* metrics);
  //! Enqueue() for an ensemble: runs the steps; the job is answered when they end.
  void RunEnsemble(std::unique_ptr<InferJob> job);
  //! The scheduler's question before each batch: can `instance` still run? (logs a device's first failure)
  Status InstanceHealth(int instance) const;
  //! "backend 'cuda' device 1"
  std::string EngineName(size_t engine) const;
  void Execute(int instance, std::vector<scheduler::JobPtr>& batch);
  //! Execute's parts (model_requests.cpp): the batch's inputs as one map; its outputs split
  //! into one response per job; the statistics and metrics of the execution.
  std::map<std::string, Tensor> GatherInputs(int instance, const std::vector<InferJob*>& jobs, int64_t total,
                                             int64_t padded);
  Result<std::vector<InferResponse>> SplitOutputs(const std::vector<InferJob*>& jobs, const std::vector<Tensor>& outs,
                                                  int64_t total, int64_t padded) const;
  void RecordExecution(int instance, int64_t served, int64_t total, uint64_t in_ns, uint64_t infer_ns, uint64_t out_ns);
  //! Runs every batch bucket once per instance with zero inputs (sampan.skip_warmup off).
  Status WarmUp();
  //! Runs the config's model_warmup samples on every instance (Triton's warm-up), before READY.
  Status RunModelWarmup(const std::string& model_dir);
  //! The smallest bucket holding `rows` (rows itself when there are no buckets).
  int64_t PaddedRows(int64_t rows) const;

  ModelConfig config_;
  int64_t version_ = 0;
  std::string version_string_;
  std::string platform_;
  std::string source_fingerprint_;
  bool batching_ = false;
  //! Batch sizes the engine runs (sorted); a batch is padded up to the next one. Empty: no padding.
  std::vector<int64_t> buckets_;
  //! sampan.latency_slo_ms without dynamic-batching knobs: the SLO batcher schedules the model
  //! (scheduler/slo_policy.h), starting from the warm-up's execution times per bucket.
  bool slo_batching_ = false;
  std::map<int64_t, std::vector<double>> warmup_us_;
  //! Model graph output index of each config output.
  std::vector<int> output_index_;
  std::vector<std::shared_ptr<runtime::Engine>> engines_;       // one per (backend, device)
  std::vector<std::unique_ptr<runtime::Context>> contexts_;     // one per instance
  std::vector<size_t> instance_engine_;                         // per instance: index into engines_
  std::vector<std::unique_ptr<DeviceMetrics>> device_metrics_;  // per engine
  std::unique_ptr<std::atomic<bool>[]> unhealthy_logged_;       // per engine
  //! Set under --rate-limit=execution_count: the instances' resources (declared before scheduler_,
  //! so the scheduler stops, and no instance waits or holds resources, before they unregister).
  std::unique_ptr<InstanceRateLimiter::Group> rate_limited_;
  std::unique_ptr<scheduler::JobQueue> scheduler_;  //!< the Scheduler, or the SequenceBatcher
  std::unique_ptr<SequenceTensors> sequence_;       //!< set for a sequence model
  std::shared_ptr<ResponseSequencer> sequencer_;    //!< set when preserve_ordering
  std::unique_ptr<VersionMetrics> metrics_;
  std::shared_ptr<const Ensemble> ensemble_;
  Dispatch dispatch_;
  std::shared_ptr<std::atomic<int64_t>> ensemble_running_ = std::make_shared<std::atomic<int64_t>>(0);

  mutable std::mutex stats_mu_;
  ModelStats stats_;
  std::map<uint64_t, BatchStat> batch_stats_;
  friend class VersionLoader;
};

}  // namespace sampan::server
