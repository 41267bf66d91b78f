#include "server/core/model_version.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "ir/graph.h"
#include "runtime/backend.h"
#include "server/core/log.h"
#include "server/core/memory_account.h"
#include "server/core/model_loader.h"
#include "server/core/model_version_internal.h"
#include "server/core/model_warmup.h"
#include "server/repository/repository.h"
#include "server/scheduler/sequence_batcher.h"

namespace sampan::server {

namespace sc = ::sampan::serverconfig;
using Clock = std::chrono::steady_clock;
using internal::Dims;
using internal::DimsText;
using internal::Ns;

// The longest mean execution that runs on the submitting thread (SchedulerOptions::inline_max_us):
// a wake-up and a sleep each way cost tens of microseconds on a loaded machine, and an I/O
// thread held this long delays its other connections by as little.
constexpr uint64_t kInlineMaxUs = 200;

// ---------------------------------------------------------------- ResponseSequencer

void ResponseSequencer::Complete(uint64_t ticket, Result<InferResponse> result, InferCallback done) {
  std::unique_lock<std::mutex> lock(mu_);
  waiting_.emplace(ticket, Entry{std::move(result), std::move(done)});
  if (delivering_) return;  // the thread delivering now will get to it
  delivering_ = true;
  for (auto it = waiting_.find(next_delivery_); it != waiting_.end(); it = waiting_.find(next_delivery_)) {
    Entry e = std::move(it->second);
    waiting_.erase(it);
    ++next_delivery_;
    lock.unlock();
    if (e.done) e.done(std::move(e.result));
    lock.lock();
  }
  delivering_ = false;
}

// ---------------------------------------------------------------- InferJob

InferJob::~InferJob() {
  // Exactly-once: a job destroyed without an answer (a bug) still answers.
  if (!completed_) Fail(Internal("request was dropped by the scheduler"));
}

// Trace timestamps of the stages this job went through, from the executor's durations.
void InferJob::RecordTrace() const {
  RequestTrace* t = request.trace.get();
  if (t == nullptr || enqueued == scheduler::Clock::time_point{}) return;
  t->Record("QUEUE_START", enqueued);
  if (input_ns + infer_ns + output_ns == 0) return;  // it never ran (a queue timeout, a cancel)
  auto at = enqueued + std::chrono::nanoseconds(queue_ns);
  t->Record("COMPUTE_START", at);
  at += std::chrono::nanoseconds(input_ns);
  t->Record("COMPUTE_INPUT_END", at);
  at += std::chrono::nanoseconds(infer_ns);
  t->Record("COMPUTE_OUTPUT_START", at);
  at += std::chrono::nanoseconds(output_ns);
  t->Record("COMPUTE_END", at);
}

// trace_level TENSORS: the request's inputs as queued (model-side: names and shapes after the
// config's reshape) and, when it succeeded, its outputs as returned.
void InferJob::RecordTraceTensors(const InferResponse* response) const {
  RequestTrace* t = request.trace.get();
  if (t == nullptr || !t->tensors()) return;
  for (const auto& [name, value] : inputs) t->RecordTensor("TENSOR_QUEUE_INPUT", name, value);
  if (response != nullptr)
    for (const InferTensor& o : response->outputs) t->RecordTensor("TENSOR_BACKEND_OUTPUT", o.name, o.data);
}

void InferJob::Fail(const Status& status) {
  if (completed_) return;
  completed_ = true;
  RecordTrace();
  RecordTraceTensors(nullptr);
  if (version) version->RecordRequest(status, *this);
  if (done) done(status);
}

void InferJob::Succeed(InferResponse response) {
  if (completed_) return;
  completed_ = true;
  RecordTrace();
  RecordTraceTensors(&response);
  if (version) version->RecordRequest(Status::Ok(), *this);
  if (done) done(std::move(response));
}

// ---------------------------------------------------------------- ModelVersion

namespace {}  // namespace

ModelVersion::~ModelVersion() {
  if (scheduler_) scheduler_->Stop();
}

Result<std::shared_ptr<ModelVersion>> ModelVersion::Load(const std::string& model_dir, int64_t version,
                                                         ModelConfig config, bool has_config_file,
                                                         const VersionLoadOptions& options, ServerMetrics* metrics) {
  std::shared_ptr<ModelVersion> v(new ModelVersion());
  v->version_ = version;
  v->version_string_ = std::to_string(version);
  if (config.platform() == "ensemble") return LoadEnsemble(std::move(v), std::move(config), options, metrics);
  SP_ASSIGN_OR_RETURN(LoadedModel loaded,
                      LoadModelFiles(model_dir, version, std::move(config), has_config_file, options));
  v->config_ = std::move(loaded.config);
  v->platform_ = loaded.platform;
  if (v->config_.model_transaction_policy().decoupled())
    for (const auto& o : v->config_.output())
      if (o.dims_size() == 0 || o.dims(0) != -1)
        return InvalidArgument("model '", v->config_.name(), "': output '", o.name(), "' has dims ", DimsText(Dims(o)),
                               ": a decoupled model streams the rows of its outputs' leading dimension, which must "
                               "be variable (-1)");
  v->engines_ = std::move(loaded.engines);
  v->output_index_ = std::move(loaded.output_index);
  v->instance_engine_ = std::move(loaded.instance_engine);
  if (options.rate_limiter && options.rate_limiter->enabled()) {
    std::vector<InstanceRateLimiter::Instance> instances;
    for (size_t i = 0; i < v->instance_engine_.size(); ++i) {
      const int group = loaded.instance_group[i];
      instances.push_back({v->engines_[v->instance_engine_[i]]->options().device,
                           v->config_.instance_group(group).rate_limiter(), StrCat("instance_group[", group, "]")});
    }
    SP_ASSIGN_OR_RETURN(v->rate_limited_, options.rate_limiter->Register(instances));
  }
  v->unhealthy_logged_ = std::make_unique<std::atomic<bool>[]>(v->engines_.size());
  v->batching_ = v->config_.max_batch_size() > 0;
  if (v->batching_) {
    const auto& bb = v->config_.sampan().batch_buckets();
    const int64_t max_batch = v->config_.max_batch_size();
    const runtime::Backend* backend =
        v->engines_.empty() ? nullptr : runtime::FindBackend(v->engines_[0]->plan().fingerprint.backend);
    const bool per_shape = backend != nullptr && backend->plans_per_shape;
    if (!bb.empty() && !(bb.size() == 1 && bb[0] == 0)) {
      v->buckets_.assign(bb.begin(), bb.end());
      if (v->buckets_.back() != max_batch) v->buckets_.push_back(max_batch);
    } else if (bb.empty() && per_shape) {
      // 1, 2, 3, 4, 6, 8, 12, 16, 24, ...: padding costs at most a third of a batch.
      for (int64_t p = 1; p < max_batch; p *= 2) {
        v->buckets_.push_back(p);
        if (p >= 2 && p + p / 2 < max_batch) v->buckets_.push_back(p + p / 2);
      }
      v->buckets_.push_back(max_batch);
    }
  }
  // GPU admission: the instances' estimated need on each device must fit (memory_account.h); the
  // reservation covers loads running side by side until warm-up has allocated the buckets.
  GpuReservation gpu_reservation;
  if (!v->engines_.empty()) {
    SP_ASSIGN_OR_RETURN(const uint64_t headroom, GpuHeadroomBytes());
    std::vector<int64_t> batches = v->buckets_;
    if (batches.empty() && v->batching_) batches = {v->config_.max_batch_size()};
    std::vector<std::map<std::string, Shape>> planned;
    if (auto shapes = PlannedShapes(v->engines_[0]->graph(), batches); shapes.ok()) planned = std::move(shapes).value();
    SP_ASSIGN_OR_RETURN(gpu_reservation,
                        AdmitOnGpus(v->config_.name(), v->engines_, v->instance_engine_, planned, headroom));
  }
  for (size_t i = 0; i < v->instance_engine_.size(); ++i) {
    auto ctx = v->engines_[v->instance_engine_[i]]->CreateContext();
    if (!ctx.ok()) return ctx.status().WithContext(StrCat("instance ", i));
    v->contexts_.push_back(std::move(ctx).value());
  }
  {
    const ModelConfig& c = v->config_;
    const auto& db = c.dynamic_batching();
    v->slo_batching_ = c.sampan().latency_slo_ms() > 0 && v->batching_ && !c.has_sequence_batching() &&
                       db.preferred_batch_size().empty() && db.max_queue_delay_microseconds() == 0;
  }
  if (!v->buckets_.empty() && !v->config_.sampan().skip_warmup())
    SP_RETURN_IF_ERROR(v->WarmUp().WithContext("warm-up (skip it with sampan { skip_warmup: true })"));
  SP_RETURN_IF_ERROR(v->RunModelWarmup(model_dir));
  gpu_reservation.Release();  // the buckets are allocated now: the device's free memory shows them
  v->InitMetrics(metrics);
  for (const auto& e : v->engines_)
    v->device_metrics_.push_back(std::make_unique<DeviceMetrics>(*metrics, v->config_.name(), v->version_string_,
                                                                 e->plan().fingerprint.backend, e->options().device));

  ModelVersion* raw = v.get();
  auto executor = [raw](int instance, std::vector<scheduler::JobPtr>& batch) { raw->Execute(instance, batch); };
  if (v->config_.has_sequence_batching()) {
    const auto& sb = v->config_.sequence_batching();
    std::vector<std::string> graph_outputs;
    for (const ir::Value* o : v->contexts_[0]->engine().graph().outputs()) graph_outputs.push_back(o->name());
    SP_ASSIGN_OR_RETURN(v->sequence_, SequenceTensors::Create(v->config_, model_dir, graph_outputs));
    scheduler::SequenceOptions qo;
    qo.name = StrCat("model '", v->config_.name(), "' version ", version);
    qo.instances = static_cast<int>(v->contexts_.size());
    qo.max_batch_size = v->config_.max_batch_size();
    qo.oldest = sb.has_oldest();
    if (sb.has_oldest()) {
      qo.max_queue_delay_us = sb.oldest().max_queue_delay_microseconds();
      qo.max_candidate_sequences = sb.oldest().max_candidate_sequences();
      qo.preferred_batch_sizes.assign(sb.oldest().preferred_batch_size().begin(),
                                      sb.oldest().preferred_batch_size().end());
      if (sb.oldest().preserve_ordering()) v->sequencer_ = std::make_shared<ResponseSequencer>();
    } else {
      qo.max_queue_delay_us = sb.direct().max_queue_delay_microseconds();
      qo.minimum_slot_utilization = sb.direct().minimum_slot_utilization();
    }
    if (sb.max_sequence_idle_microseconds() > 0) qo.max_sequence_idle_us = sb.max_sequence_idle_microseconds();
    qo.instance_health = [raw](int instance) { return raw->InstanceHealth(instance); };
    v->scheduler_ = std::make_unique<scheduler::SequenceBatcher>(std::move(qo), executor);
    return v;
  }
  scheduler::SchedulerOptions so;
  so.name = StrCat("model '", v->config_.name(), "' version ", version);
  so.instances = static_cast<int>(v->contexts_.size());
  so.max_batch_size = v->config_.max_batch_size();
  if (v->config_.has_dynamic_batching()) {
    const auto& db = v->config_.dynamic_batching();
    so.dynamic_batching = true;
    so.preferred_batch_sizes.assign(db.preferred_batch_size().begin(), db.preferred_batch_size().end());
    so.max_queue_delay_us = db.max_queue_delay_microseconds();
    so.priority_levels = static_cast<uint32_t>(db.priority_levels());
    so.default_priority = static_cast<uint32_t>(db.default_priority_level());
    auto policy = [](const sc::ModelQueuePolicy& p) {
      scheduler::QueuePolicy q;
      q.delay_on_timeout = p.timeout_action() == sc::ModelQueuePolicy::DELAY;
      q.default_timeout_us = p.default_timeout_microseconds();
      q.allow_timeout_override = p.allow_timeout_override();
      q.max_queue_size = p.max_queue_size();
      return q;
    };
    if (db.preserve_ordering()) v->sequencer_ = std::make_shared<ResponseSequencer>();
    so.default_policy = policy(db.default_queue_policy());
    for (const auto& [level, p] : db.priority_queue_policy())
      so.priority_policy[static_cast<uint32_t>(level)] = policy(p);
  }
  if (v->slo_batching_) {
    so.dynamic_batching = true;
    so.latency_slo_us = static_cast<uint64_t>(v->config_.sampan().latency_slo_ms() * 1e3);
    so.buckets = v->buckets_;
    so.measured_us = v->warmup_us_;
    so.on_shed = [raw] { raw->metrics_->slo_shed->Increment(); };
    LogInfo("model '", v->config_.name(), "' version ", version, ": the SLO batcher schedules it (latency SLO ",
            v->config_.sampan().latency_slo_ms(), " ms, ", v->warmup_us_.size(), " bucket(s) timed at warm-up)");
  }
  so.instance_health = [raw](int instance) { return raw->InstanceHealth(instance); };
  // Executions this short may run on the submitting thread (an HTTP/gRPC I/O thread) when an
  // instance is idle: no hand-over to the instance thread and back. Not under the rate limiter,
  // whose wait for resources must not block an I/O thread.
  so.inline_max_us = v->rate_limited_ ? 0 : kInlineMaxUs;
  v->scheduler_ = std::make_unique<scheduler::Scheduler>(so, executor);
  return v;
}

void ModelVersion::InitMetrics(ServerMetrics* metrics) {
  stats_.name = config_.name();
  stats_.version = version_string_;
  metrics_ = std::make_unique<VersionMetrics>(*metrics, config_.name(), version_string_);
  if (config_.response_cache().enable()) {
    const metrics::Labels l = {{"model", config_.name()}, {"version", version_string_}};
    metrics_->cache_hits = &metrics->cache_hits.counter(l);
    metrics_->cache_misses = &metrics->cache_misses.counter(l);
    metrics_->cache_hit_us = &metrics->cache_hit_duration.counter(l);
    metrics_->cache_miss_us = &metrics->cache_miss_duration.counter(l);
  }
  const metrics::Labels labels = {{"model", config_.name()}, {"version", version_string_}};
  if (const double slo_ms = config_.sampan().latency_slo_ms(); slo_ms > 0) {
    metrics->latency_slo.gauge(labels).Set(slo_ms / 1e3);
    metrics_->slo_misses = &metrics->slo_misses.counter(labels);
  }
  if (slo_batching_) {
    metrics_->slo_shed = &metrics->slo_shed.counter(labels);
    metrics_->slo_target = &metrics->slo_target.gauge(labels);
    metrics_->slo_capacity = &metrics->slo_capacity.gauge(labels);
    metrics_->slo_arrivals = &metrics->slo_arrivals.gauge(labels);
  }
  if (batching_) metrics_->batch_buckets = &metrics->batch_buckets;
}

void ModelVersion::RefreshSloMetrics() {
  const auto* s = dynamic_cast<const scheduler::Scheduler*>(scheduler_.get());
  if (!s || !s->slo_enabled() || !metrics_->slo_target) return;
  const scheduler::SloSnapshot snap = s->Slo();
  metrics_->slo_target->Set(static_cast<double>(snap.target_rows));
  metrics_->slo_capacity->Set(snap.capacity_rows_per_s);
  metrics_->slo_arrivals->Set(snap.arrival_rows_per_s);
}

Result<std::shared_ptr<ModelVersion>> ModelVersion::LoadEnsemble(std::shared_ptr<ModelVersion> v, ModelConfig config,
                                                                 const VersionLoadOptions& options,
                                                                 ServerMetrics* metrics) {
  if (!options.composing_config || !options.dispatch)
    return Internal("model '", config.name(), "': an ensemble needs the server core to send its steps");
  SP_ASSIGN_OR_RETURN(v->ensemble_, Ensemble::Create(config, options.composing_config));
  v->dispatch_ = options.dispatch;
  v->config_ = std::move(config);
  v->platform_ = "ensemble";
  v->batching_ = v->config_.max_batch_size() > 0;
  v->InitMetrics(metrics);
  return v;
}

void ModelVersion::RunEnsemble(std::unique_ptr<InferJob> job) {
  std::vector<std::string> wanted;
  for (int i : job->outputs) wanted.push_back(config_.output(i).name());
  const auto start = Clock::now();
  InferJob* raw = job.release();  // owned by the callback from here (answered exactly once)
  std::shared_ptr<InferJob> owned(raw);
  ensemble_running_->fetch_add(1);
  ensemble_->Run(raw->inputs, raw->request, wanted, dispatch_,
                 [owned, start, running = ensemble_running_](Result<std::map<std::string, Tensor>> r) {
                   running->fetch_sub(1);
                   if (!r.ok()) {
                     owned->Fail(r.status());
                     return;
                   }
                   owned->infer_ns = Ns(Clock::now() - start);  // the steps, each with its own queue and compute
                   InferResponse resp;
                   resp.model_name = owned->version->name();
                   resp.model_version = owned->version->version_string();
                   resp.id = owned->request.id;
                   resp.decoupled = owned->version->config().model_transaction_policy().decoupled();
                   for (int i : owned->outputs) {
                     const std::string& name = owned->version->config().output(i).name();
                     Tensor& t = r->at(name);
                     resp.outputs.push_back(InferTensor{name, t.dtype(), t.shape(), t});
                   }
                   if (resp.decoupled && !resp.outputs.empty() && !resp.outputs[0].shape.empty())
                     owned->response_rows = resp.outputs[0].shape[0];
                   {
                     std::lock_guard<std::mutex> lock(owned->version->stats_mu_);
                     owned->version->stats_.inference_count += static_cast<uint64_t>(owned->rows);
                     owned->version->stats_.execution_count += 1;
                   }
                   owned->Succeed(std::move(resp));
                 });
}

int64_t ModelVersion::PaddedRows(int64_t rows) const {
  for (int64_t b : buckets_)
    if (b >= rows) return b;
  return rows;
}

Status ModelVersion::RunModelWarmup(const std::string& model_dir) {
  if (config_.model_warmup_size() == 0) return Status::Ok();
  SP_ASSIGN_OR_RETURN(std::vector<WarmupSample> samples, MakeWarmupSamples(config_, model_dir));
  // Instances side by side, each running every sample `count` times, in order.
  std::vector<Status> errors(contexts_.size(), Status::Ok());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < contexts_.size(); ++i) {
    threads.emplace_back([&, i] {
      for (const WarmupSample& s : samples)
        for (int k = 0; k < s.count; ++k) {
          auto r = contexts_[i]->Run(s.inputs);
          if (!r.ok()) {
            errors[i] = r.status().WithContext(StrCat(s.where, ", instance ", i));
            return;
          }
        }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) SP_RETURN_IF_ERROR(e);
  for (const WarmupSample& s : samples)
    LogVerbose(1, "model '", config_.name(), "' version ", version_, ": ", s.where, " ran ", s.count,
               " time(s) on each of ", contexts_.size(), " instance(s)");
  return Status::Ok();
}

Status ModelVersion::WarmUp() {
  if (contexts_.empty()) return Status::Ok();
  const ir::Graph& g = contexts_[0]->engine().graph();
  // Inputs whose only dynamic dimension is the batch can be made up; otherwise shapes are unknown.
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> specs;
  for (const ir::Value* in : g.inputs()) {
    if (!in->type.dims || in->type.dims->empty()) return Status::Ok();
    Shape shape;
    for (size_t d = 1; d < in->type.dims->size(); ++d) {
      if (!(*in->type.dims)[d].known()) return Status::Ok();
      shape.push_back((*in->type.dims)[d].value);
    }
    shape.insert(shape.begin(), 0);
    specs.push_back({in->name(), {in->type.dtype, shape}});
  }
  // Instances warm up side by side (each context runs on its own thread anyway).
  std::vector<Status> errors(contexts_.size(), Status::Ok());
  std::mutex timing_mu;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < contexts_.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int64_t b : buckets_) {
        std::map<std::string, Tensor> inputs;
        for (const auto& [name, spec] : specs) {
          Shape shape = spec.second;
          shape[0] = b;
          Tensor t = contexts_[i]->AllocateHostInput(spec.first, shape);
          if (!t.is_string()) std::memset(t.mutable_raw(), 0, t.nbytes());  // strings start empty
          inputs.emplace(name, std::move(t));
        }
        // Twice: the second run of a shape captures its CUDA graph. For the SLO batcher three
        // more, timed: its first estimate of each bucket's execution time.
        const int runs = slo_batching_ ? 5 : 2;
        for (int k = 0; k < runs; ++k) {
          const auto t0 = Clock::now();
          auto r = contexts_[i]->Run(inputs);
          if (!r.ok()) {
            errors[i] = r.status().WithContext(StrCat("instance ", i, ", batch ", b));
            return;
          }
          if (k >= 2) {
            std::lock_guard<std::mutex> lock(timing_mu);
            warmup_us_[b].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) SP_RETURN_IF_ERROR(e);
  return Status::Ok();
}

std::string ModelVersion::EngineName(size_t engine) const {
  const runtime::Engine& e = *engines_[engine];
  const std::string& backend = e.plan().fingerprint.backend;
  return StrCat("backend '", backend.empty() ? "reference" : backend, "' device ", e.options().device);
}

Status ModelVersion::Health() const {
  std::string why;
  for (size_t i = 0; i < engines_.size(); ++i) {
    Status st = engines_[i]->health();
    if (st.ok()) return Status::Ok();  // one healthy device keeps the version serving
    why += StrCat(why.empty() ? "" : "; ", EngineName(i), ": ", st.message());
  }
  if (engines_.empty()) return Status::Ok();
  return Unavailable("model '", name(), "' version ", version_, ": no healthy device left: ", why);
}

std::string ModelVersion::UnhealthyDevices() const {
  std::string out;
  size_t bad = 0;
  for (size_t i = 0; i < engines_.size(); ++i) {
    Status st = engines_[i]->health();
    if (st.ok()) continue;
    ++bad;
    out += StrCat(out.empty() ? "" : "; ", EngineName(i), ": ", st.message());
  }
  if (out.empty()) return out;
  return StrCat("serving on ", engines_.size() - bad, " of ", engines_.size(), " devices; out of service: ", out);
}

Status ModelVersion::InstanceHealth(int instance) const {
  const size_t e = instance_engine_[static_cast<size_t>(instance)];
  Status st = engines_[e]->health();
  if (!st.ok() && !unhealthy_logged_[e].exchange(true))
    LogWarning("model '", name(), "' version ", version_, ": ", EngineName(e),
               " is out of service, its instances take no more batches: ", st.message());
  return st;
}

void ModelVersion::RecordRequest(const Status& status, const InferJob& job) {
  const auto now = Clock::now();
  const uint64_t total_ns = Ns(now - job.request.received);
  const uint64_t ms_epoch = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.last_inference_ms = ms_epoch;
    auto& s = stats_.inference_stats;
    if (status.ok()) {
      s.success.count++, s.success.ns += total_ns;
      s.queue.count++, s.queue.ns += job.queue_ns;
      s.compute_input.count++, s.compute_input.ns += job.input_ns;
      s.compute_infer.count++, s.compute_infer.ns += job.infer_ns;
      s.compute_output.count++, s.compute_output.ns += job.output_ns;
    } else {
      s.fail.count++, s.fail.ns += total_ns;
    }
    if (config_.model_transaction_policy().decoupled()) {
      auto& rs = stats_.response_stats;
      if (status.ok()) {
        for (int64_t k = 0; k < job.response_rows; ++k) {
          ResponseStat& r = rs[static_cast<uint64_t>(k)];
          r.success.count++, r.success.ns += total_ns;
          r.compute_infer.count++, r.compute_infer.ns += job.infer_ns;
          r.compute_output.count++, r.compute_output.ns += job.output_ns;
        }
        ResponseStat& end = rs[static_cast<uint64_t>(job.response_rows)];
        end.empty_response.count++, end.empty_response.ns += total_ns;
      } else if (status.code() == StatusCode::kCancelled) {
        rs[0].cancel.count++, rs[0].cancel.ns += total_ns;
      } else {
        rs[0].fail.count++, rs[0].fail.ns += total_ns;
      }
    }
  }
  VersionMetrics& m = *metrics_;
  if (status.ok()) {
    m.success.Increment();
    if (m.slo_misses && static_cast<double>(total_ns) > config_.sampan().latency_slo_ms() * 1e6)
      m.slo_misses->Increment();
    m.request_us.Increment(static_cast<double>(total_ns) / 1e3);
    m.queue_us.Increment(static_cast<double>(job.queue_ns) / 1e3);
    m.input_us.Increment(static_cast<double>(job.input_ns) / 1e3);
    m.infer_us.Increment(static_cast<double>(job.infer_ns) / 1e3);
    m.output_us.Increment(static_cast<double>(job.output_ns) / 1e3);
    m.latency.Observe(static_cast<double>(total_ns) / 1e9);
    m.queue_seconds.Observe(static_cast<double>(job.queue_ns) / 1e9);
    m.compute_seconds.Observe(static_cast<double>(job.input_ns + job.infer_ns + job.output_ns) / 1e9);
  } else {
    switch (status.code()) {
      case StatusCode::kUnavailable:
      case StatusCode::kDeadlineExceeded:
        m.fail_rejected.Increment();
        break;
      case StatusCode::kCancelled:
        m.fail_canceled.Increment();
        break;
      case StatusCode::kInvalidArgument:
        m.fail_other.Increment();
        break;
      default:
        m.fail_backend.Increment();
        break;
    }
  }
}

void ModelVersion::RecordCacheHit(uint64_t lookup_ns, const InferRequest& request) {
  const uint64_t total_ns = Ns(Clock::now() - request.received);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.last_inference_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    auto& s = stats_.inference_stats;
    s.success.count++, s.success.ns += total_ns;
    s.cache_hit.count++, s.cache_hit.ns += lookup_ns;
  }
  VersionMetrics& m = *metrics_;
  m.success.Increment();
  m.request_us.Increment(static_cast<double>(total_ns) / 1e3);
  m.latency.Observe(static_cast<double>(total_ns) / 1e9);
  if (m.cache_hits) {
    m.cache_hits->Increment();
    m.cache_hit_us->Increment(static_cast<double>(lookup_ns) / 1e3);
  }
}

void ModelVersion::RecordCacheMiss(uint64_t ns) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.inference_stats.cache_miss.count++;
    stats_.inference_stats.cache_miss.ns += ns;
  }
  if (metrics_->cache_misses) {
    metrics_->cache_misses->Increment();
    metrics_->cache_miss_us->Increment(static_cast<double>(ns) / 1e3);
  }
}

