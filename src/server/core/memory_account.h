// Memory a loaded version holds (statistics' memory_usage, as Triton reports it), and the
// admission of a load on the GPU: before a version's contexts are made, what they will take on
// each device is estimated from the plan (runtime::Engine::EstimateContextMemory: arenas,
// uploaded folded values, kernels' data, workspace) and compared with what the device has free
// (runtime::Backend::device_memory), less a headroom and less what other loads were promised.
// The server calls no device library: both queries go through the runtime's backend interface.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "runtime/engine.h"
#include "server/core/core.h"

namespace sampan::server {

//! Triton's entries for a report: CPU (host), CPU_PINNED (page-locked host), GPU (id = device),
//! summed over kinds, in that order and by device.
std::vector<MemoryUsage> TritonMemoryUsage(const runtime::MemoryReport& report);

//! Statistics' memory_usage of one version now: every engine's figures (the plan's host weights
//! once per plan: engines of one plan share them) and every context's (arenas of the shape
//! buckets planned so far, workspace, staging). Thread-safe against the contexts' runs.
std::vector<MemoryUsage> VersionMemoryUsage(const std::vector<std::shared_ptr<runtime::Engine>>& engines,
                                            const std::vector<std::unique_ptr<runtime::Context>>& contexts);

//! The input shapes a version's contexts plan, one set per batch size in `batches` (the batch
//! buckets warm-up runs): each input's dimensions after the first as the graph declares them.
//! Unavailable, naming the input, when one of those is not fixed (only requests will tell).
//! With no batches (a model without batching): the graph's input shapes, which must be static.
Result<std::vector<std::map<std::string, Shape>>> PlannedShapes(const ir::Graph& graph,
                                                                const std::vector<int64_t>& batches);

//! The headroom a load leaves free on each GPU: SAMPAN_GPU_MEMORY_HEADROOM_MIB (MiB, >= 0) when
//! set, else 512 MiB (library handles, the CUDA context's growth and CUDA graphs, which the
//! estimate does not cover). An unparsable value is an error naming it.
Result<uint64_t> GpuHeadroomBytes();

//! Device memory promised to one admitted load until its contexts have allocated it: other
//! loads count it as taken. Dropped (moved-from or destroyed): given back.
class GpuReservation {
 public:
  GpuReservation() = default;
  GpuReservation(GpuReservation&& o) noexcept : bytes_(std::move(o.bytes_)) { o.bytes_.clear(); }
  GpuReservation& operator=(GpuReservation&& o) noexcept;
  GpuReservation(const GpuReservation&) = delete;
  GpuReservation& operator=(const GpuReservation&) = delete;
  ~GpuReservation() { Release(); }
  //! Bytes promised on `device` (0 when none).
  uint64_t bytes(int device) const;
  void Release();

 private:
  friend Result<GpuReservation> AdmitOnGpus(const std::string&, const std::vector<std::shared_ptr<runtime::Engine>>&,
                                            const std::vector<size_t>&,
                                            const std::vector<std::map<std::string, Shape>>&, uint64_t);
  std::map<int, uint64_t> bytes_;
};

//! Device memory promised to admitted loads now, on `device` (all GpuReservations alive).
uint64_t GpuBytesPromised(int device);

//! Admits the contexts of a version on the GPUs: `instance_engine[i]` is the engine of instance
//! i (one context each), `shape_sets` what each context will plan (PlannedShapes; empty: the
//! contexts' fixed buffers only). For every device an engine of a device backend is bound to,
//! the need is instances x the engine's per-context estimate; it must fit in what the device
//! has free less `headroom_bytes` and less what other loads were promised. Engines' weights are
//! on their devices already (Engine::Create put them there), so the free figure excludes them.
//! Refused (Unavailable) with a message naming the model, the device, the need (and its
//! parts), what is free, the headroom and what is promised. Host backends are not checked.
Result<GpuReservation> AdmitOnGpus(const std::string& model,
                                   const std::vector<std::shared_ptr<runtime::Engine>>& engines,
                                   const std::vector<size_t>& instance_engine,
                                   const std::vector<std::map<std::string, Shape>>& shape_sets,
                                   uint64_t headroom_bytes);

}  // namespace sampan::server
