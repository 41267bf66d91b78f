// server::Core's queries (readiness, metadata, statistics, the repository index, metrics) and
// the request path: Infer -> ModelVersion::Prepare -> scheduler -> ModelVersion::Execute.
#include <algorithm>
#include <chrono>
#include <set>

#include "base/report_util.h"
#include "server/core/core_impl.h"
#include "server/core/log.h"
#include "server/repository/repository.h"

namespace sampan::server::internal {

// ------------------------------------------------------------ queries

bool CoreImpl::Ready() const {
  if (shutting_down_) return false;
  if (gpu_health_ && !gpu_health_->Unhealthy().empty()) return false;  // a GPU health rule tripped
  if (model_health_ && !model_health_->Unhealthy(ModelErrorRates::Clock::now()).empty()) return false;
  if (!options_.strict_readiness) return true;
  std::shared_lock lock(mu_);
  for (const auto& [name, m] : models_) {
    if (!m.wanted) continue;
    if (m.state != ModelState::kReady || m.serving.empty()) return false;
    for (const auto& [v, mv] : m.serving)
      if (!mv->Health().ok()) return false;
  }
  return true;
}

double CoreImpl::Saturation() const {
  double busiest = 0;
  std::shared_lock lock(mu_);
  for (const auto& [name, m] : models_)
    for (const auto& [v, mv] : m.serving)
      if (mv->ensemble() == nullptr) busiest = std::max(busiest, mv->Saturation());
  return busiest;
}

ServerMetadata CoreImpl::GetServerMetadata() const {
  ServerMetadata md;
  md.name = "sampan";
  md.version = Version();
  md.extensions = {"model_repository", "model_configuration", "statistics", "binary_tensor_data", "trace", "logging"};
  return md;
}

Result<std::shared_ptr<ModelVersion>> CoreImpl::Route(const std::string& name, const std::string& version) const {
  auto it = models_.find(name);
  if (it == models_.end()) return NotFound("Request for unknown model: '", name, "' is not found");
  const ModelEntry& m = it->second;
  if (version.empty()) {
    if (m.serving.empty())
      return Unavailable("model '", name, "' is not ready (", ModelStateName(m.state),
                         m.reason.empty() ? "" : ": " + m.reason, ")");
    return m.serving.rbegin()->second;
  }
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(version, &used);
    if (used != version.size()) v = -1;
  } catch (...) {
    v = -1;
  }
  auto sv = m.serving.find(v);
  if (sv != m.serving.end()) return sv->second;
  auto known = m.versions.find(v);
  if (known != m.versions.end())
    return Unavailable("model '", name, "' version ", version, " is not ready (", ModelStateName(known->second.first),
                       known->second.second.empty() ? "" : ": " + known->second.second, ")");
  return NotFound("Request for unknown model: '", name, "' version ", version, " is not found");
}

Result<bool> CoreImpl::ModelReady(const std::string& name, const std::string& version) const {
  std::shared_lock lock(mu_);
  auto routed = Route(name, version);
  if (!routed.ok()) {
    if (routed.status().code() == StatusCode::kUnavailable) return false;
    return routed.status();
  }
  return (*routed)->Health().ok() && !shutting_down_;
}

Result<ModelMetadata> CoreImpl::GetModelMetadata(const std::string& name, const std::string& version) const {
  std::shared_lock lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<ModelVersion> mv, Route(name, version));
  ModelMetadata md;
  md.name = name;
  for (const auto& [v, s] : models_.at(name).serving) md.versions.push_back(std::to_string(v));
  md.platform = mv->platform();
  const ModelConfig& c = mv->config();
  const bool batch = c.max_batch_size() > 0;
  auto add = [&](const std::string& n, serverconfig::DataType t, const auto& dims, std::vector<TensorMetadata>* out) {
    TensorMetadata tm;
    tm.name = n;
    tm.datatype = KServeDatatype(DTypeFromConfig(t));
    if (batch) tm.shape.push_back(-1);
    tm.shape.insert(tm.shape.end(), dims.begin(), dims.end());
    out->push_back(std::move(tm));
  };
  for (const auto& i : c.input()) add(i.name(), i.data_type(), i.dims(), &md.inputs);
  for (const auto& o : c.output()) add(o.name(), o.data_type(), o.dims(), &md.outputs);
  return md;
}

Result<ModelConfig> CoreImpl::GetModelConfig(const std::string& name, const std::string& version) const {
  std::shared_lock lock(mu_);
  auto routed = Route(name, version);
  if (routed.ok()) return (*routed)->config();
  auto it = models_.find(name);
  if (version.empty() && it != models_.end() && it->second.last_config) return *it->second.last_config;
  return routed.status();
}

