// server::Core: the model registry and lifecycle (load, reload, unload, polling, shutdown) on
// top of ModelVersion. The queries and the request path are in core_requests.cpp, canary
// releases in core_canary.cpp; core_impl.h holds the state they share.
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
#include "server/core/core_impl.h"
#include "server/core/ensemble.h"
#include "server/core/log.h"
#include "server/core/model_version.h"
#include "server/core/response_cache.h"
#include "server/core/server_metrics.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace fs = std::filesystem;

const char* ModelStateName(ModelState s) {
  switch (s) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kUnknown:
      break;
  }
  return "UNKNOWN";
}

namespace {

struct KServeName {
  const char* name;
  DType dtype;
};
constexpr KServeName kKServe[] = {
    {"BOOL", DType::kBool},     {"UINT8", DType::kUInt8},  {"UINT16", DType::kUInt16}, {"UINT32", DType::kUInt32},
    {"UINT64", DType::kUInt64}, {"INT8", DType::kInt8},    {"INT16", DType::kInt16},   {"INT32", DType::kInt32},
    {"INT64", DType::kInt64},   {"FP16", DType::kFloat16}, {"FP32", DType::kFloat32},  {"FP64", DType::kFloat64},
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

namespace internal {

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
  if (options_.control_mode == CoreOptions::ControlMode::kPoll) poll_thread_ = std::thread([this] { PollLoop(); });
  canary_thread_ = std::thread([this] { CanaryLoop(); });
  return StartGpuHealth();
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
  auto config = config_json.empty() ? ReadModelConfig((fs::path(options_.repository) / name).string(), name, &has_file)
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
    return fail_model(
        FailedPrecondition("model '", name,
                           "': config.pbtxt: response_cache.enable: the server has no response cache (start it with "
                           "--cache-config local,size=BYTES)"));
  // Source identity of a version: the config file's time and that version's files.
  auto version_source = [&](int64_t v) {
    std::error_code e;
    auto t = fs::last_write_time(fs::path(model_dir) / "config.pbtxt", e);
    std::string cfg = !config_json.empty() ? "load request config " + config_json
                      : e                  ? std::string("no config")
                                           : std::to_string(t.time_since_epoch().count());
    return cfg + "\n" + ModelDirFingerprint((fs::path(model_dir) / std::to_string(v)).string());
  };

  const std::vector<int64_t> available = ListVersions(model_dir);
  // Versions a canary rolled back stay out (their decision file, or this server's memory when the
  // file could not be written); the version policy chooses among the others.
  std::vector<int64_t> usable;
  std::map<int64_t, std::string> left_out;  // version -> why: rolled back, or report.json malformed
  std::map<int64_t, bool> decided;          // version -> promoted
  for (int64_t v : available) {
    auto decision = ReadCanaryDecision(VersionDir(name, v));
    if (!decision.ok()) LogWarning("model '", name, "' version ", v, ": ", decision.status().message());
    if (decision.ok() && *decision) decided[v] = (*decision)->promoted;
    if (decision.ok() && *decision && !(*decision)->promoted) {
      left_out[v] = "canary rolled back: " + (*decision)->reason;
      continue;
    }
    std::string rejected_source;
    {
      std::shared_lock lock(mu_);
      const auto m = models_.find(name);
      if (m != models_.end() && m->second.rejected.count(v)) rejected_source = m->second.rejected.at(v);
    }
    if (!rejected_source.empty() && rejected_source == version_source(v)) {
      left_out[v] = "canary rolled back (this server could not write its decision file)";
      continue;
    }
    usable.push_back(v);
  }
  std::vector<int64_t> selected = SelectVersions(config->version_policy(), usable);
  if (selected.empty())
    return fail_model(NotFound(model_dir, available.empty() ? ": no version directories (1, 2, ...)"
                                          : usable.empty()  ? ": every version was rolled back by a canary"
                                                            : ": no version matches the version_policy"));
  // The newest version may be a canary release (its report.json says so, and no decision was
  // made yet): its baseline serves beside it, even where the version policy alone would retire it.
  std::optional<CanaryPolicy> canary_plan;
  bool baseline_extra = false;
  while (!selected.empty()) {
    const int64_t newest = *std::max_element(selected.begin(), selected.end());
    auto policy = ReadCanaryPolicy(VersionDir(name, newest), newest);
    if (!policy.ok()) {
      // A version whose release description is malformed does not load; the policy picks again.
      LogError("model '", name, "' version ", newest, " failed to load: ", policy.status().message());
      left_out[newest] = policy.status().message();
      usable.erase(std::find(usable.begin(), usable.end(), newest));
      selected = SelectVersions(config->version_policy(), usable);
      continue;
    }
    if (*policy && !decided.count(newest)) {
      const int64_t b = (*policy)->baseline;
      if (std::find(usable.begin(), usable.end(), b) == usable.end()) {
        LogWarning("model '", name, "' version ", newest, ": its canary baseline, version ", b,
                   left_out.count(b) ? ", was rolled back or cannot load" : ", is not in the repository", "; version ",
                   newest, " serves without a canary");
      } else {
        canary_plan = **policy;
        if (std::find(selected.begin(), selected.end(), b) == selected.end()) {
          selected.push_back(b);
          std::sort(selected.begin(), selected.end());
          baseline_extra = true;
        }
      }
    }
    break;
  }
  if (selected.empty())
    return fail_model(NotFound(model_dir, ": no version could load (", left_out.rbegin()->second, ")"));

  // An ensemble's composing models load first (Triton does the same), each once.
  if (config->platform() == "ensemble") {
    if (!loading_.insert(name).second)
      return fail_model(InvalidArgument("ensemble '", name, "' is part of its own steps"));
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
        return fail_model(
            Unavailable("ensemble '", name, "': step model '", step_model, "' failed to load: ", st.message()));
      }
    }
    loading_.erase(name);
  }

