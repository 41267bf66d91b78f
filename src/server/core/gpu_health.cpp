#include "server/core/gpu_health.h"

#include <algorithm>
#include <cstdlib>

#include "base/split.h"
#include "server/core/log.h"

namespace sampan::server {

namespace {

// nvmlClocksThrottleReason* bits a rule can name (the others are not faults: idle, application
// clocks, sync boost, display clock).
const std::pair<const char*, uint64_t> kThrottleBits[] = {
    {"sw_power_cap", 0x4}, {"hw_slowdown", 0x8}, {"sw_thermal", 0x20}, {"hw_thermal", 0x40}, {"hw_power_brake", 0x80}};

Result<uint64_t> Count(const std::string& spec, const std::string& value) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || value[0] == '-')
    return InvalidArgument("--gpu-health-rule '", spec, "': '", value, "' is not a whole number >= 0");
  return static_cast<uint64_t>(v);
}

Result<bool> OnOff(const std::string& spec, const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return InvalidArgument("--gpu-health-rule '", spec, "': expected on or off, not '", value, "'");
}

std::string ThrottleNames(uint64_t bits) {
  std::string out;
  for (const auto& [name, bit] : kThrottleBits) {
    if ((bits & bit) == 0) continue;
    if (!out.empty()) out.push_back(',');
    out.append(name);  // appended, not `"," + name`: GCC 12's -O3 -Wrestrict misreads that temporary
  }
  return out;
}

int64_t Unaccounted(const metrics::GpuHealthSample& s, uint64_t accounted) {
  return static_cast<int64_t>(s.memory_used.value_or(0)) - static_cast<int64_t>(accounted);
}

}  // namespace

Result<GpuHealthRules> ParseGpuHealthRules(const std::vector<std::string>& specs) {
  GpuHealthRules r;
  for (const std::string& spec : specs) {
    if (spec == "default") {
      r = GpuHealthRules{};
      continue;
    }
    if (spec == "off") {
      r = GpuHealthRules{};
      r.xids.clear();
      r.ecc_dbe = 0;
      r.retired_pending = r.remap_failure = false;
      continue;
    }
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return InvalidArgument("--gpu-health-rule '", spec, "': expected NAME=VALUE, 'default' or 'off'");
    const std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    if (name == "xid") {
      r.xids.clear();
      if (value == "none") continue;
      for (const std::string& x : SplitFields(value, ',')) {
        SP_ASSIGN_OR_RETURN(uint64_t v, Count(spec, x));
        r.xids.insert(v);
      }
    } else if (name == "ecc-dbe") {
      SP_ASSIGN_OR_RETURN(r.ecc_dbe, Count(spec, value));
    } else if (name == "ecc-sbe") {
      SP_ASSIGN_OR_RETURN(r.ecc_sbe, Count(spec, value));
    } else if (name == "retired-pages") {
      SP_ASSIGN_OR_RETURN(r.retired_pages, Count(spec, value));
    } else if (name == "retired-pending") {
      SP_ASSIGN_OR_RETURN(r.retired_pending, OnOff(spec, value));
    } else if (name == "remap-failure") {
      SP_ASSIGN_OR_RETURN(r.remap_failure, OnOff(spec, value));
    } else if (name == "remap-pending") {
      SP_ASSIGN_OR_RETURN(r.remap_pending, OnOff(spec, value));
    } else if (name == "temperature") {
      SP_ASSIGN_OR_RETURN(r.temperature_c, Count(spec, value));
    } else if (name == "memory-growth-mib") {
      SP_ASSIGN_OR_RETURN(r.memory_growth_mib, Count(spec, value));
    } else if (name == "throttle") {
      r.throttle_mask = 0;
      if (value == "none") continue;
      for (const std::string& t : SplitFields(value, ',')) {
        uint64_t bit = 0;
        for (const auto& [n, b] : kThrottleBits)
          if (t == n) bit = b;
        if (bit == 0)
          return InvalidArgument("--gpu-health-rule '", spec, "': unknown throttle reason '", t,
                                 "' (expected sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake or "
                                 "none)");
        r.throttle_mask |= bit;
      }
    } else {
      return InvalidArgument("--gpu-health-rule '", spec, "': unknown rule '", name,
                             "' (expected xid, ecc-dbe, ecc-sbe, retired-pages, retired-pending, remap-failure, "
                             "remap-pending, temperature, throttle, memory-growth-mib)");
    }
  }
  return r;
}

