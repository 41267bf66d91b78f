#include "server/core/cuda_ipc.h"

#include <cstring>

#include "server/core/log.h"

#if SAMPAN_HAVE_CUDA
#include <cuda.h>  // driver types only: cuMemGetAddressRange is reached through the runtime
#include <cuda_runtime_api.h>
#endif

namespace sampan::server::cuda_ipc {

Status NotBuilt() {
  return Unsupported("CUDA shared memory is not supported: this server was built without CUDA");
}

#if SAMPAN_HAVE_CUDA

namespace {

std::string ErrorText(cudaError_t e) {
  return StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// Clears the thread's last CUDA error after a failed call, so that a later cudaGetLastError()
// on this thread (the CUDA backend checks launches with it) does not report ours.
cudaError_t Failed(cudaError_t e) {
  (void)cudaGetLastError();
  return e;
}

// `device` current for the scope; the thread's previous device after it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      Failed(cudaSuccess);
      previous_ = -1;
    }
    if (previous_ != device_) {
      status_ = cudaSetDevice(device_);
      if (status_ != cudaSuccess) Failed(status_);
    }
  }
  ~DeviceScope() {
    if (status_ == cudaSuccess && previous_ >= 0 && previous_ != device_ && cudaSetDevice(previous_) != cudaSuccess)
      Failed(cudaSuccess);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int device_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// The bytes of the device allocation holding `ptr`, from `ptr` to its end. Through the runtime's
// driver entry point: linking libcuda would stop the server from starting where no driver is.
Result<uint64_t> BytesFrom(const char* ptr, int device) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr)
    return Internal("cannot check the size of the allocation on CUDA device ", device,
                    ": the driver's cuMemGetAddressRange is not available",
                    e != cudaSuccess ? StrCat(": ", ErrorText(Failed(e))) : std::string());
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  const CUresult r = reinterpret_cast<GetAddressRange>(fn)(&base, &size, p);
  if (r != CUDA_SUCCESS)
    return InvalidArgument("cannot find the allocation of the handle on CUDA device ", device,
                           ": cuMemGetAddressRange failed with CUresult ", static_cast<int>(r));
  return static_cast<uint64_t>(base + size - p);
}

Status Copy(int device, void* dst, const void* src, size_t n, const char* direction) {
  if (n == 0) return Status::Ok();
  DeviceScope scope(device);
  if (scope.status() != cudaSuccess)
    return Internal("CUDA shared memory: cannot use CUDA device ", device, ": ", ErrorText(scope.status()));
  // The per-thread stream does not wait for the backends' streams as the legacy default one would.
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cudaStreamPerThread);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
  if (e != cudaSuccess)
    return Internal("CUDA shared memory: copying ", n, " bytes ", direction, " on CUDA device ", device,
                    " failed: ", ErrorText(Failed(e)));
  return Status::Ok();
}

}  // namespace

bool Built() {
  return true;
}

Result<std::shared_ptr<Mapping>> Mapping::Open(std::string_view handle, int device, uint64_t byte_size) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t))
    return InvalidArgument("a CUDA IPC handle has ", sizeof(cudaIpcMemHandle_t), " bytes, got ", handle.size());
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return InvalidArgument("CUDA device ", device, " is not available: ", ErrorText(Failed(e)));
  if (device < 0 || device >= count)
    return InvalidArgument("CUDA device ", device, " does not exist (this machine has ", count, " CUDA device",
                           count == 1 ? "" : "s", ")");
  DeviceScope scope(device);
  if (scope.status() != cudaSuccess)
    return InvalidArgument("cannot use CUDA device ", device, ": ", ErrorText(scope.status()));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  void* ptr = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess)
    return InvalidArgument("cannot open the CUDA IPC handle on CUDA device ", device, ": ", ErrorText(Failed(e)));
  // Owned from here: an error below closes the handle again.
  std::shared_ptr<Mapping> m(new Mapping(static_cast<char*>(ptr), device));
  SP_ASSIGN_OR_RETURN(const uint64_t bytes, BytesFrom(m->data(), device));
  if (byte_size > bytes)
    return InvalidArgument("byte_size ", byte_size, " is more than the ", bytes,
                           " bytes of the device allocation the handle names (CUDA device ", device, ")");
  return m;
}

Mapping::~Mapping() {
  DeviceScope scope(device_);
  const cudaError_t e = scope.status() == cudaSuccess ? cudaIpcCloseMemHandle(data_) : scope.status();
  if (e != cudaSuccess)
    LogWarning("CUDA shared memory: closing an IPC handle on device ", device_, ": ", ErrorText(Failed(e)));
}

Status CopyToHost(int device, void* dst, const void* src, size_t n) {
  return Copy(device, dst, src, n, "from the device");
}

Status CopyToDevice(int device, void* dst, const void* src, size_t n) {
  return Copy(device, dst, src, n, "to the device");
}

#else  // !SAMPAN_HAVE_CUDA

bool Built() {
  return false;
}

Result<std::shared_ptr<Mapping>> Mapping::Open(std::string_view, int, uint64_t) {
  return NotBuilt();
}

Mapping::~Mapping() = default;

Status CopyToHost(int, void*, const void*, size_t) {
  return NotBuilt();
}

Status CopyToDevice(int, void*, const void*, size_t) {
  return NotBuilt();
}

#endif  // SAMPAN_HAVE_CUDA

}  // namespace sampan::server::cuda_ipc
