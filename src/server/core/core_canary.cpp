// server::Core's canary releases (canary.h): the monitor thread, and the promotion or rollback
// it decides.
#include <chrono>

#include "server/core/core_impl.h"
#include "server/core/log.h"

namespace sampan::server::internal {

// ------------------------------------------------------------ canary releases

void CoreImpl::CanaryLoop() {
  std::unique_lock<std::mutex> lock(poll_mu_);
  while (!poll_stop_) {
    poll_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (poll_stop_) break;
    lock.unlock();
    CheckCanaries();
    lock.lock();
  }
}

void CoreImpl::CheckCanaries() {
  std::vector<std::pair<std::string, std::shared_ptr<Canary>>> running;
  {
    std::shared_lock lock(mu_);
    for (const auto& [n, m] : models_)
      if (m.canary) running.emplace_back(n, m.canary);
  }
  for (const auto& [name, canary] : running) {
    // Another server sharing the repository may have decided first: its verdict holds.
    auto decided = ReadCanaryDecision(VersionDir(name, canary->policy().version));
    if (decided.ok() && *decided) {
      Conclude(name, canary, (*decided)->promoted, "decided by another server: " + (*decided)->reason, false);
      continue;
    }
    const CanaryJudgement j = canary->Evaluate();
    if (j.verdict != CanaryVerdict::kWait) Conclude(name, canary, j.verdict == CanaryVerdict::kPromote, j.why, true);
  }
}

void CoreImpl::Conclude(const std::string& name, const std::shared_ptr<Canary>& canary, bool promoted, std::string why,
                        bool write_decision) {
  auto model_lock = LockModel(name);
  const CanaryPolicy& p = canary->policy();
  {
    std::shared_lock lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.canary != canary) return;  // superseded by a reload
  }
  if (write_decision) {
    Status st = WriteCanaryDecision(VersionDir(name, p.version), {promoted, why});
    if (st.code() == StatusCode::kFailedPrecondition) {
      // Written by another server in the meantime: that verdict holds.
      auto d = ReadCanaryDecision(VersionDir(name, p.version));
      if (d.ok() && *d) promoted = (*d)->promoted, why = "decided by another server: " + (*d)->reason;
    } else if (!st.ok()) {
      LogWarning("canary: model '", name, "' version ", p.version,
                 ": decision not written (held in memory only): ", st.message());
    }
  }
  std::vector<std::shared_ptr<ModelVersion>> retired;
  {
    std::unique_lock lock(mu_);
    ModelEntry& m = models_.at(name);
    m.canary.reset();
    const int64_t gone = promoted ? p.baseline : p.version;
    auto sv = m.serving.find(gone);
    if (promoted) {
      if (canary->baseline_extra() && sv != m.serving.end()) {
        retired.push_back(sv->second);
        m.serving.erase(sv);
        m.versions[gone] = {ModelState::kUnavailable, "unloaded"};
      }
    } else {
      if (sv != m.serving.end()) {
        m.rejected[gone] = sv->second->source_fingerprint();
        retired.push_back(sv->second);
        m.serving.erase(sv);
      }
      m.versions[gone] = {ModelState::kUnavailable, "canary rolled back: " + why};
    }
    metrics_.canary_percent.gauge({{"model", name}, {"version", std::to_string(p.version)}}).Set(0);
    (promoted ? metrics_.promotions : metrics_.rollbacks).counter({{"model", name}}).Increment();
  }
  if (promoted)
    LogInfo("canary: model '", name, "' version ", p.version, " promoted after ", canary->elapsed_secs(), " s: ", why);
  else
    LogWarning("canary: model '", name, "' version ", p.version, " rolled back after ", canary->elapsed_secs(),
               " s, version ", p.baseline, " serves: ", why);
  for (auto& r : retired) r->Drain();
}

}  // namespace sampan::server::internal