std::string XidText(uint64_t xid) {
  static const std::map<uint64_t, const char*> kNames = {{13, "graphics engine exception"},
                                                         {31, "GPU memory page fault"},
                                                         {43, "GPU stopped processing"},
                                                         {45, "preemptive cleanup"},
                                                         {48, "double bit ECC error"},
                                                         {61, "internal micro-controller breakpoint"},
                                                         {62, "internal micro-controller halt"},
                                                         {63, "ECC page retirement or row remapping event"},
                                                         {64, "ECC page retirement or row remapping failure"},
                                                         {74, "NVLink error"},
                                                         {79, "GPU has fallen off the bus"},
                                                         {92, "high single-bit ECC error rate"},
                                                         {94, "contained ECC error"},
                                                         {95, "uncontained ECC error"},
                                                         {119, "GSP RPC timeout"},
                                                         {120, "GSP error"}};
  auto it = kNames.find(xid);
  return it == kNames.end() ? StrCat("XID ", xid) : StrCat("XID ", xid, " (", it->second, ")");
}

std::vector<GpuFault> EvaluateGpuHealth(const GpuHealthRules& rules, const metrics::GpuHealthSample& start,
                                        const metrics::GpuHealthSample& now, uint64_t accounted,
                                        int64_t baseline_unaccounted) {
  std::vector<GpuFault> out;
  for (uint64_t x : now.xids)
    if (rules.xids.count(x)) out.push_back({"xid", XidText(x), true});
  auto grown = [](const std::optional<uint64_t>& a, const std::optional<uint64_t>& b) -> uint64_t {
    return a && b && *b > *a ? *b - *a : 0;
  };
  if (const uint64_t n = grown(start.ecc_dbe_volatile, now.ecc_dbe_volatile); rules.ecc_dbe && n >= rules.ecc_dbe)
    out.push_back({"ecc-dbe", StrCat(n, " uncorrected ECC error(s) since start (rule: ", rules.ecc_dbe, ")"), true});
  if (const uint64_t n = grown(start.ecc_sbe_volatile, now.ecc_sbe_volatile); rules.ecc_sbe && n >= rules.ecc_sbe)
    out.push_back({"ecc-sbe", StrCat(n, " corrected ECC errors since start (rule: ", rules.ecc_sbe, ")"), true});
  if (const uint64_t n = now.retired_sbe.value_or(0) + now.retired_dbe.value_or(0);
      rules.retired_pages && n >= rules.retired_pages)
    out.push_back({"retired-pages", StrCat(n, " retired pages (rule: ", rules.retired_pages, ")"), true});
  if (rules.retired_pending && now.retired_pending.value_or(false))
    out.push_back({"retired-pending", "a page retirement is pending (reset the GPU)", true});
  if (rules.remap_failure && now.remap_failure.value_or(false))
    out.push_back({"remap-failure", "row remapping failed", true});
  if (rules.remap_pending && now.remap_pending.value_or(false))
    out.push_back({"remap-pending", "a row remapping is pending (reset the GPU)", true});
  if (rules.temperature_c && now.temperature_c && *now.temperature_c >= rules.temperature_c)
    out.push_back({"temperature", StrCat("temperature ", *now.temperature_c, " C (rule: ", rules.temperature_c, ")")});
  if (rules.throttle_mask && now.throttle_reasons && (*now.throttle_reasons & rules.throttle_mask))
    out.push_back(
        {"throttle", StrCat("clocks throttled: ", ThrottleNames(*now.throttle_reasons & rules.throttle_mask))});
  if (rules.memory_growth_mib && now.memory_used) {
    const int64_t growth = Unaccounted(now, accounted) - baseline_unaccounted;
    if (growth > static_cast<int64_t>(rules.memory_growth_mib << 20))
      out.push_back({"memory-growth", StrCat("device memory beyond the plans' grew by ", growth >> 20,
                                             " MiB since start (rule: ", rules.memory_growth_mib, ")")});
  }
  return out;
}

