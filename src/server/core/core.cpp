// server::Core: the model registry and lifecycle (load, reload, unload,
// polling, shutdown) on top of ModelVersion; the request path is
// Infer -> ModelVersion::Prepare -> scheduler -> ModelVersion::Execute.
#include "server/core/log.h"
#include "server/core/core.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "base/report_util.h"
#include "plan/plan.h"
#include "server/core/ensemble.h"
#include "server/core/model_version.h"
#include "server/core/response_cache.h"
#include "server/core/server_metrics.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace fs = std::filesystem;

const char* ModelStateName(ModelState s) {
  switch (s) {
    case ModelState::kLoading: return "LOADING";
    case ModelState::kReady: return "READY";
    case ModelState::kUnloading: return "UNLOADING";
    case ModelState::kUnavailable: return "UNAVAILABLE";
    case ModelState::kUnknown: break;
  }
  return "UNKNOWN";
}

namespace {

struct KServeName {
  const char* name;
  DType dtype;
};
constexpr KServeName kKServe[] = {
    {"BOOL", DType::kBool},     {"UINT8", DType::kUInt8},     {"UINT16", DType::kUInt16}, {"UINT32", DType::kUInt32},
    {"UINT64", DType::kUInt64}, {"INT8", DType::kInt8},       {"INT16", DType::kInt16},   {"INT32", DType::kInt32},
    {"INT64", DType::kInt64},   {"FP16", DType::kFloat16},    {"FP32", DType::kFloat32},  {"FP64", DType::kFloat64},
    {"BF16", DType::kBFloat16}, {"BYTES", DType::kString},
};

}  // namespace

DType DTypeFromKServe(const std::string& datatype) {
  for (const auto& k : kKServe)
    if (datatype == k.name) return k.dtype;
  return DType::kUndefined;
}

const char* KServeDatatype(DType dtype) {
  for (const auto& k : kKServe)
    if (dtype == k.dtype) return k.name;
  return "";
}

namespace {

// A model of the repository and what the server knows of it.
struct ModelEntry {
  std::string name;
  //! Serving versions (READY), by number. A request for "" takes the highest.
  std::map<int64_t, std::shared_ptr<ModelVersion>> serving;
  //! Every version the server has tried, with its state and the reason when not READY.
  std::map<int64_t, std::pair<ModelState, std::string>> versions;
  ModelState state = ModelState::kUnknown;  //!< of the model as a whole
  std::string reason;
  std::optional<ModelConfig> last_config;   //!< the last config that parsed (for GetModelConfig when nothing serves)
  std::string fingerprint;                  //!< ModelDirFingerprint at the last load attempt
  bool wanted = false;                      //!< should be loaded (strict readiness)
};

class CoreImpl final : public Core {
 public:
  explicit CoreImpl(CoreOptions options) : options_(std::move(options)) {
    if (options_.response_cache_bytes > 0) cache_ = std::make_unique<ResponseCache>(options_.response_cache_bytes);
  }
  ~CoreImpl() override;

  Status Init();

  bool Shutdown(std::chrono::milliseconds timeout) override;
  bool Live() const override { return true; }
  bool Ready() const override;
  ServerMetadata GetServerMetadata() const override;
  Result<bool> ModelReady(const std::string& name, const std::string& version) const override;
  Result<ModelMetadata> GetModelMetadata(const std::string& name, const std::string& version) const override;
  Result<ModelConfig> GetModelConfig(const std::string& name, const std::string& version) const override;
  void Infer(InferRequest request, InferCallback done) override;
  Result<std::vector<ModelStats>> Statistics(const std::string& name, const std::string& version) const override;
  std::vector<RepositoryEntry> RepositoryIndex(bool ready_only) const override;
  Status LoadModel(const std::string& name, const std::string& config_json = "") override;
  Status UnloadModel(const std::string& name, bool unload_dependents = false) override;
  std::string RenderMetrics() const override;

 private:
  // Under the model's lock (LockModel); an ensemble's under ensemble_mu_ too.
  Status Load(const std::string& name, const std::string& config_json = "");
  Status Unload(const std::string& name);  // under the model's lock
  // Loads and unloads of one model are serialised by its own lock; different models load in
  // parallel. An ensemble's load, which loads its composing models (taking their locks), first
  // takes ensemble_mu_, so two ensembles never wait on each other's steps.
  std::unique_lock<std::mutex> LockModel(const std::string& name);
  Status LoadLocked(const std::string& name, const std::string& config_json = "");
  Status UnloadLocked(const std::string& name);
  bool IsEnsemble(const std::string& name, const std::string& config_json) const;
  void PollLoop();
  void PollOnce();
  // Under mu_ (shared): the version a request for `version` goes to.
  Result<std::shared_ptr<ModelVersion>> Route(const std::string& name, const std::string& version) const;
  void Log(const std::string& line) const {
    LogVerbose(1, line);
  }

