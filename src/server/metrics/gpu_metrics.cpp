#include "server/metrics/gpu_metrics.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace sampan::server::metrics {

namespace {

// The slice of nvml.h used here (ABI-stable since NVML 5; row remapping since R460).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID, for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
constexpr unsigned kMigEnabled = 1;              // NVML_DEVICE_MIG_ENABLE
constexpr unsigned long long kEventXid = 0x8;    // nvmlEventTypeXidCriticalError
constexpr int kCorrected = 0, kUncorrected = 1;  // nvmlMemoryErrorType_t
constexpr int kVolatile = 0, kAggregate = 1;     // nvmlEccCounterType_t
constexpr int kCauseSbe = 0, kCauseDbe = 1;      // nvmlPageRetirementCause_t
constexpr int kTemperatureGpu = 0;               // nvmlTemperatureSensors_t

std::string LibraryPath(const std::string& path) {
  if (!path.empty()) return path;
  const char* env = std::getenv("SAMPAN_NVML_LIBRARY");
  return env && *env ? env : "libnvidia-ml.so.1";
}

class Nvml final : public GpuMonitor {
 public:
  ~Nvml() override {
    if (events_ && event_free_) event_free_(events_);
    if (initialised_) shutdown_();
    if (lib_) dlclose(lib_);
  }

  static Result<std::unique_ptr<GpuMonitor>> Open(const std::string& path) {
    const std::string where = StrCat("NVML library '", path, "'");
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* err = dlerror();
      return Unavailable(where, " cannot be loaded: ", err ? err : "dlopen failed");
    }
    auto nvml = std::unique_ptr<Nvml>(new Nvml(lib, path));
    if (const char* missing = nvml->Resolve()) return Unavailable(where, " has no function ", missing);
    if (const nvmlReturn_t r = nvml->init_(); r != kNvmlSuccess)
      return Unavailable(where, ": nvmlInit_v2 failed (NVML error ", r, ")");
    nvml->initialised_ = true;
    unsigned int n = 0;
    if (const nvmlReturn_t r = nvml->count_(&n); r != kNvmlSuccess)
      return Unavailable(where, ": nvmlDeviceGetCount_v2 failed (NVML error ", r, ")");
    if (n == 0) return Unavailable(where, " sees no GPU");
    nvml->RegisterXidEvents(n);
    return std::unique_ptr<GpuMonitor>(std::move(nvml));
  }

  const std::string& library() const override { return path_; }

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