Result<std::unique_ptr<GpuHealth>> GpuHealth::Start(GpuHealthOptions options, metrics::Registry* registry) {
  const char* env = std::getenv("SAMPAN_NVML_LIBRARY");
  const bool asked = !options.library.empty() || (env && *env);
  auto monitor = metrics::GpuMonitor::OpenOrError(options.library);
  if (!monitor.ok()) {
    if (asked) return monitor.status().WithContext("GPU health");
    LogVerbose(1, "GPU health: off (", monitor.status().message(), ")");
    return std::unique_ptr<GpuHealth>();
  }
  return Start(std::move(options), std::move(monitor).value(), registry);
}

std::unique_ptr<GpuHealth> GpuHealth::Start(GpuHealthOptions options, std::unique_ptr<metrics::GpuMonitor> monitor,
                                            metrics::Registry* registry) {
  std::unique_ptr<GpuHealth> h(new GpuHealth(std::move(options), std::move(monitor), registry));
  h->Poll();  // the start figures, before the server says it is ready
  if (h->options_.interval.count() > 0) h->thread_ = std::thread([p = h.get()] { p->Run(); });
  return h;
}

GpuHealth::GpuHealth(GpuHealthOptions options, std::unique_ptr<metrics::GpuMonitor> monitor,
                     metrics::Registry* registry)
    : options_(std::move(options)), monitor_(std::move(monitor)), registry_(registry) {
  LogInfo("GPU health: watching the GPUs through ", monitor_->library(), " every ", options_.interval.count(), " ms");
}

GpuHealth::~GpuHealth() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string GpuHealth::Unhealthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unhealthy_;
}

void GpuHealth::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, options_.interval, [this] { return stop_; })) {
    lock.unlock();
    Poll();
    lock.lock();
  }
}

void GpuHealth::Poll() {
  std::lock_guard<std::mutex> one(poll_mu_);
  const std::vector<metrics::GpuHealthSample> samples = monitor_->SampleHealth();
  // Asked before mu_ is taken: the callback takes the Core's lock, under which Ready() asks us.
  std::vector<uint64_t> accounted_bytes;
  for (const metrics::GpuHealthSample& s : samples)
    accounted_bytes.push_back(options_.accounted ? options_.accounted(s.index) : 0);
  std::lock_guard<std::mutex> lock(mu_);
  std::string all;
  for (size_t i = 0; i < samples.size(); ++i) {
    const metrics::GpuHealthSample& s = samples[i];
    const uint64_t accounted = accounted_bytes[i];
    auto [it, first] = gpus_.try_emplace(s.index);
    Gpu& g = it->second;
    if (first) {
      g.start = s;
      g.baseline_unaccounted = Unaccounted(s, accounted);
    }
    if (!s.xids.empty()) g.last_xid = s.xids.back();
    std::vector<GpuFault> faults = EvaluateGpuHealth(options_.rules, g.start, s, accounted, g.baseline_unaccounted);
    std::string reason;
    // A sticky fault stays, in the order they came, each with its latest figure (an ECC count
    // that rises); every XID of the rule is one of its own.
    for (const GpuFault& f : faults) {
      if (!f.sticky) continue;
      const std::string key = f.rule == "xid" ? f.detail : f.rule;
      auto same = std::find_if(g.sticky.begin(), g.sticky.end(),
                               [&](const std::pair<std::string, GpuFault>& e) { return e.first == key; });
      if (same == g.sticky.end())
        g.sticky.emplace_back(key, f);
      else
        same->second = f;
    }
    std::vector<GpuFault> tripped;
    for (const auto& [key, f] : g.sticky) tripped.push_back(f);
    for (const GpuFault& f : faults)
      if (!f.sticky) tripped.push_back(f);
    for (const GpuFault& f : tripped) reason += (reason.empty() ? "" : "; ") + f.detail;
    const std::string name = StrCat("GPU ", s.index, " (", s.uuid, ")");
    if (reason != g.reason) {
      if (!reason.empty())
        LogError("GPU health: ", name, " is unhealthy: ", reason, ": the server is not ready (it drains)");
      else
        LogInfo("GPU health: ", name, " is healthy again");
      g.reason = reason;
    }
    if (!reason.empty()) all += (all.empty() ? "" : "; ") + name + ": " + reason;
    Export(s, tripped, Unaccounted(s, accounted) - g.baseline_unaccounted);
  }
  unhealthy_ = all;
}