  CoreOptions options_;
  mutable ServerMetrics metrics_;
  std::unique_ptr<ResponseCache> cache_;  //!< nullptr without --cache-config
  mutable std::shared_mutex mu_;  // models_
  std::map<std::string, ModelEntry> models_;
  std::mutex locks_mu_;  // model_locks_
  std::map<std::string, std::unique_ptr<std::mutex>> model_locks_;
  std::mutex ensemble_mu_;         // one ensemble load (with its composing models) at a time
  std::set<std::string> loading_;  // ensembles whose composing models are loading (under ensemble_mu_)
  std::atomic<bool> shutting_down_{false};

  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  int64_t inflight_ = 0;

  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool poll_stop_ = false;
  std::thread poll_thread_;
};

CoreImpl::~CoreImpl() {
  Shutdown(std::chrono::milliseconds(0));
  // Every version finishes what it has queued before it goes.
  std::vector<std::shared_ptr<ModelVersion>> all;
  {
    std::unique_lock lock(mu_);
    for (auto& [name, m] : models_)
      for (auto& [v, mv] : m.serving) all.push_back(mv);
    models_.clear();
  }
  for (auto& v : all) v->Drain();
}

Status CoreImpl::Init() {
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListModels(options_.repository));
  std::set<std::string> load;
  if (options_.control_mode == CoreOptions::ControlMode::kExplicit) {
    for (const auto& n : options_.startup_models) {
      if (n == "*") {
        load.insert(names.begin(), names.end());
      } else if (std::find(names.begin(), names.end(), n) == names.end()) {
        return NotFound("--load-model '", n, "': no such model in repository '", options_.repository, "'");
      } else {
        load.insert(n);
      }
    }
  } else {
    load.insert(names.begin(), names.end());
  }
  {
    std::unique_lock lock(mu_);
    for (const auto& n : names) models_[n].name = n;
  }
  {
    // --model-load-thread-count models load at once; a slow one holds up only its own thread.
    const std::vector<std::string> queue(load.begin(), load.end());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < queue.size(); i = next++) {
        Status st = LoadLocked(queue[i]);
        if (!st.ok()) LogError("model '", queue[i], "' is UNAVAILABLE: ", st.message());
      }
    };
    const size_t n = std::min<size_t>(queue.size(), static_cast<size_t>(std::max(1, options_.model_load_threads)));
    std::vector<std::thread> threads;
    for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }
  if (options_.control_mode == CoreOptions::ControlMode::kPoll)
    poll_thread_ = std::thread([this] { PollLoop(); });
  return Status::Ok();
}

// ------------------------------------------------------------ lifecycle

std::unique_lock<std::mutex> CoreImpl::LockModel(const std::string& name) {
  std::mutex* m = nullptr;
  {
    std::lock_guard<std::mutex> guard(locks_mu_);
    auto& slot = model_locks_[name];
    if (!slot) slot = std::make_unique<std::mutex>();
    m = slot.get();
  }
  return std::unique_lock<std::mutex>(*m);
}

bool CoreImpl::IsEnsemble(const std::string& name, const std::string& config_json) const {
  bool has_file = false;
  auto config = config_json.empty()
                    ? ReadModelConfig((fs::path(options_.repository) / name).string(), name, &has_file)
                    : ParseModelConfigJson(config_json, "load request config", name);
  return config.ok() && config->platform() == "ensemble";  // a bad config: Load reports it
}

Status CoreImpl::LoadLocked(const std::string& name, const std::string& config_json) {
  std::unique_lock<std::mutex> ensembles;
  if (IsEnsemble(name, config_json)) ensembles = std::unique_lock<std::mutex>(ensemble_mu_);
  auto lock = LockModel(name);
  return Load(name, config_json);
}

Status CoreImpl::UnloadLocked(const std::string& name) {
  auto lock = LockModel(name);
  return Unload(name);
}