Result<std::vector<ModelStats>> CoreImpl::Statistics(const std::string& name, const std::string& version) const {
  std::shared_lock lock(mu_);
  std::vector<ModelStats> out;
  if (name.empty()) {
    for (const auto& [n, m] : models_)
      for (const auto& [v, mv] : m.serving) out.push_back(mv->Stats());
    return out;
  }
  auto it = models_.find(name);
  if (it == models_.end()) return NotFound("Request for unknown model: '", name, "' is not found");
  if (version.empty()) {
    for (const auto& [v, mv] : it->second.serving) out.push_back(mv->Stats());
    return out;
  }
  SP_ASSIGN_OR_RETURN(std::shared_ptr<ModelVersion> mv, Route(name, version));
  out.push_back(mv->Stats());
  return out;
}

std::vector<RepositoryEntry> CoreImpl::RepositoryIndex(bool ready_only) const {
  std::vector<RepositoryEntry> out;
  std::set<std::string> names;
  if (auto listed = ListModels(options_.repository); listed.ok()) names.insert(listed->begin(), listed->end());
  std::shared_lock lock(mu_);
  for (const auto& [n, m] : models_) names.insert(n);
  for (const auto& n : names) {
    auto it = models_.find(n);
    if (it == models_.end() || it->second.versions.empty()) {
      if (ready_only) continue;
      RepositoryEntry e;
      e.name = n;
      if (it != models_.end()) e.state = it->second.state, e.reason = it->second.reason;
      out.push_back(std::move(e));
      continue;
    }
    for (const auto& [v, st] : it->second.versions) {
      RepositoryEntry e;
      e.name = n;
      e.version = std::to_string(v);
      e.state = st.first;
      e.reason = st.second;
      auto sv = it->second.serving.find(v);
      if (sv != it->second.serving.end() && !sv->second->Health().ok()) {
        e.state = ModelState::kUnavailable;
        e.reason = sv->second->Health().message();
      } else if (sv != it->second.serving.end()) {
        // READY on the devices left; the reason says which are out of service.
        if (std::string out = sv->second->UnhealthyDevices(); !out.empty()) e.reason = out;
      }
      if (ready_only && e.state != ModelState::kReady) continue;
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::string CoreImpl::RenderMetrics() const {
  {
    std::shared_lock lock(mu_);
    for (const auto& [n, m] : models_)
      for (const auto& [v, mv] : m.serving) {
        VersionMetrics& vm = mv->metrics();
        vm.pending.Set(static_cast<double>(mv->queued()));
        vm.inflight.Set(static_cast<double>(mv->inflight()));
        vm.saturation.Set(mv->Saturation());
        mv->RefreshSloMetrics();
      }
  }
  metrics_.SampleGpus();
  return metrics_.registry.Render();
}

// ------------------------------------------------------------ inference

void CoreImpl::Infer(InferRequest request, InferCallback done) {
  if (request.trace) {
    request.trace->Record("REQUEST_START", std::chrono::steady_clock::now());
    done = [done = std::move(done), trace = request.trace](Result<InferResponse> r) {
      trace->Record("REQUEST_END", std::chrono::steady_clock::now());
      done(std::move(r));
    };
  }
  if (request.protocol[0] != '\0' && Log::Get().AccessEnabled()) {
    // The access log: one line per front-end request, when its answer is handed back.
    done = [done = std::move(done), protocol = request.protocol, model = request.model_name,
            version = request.model_version, id = request.id, received = request.received](Result<InferResponse> r) {
      const auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - received);
      const std::string outcome = r.ok() ? "OK" : StatusCodeName(r.status().code());
      Log::Get().Write(LogLevel::kInfo, "inference",
                       {{"protocol", protocol},
                        {"model", model},
                        {"version", version},
                        {"id", id},
                        {"outcome", outcome},
                        {"microseconds", std::to_string(us.count())}});
      done(std::move(r));
    };
  }
  if (options_.max_request_elements > 0) {
    // Saturating: shapes are not validated yet, and a forged one must not overflow the count.
    const int64_t limit = options_.max_request_elements;
    int64_t total = 0;
    for (const InferTensor& in : request.inputs) {
      int64_t n = 1;
      for (const int64_t d : in.shape) n = d <= 0 ? 0 : (n > limit / d ? limit + 1 : n * d);
      total = std::min(limit + 1, total + n);
    }
    if (total > limit) {
      done(InvalidArgument("the request's inputs hold more than ", limit,
                           " elements, the server's limit (--max-request-elements)"));
      return;
    }
  }
  // Every accepted request is counted until its callback has run (Shutdown waits on it).
  bool shutting = false;
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    if (shutting_down_)
      shutting = true;
    else
      ++inflight_;
  }
  if (shutting) {
    done(Unavailable("the server is shutting down; request refused"));
    return;
  }
  InferCallback finish = [this, done = std::move(done)](Result<InferResponse> r) {
    done(std::move(r));
    std::lock_guard<std::mutex> lock(inflight_mu_);
    if (--inflight_ == 0) inflight_cv_.notify_all();
  };
  std::shared_lock lock(mu_);
  auto routed = Route(request.model_name, request.model_version);
  if (!routed.ok()) {
    lock.unlock();
    finish(routed.status());
    return;
  }
  std::shared_ptr<ModelVersion> mv = *routed;
  if (request.model_version.empty()) {
    // A canary release takes its share of the unversioned requests; both arms are recorded.
    const ModelEntry& m = models_.at(request.model_name);
    if (m.canary) {
      const bool to_canary = m.canary->TakeCanary();
      const CanaryPolicy& p = m.canary->policy();
      auto arm = m.serving.find(to_canary ? p.version : p.baseline);
      if (arm != m.serving.end()) {
        mv = arm->second;
        finish = [finish = std::move(finish), canary = m.canary, to_canary, received = request.received,
                  counters = &metrics_.canary_requests, model = request.model_name,
                  version = mv->version_string()](Result<InferResponse> r) {
          if (r.ok() || r.status().code() != StatusCode::kCancelled) {
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - received).count();
            canary->Record(to_canary, r.ok(), ms);
            counters->counter({{"model", model}, {"version", version}, {"outcome", r.ok() ? "success" : "failure"}})
                .Increment();
          }
          finish(std::move(r));
        };
      }
    }
  }
  if (request.trace) request.trace->SetVersion(mv->version_string());
  if (model_health_) {
    finish = [finish = std::move(finish), rates = model_health_.get(), model = mv->name()](Result<InferResponse> r) {
      rates->Record(model, !r.ok() && CountsAgainstModel(r.status().code()), ModelErrorRates::Clock::now());
      finish(std::move(r));
    };
  }
  if (Status health = mv->Health(); !health.ok()) {
    lock.unlock();
    finish(Unavailable(health.message()));
    return;
  }
  // The response cache, before the checks: only requests that succeeded are ever stored, so
  // a key that is found was valid (its inputs' names, types, shapes and bytes are in the key).
  std::string cache_key;
  if (cache_ && mv->config().response_cache().enable()) {
    const auto t0 = std::chrono::steady_clock::now();
    cache_key = ResponseCache::Key(mv->name(), mv->version_string(), request);
    if (auto hit = cache_->Lookup(cache_key)) {
      const auto lookup_ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      lock.unlock();
      InferResponse resp;
      resp.model_name = mv->name();
      resp.model_version = mv->version_string();
      resp.id = request.id;
      resp.outputs = std::move(*hit);
      mv->RecordCacheHit(lookup_ns, request);
      finish(std::move(resp));
      return;
    }
    // A miss: the outputs are stored when the model answers; the miss is counted then, with
    // the lookup's and the insertion's time.
    const auto lookup = std::chrono::steady_clock::now() - t0;
    finish = [finish = std::move(finish), cache = cache_.get(), key = std::move(cache_key), mv,
              lookup](Result<InferResponse> r) mutable {
      const auto t1 = std::chrono::steady_clock::now();
      if (r.ok()) cache->Insert(key, r->outputs);
      const auto spent = lookup + (std::chrono::steady_clock::now() - t1);
      mv->RecordCacheMiss(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count()));
      finish(std::move(r));
    };
  }
  auto job = mv->Prepare(request);
  if (!job.ok()) {
    // A rejected request still counts in the version's statistics, as Triton's do.
    InferJob failed;
    failed.version = mv;
    failed.request = std::move(request);
    failed.done = std::move(finish);
    lock.unlock();
    failed.Fail(job.status());
    return;
  }
  (*job)->version = mv;
  (*job)->request = std::move(request);
  (*job)->done = std::move(finish);
  if (mv->ensemble()) {
    // Its steps are requests of their own (routed, queued and counted by this method):
    // sent without this lock, which is not re-entrant.
    lock.unlock();
    scheduler::JobPtr unused;
    (void)mv->Enqueue(std::move(job).value(), &unused);
    return;
  }
  // Queued under the shared lock: an unload (exclusive lock) either happens before
  // (the request is routed elsewhere) or after (the version drains it). A refused
  // job is answered after the lock is released (the callback may call back in).
  scheduler::JobPtr refused;
  scheduler::InlineRun run;  // when the scheduler hands the job back to run on this thread
  Status queued = mv->Enqueue(std::move(job).value(), &refused, &run);
  lock.unlock();
  if (!queued.ok() && refused) refused->Fail(queued);
  run.Run();
}

}  // namespace sampan::server::internal
