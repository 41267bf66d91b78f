#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/tile.h"

namespace sampan::cuda {
namespace {

template <class T>
__global__ void TileKernel(const T* src, T* dst, TileShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t o = rest % s.out_dims[d];
      rest /= s.out_dims[d];
      off += (o % s.in_dims[d]) * s.in_stride[d];
    }
    dst[i] = src[off];
  }
}

template <class T>
cudaError_t Tile(const void* src, void* dst, const TileShape& s, cudaStream_t st) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) {
    if (s.in_dims[d] <= 0 && s.out_dims[d] > 0) return cudaErrorInvalidValue;
    n *= s.out_dims[d];
  }
  if (n == 0) return cudaSuccess;
  TileKernel<T><<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTile(size_t elem_size, const void* src, void* dst, const TileShape& shape, cudaStream_t stream) {
  switch (elem_size) {
    case 1:
      return Tile<uint8_t>(src, dst, shape, stream);
    case 2:
      return Tile<uint16_t>(src, dst, shape, stream);
    case 4:
      return Tile<uint32_t>(src, dst, shape, stream);
    case 8:
      return Tile<uint64_t>(src, dst, shape, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
