#include "backends/cuda/pinned_pool.h"

#include <cuda_runtime.h>

namespace sampan::cuda {
namespace {

// Sizes are rounded to 64 KiB (small) or 1 MiB (large) so batches of nearby
// sizes share blocks.
size_t RoundUp(size_t bytes) {
  const size_t g = bytes <= (4u << 20) ? (64u << 10) : (1u << 20);
  return (std::max<size_t>(bytes, 1) + g - 1) / g * g;
}

}  // namespace

PinnedPool::~PinnedPool() {
  for (auto& [bytes, p] : free_) cudaFreeHost(p);
}

Tensor PinnedPool::Allocate(DType dtype, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t need = RoundUp(DTypeBytes(dtype, n));
  void* p = nullptr;
  size_t have = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A cached block at least as large, but not wastefully larger.
    auto it = free_.lower_bound(need);
    if (it != free_.end() && it->first <= 2 * need) {
      have = it->first;
      p = it->second;
      cached_ -= have;
      free_.erase(it);
    }
  }
  if (p == nullptr) {
    int prev = -1;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    const cudaError_t e = cudaHostAlloc(&p, need, cudaHostAllocPortable);
    if (prev >= 0 && prev != device_) cudaSetDevice(prev);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Tensor::Alloc(dtype, shape);
    }
    have = need;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
    outstanding_bytes_ += have;
  }
  std::shared_ptr<void> owner(p, [pool = shared_from_this(), have](void* q) { pool->Release(q, have); });
  return Tensor::WrapMutable(dtype, shape, std::move(owner), p);
}

void PinnedPool::Release(void* p, size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  --outstanding_;
  outstanding_bytes_ -= bytes;
  if (cached_ + bytes <= max_cached_) {
    free_.emplace(bytes, p);
    cached_ += bytes;
    return;
  }
  lock.unlock();
  cudaFreeHost(p);
}

size_t PinnedPool::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_;
}

size_t PinnedPool::outstanding_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_bytes_;
}

size_t PinnedPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

bool IsPinnedHost(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

}  // namespace sampan::cuda
