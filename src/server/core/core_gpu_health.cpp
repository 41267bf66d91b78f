// server::Core's GPU health (gpu_health.h) and model health (model_health.h): started after the repository's first
// load, read by Ready() and NotReadyReason(); the loaded versions' device memory is what the memory-growth rule counts
// as the plans' own.
#include "server/core/core_impl.h"

namespace sampan::server::internal {

Status CoreImpl::StartGpuHealth() {
  SP_ASSIGN_OR_RETURN(ModelHealthRules model_rules, ParseModelHealthRules(options_.model_health_rules));
  if (model_rules.on()) model_health_ = std::make_unique<ModelErrorRates>(model_rules, &metrics_.registry);
  if (options_.gpu_health_interval_ms < 0)
    return InvalidArgument("--gpu-health-interval-ms must be >= 0 (it is ", options_.gpu_health_interval_ms, ")");
  if (options_.gpu_health_interval_ms == 0) return Status::Ok();
  GpuHealthOptions o;
  SP_ASSIGN_OR_RETURN(o.rules, ParseGpuHealthRules(options_.gpu_health_rules));
  o.interval = std::chrono::milliseconds(options_.gpu_health_interval_ms);
  o.library = options_.nvml_library;
  o.accounted = [this](unsigned device) { return AccountedGpuBytes(device); };
  SP_ASSIGN_OR_RETURN(gpu_health_, GpuHealth::Start(std::move(o), &metrics_.registry));
  return Status::Ok();
}

uint64_t CoreImpl::AccountedGpuBytes(unsigned device) const {
  uint64_t bytes = 0;
  std::shared_lock lock(mu_);
  for (const auto& [name, m] : models_)
    for (const auto& [v, mv] : m.serving)
      for (const MemoryUsage& u : mv->Stats().memory_usage)
        if (u.type == "GPU" && u.id == static_cast<int64_t>(device)) bytes += u.byte_size;
  return bytes;
}

std::string CoreImpl::NotReadyReason() const {
  std::string gpu = gpu_health_ ? gpu_health_->Unhealthy() : "";
  std::string models = model_health_ ? model_health_->Unhealthy(ModelErrorRates::Clock::now()) : "";
  return gpu.empty() ? models : models.empty() ? gpu : gpu + "; " + models;
}

}  // namespace sampan::server::internal
