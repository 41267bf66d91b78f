#include "backends/cuda/device.h"

#include <atomic>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_check.h"

namespace sampan::cuda {

namespace {
std::mutex g_sticky_mu;
// The first sticky error of each device (its CUDA context is then unusable; the
// other devices of the process go on).
std::map<int, cudaError_t> g_sticky;
}  // namespace

void NoteCudaError(cudaError_t e) {
  if (!IsStickyError(e)) return;
  int device = -1;
  cudaGetDevice(&device);
  std::lock_guard<std::mutex> lock(g_sticky_mu);
  g_sticky.emplace(device, e);
}

Status StickyDeviceError(int device) {
  std::lock_guard<std::mutex> lock(g_sticky_mu);
  auto it = g_sticky.find(device);
  if (it == g_sticky.end()) return Status::Ok();
  return Unavailable("CUDA device ", device, " hit an unrecoverable error (", cudaGetErrorName(it->second), ": ",
                     cudaGetErrorString(it->second), "); the process must be restarted to use that device again");
}

Status CudaAvailable() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return Unavailable("no CUDA device (", cudaGetErrorString(e), ")");
  }
  if (n == 0) return Unavailable("no CUDA device");
  return Status::Ok();
}

Status CheckDevice(int device) {
  SP_RETURN_IF_ERROR(CudaAvailable());
  int n = 0;
  SP_CUDA(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n)
    return InvalidArgument("CUDA device ", device, " does not exist (this machine has ", n, " device",
                           n == 1 ? "" : "s", ": 0..", n - 1, ")");
  return Status::Ok();
}

int StreamPriorityIn(runtime::StreamPriority p, int least, int greatest) {
  switch (p) {
    case runtime::StreamPriority::kHigh:
      return greatest;
    case runtime::StreamPriority::kLow:
      return least;
    case runtime::StreamPriority::kDefault:
      break;
  }
  return 0;  // the priority of a stream made without one
}

Result<int> StreamPriorityValue(runtime::StreamPriority p) {
  if (p == runtime::StreamPriority::kDefault) return 0;
  int least = 0, greatest = 0;
  SP_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return StreamPriorityIn(p, least, greatest);
}

plan::Fingerprint DeviceFingerprint(int device) {
  plan::Fingerprint f;
  f.backend = "cuda";
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) f.cuda_version = StrCat(rt / 1000, ".", (rt % 1000) / 10);
  f.cudnn_version = std::to_string(cudnnGetVersion());
  f.cublas_version = std::to_string(cublasLtGetVersion());
  if (CheckDevice(device).ok()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, device) == cudaSuccess) {
      f.gpu_name = p.name;
      f.compute_capability = StrCat(p.major, ".", p.minor);
    }
  }
  return f;
}

std::string DeviceKey(int device) {
  const plan::Fingerprint f = DeviceFingerprint(device);
  return StrCat(f.gpu_name, " sm_", f.compute_capability, " cuda ", f.cuda_version, " cudnn ", f.cudnn_version,
                " cublasLt ", f.cublas_version);
}

Result<std::shared_ptr<void>> AllocShared(int device, size_t bytes) {
  SP_CUDA(cudaSetDevice(device));
  void* p = nullptr;
  SP_CUDA(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return std::shared_ptr<void>(p, [device](void* q) {
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != device) cudaSetDevice(device);
    cudaFree(q);
    if (prev != device) cudaSetDevice(prev);
  });
}

}  // namespace sampan::cuda