double ModelVersion::Saturation() const {
  const double instances = static_cast<double>(std::max<size_t>(contexts_.size(), 1));
  const double batch = static_cast<double>(std::max<int64_t>(config_.max_batch_size(), 1));
  double capacity = instances * batch;  // one full batch per instance
  const double slo_s = config_.sampan().latency_slo_ms() / 1e3;
  if (slo_s > 0) {
    uint64_t rows = 0, ns = 0;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      for (const auto& [size, b] : batch_stats_) {
        rows += size * b.compute_infer.count;
        ns += b.compute_input.ns + b.compute_infer.ns + b.compute_output.ns;
      }
    }
    // Rows an instance computes per second, times the SLO: what each completes in time.
    if (rows > 0 && ns > 0)
      capacity = std::max(1.0, instances * static_cast<double>(rows) / (static_cast<double>(ns) / 1e9) * slo_s);
  }
  return static_cast<double>(inflight()) / capacity;
}

ModelStats ModelVersion::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ModelStats s = stats_;
  for (const auto& [size, b] : batch_stats_) s.batch_stats.push_back(b);
  s.memory_usage = VersionMemoryUsage(engines_, contexts_);
  if (const auto* sched = dynamic_cast<const scheduler::Scheduler*>(scheduler_.get()); sched && sched->slo_enabled()) {
    const scheduler::SloSnapshot snap = sched->Slo();
    SloStats o;
    o.latency_slo_ms = static_cast<double>(snap.latency_slo_us) / 1e3;
    o.target_batch_size = snap.target_rows;
    o.max_batch_size = snap.cap_rows;
    o.arrival_per_s = snap.arrival_rows_per_s;
    o.capacity_per_s = snap.capacity_rows_per_s;
    o.shed = snap.shed, o.late = snap.late, o.waits = snap.waits;
    for (const auto& b : snap.buckets) o.buckets.push_back({b.rows, b.mean_us, b.sd_us, b.samples, b.executions});
    s.slo = std::move(o);
  }
  return s;
}

}  // namespace sampan::server
