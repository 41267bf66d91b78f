#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

template <class T, class I>
__global__ void StridedCopyKernel(const T* src, T* dst, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    dst[off[1]] = src[off[0]];
  }
}

template <class T>
cudaError_t Copy(const void* src, void* dst, const StridedShape& s, cudaStream_t st) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  if (n == 0) return cudaSuccess;
  if (FitsInt32(s, 2))
    StridedCopyKernel<T, int32_t><<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s,
                                                                   static_cast<int32_t>(n));
  else
    StridedCopyKernel<T, int64_t><<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, n);
  return cudaGetLastError();
}

// When the innermost dim is contiguous on both sides, copies `wide` bytes per thread
// instead of one element: dims and strides rescaled to units of `wide` bytes. False
// when the sizes, strides or pointers do not allow it.
bool Widen(size_t elem, size_t wide, const void* src, const void* dst, const StridedShape& in, StridedShape* out) {
  const int last = in.rank - 1;
  const int64_t v = static_cast<int64_t>(wide / elem);
  if (last < 0 || v <= 1 || in.stride[0][last] != 1 || in.stride[1][last] != 1 || in.dims[last] % v != 0) return false;
  if (reinterpret_cast<uintptr_t>(src) % wide != 0 || reinterpret_cast<uintptr_t>(dst) % wide != 0) return false;
  for (int d = 0; d < last; ++d)
    if (in.stride[0][d] % v != 0 || in.stride[1][d] % v != 0) return false;
  *out = in;
  out->dims[last] /= v;
  for (int d = 0; d < last; ++d) {
    out->stride[0][d] /= v;
    out->stride[1][d] /= v;
  }
  return true;
}

}  // namespace

cudaError_t LaunchStridedCopy(size_t elem_size, const void* src, void* dst, const StridedShape& shape,
                              cudaStream_t stream) {
  StridedShape wide;
  if (Widen(elem_size, 16, src, dst, shape, &wide)) return Copy<uint4>(src, dst, wide, stream);
  if (Widen(elem_size, 8, src, dst, shape, &wide)) return Copy<uint2>(src, dst, wide, stream);
  if (Widen(elem_size, 4, src, dst, shape, &wide)) return Copy<uint32_t>(src, dst, wide, stream);
  switch (elem_size) {
    case 1: return Copy<uint8_t>(src, dst, shape, stream);
    case 2: return Copy<uint16_t>(src, dst, shape, stream);
    case 4: return Copy<uint32_t>(src, dst, shape, stream);
    case 8: return Copy<uint64_t>(src, dst, shape, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
