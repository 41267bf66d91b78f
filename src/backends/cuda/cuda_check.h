// Checking CUDA, cuBLASLt and cuDNN return codes: every call goes through one of
// these macros, which turn a failure into a Status naming the call, the file
// and line, and the library's own message. Device-side (sticky) errors are
// recognised so the engine can report itself unhealthy instead of aborting.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "base/status.h"

namespace sampan::cuda {

//! True for errors after which the CUDA context is unusable (illegal address, launch failure...).
inline bool IsStickyError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

//! Records the first sticky error of the current device (read by BackendEngine::Health()).
void NoteCudaError(cudaError_t e);
//! Ok, or the first sticky error device `device` hit (other devices stay usable).
Status StickyDeviceError(int device);

inline Status CudaStatus(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::Ok();
  NoteCudaError(e);
  return Internal("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") in ", what, " at ", file, ":",
                  line);
}
inline Status CublasStatus(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal("cuBLASLt error ", cublasLtGetStatusName(e), " (", cublasLtGetStatusString(e), ") in ", what, " at ",
                  file, ":", line);
}
inline Status CudnnStatus(cudnnStatus_t e, const char* what, const char* file, int line) {
  if (e == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return Internal("cuDNN error ", cudnnGetErrorString(e), " in ", what, " at ", file, ":", line);
}

}  // namespace sampan::cuda

#define SP_CUDA(expr) SP_RETURN_IF_ERROR(::sampan::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__))
#define SP_CUBLAS(expr) SP_RETURN_IF_ERROR(::sampan::cuda::CublasStatus((expr), #expr, __FILE__, __LINE__))
#define SP_CUDNN(expr) SP_RETURN_IF_ERROR(::sampan::cuda::CudnnStatus((expr), #expr, __FILE__, __LINE__))
//! After a kernel launch: launch-configuration errors now, device faults at the next sync.
#define SP_CUDA_LAUNCHED() SP_CUDA(cudaGetLastError())
