// GPU health beyond sticky CUDA errors, as DCGM-based operators watch it (issue #22): XID error
// events, ECC error counts, retired pages and remapped rows, temperature and throttle reasons,
// and device memory growth beyond what the loaded plans account for, read from NVML
// (server/metrics/gpu_metrics.h). Rules turn the server's readiness false with a reason, so the
// node drains itself (the readiness probe, haproxy's check and agent take it out) before users see
// failures; requests it already holds still run.
//
// A rule trips on one GPU. Sticky rules (an XID, ECC errors, retired pages and remapped rows) stay
// tripped until the server restarts, as DCGM's health watches do: the GPU needs a reset. The others
// (temperature, throttle reasons, memory growth) clear when the figure does.
//
// The same figures are exported with dcgm-exporter's names (labels gpu, UUID), so dashboards built
// for it work: DCGM_FI_DEV_XID_ERRORS (the last XID), DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL,
// DCGM_FI_DEV_RETIRED_{SBE,DBE,PENDING}, DCGM_FI_DEV_{CORRECTABLE,UNCORRECTABLE}_REMAPPED_ROWS,
// DCGM_FI_DEV_ROW_REMAP_{FAILURE,PENDING}, DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,
// DCGM_FI_DEV_FB_{USED,FREE} (MiB); and Sampan's own: sampan_gpu_xid_errors_total{xid},
// sampan_gpu_memory_unaccounted_growth_bytes, sampan_gpu_healthy, sampan_gpu_health_rule_tripped{rule}.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "server/metrics/gpu_metrics.h"
#include "server/metrics/metrics.h"

namespace sampan::server {

//! Which conditions make a GPU unhealthy. A threshold of 0 switches its rule off.
struct GpuHealthRules {
  //! XIDs that mean the GPU needs a reset or its jobs fail (DCGM and NVIDIA's XID catalogue):
  //! 48 DBE, 61/62 internal micro-controller halt, 63/64 page retirement or row remapping event
  //! or failure, 74 NVLink error, 79 fallen off the bus, 92 high SBE rate, 94/95 contained /
  //! uncontained ECC error, 119/120 GSP error.
  std::set<uint64_t> xids = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120};
  uint64_t ecc_dbe = 1;            //!< new volatile uncorrected ECC errors since start
  uint64_t ecc_sbe = 0;            //!< new volatile corrected ECC errors since start
  uint64_t retired_pages = 0;      //!< retired pages (both causes) in all
  bool retired_pending = true;     //!< a page retirement waits for a reset
  bool remap_failure = true;       //!< row remapping failed (the board is out of spare rows)
  bool remap_pending = false;      //!< a row remapping waits for a reset
  uint64_t temperature_c = 0;      //!< GPU temperature at or above
  uint64_t throttle_mask = 0;      //!< any of these nvmlClocksThrottleReason bits
  uint64_t memory_growth_mib = 0;  //!< device memory used beyond the plans' accounted use grew by more
};

//! `--gpu-health-rule` values, each `NAME=VALUE` (or `off`: no rule, `default`: the defaults):
//! xid=48,79,... | xid=none, ecc-dbe=N, ecc-sbe=N, retired-pages=N, retired-pending=on|off,
//! remap-failure=on|off, remap-pending=on|off, temperature=C, throttle=NAME,NAME (hw_slowdown,
//! sw_thermal, hw_thermal, hw_power_brake, sw_power_cap) | throttle=none, memory-growth-mib=N.
//! Each replaces that rule's default. Errors name the flag value and what was expected.
Result<GpuHealthRules> ParseGpuHealthRules(const std::vector<std::string>& specs);

//! One tripped rule on one GPU.
struct GpuFault {
  std::string rule;    //!< "xid", "ecc-dbe", "temperature", ...
  std::string detail;  //!< "XID 79 (GPU has fallen off the bus)"
  bool sticky = false;
};

//! What the rules make of one GPU's sample. `start` is the GPU's first sample (ECC counts are
//! counted from it); `accounted` the device memory the loaded plans hold; `baseline_unaccounted`
//! the used memory beyond them at start. Pure: the tests feed it samples.
std::vector<GpuFault> EvaluateGpuHealth(const GpuHealthRules& rules, const metrics::GpuHealthSample& start,
                                        const metrics::GpuHealthSample& now, uint64_t accounted,
                                        int64_t baseline_unaccounted);
//! "XID 79 (GPU has fallen off the bus)"; an XID not in the table: "XID 13".
std::string XidText(uint64_t xid);

struct GpuHealthOptions {
  GpuHealthRules rules;
  std::chrono::milliseconds interval{1000};  //!< how often NVML is read
  std::string library;                       //!< "" = SAMPAN_NVML_LIBRARY, else libnvidia-ml.so.1
  //! Device memory the loaded plans account for on NVML device `index` (bytes).
  std::function<uint64_t(unsigned index)> accounted;
};

//! Reads NVML every interval on its own thread, applies the rules, keeps the DCGM-named series in
//! `registry` current and logs each change of a GPU's health.
class GpuHealth {
 public:
  //! nullptr (and Ok) when NVML is not there or sees no GPU and no library was asked for by name
  //! (options.library or SAMPAN_NVML_LIBRARY): a machine without a GPU has nothing to watch. A
  //! library asked for that cannot be used is an error naming it.
  static Result<std::unique_ptr<GpuHealth>> Start(GpuHealthOptions options, metrics::Registry* registry);
  //! The same, on a monitor given (tests).
  static std::unique_ptr<GpuHealth> Start(GpuHealthOptions options, std::unique_ptr<metrics::GpuMonitor> monitor,
                                          metrics::Registry* registry);
  ~GpuHealth();
  //! "" while every GPU is healthy; else why not, GPU by GPU ("GPU 0 (GPU-...): XID 79 (...)").
  std::string Unhealthy() const;
  //! Reads NVML and applies the rules now (the thread does it every interval).
  void Poll();

 private:
  GpuHealth(GpuHealthOptions options, std::unique_ptr<metrics::GpuMonitor> monitor, metrics::Registry* registry);
  void Run();
  void Export(const metrics::GpuHealthSample& s, const std::vector<GpuFault>& faults, int64_t growth);

  struct Gpu {
    metrics::GpuHealthSample start;
    int64_t baseline_unaccounted = 0;
    uint64_t last_xid = 0;
    std::vector<std::pair<std::string, GpuFault>> sticky;  //!< in the order they tripped, by rule (XIDs by XID)
    std::string reason;                                    //!< "" healthy
  };
  GpuHealthOptions options_;
  std::unique_ptr<metrics::GpuMonitor> monitor_;
  metrics::Registry* registry_;
  mutable std::mutex mu_;
  std::map<unsigned, Gpu> gpus_;  // by NVML index
  std::string unhealthy_;
  std::mutex poll_mu_;  // one Poll at a time
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sampan::server
