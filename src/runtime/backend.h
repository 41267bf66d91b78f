// Backends as the runtime sees them: a registry of named backends, each able to
// bind a plan to one device (a BackendEngine: weights prepared once, shared by
// all contexts) and to create contexts on it.
//
// A backend library registers itself from a static initialiser with
// SAMPAN_REGISTER_BACKEND, so programs link backend archives whole (like ops/).
// The reference backend is built into the runtime and always present.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "plan/plan.h"
#include "runtime/memory_usage.h"

namespace sampan::runtime {

class ContextImpl;

//! How an engine is bound: which device, how many threads.
//! The priority of the streams a device backend's contexts run on (Triton's ModelPriority):
//! kHigh is the device's greatest stream priority, kLow its least. Host backends ignore it.
enum class StreamPriority { kDefault, kHigh, kLow };

//! "default", "high", "low".
const char* StreamPriorityName(StreamPriority p);

struct EngineOptions {
  int device = 0;               //!< GPU ordinal, for device backends
  int threads = 0;              //!< CPU threads for this engine; 0 = the cores available to the process
  bool use_cuda_graph = false;  //!< capture and replay CUDA graphs per shape bucket (cuda backend)
  StreamPriority stream_priority = StreamPriority::kDefault;  //!< of each context's stream (cuda backend)
};

//! One plan bound to one device: prepared weights shared by its contexts.
class BackendEngine {
 public:
  virtual ~BackendEngine() = default;
  virtual Result<std::unique_ptr<ContextImpl>> CreateContext() = 0;
  //! Ok while healthy; after an unrecoverable (sticky) device error, why not.
  virtual Status Health() const { return Status::Ok(); }
  //! What runs the plan, for `sampan bench` (device, kernel variant); empty when nothing to say.
  virtual std::string Describe() const { return {}; }
  //! Memory this engine holds beyond the plan itself, shared by its contexts (a device copy of
  //! the weights, reordered weights; memory_usage.h says what no figure covers). Thread-safe.
  //! Default: nothing (the reference backend runs on the plan's own weights; the sim
  //! backend's device memory is simulated).
  virtual MemoryReport MemoryUsage() const { return {}; }
  //! (device backends) What one more context of this engine will hold once it has planned
  //! each of `shape_sets` (graph input name -> shape; one set per shape bucket it will run):
  //! figures marked estimate, on this engine's device and in pinned host memory. Allocates
  //! nothing that outlives the call. Default: Unsupported (a host backend; nothing to admit).
  virtual Result<MemoryReport> EstimateContextMemory(const std::vector<std::map<std::string, Shape>>& shape_sets) {
    (void)shape_sets;
    return Unsupported("this backend does not estimate a context's memory ahead of allocation");
  }
};

struct Backend {
  std::string name;
  //! Ok when this machine can run the backend; otherwise why not ("no CUDA device").
  std::function<Status()> available;
  //! The fingerprint plans built for `device` record (compared on load).
  std::function<plan::Fingerprint(int device)> fingerprint;
  //! Binds `plan` (which outlives the result) to a device.
  std::function<Result<std::unique_ptr<BackendEngine>>(const plan::Plan& plan, const EngineOptions& options)> create;
  //! (optional) How many devices this process sees (ordinals 0..n-1); absent: 1 (a host backend).
  std::function<int()> device_count;
  //! (optional) What this machine offers the backend, one "key: value" per line, for `sampan info`
  //! (the CPU's instruction set levels, the GPUs).
  std::function<std::string()> describe;
  //! (optional, device backends) Device memory for callers that hand device buffers to a context
  //! (Context::RunDevice) without a device library of their own, as the Python API's device
  //! arrays do. device_alloc: `bytes` on `device`, freed when the last copy of the pointer goes.
  //! device_copy: synchronous; kind says which side is the device.
  enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
  std::function<Result<std::shared_ptr<void>>(int device, size_t bytes)> device_alloc;
  std::function<Status(int device, void* dst, const void* src, size_t bytes, CopyKind kind)> device_copy;
  //! (optional, device backends) Bytes of `device`'s memory in use now, by every process (as
  //! nvidia-smi counts them): `sampan publish` measures what one engine and context take.
  std::function<Result<size_t>(int device)> device_memory_used;
  //! (optional, device backends) Free and total bytes of `device`'s memory now, as the driver
  //! counts them (cudaMemGetInfo): the server's load admission (server/core/memory_account.h).
  struct DeviceMemory {
    uint64_t free = 0;
    uint64_t total = 0;
  };
  std::function<Result<DeviceMemory>(int device)> device_memory;
  //! Whether a context prepares work per input shape (kernels, memory, CUDA graphs), so
  //! a server keeps to a few batch sizes (padding up to batch buckets) rather than one per size.
  bool plans_per_shape = false;
};

//! backend.device_count() when given, else 1.
int DeviceCount(const Backend& backend);

void RegisterBackend(Backend backend);
//! nullptr when no backend of that name is in this build.
const Backend* FindBackend(const std::string& name);
//! Names of the backends in this build, sorted.
std::vector<std::string> BackendNames();

}  // namespace sampan::runtime

#define SAMPAN_REGISTER_BACKEND_IMPL(id, factory)         \
  namespace {                                             \
  const bool SP_CONCAT(sp_backend_registered_, id) = [] { \
    ::sampan::runtime::RegisterBackend(factory());        \
    return true;                                          \
  }();                                                    \
  }
//! SAMPAN_REGISTER_BACKEND(cpu, MakeCpuBackend) where MakeCpuBackend() returns a Backend.
#define SAMPAN_REGISTER_BACKEND(id, factory) SAMPAN_REGISTER_BACKEND_IMPL(id, factory)