  std::vector<GpuInfo> Inventory() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GpuInfo> out;
    unsigned int n = 0;
    if (count_(&n) != kNvmlSuccess) return out;
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      char text[96] = {};
      if (handle_(i, &dev) != kNvmlSuccess || uuid_(dev, text, sizeof(text)) != kNvmlSuccess) continue;
      GpuInfo g;
      g.index = i;
      g.uuid = text;
      g.name = Name(dev);
      nvmlMemory_t mem{};
      if (memory_(dev, &mem) == kNvmlSuccess) g.memory_total = mem.total;
      unsigned int current = 0, pending = 0;
      g.mig_enabled = mig_mode_ && mig_mode_(dev, &current, &pending) == kNvmlSuccess && current == kMigEnabled;
      unsigned int slots = 0;
      if (g.mig_enabled && mig_count_ && mig_handle_ && mig_count_(dev, &slots) == kNvmlSuccess) {
        for (unsigned int k = 0; k < slots; ++k) {
          nvmlDevice_t mig = nullptr;
          char uuid[96] = {};
          // An empty slot answers NVML_ERROR_NOT_FOUND.
          if (mig_handle_(dev, k, &mig) != kNvmlSuccess || uuid_(mig, uuid, sizeof(uuid)) != kNvmlSuccess) continue;
          MigDeviceInfo m;
          m.index = k;
          m.uuid = uuid;
          m.name = Name(mig);
          nvmlMemory_t mm{};
          if (memory_(mig, &mm) == kNvmlSuccess) m.memory_total = mm.total;
          g.mig.push_back(std::move(m));
        }
      }
      out.push_back(std::move(g));
    }
    return out;
  }

  std::vector<GpuHealthSample> SampleHealth() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GpuHealthSample> out;
    unsigned int n = 0;
    if (count_(&n) != kNvmlSuccess) return out;
    std::vector<nvmlDevice_t> devices;
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      char uuid[96] = {};
      if (handle_(i, &dev) != kNvmlSuccess || uuid_(dev, uuid, sizeof(uuid)) != kNvmlSuccess) continue;
      GpuHealthSample s;
      s.index = i;
      s.uuid = uuid;
      ReadHealth(dev, &s);
      devices.push_back(dev);
      out.push_back(std::move(s));
    }
    // Every XID event waiting, each to its device's sample (timeout 0: never blocks).
    nvmlEventData_t e{};
    while (events_ && event_wait_(events_, &e, 0) == kNvmlSuccess) {
      if (!(e.eventType & kEventXid)) continue;
      for (size_t k = 0; k < devices.size(); ++k)
        if (devices[k] == e.device) out[k].xids.push_back(e.eventData);
    }
    return out;
  }

 private:
  Nvml(void* lib, std::string path) : lib_(lib), path_(std::move(path)) {}

  template <class F>
  bool Sym(F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(lib_, name));
    return *f != nullptr;
  }
  // The first required function missing, or nullptr. The health functions are optional: a
  // driver without one leaves that figure out.
  const char* Resolve() {
    const std::pair<bool, const char*> required[] = {
        {Sym(&init_, "nvmlInit_v2"), "nvmlInit_v2"},
        {Sym(&shutdown_, "nvmlShutdown"), "nvmlShutdown"},
        {Sym(&count_, "nvmlDeviceGetCount_v2"), "nvmlDeviceGetCount_v2"},
        {Sym(&handle_, "nvmlDeviceGetHandleByIndex_v2"), "nvmlDeviceGetHandleByIndex_v2"},
        {Sym(&uuid_, "nvmlDeviceGetUUID"), "nvmlDeviceGetUUID"},
        {Sym(&utilization_, "nvmlDeviceGetUtilizationRates"), "nvmlDeviceGetUtilizationRates"},
        {Sym(&memory_, "nvmlDeviceGetMemoryInfo"), "nvmlDeviceGetMemoryInfo"},
        {Sym(&power_, "nvmlDeviceGetPowerUsage"), "nvmlDeviceGetPowerUsage"}};
    for (const auto& [found, name] : required)
      if (!found) return name;
    Sym(&event_create_, "nvmlEventSetCreate");
    Sym(&event_free_, "nvmlEventSetFree");
    Sym(&event_register_, "nvmlDeviceRegisterEvents");
    Sym(&event_wait_, "nvmlEventSetWait_v2");
    Sym(&ecc_, "nvmlDeviceGetTotalEccErrors");
    Sym(&retired_, "nvmlDeviceGetRetiredPages");
    Sym(&retired_pending_, "nvmlDeviceGetRetiredPagesPendingStatus");
    Sym(&remapped_, "nvmlDeviceGetRemappedRows");
    Sym(&temperature_, "nvmlDeviceGetTemperature");
    Sym(&throttle_, "nvmlDeviceGetCurrentClocksThrottleReasons");
    Sym(&name_, "nvmlDeviceGetName");
    Sym(&mig_mode_, "nvmlDeviceGetMigMode");
    Sym(&mig_count_, "nvmlDeviceGetMaxMigDeviceCount");
    Sym(&mig_handle_, "nvmlDeviceGetMigDeviceHandleByIndex");
    return nullptr;
  }

  std::string Name(nvmlDevice_t dev) {
    char name[96] = {};
    return name_ && name_(dev, name, sizeof(name)) == kNvmlSuccess ? std::string(name) : std::string();
  }

  void RegisterXidEvents(unsigned int n) {
    if (!event_create_ || !event_register_ || !event_wait_ || event_create_(&events_) != kNvmlSuccess) {
      events_ = nullptr;
      return;
    }
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle_(i, &dev) == kNvmlSuccess) event_register_(dev, kEventXid, events_);
    }
  }

  void ReadHealth(nvmlDevice_t dev, GpuHealthSample* s) {
    unsigned long long v = 0;
    if (ecc_) {
      if (ecc_(dev, kCorrected, kVolatile, &v) == kNvmlSuccess) s->ecc_sbe_volatile = v;
      if (ecc_(dev, kUncorrected, kVolatile, &v) == kNvmlSuccess) s->ecc_dbe_volatile = v;
      if (ecc_(dev, kCorrected, kAggregate, &v) == kNvmlSuccess) s->ecc_sbe_aggregate = v;
      if (ecc_(dev, kUncorrected, kAggregate, &v) == kNvmlSuccess) s->ecc_dbe_aggregate = v;
    }
    if (retired_) {
      // A count of 0 asks for the number only (INSUFFICIENT_SIZE when there are pages).
      for (auto [cause, field] : {std::pair{kCauseSbe, &s->retired_sbe}, {kCauseDbe, &s->retired_dbe}}) {
        unsigned int count = 0;
        const nvmlReturn_t r = retired_(dev, cause, &count, nullptr);
        if (r == kNvmlSuccess || r == kNvmlInsufficientSize) *field = count;
      }
    }
    int pending = 0;
    if (retired_pending_ && retired_pending_(dev, &pending) == kNvmlSuccess) s->retired_pending = pending != 0;
    unsigned int corr = 0, unc = 0, remap_pending = 0, failure = 0;
    if (remapped_ && remapped_(dev, &corr, &unc, &remap_pending, &failure) == kNvmlSuccess) {
      s->remapped_correctable = corr;
      s->remapped_uncorrectable = unc;
      s->remap_pending = remap_pending != 0;
      s->remap_failure = failure != 0;
    }
    unsigned int temp = 0;
    if (temperature_ && temperature_(dev, kTemperatureGpu, &temp) == kNvmlSuccess) s->temperature_c = temp;
    if (throttle_ && throttle_(dev, &v) == kNvmlSuccess) s->throttle_reasons = v;
    nvmlMemory_t mem{};
    if (memory_(dev, &mem) == kNvmlSuccess) {
      s->memory_used = mem.used;
      s->memory_total = mem.total;
    }
  }

  void* lib_ = nullptr;
  std::string path_;
  bool initialised_ = false;
  std::mutex mu_;
  nvmlEventSet_t events_ = nullptr;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*event_create_)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*event_free_)(nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_register_)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_wait_)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;
  nvmlReturn_t (*ecc_)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*retired_)(nvmlDevice_t, int, unsigned int*, unsigned long long*) = nullptr;
  nvmlReturn_t (*retired_pending_)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*remapped_)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*throttle_)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*mig_mode_)(nvmlDevice_t, unsigned int*, unsigned int*) = nullptr;
  nvmlReturn_t (*mig_count_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*mig_handle_)(nvmlDevice_t, unsigned int, nvmlDevice_t*) = nullptr;
};

}  // namespace

std::unique_ptr<GpuMonitor> GpuMonitor::Open() {
  auto r = Nvml::Open(LibraryPath(""));
  return r.ok() ? std::move(r).value() : nullptr;
}

Result<std::unique_ptr<GpuMonitor>> GpuMonitor::OpenOrError(const std::string& path) {
  return Nvml::Open(LibraryPath(path));
}

}  // namespace sampan::server::metrics
