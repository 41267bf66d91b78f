// Registers the "cuda" backend with the runtime.
#include <cuda_runtime.h>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "runtime/backend.h"

namespace sampan::cuda {
namespace {

runtime::Backend MakeCudaBackend() {
  runtime::Backend b;
  b.name = "cuda";
  b.plans_per_shape = true;  // a bucket (kernels, arena, CUDA graph) per input shape
  b.available = [] { return CudaAvailable(); };
  b.fingerprint = [](int device) { return DeviceFingerprint(device); };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& options) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto engine, CudaEngine::Create(plan, options));
    return std::unique_ptr<runtime::BackendEngine>(std::move(engine));
  };
  b.device_count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return 0;
    }
    return n;
  };
  b.device_alloc = [](int device, size_t bytes) -> Result<std::shared_ptr<void>> {
    SP_RETURN_IF_ERROR(CudaAvailable());
    return AllocShared(device, bytes);
  };
  b.device_copy = [](int device, void* dst, const void* src, size_t bytes, runtime::Backend::CopyKind kind) -> Status {
    if (bytes == 0) return Status::Ok();
    SP_RETURN_IF_ERROR(CudaAvailable());
    SP_CUDA(cudaSetDevice(device));
    const cudaMemcpyKind k = kind == runtime::Backend::CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                             : kind == runtime::Backend::CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                                                 : cudaMemcpyDeviceToDevice;
    SP_CUDA(cudaMemcpy(dst, src, bytes, k));
    return Status::Ok();
  };
  b.device_memory_used = [](int device) -> Result<size_t> {
    SP_RETURN_IF_ERROR(CudaAvailable());
    SP_CUDA(cudaSetDevice(device));
    SP_CUDA(cudaDeviceSynchronize());
    size_t free_bytes = 0, total = 0;
    SP_CUDA(cudaMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
  };
  b.device_memory = [](int device) -> Result<runtime::Backend::DeviceMemory> {
    SP_RETURN_IF_ERROR(CudaAvailable());
    SP_RETURN_IF_ERROR(CheckDevice(device));
    SP_CUDA(cudaSetDevice(device));
    size_t free_bytes = 0, total = 0;
    SP_CUDA(cudaMemGetInfo(&free_bytes, &total));
    return runtime::Backend::DeviceMemory{free_bytes, total};
  };
  return b;
}

}  // namespace
}  // namespace sampan::cuda

SAMPAN_REGISTER_BACKEND(cuda, ::sampan::cuda::MakeCudaBackend)
