// GPU figures for /metrics through NVML, loaded with dlopen at run time so
// the server neither links nor needs the NVIDIA driver: without it (or
// without a GPU) there are simply no GPU series.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace sampan::server::metrics {

//! One GPU at one moment.
struct GpuSample {
  std::string uuid;         //!< "GPU-8c1b..."
  double utilization = 0;   //!< 0..1, over NVML's last sample period
  double memory_used = 0;   //!< bytes
  double memory_total = 0;  //!< bytes
  double power_watts = 0;
  bool has_power = false;  //!< some boards do not report power
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  //! nullptr when libnvidia-ml.so.1 cannot be loaded or initialised, or there is no GPU.
  static std::unique_ptr<GpuMonitor> Open();
  //! Every GPU NVML can read now (a GPU whose query fails is left out).
  virtual std::vector<GpuSample> Sample() = 0;
};

}  // namespace sampan::server::metrics
