// The CUDA device as Sampan sees it: availability, the plan fingerprint
// (GPU name, compute capability, CUDA/cuDNN/cuBLASLt versions), and a scoped
// device selection for calls made from any thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/backend.h"

namespace sampan::cuda {

//! Ok when a CUDA device can be used; otherwise why not ("no CUDA device: ...").
Status CudaAvailable();
//! Ok when `device` is a valid ordinal on this machine.
Status CheckDevice(int device);
//! The CUDA stream priority `p` stands for on the current device: kHigh its greatest
//! (numerically least) priority, kLow its least, kDefault 0 (cudaDeviceGetStreamPriorityRange).
Result<int> StreamPriorityValue(runtime::StreamPriority p);
//! The same for a device whose range is [greatest, least] (CUDA: lower numbers run first).
int StreamPriorityIn(runtime::StreamPriority p, int least, int greatest);
//! Fingerprint of `device` (empty GPU fields when it cannot be queried).
plan::Fingerprint DeviceFingerprint(int device);
//! "H200 sm_90 cuda 13.0 cudnn 91900 cublasLt 130100" — the timing cache's device key.
std::string DeviceKey(int device);
//! `bytes` (at least 1) of device memory on `device`, freed when the last copy of the pointer
//! goes; cudaFree waits for the device, so work still using it on any stream ends first.
Result<std::shared_ptr<void>> AllocShared(int device, size_t bytes);

}  // namespace sampan::cuda