Status CoreImpl::Load(const std::string& name, const std::string& config_json) {
  const std::string model_dir = (fs::path(options_.repository) / name).string();
  std::error_code ec;
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || !fs::is_directory(model_dir, ec))
    return NotFound("model '", name, "' is not in the model repository");
  // Taken before reading, so a change made while loading is seen by the next poll.
  const std::string fingerprint = ModelDirFingerprint(model_dir);
  {
    std::unique_lock lock(mu_);
    ModelEntry& m = models_[name];
    m.name = name;
    m.wanted = true;
    m.fingerprint = fingerprint;
    if (m.serving.empty()) m.state = ModelState::kLoading;
  }
  auto fail_model = [&](const Status& st) {
    std::unique_lock lock(mu_);
    ModelEntry& m = models_[name];
    if (m.serving.empty()) {
      m.state = ModelState::kUnavailable;
      m.reason = st.message();
    } else {
      // A failed reload leaves the versions that serve now in place.
      m.reason = StrCat("reload failed (still serving the previous versions): ", st.message());
    }
    return st;
  };

  bool has_file = false;
  auto config = config_json.empty() ? ReadModelConfig(model_dir, name, &has_file)
                                    : ParseModelConfigJson(config_json, "load request config", name);
  if (!config_json.empty()) has_file = true;  // written out by the client: nothing is completed from the model
  if (!config.ok()) return fail_model(config.status());
  {
    std::unique_lock lock(mu_);
    models_[name].last_config = *config;
  }
  if (config->response_cache().enable() && !cache_)
    return fail_model(FailedPrecondition(
        "model '", name, "': config.pbtxt: response_cache.enable: the server has no response cache (start it with "
        "--cache-config local,size=BYTES)"));
  const std::vector<int64_t> available = ListVersions(model_dir);
  const std::vector<int64_t> selected = SelectVersions(config->version_policy(), available);
  if (selected.empty())
    return fail_model(NotFound(model_dir, available.empty() ? ": no version directories (1, 2, ...)"
                                                            : ": no version matches the version_policy"));

  // Source identity of a version: the config file's time and that version's files.
  auto version_source = [&](int64_t v) {
    std::error_code e;
    auto t = fs::last_write_time(fs::path(model_dir) / "config.pbtxt", e);
    std::string cfg = !config_json.empty() ? "load request config " + config_json
                      : e                  ? std::string("no config")
                                           : std::to_string(t.time_since_epoch().count());
    return cfg + "\n" + ModelDirFingerprint((fs::path(model_dir) / std::to_string(v)).string());
  };

  // An ensemble's composing models load first (Triton does the same), each once.
  if (config->platform() == "ensemble") {
    if (!loading_.insert(name).second) return fail_model(InvalidArgument("ensemble '", name, "' is part of its own steps"));
    for (const std::string& step_model : EnsembleComposingModels(*config)) {
      bool serving = false;
      {
        std::shared_lock lock(mu_);
        auto it = models_.find(step_model);
        serving = it != models_.end() && !it->second.serving.empty();
      }
      if (serving) continue;
      if (loading_.count(step_model)) {
        loading_.erase(name);
        return fail_model(InvalidArgument("ensemble '", name, "': its step model '", step_model,
                                          "' is an ensemble that runs '", name, "' (a cycle)"));
      }
      Status st = Status::Ok();
      {
        auto step_lock = LockModel(step_model);
        st = Load(step_model);
      }
      if (!st.ok()) {
        loading_.erase(name);
        return fail_model(Unavailable("ensemble '", name, "': step model '", step_model, "' failed to load: ", st.message()));
      }
    }
    loading_.erase(name);
  }

  std::map<int64_t, std::shared_ptr<ModelVersion>> next;
  std::map<int64_t, std::pair<ModelState, std::string>> states;
  std::string first_error;
  VersionLoadOptions vo{options_.default_backend, options_.threads_per_instance, {}, {}, options_.plan_trust};
  vo.composing_config = [this](const std::string& model, const std::string& version) -> Result<ModelConfig> {
    std::shared_lock lock(mu_);
    SP_ASSIGN_OR_RETURN(std::shared_ptr<ModelVersion> mv, Route(model, version));
    return mv->config();
  };
  vo.dispatch = [this](InferRequest r, InferCallback cb) { Infer(std::move(r), std::move(cb)); };
  for (int64_t v : selected) {
    const std::string source = version_source(v);
    std::shared_ptr<ModelVersion> current;
    {
      std::shared_lock lock(mu_);
      auto m = models_.find(name);
      if (m != models_.end() && m->second.serving.count(v)) current = m->second.serving.at(v);
    }
    if (current && current->source_fingerprint() == source) {
      next[v] = current;  // unchanged: keeps serving, no reload
      states[v] = {ModelState::kReady, ""};
      continue;
    }
    Log(StrCat("loading model '", name, "' version ", v));
    auto loaded = ModelVersion::Load(model_dir, v, *config, has_file, vo, &metrics_);
    if (!loaded.ok()) {
      std::string why = loaded.status().message();
      LogError("model '", name, "' version ", v, " failed to load: ", why);
      states[v] = {ModelState::kUnavailable, why};
      if (first_error.empty()) first_error = why;
      continue;
    }
    (*loaded)->set_source_fingerprint(source);
    next[v] = *loaded;
    states[v] = {ModelState::kReady, ""};
    Log(StrCat("model '", name, "' version ", v, " is READY"));
  }

  // The swap: new versions take traffic from here on; replaced ones finish what they hold.
  std::vector<std::shared_ptr<ModelVersion>> retired;
  {
    std::unique_lock lock(mu_);
    ModelEntry& m = models_[name];
    if (next.empty() && !m.serving.empty()) {
      m.reason = StrCat("reload failed (still serving the previous versions): ", first_error);
      for (auto& [v, st] : states) m.versions[v] = st;
      return Unavailable("model '", name, "': ", first_error);
    }
    for (auto& [v, mv] : m.serving) {
      auto it = next.find(v);
      if (it == next.end() || it->second != mv) {
        retired.push_back(mv);
        if (!states.count(v)) states[v] = {ModelState::kUnavailable, "unloaded"};
      }
    }
    for (auto& [v, st] : m.versions)
      if (!states.count(v) && st.first == ModelState::kReady) st = {ModelState::kUnavailable, "unloaded"};
    for (auto& [v, st] : states) m.versions[v] = st;
    m.serving = std::move(next);
    if (m.serving.empty()) {
      m.state = ModelState::kUnavailable;
      m.reason = first_error;
    } else {
      m.state = ModelState::kReady;
      m.reason.clear();
    }
  }
  for (auto& r : retired) {
    Log(StrCat("retiring model '", name, "' version ", r->version()));
    r->Drain();
  }
  if (!first_error.empty()) return Unavailable("model '", name, "': ", first_error);
  return Status::Ok();
}