void GpuHealth::Export(const metrics::GpuHealthSample& s, const std::vector<GpuFault>& faults, int64_t growth) {
  if (!registry_) return;
  metrics::Registry& r = *registry_;
  const metrics::Labels l = {{"gpu", std::to_string(s.index)}, {"UUID", s.uuid}};
  auto gauge = [&](const char* name, const char* help, const std::optional<uint64_t>& v) {
    if (v) r.AddGauge(name, help).gauge(l).Set(static_cast<double>(*v));
  };
  auto counter = [&](const char* name, const char* help, const std::optional<uint64_t>& v) {
    if (!v) return;
    metrics::Counter& c = r.AddCounter(name, help).counter(l);
    c.Increment(static_cast<double>(*v) - c.value());  // NVML's count since boot; never goes down
  };
  auto flag = [](const std::optional<bool>& b) { return b ? std::optional<uint64_t>(*b ? 1 : 0) : std::nullopt; };
  auto mib = [](const std::optional<uint64_t>& b) { return b ? std::optional<uint64_t>(*b >> 20) : std::nullopt; };
  const Gpu& g = gpus_.at(s.index);
  gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered (0: none)", g.last_xid);
  for (uint64_t x : s.xids)
    r.AddCounter("sampan_gpu_xid_errors_total", "XID critical errors seen, by XID")
        .counter({{"gpu", std::to_string(s.index)}, {"UUID", s.uuid}, {"xid", std::to_string(x)}})
        .Increment();
  counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors", s.ecc_sbe_volatile);
  counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors", s.ecc_dbe_volatile);
  counter("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors", s.ecc_sbe_aggregate);
  counter("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors", s.ecc_dbe_aggregate);
  counter("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors", s.retired_sbe);
  counter("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors", s.retired_dbe);
  gauge("DCGM_FI_DEV_RETIRED_PENDING", "Page retirement pending (1: yes)", flag(s.retired_pending));
  counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
          s.remapped_correctable);
  counter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors",
          s.remapped_uncorrectable);
  gauge("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", flag(s.remap_failure));
  gauge("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether a row remapping is pending", flag(s.remap_pending));
  gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)", s.temperature_c);
  gauge("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Throttling reasons bitmask", s.throttle_reasons);
  gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)", mib(s.memory_used));
  if (s.memory_used && s.memory_total)
    gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)",
          (*s.memory_total > *s.memory_used ? *s.memory_total - *s.memory_used : 0) >> 20);
  if (s.memory_used)
    r.AddGauge("sampan_gpu_memory_unaccounted_growth_bytes",
               "Device memory used beyond what the loaded plans account for, change since start")
        .gauge(l)
        .Set(static_cast<double>(growth));
  r.AddGauge("sampan_gpu_healthy", "1 while no GPU health rule is tripped on the GPU (--gpu-health-rule)")
      .gauge(l)
      .Set(faults.empty() ? 1 : 0);
  metrics::Family& tripped =
      r.AddGauge("sampan_gpu_health_rule_tripped", "1 for each GPU health rule tripped on the GPU (readiness false)");
  for (const char* rule : {"xid", "ecc-dbe", "ecc-sbe", "retired-pages", "retired-pending", "remap-failure",
                           "remap-pending", "temperature", "throttle", "memory-growth"}) {
    bool on = false;
    for (const GpuFault& f : faults) on = on || f.rule == rule;
    metrics::Labels lr = l;
    lr.emplace_back("rule", rule);
    if (on)
      tripped.gauge(lr).Set(1);
    else
      tripped.Remove(lr);
  }
}

}  // namespace sampan::server
