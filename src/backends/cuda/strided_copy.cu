#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

template <class T>
__global__ void StridedCopyKernel(const T* src, T* dst, StridedShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, is = 0, id = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t c = rem % s.dims[d];
      rem /= s.dims[d];
      is += c * s.stride[0][d];
      id += c * s.stride[1][d];
    }
    dst[id] = src[is];
  }
}

template <class T>
cudaError_t Copy(const void* src, void* dst, const StridedShape& s, cudaStream_t st) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  if (n == 0) return cudaSuccess;
  StridedCopyKernel<T><<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchStridedCopy(size_t elem_size, const void* src, void* dst, const StridedShape& shape,
                              cudaStream_t stream) {
  switch (elem_size) {
    case 1: return Copy<uint8_t>(src, dst, shape, stream);
    case 2: return Copy<uint16_t>(src, dst, shape, stream);
    case 4: return Copy<uint32_t>(src, dst, shape, stream);
    case 8: return Copy<uint64_t>(src, dst, shape, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