Status CoreImpl::Unload(const std::string& name) {
  std::vector<std::shared_ptr<ModelVersion>> retired;
  {
    std::unique_lock lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return NotFound("model '", name, "' is not in the model repository");
    ModelEntry& m = it->second;
    m.wanted = false;
    for (auto& [v, mv] : m.serving) {
      retired.push_back(mv);
      m.versions[v] = {ModelState::kUnavailable, "unloaded"};
    }
    m.serving.clear();
    m.state = ModelState::kUnavailable;
    m.reason = "unloaded";
  }
  for (auto& r : retired) r->Drain();
  return Status::Ok();
}

Status CoreImpl::LoadModel(const std::string& name, const std::string& config_json) {
  if (options_.control_mode != CoreOptions::ControlMode::kExplicit)
    return FailedPrecondition("explicit model load / unload is not allowed: the server runs with "
                              "--model-control-mode ",
                              options_.control_mode == CoreOptions::ControlMode::kPoll ? "poll" : "none");
  if (shutting_down_) return Unavailable("the server is shutting down");
  return LoadLocked(name, config_json);
}

Status CoreImpl::UnloadModel(const std::string& name, bool unload_dependents) {
  if (options_.control_mode != CoreOptions::ControlMode::kExplicit)
    return FailedPrecondition("explicit model load / unload is not allowed: the server runs with "
                              "--model-control-mode ",
                              options_.control_mode == CoreOptions::ControlMode::kPoll ? "poll" : "none");
  std::vector<std::string> composing;
  if (unload_dependents) {
    std::shared_lock lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end() && it->second.last_config && it->second.last_config->platform() == "ensemble")
      composing = EnsembleComposingModels(*it->second.last_config);
  }
  SP_RETURN_IF_ERROR(UnloadLocked(name));
  for (const std::string& m : composing)
    SP_RETURN_IF_ERROR(UnloadLocked(m).WithContext(StrCat("composing model of '", name, "'")));
  return Status::Ok();
}

