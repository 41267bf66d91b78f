// CUDA IPC for the CUDA shared-memory extension: a device allocation that
// another process exported (cudaIpcGetMemHandle) opened in this one, and the
// copies between it and host memory. The server uses the CUDA runtime the rest
// of the binary links when it is built with CUDA (SAMPAN_HAVE_CUDA, from the
// CUDA backend); without it every call answers kUnsupported, saying so.
//
// Requests read and write a CUDA region by copying (device to host before the
// batch, host to device for outputs), on the calling thread's per-thread
// stream; the calling thread's current device is restored afterwards (output
// copies run on instance threads, whose device the CUDA backend chose).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"

namespace sampan::server::cuda_ipc {

//! Bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE).
inline constexpr size_t kHandleSize = 64;

//! Whether this server was built with CUDA (otherwise Open and the copies fail).
bool Built();

//! The answer of every call in a build without CUDA.
Status NotBuilt();

//! An opened IPC handle; closed (cudaIpcCloseMemHandle) when the last owner lets go.
class Mapping {
 public:
  //! Opens `handle` (kHandleSize bytes) on CUDA device `device` and checks that the allocation
  //! holds `byte_size` bytes. Errors (kInvalidArgument) name the device and CUDA's reason: no
  //! CUDA device, a device that does not exist, a handle CUDA refuses, a size beyond the allocation.
  static Result<std::shared_ptr<Mapping>> Open(std::string_view handle, int device, uint64_t byte_size);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }  //!< a device address
  int device() const { return device_; }

 private:
  Mapping(char* data, int device) : data_(data), device_(device) {}
  char* data_;
  int device_;
};

//! Copies `n` bytes of device memory `src` (on `device`) to host memory `dst`.
Status CopyToHost(int device, void* dst, const void* src, size_t n);
//! Copies `n` bytes of host memory `src` to device memory `dst` (on `device`).
Status CopyToDevice(int device, void* dst, const void* src, size_t n);

}  // namespace sampan::server::cuda_ipc
