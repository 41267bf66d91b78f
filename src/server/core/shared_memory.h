// Shared memory (KServe/Triton's shared-memory extensions): clients put tensors
// in shared memory, register the region once under a name, and then requests
// only name a region, an offset and a byte size — large tensors skip the
// socket. Two kinds share one namespace of names, as in Triton:
//   system  POSIX shared memory (shm_open key), mapped into the server;
//   CUDA    a device allocation of the client's, exported as a CUDA IPC handle
//           (cudaIpcGetMemHandle) and opened in the server (cuda_ipc.h). Requests
//           copy between it and host tensors: device to host for inputs, host to
//           device for outputs (CopyFromView / CopyToView), not zero-copy.
// One registry per server, shared by the HTTP and gRPC front ends (a region
// registered over one is usable over the other).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sampan::server {

enum class SharedMemoryKind { kSystem, kCuda };

struct SharedMemoryRegionInfo {
  std::string name;
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  std::string key;      //!< system: shm_open key, "/name"
  uint64_t offset = 0;  //!< system: where the region starts in the shared-memory object
  uint64_t byte_size = 0;
  int64_t device_id = -1;  //!< CUDA: the device the handle was made on
};

//! Bytes inside a registered region; `keepalive` keeps the mapping (or the
//! opened CUDA handle) alive even when the region is unregistered while a
//! request still uses it.
struct SharedMemoryView {
  char* data = nullptr;  //!< a host address, or a device address when device >= 0
  uint64_t size = 0;
  int device = -1;  //!< >= 0: CUDA shared memory on this device; use CopyFromView / CopyToView
  std::shared_ptr<void> keepalive;
};

//! Copies the view's first `n` bytes to host memory `dst` (device to host for CUDA regions).
::sampan::Status CopyFromView(const SharedMemoryView& view, void* dst, size_t n);
//! Copies `n` bytes of host memory `src` to the view's start (host to device for CUDA regions).
::sampan::Status CopyToView(const SharedMemoryView& view, const void* src, size_t n);

class SharedMemoryRegistry {
 public:
  //! Maps [offset, offset + byte_size) of the shared-memory object `key`.
  //! Errors: a name already registered, a key that does not exist, a range
  //! beyond the object's size.
  ::sampan::Status Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  //! Opens `raw_handle` (a cudaIpcMemHandle_t's 64 bytes) on CUDA device `device_id` as a region
  //! of `byte_size` bytes. Errors name the region: a name already registered, a handle of another
  //! size, byte_size 0, a negative device, then what CUDA says (no device, a device that does not
  //! exist, a handle it cannot open, a size beyond the allocation); kUnsupported in a build without CUDA.
  ::sampan::Status RegisterCuda(const std::string& name, std::string_view raw_handle, int64_t device_id,
                                uint64_t byte_size);
  //! Whether this build can register CUDA regions (built with CUDA; a GPU is another matter).
  static bool CudaBuilt();
  //! Unregisters one region of `kind` ("" = all of that kind). Unknown names, and names of the
  //! other kind, are not an error (as Triton).
  ::sampan::Status Unregister(const std::string& name, SharedMemoryKind kind);
  //! Every region of `kind`, or the one named (kNotFound when it is not registered, or is of the other kind).
  Result<std::vector<SharedMemoryRegionInfo>> Regions(const std::string& name, SharedMemoryKind kind) const;
  //! [offset, offset + size) of region `name`, of either kind; errors name the region and the range.
  Result<SharedMemoryView> View(const std::string& name, uint64_t offset, uint64_t size) const;

 private:
  static ::sampan::Status AlreadyRegistered(const std::string& name);
  struct Mapping;
  struct Region {
    SharedMemoryRegionInfo info;
    std::shared_ptr<Mapping> mapping;  //!< system regions
    std::shared_ptr<void> cuda;        //!< CUDA regions: the opened handle (cuda_ipc::Mapping)
    char* base = nullptr;              //!< the region's first byte (a device address for CUDA)
  };
  mutable std::mutex mu_;
  std::map<std::string, Region> regions_;
};

}  // namespace sampan::server
