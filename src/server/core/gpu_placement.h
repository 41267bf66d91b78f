// Which GPUs and MIG devices the server runs on (docs/gpu-sharing.md). CUDA decides what a
// process sees from CUDA_VISIBLE_DEVICES (indices, GPU-UUIDs or their unique prefixes,
// MIG-UUIDs), as Triton relies on; `sampan serve --gpus LIST` sets it from NVML's enumeration,
// checked, before CUDA starts. instance_group's `gpus: [...]` then names CUDA's ordinals among
// those devices. The NVML enumeration (GPUs, and the MIG devices of GPUs in MIG mode) and what
// CUDA will make of the variable are shown in the startup log and `sampan info`.
//
// A CUDA process enumerates at most one MIG device (CUDA 11 and 12 drivers, NVIDIA's MIG user
// guide): several MIG devices are served by one server process each.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/metrics/gpu_metrics.h"

namespace sampan::server {

//! One device CUDA will show this process, by ordinal.
struct VisibleGpu {
  int ordinal = 0;          //!< CUDA's ordinal in this process (what instance_group's gpus: [...] names)
  std::string uuid;         //!< "GPU-..." or "MIG-..."
  bool mig = false;         //!< a MIG device
  std::string description;  //!< "GPU 0 (NVIDIA H100 80GB HBM3, 79.6 GiB)", "MIG device 1 of GPU 0 (...)"
};

struct GpuPlacement {
  std::vector<VisibleGpu> visible;  //!< in CUDA's order
  //! Where CUDA will not do what the variable seems to ask: entries NVML does not know (CUDA
  //! ignores them and every entry after), a second MIG device, a GPU in MIG mode named whole.
  std::vector<std::string> notes;
};

//! The devices CUDA enumerates for CUDA_VISIBLE_DEVICES = `visible` (nullopt: not set) on the
//! GPUs NVML reports. Not set: every GPU not in MIG mode, in NVML's order (CUDA's order when
//! CUDA_DEVICE_ORDER=PCI_BUS_ID; the default, FASTEST_FIRST, agrees on identical GPUs); a GPU in
//! MIG mode gets a note (which of its MIG devices CUDA takes is the driver's choice: name one).
GpuPlacement ResolveVisibleGpus(const std::vector<metrics::GpuInfo>& gpus, const std::optional<std::string>& visible);

//! `sampan serve --gpus LIST` (comma-separated NVML indices, GPU UUIDs or MIG UUIDs, either
//! whole or a unique prefix) as the CUDA_VISIBLE_DEVICES value it stands for (full UUIDs, in the
//! order given). Errors name the entry and list what NVML has: an unknown or ambiguous entry, a
//! GPU in MIG mode named whole (its MIG devices are listed), more than one MIG device, or MIG
//! devices mixed with GPUs.
Result<std::string> VisibleDevicesFor(const std::vector<metrics::GpuInfo>& gpus, const std::string& list);

//! NVML's enumeration, one line per GPU and per MIG device, for the log and `sampan info`.
std::vector<std::string> GpuInventoryLines(const std::vector<metrics::GpuInfo>& gpus);

}  // namespace sampan::server
