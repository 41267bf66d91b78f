#include "server/metrics/gpu_metrics.h"

#include <dlfcn.h>

#include <mutex>

namespace sampan::server::metrics {

namespace {

// The slice of nvml.h used here (ABI-stable since NVML 5).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;

class Nvml final : public GpuMonitor {
 public:
  ~Nvml() override {
    if (shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }

  static std::unique_ptr<GpuMonitor> Open() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return nullptr;
    auto nvml = std::unique_ptr<Nvml>(new Nvml(lib));
    if (!nvml->Resolve() || nvml->init_() != kNvmlSuccess) {
      nvml->shutdown_ = nullptr;  // never initialised: nothing to shut down
      return nullptr;
    }
    unsigned int n = 0;
    if (nvml->count_(&n) != kNvmlSuccess || n == 0) return nullptr;
    return nvml;
  }

  std::vector<GpuSample> Sample() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GpuSample> out;
    unsigned int n = 0;
    if (count_(&n) != kNvmlSuccess) return out;
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle_(i, &dev) != kNvmlSuccess) continue;
      char uuid[96] = {};
      if (uuid_(dev, uuid, sizeof(uuid)) != kNvmlSuccess) continue;
      GpuSample s;
      s.uuid = uuid;
      nvmlUtilization_t util{};
      if (utilization_(dev, &util) == kNvmlSuccess) s.utilization = util.gpu / 100.0;
      nvmlMemory_t mem{};
      if (memory_(dev, &mem) == kNvmlSuccess) {
        s.memory_used = static_cast<double>(mem.used);
        s.memory_total = static_cast<double>(mem.total);
      }
      unsigned int mw = 0;
      if (power_(dev, &mw) == kNvmlSuccess) {
        s.power_watts = mw / 1000.0;
        s.has_power = true;
      }
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  explicit Nvml(void* lib) : lib_(lib) {}

  template <class F>
  bool Sym(F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(lib_, name));
    return *f != nullptr;
  }
  bool Resolve() {
    return Sym(&init_, "nvmlInit_v2") && Sym(&shutdown_, "nvmlShutdown") && Sym(&count_, "nvmlDeviceGetCount_v2") &&
           Sym(&handle_, "nvmlDeviceGetHandleByIndex_v2") && Sym(&uuid_, "nvmlDeviceGetUUID") &&
           Sym(&utilization_, "nvmlDeviceGetUtilizationRates") && Sym(&memory_, "nvmlDeviceGetMemoryInfo") &&
           Sym(&power_, "nvmlDeviceGetPowerUsage");
  }

  void* lib_ = nullptr;
  std::mutex mu_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
};

}  // namespace

std::unique_ptr<GpuMonitor> GpuMonitor::Open() {
  return Nvml::Open();
}

}  // namespace sampan::server::metrics
