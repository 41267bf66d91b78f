// System shared memory (KServe/Triton's shared-memory extension): clients put
// tensors in POSIX shared memory (shm_open), register the region once under a
// name, and then requests only name a region, an offset and a byte size —
// large tensors skip the socket. One registry per server, shared by the HTTP
// and gRPC front ends (a region registered over one is usable over the other).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace sampan::server {

struct SharedMemoryRegionInfo {
  std::string name;
  std::string key;      //!< shm_open key, "/name"
  uint64_t offset = 0;  //!< where the region starts in the shared-memory object
  uint64_t byte_size = 0;
};

//! Bytes inside a registered region; `keepalive` keeps the mapping alive even
//! when the region is unregistered while a request still uses it.
struct SharedMemoryView {
  char* data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<void> keepalive;
};

class SharedMemoryRegistry {
 public:
  //! Maps [offset, offset + byte_size) of the shared-memory object `key`.
  //! Errors: a name already registered, a key that does not exist, a range
  //! beyond the object's size.
  ::sampan::Status Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  //! Unregisters one region ("" = all). Unknown names are not an error (as Triton).
  ::sampan::Status Unregister(const std::string& name);
  //! Every region, or the one named (kNotFound when it is not registered).
  Result<std::vector<SharedMemoryRegionInfo>> Regions(const std::string& name) const;
  //! [offset, offset + size) of region `name`; errors name the region and the range.
  Result<SharedMemoryView> View(const std::string& name, uint64_t offset, uint64_t size) const;

 private:
  static ::sampan::Status AlreadyRegistered(const std::string& name);
  struct Mapping;
  struct Region {
    SharedMemoryRegionInfo info;
    std::shared_ptr<Mapping> mapping;
    char* base = nullptr;  //!< the region's first byte
  };
  mutable std::mutex mu_;
  std::map<std::string, Region> regions_;
};

}  // namespace sampan::server
