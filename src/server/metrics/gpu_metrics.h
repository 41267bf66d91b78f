// GPU figures for /metrics and for the GPU health rules (server/core/gpu_health.h) through NVML,
// loaded with dlopen at run time so the server neither links nor needs the NVIDIA driver: without
// it (or without a GPU) there are simply no GPU series. SAMPAN_NVML_LIBRARY names another library
// to load instead of libnvidia-ml.so.1 (the tests' fake NVML, tests/fixtures/fake_nvml.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

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

//! What a DCGM health watch reads of one GPU; a figure the driver or board does not report is
//! absent (older drivers, boards without ECC or row remapping).
struct GpuHealthSample {
  unsigned index = 0;  //!< NVML's device index
  std::string uuid;
  std::vector<uint64_t> xids;  //!< XID critical errors since the previous sample, in order
  std::optional<uint64_t> ecc_sbe_volatile, ecc_dbe_volatile;            //!< corrected / uncorrected since boot
  std::optional<uint64_t> ecc_sbe_aggregate, ecc_dbe_aggregate;          //!< over the board's life
  std::optional<uint64_t> retired_sbe, retired_dbe;                      //!< pages retired for each cause
  std::optional<bool> retired_pending;                                   //!< a retirement waits for a reset
  std::optional<uint64_t> remapped_correctable, remapped_uncorrectable;  //!< rows remapped (A100 and later)
  std::optional<bool> remap_pending, remap_failure;
  std::optional<uint64_t> temperature_c;
  std::optional<uint64_t> throttle_reasons;           //!< nvmlClocksThrottleReason* bits
  std::optional<uint64_t> memory_used, memory_total;  //!< bytes
};

//! A MIG device (a compute instance of a GPU instance): CUDA places work on it by its UUID.
struct MigDeviceInfo {
  unsigned index = 0;         //!< nvmlDeviceGetMigDeviceHandleByIndex's index on its GPU
  std::string uuid;           //!< "MIG-8c1b..." (CUDA_VISIBLE_DEVICES takes it)
  std::string name;           //!< "NVIDIA H100 80GB HBM3 MIG 1g.10gb" ("" when NVML does not say)
  uint64_t memory_total = 0;  //!< bytes of its GPU instance (0 when NVML does not say)
};

//! One physical GPU as NVML enumerates it, and its MIG devices when MIG mode is on.
struct GpuInfo {
  unsigned index = 0;  //!< NVML's device index (nvidia-smi's)
  std::string uuid;    //!< "GPU-8c1b..."
  std::string name;
  uint64_t memory_total = 0;
  bool mig_enabled = false;  //!< the current MIG mode (nvmlDeviceGetMigMode); false where not supported
  std::vector<MigDeviceInfo> mig;
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  //! nullptr when NVML (libnvidia-ml.so.1, or SAMPAN_NVML_LIBRARY) cannot be loaded or
  //! initialised, or there is no GPU.
  static std::unique_ptr<GpuMonitor> Open();
  //! As Open(), with the reason when there is no monitor: the library (`path`, "" for
  //! SAMPAN_NVML_LIBRARY or else libnvidia-ml.so.1) cannot be loaded, lacks a function, does not
  //! initialise or sees no GPU. XID events are registered for every GPU.
  static Result<std::unique_ptr<GpuMonitor>> OpenOrError(const std::string& path = "");
  //! The library loaded ("libnvidia-ml.so.1" or the override).
  virtual const std::string& library() const = 0;
  //! Every GPU NVML can read now (a GPU whose query fails is left out).
  virtual std::vector<GpuSample> Sample() = 0;
  //! Every GPU's health figures now, and the XID events since the last call.
  virtual std::vector<GpuHealthSample> SampleHealth() = 0;
  //! Every GPU and, on those in MIG mode, every MIG device (a driver without the MIG functions:
  //! none). Default: nothing.
  virtual std::vector<GpuInfo> Inventory() { return {}; }
};

}  // namespace sampan::server::metrics