void CoreImpl::PollLoop() {
  std::unique_lock<std::mutex> lock(poll_mu_);
  while (!poll_stop_) {
    poll_cv_.wait_for(lock, std::chrono::seconds(std::max(1, options_.poll_secs)));
    if (poll_stop_) break;
    lock.unlock();
    PollOnce();
    lock.lock();
  }
}

void CoreImpl::PollOnce() {
  auto names = ListModels(options_.repository);
  if (!names.ok()) {
    LogError("poll: ", names.status().message());
    return;
  }
  std::set<std::string> present(names->begin(), names->end());
  std::vector<std::string> changed, gone;
  {
    std::shared_lock lock(mu_);
    for (const auto& n : present) {
      auto it = models_.find(n);
      const std::string fp = ModelDirFingerprint((fs::path(options_.repository) / n).string());
      if (it == models_.end() || it->second.fingerprint != fp) changed.push_back(n);
    }
    for (const auto& [n, m] : models_)
      if (!present.count(n)) gone.push_back(n);
  }
  for (const auto& n : changed) {
    if (shutting_down_) return;
    Log(StrCat("poll: model '", n, "' changed; loading"));
    Status st = LoadLocked(n);
    if (!st.ok()) LogError("poll: model '", n, "': ", st.message());
  }
  for (const auto& n : gone) {
    Log(StrCat("poll: model '", n, "' was removed; unloading"));
    auto model_lock = LockModel(n);
    (void)Unload(n);
    std::unique_lock lock(mu_);
    models_.erase(n);
  }
}

bool CoreImpl::Shutdown(std::chrono::milliseconds timeout) {
  {
    // Under inflight_mu_, as Infer checks it: a request either is counted before
    // this line or sees the flag (never accepted after Shutdown saw 0 in flight).
    std::lock_guard<std::mutex> lock(inflight_mu_);
    shutting_down_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(poll_mu_);
    poll_stop_ = true;
  }
  poll_cv_.notify_all();
  if (poll_thread_.joinable() && poll_thread_.get_id() != std::this_thread::get_id()) poll_thread_.join();
  std::unique_lock<std::mutex> lock(inflight_mu_);
  return inflight_cv_.wait_for(lock, timeout, [&] { return inflight_ == 0; });
}

// ------------------------------------------------------------ queries

bool CoreImpl::Ready() const {
  if (shutting_down_) return false;
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

ServerMetadata CoreImpl::GetServerMetadata() const {
  ServerMetadata md;
  md.name = "sampan";
  md.version = Version();
  md.extensions = {"model_repository", "model_configuration", "statistics", "binary_tensor_data"};
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
      }
  }
  metrics_.SampleGpus();
  return metrics_.registry.Render();
}

// ------------------------------------------------------------ inference

void CoreImpl::Infer(InferRequest request, InferCallback done) {
  if (request.protocol[0] != '\0' && Log::Get().AccessEnabled()) {
    // The access log: one line per front-end request, when its answer is handed back.
    done = [done = std::move(done), protocol = request.protocol, model = request.model_name,
            version = request.model_version, id = request.id, received = request.received](Result<InferResponse> r) {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - received);
      const std::string outcome = r.ok() ? "OK" : StatusCodeName(r.status().code());
      Log::Get().Write(LogLevel::kInfo, "inference", {{"protocol", protocol}, {"model", model}, {"version", version},
                                                      {"id", id}, {"outcome", outcome},
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
    if (shutting_down_) shutting = true;
    else ++inflight_;
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
    finish = [finish = std::move(finish), cache = cache_.get(), key = std::move(cache_key), mv, lookup](
                 Result<InferResponse> r) mutable {
      const auto t1 = std::chrono::steady_clock::now();
      if (r.ok()) cache->Insert(key, r->outputs);
      const auto spent = lookup + (std::chrono::steady_clock::now() - t1);
      mv->RecordCacheMiss(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count()));
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
  Status queued = mv->Enqueue(std::move(job).value(), &refused);
  lock.unlock();
  if (!queued.ok() && refused) refused->Fail(queued);
}

}  // namespace

Result<std::unique_ptr<Core>> Core::Start(const CoreOptions& options) {
  auto core = std::make_unique<CoreImpl>(options);
  SP_RETURN_IF_ERROR(core->Init());
  return std::unique_ptr<Core>(std::move(core));
}

}  // namespace sampan::server
