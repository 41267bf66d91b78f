// Page-locked host buffers handed out as Tensors and recycled when the last
// reference goes (ContextImpl::AllocateHostInput): the server's batcher writes a
// batch straight into one and the context copies it to the device without a
// staging copy. Buffers are reused by size, so after warm-up a steady load
// allocates nothing; at most `max_cached_bytes` stay cached when idle.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "base/tensor.h"

namespace sampan::cuda {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  PinnedPool(int device, size_t max_cached_bytes) : device_(device), max_cached_(max_cached_bytes) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  //! A pinned tensor (uninitialised), or plain host memory when page-locked memory
  //! cannot be had (the caller's copy then goes through the context's staging).
  Tensor Allocate(DType dtype, const Shape& shape);
  //! Blocks handed out and cached now (for tests).
  size_t outstanding() const;
  //! Bytes of the blocks handed out (as allocated: sizes rounded up) and of those cached.
  size_t outstanding_bytes() const;
  size_t cached_bytes() const;

 private:
  void Release(void* p, size_t bytes);
  const int device_;
  const size_t max_cached_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  //!< block size -> block
  size_t cached_ = 0;
  size_t outstanding_ = 0;
  size_t outstanding_bytes_ = 0;
};

//! True when `p` is page-locked (cudaHostAlloc'd or registered) host memory.
bool IsPinnedHost(const void* p);

}  // namespace sampan::cuda
