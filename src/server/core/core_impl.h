// Internal to server/core: the Core implementation's state, shared by its three files —
// core.cpp (registry and lifecycle: load, reload, unload, polling, shutdown), core_requests.cpp
// (queries and the request path) and core_canary.cpp (canary releases).
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/core/canary.h"
#include "server/core/core.h"
#include "server/core/gpu_health.h"
#include "server/core/log.h"
#include "server/core/model_health.h"
#include "server/core/model_version.h"
#include "server/core/response_cache.h"
#include "server/core/server_metrics.h"

namespace sampan::server::internal {

namespace fs = std::filesystem;

// A model of the repository and what the server knows of it.
struct ModelEntry {
  std::string name;
  //! Serving versions (READY), by number. A request for "" takes the highest.
  std::map<int64_t, std::shared_ptr<ModelVersion>> serving;
  //! Every version the server has tried, with its state and the reason when not READY.
  std::map<int64_t, std::pair<ModelState, std::string>> versions;
  ModelState state = ModelState::kUnknown;  //!< of the model as a whole
  std::string reason;
  std::optional<ModelConfig> last_config;  //!< the last config that parsed (for GetModelConfig when nothing serves)
  std::string fingerprint;                 //!< ModelDirFingerprint at the last load attempt
  bool wanted = false;                     //!< should be loaded (strict readiness)
  std::shared_ptr<Canary> canary;          //!< the canary release running now (nullptr: none)
  //! Versions this server's canary rolled back, with their source fingerprint: kept out of
  //! serving even when the decision file could not be written (a read-only repository).
  std::map<int64_t, std::string> rejected;
};

class CoreImpl final : public Core {
 public:
  explicit CoreImpl(CoreOptions options) : options_(std::move(options)) {
    if (options_.response_cache_bytes > 0) cache_ = std::make_unique<ResponseCache>(options_.response_cache_bytes);
    if (options_.rate_limiter.execution_count)
      rate_limiter_ = std::make_shared<InstanceRateLimiter>(options_.rate_limiter);
  }
  ~CoreImpl() override;

  Status Init();

  bool Shutdown(std::chrono::milliseconds timeout) override;
  bool Live() const override { return true; }
  bool Ready() const override;
  bool ShuttingDown() const override { return shutting_down_; }
  std::string NotReadyReason() const override;
  double Saturation() const override;
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
  // Canary releases: CanaryLoop checks every running canary a few times a second; Conclude
  // promotes or rolls back (under the model's lock).
  void CanaryLoop();
  void CheckCanaries();
  void Conclude(const std::string& name, const std::shared_ptr<Canary>& canary, bool promoted, std::string why,
                bool write_decision);
  std::string VersionDir(const std::string& name, int64_t v) const {
    return (fs::path(options_.repository) / name / std::to_string(v)).string();
  }
  // Under mu_ (shared): the version a request for `version` goes to.
  Result<std::shared_ptr<ModelVersion>> Route(const std::string& name, const std::string& version) const;
  void Log(const std::string& line) const { LogVerbose(1, line); }

  CoreOptions options_;
  mutable ServerMetrics metrics_;
  std::unique_ptr<ResponseCache> cache_;               //!< nullptr without --cache-config
  std::shared_ptr<InstanceRateLimiter> rate_limiter_;  //!< nullptr under --rate-limit=off
  mutable std::shared_mutex mu_;                       // models_
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
  bool poll_stop_ = false;  // also stops the canary thread
  std::thread poll_thread_;
  std::thread canary_thread_;

  // Each model's error rate (model_health.h; core_gpu_health.cpp): nullptr while the rule is off.
  std::unique_ptr<ModelErrorRates> model_health_;

  // GPU health (core_gpu_health.cpp); last, so it stops before what its callback reads goes.
  Status StartGpuHealth();
  uint64_t AccountedGpuBytes(unsigned device) const;  // the loaded versions' GPU memory_usage there
  std::unique_ptr<GpuHealth> gpu_health_;             //!< nullptr: no GPU, or off
};

}  // namespace sampan::server::internal