  std::map<int64_t, std::shared_ptr<ModelVersion>> next;
  std::map<int64_t, std::pair<ModelState, std::string>> states;
  for (const auto& [v, why] : left_out) states[v] = {ModelState::kUnavailable, why};
  std::string first_error;
  VersionLoadOptions vo{
      options_.default_backend, options_.threads_per_instance, {}, {}, options_.plan_trust, rate_limiter_};
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
    // The canary runs while both of its versions serve; one that keeps its versions (a reload
    // that changed neither) keeps its window.
    const bool both = canary_plan && m.serving.count(canary_plan->version) && m.serving.count(canary_plan->baseline);
    // The arms' sources (and whether the baseline serves only for the canary) name the canary.
    const std::string key =
        both ? StrCat(m.serving.at(canary_plan->version)->source_fingerprint(), "\n--\n",
                      m.serving.at(canary_plan->baseline)->source_fingerprint(), "\n", baseline_extra)
             : std::string();
    const bool same = both && m.canary && m.canary->policy().version == canary_plan->version &&
                      m.canary->policy().baseline == canary_plan->baseline && m.canary->key() == key;
    if (!same) {
      if (m.canary)
        metrics_.canary_percent.gauge({{"model", name}, {"version", std::to_string(m.canary->policy().version)}})
            .Set(0);
      m.canary = both ? std::make_shared<Canary>(*canary_plan, baseline_extra, key) : nullptr;
      if (m.canary) {
        metrics_.canary_percent.gauge({{"model", name}, {"version", std::to_string(canary_plan->version)}})
            .Set(canary_plan->percent);
        LogInfo("canary: model '", name, "' version ", canary_plan->version, " takes ", canary_plan->percent,
                "% of unversioned requests beside version ", canary_plan->baseline, " for ", canary_plan->window_secs,
                " s (at least ", canary_plan->min_requests, " requests)");
      } else if (canary_plan) {
        LogWarning("model '", name, "': no canary for version ", canary_plan->version, ": ",
                   m.serving.count(canary_plan->version) ? "its baseline failed to load" : "it failed to load",
                   "; the versions that loaded serve");
      }
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
    if (m.canary) {  // an unloaded model's canary ends undecided
      metrics_.canary_percent.gauge({{"model", name}, {"version", std::to_string(m.canary->policy().version)}}).Set(0);
      m.canary.reset();
    }
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
    return FailedPrecondition(
        "explicit model load / unload is not allowed: the server runs with "
        "--model-control-mode ",
        options_.control_mode == CoreOptions::ControlMode::kPoll ? "poll" : "none");
  if (shutting_down_) return Unavailable("the server is shutting down");
  return LoadLocked(name, config_json);
}

Status CoreImpl::UnloadModel(const std::string& name, bool unload_dependents) {
  if (options_.control_mode != CoreOptions::ControlMode::kExplicit)
    return FailedPrecondition(
        "explicit model load / unload is not allowed: the server runs with "
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
  for (std::thread* t : {&poll_thread_, &canary_thread_})
    if (t->joinable() && t->get_id() != std::this_thread::get_id()) t->join();
  std::unique_lock<std::mutex> lock(inflight_mu_);
  return inflight_cv_.wait_for(lock, timeout, [&] { return inflight_ == 0; });
}

}  // namespace internal

Result<std::unique_ptr<Core>> Core::Start(const CoreOptions& options) {
  auto core = std::make_unique<internal::CoreImpl>(options);
  SP_RETURN_IF_ERROR(core->Init());
  return std::unique_ptr<Core>(std::move(core));
}

}  // namespace sampan::server
