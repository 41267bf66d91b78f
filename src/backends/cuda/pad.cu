#include <algorithm>
#include <cstring>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/pad.h"

namespace sampan::cuda {
namespace {

// Kept index for j outside [0, m) (m > 0), as ops/tile_pad.cpp maps it.
template <PadMode M, class I>
__device__ __forceinline__ I MapOutside(I j, I m) {
  if constexpr (M == PadMode::kEdge) {
    return j < 0 ? 0 : m - 1;
  } else if constexpr (M == PadMode::kWrap) {
    j %= m;
    return j < 0 ? j + m : j;
  } else {  // reflect about the first and last element; pads wider than the axis keep bouncing
    if (m == 1) return 0;
    const I period = 2 * (m - 1);
    j %= period;
    if (j < 0) j += period;
    return j >= m ? period - j : j;
  }
}

template <class U, class I, PadMode M>
__global__ void PadKernel(const U* x, U* y, PadParams p, I n, U value) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I rem = i, src = static_cast<I>(p.in_base);
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const I od = static_cast<I>(p.out_dims[d]);
      const I o = rem % od;
      rem /= od;
      const I m = static_cast<I>(p.kept[d]);
      I j = o - static_cast<I>(p.lo[d]);
      if (j < 0 || j >= m) {
        if constexpr (M == PadMode::kConstant) {
          inside = false;  // the remaining dims do not matter
          break;
        } else {
          j = MapOutside<M>(j, m);
        }
      }
      src += j * static_cast<I>(p.in_stride[d]);
    }
    y[i] = inside ? x[src] : value;
  }
}

// Rows of at least a warp: a warp per output row (all dims but the last), lanes along the
// row. The row's source offset is worked out once (the divisions dominate the element
// kernel); per element only the last dim's mapping is left.
template <class U, class I, PadMode M>
__global__ void PadRowKernel(const U* x, U* y, PadParams p, I rows, U value) {
  const int last = p.rank - 1, lane = threadIdx.x % 32;
  const I row_len = static_cast<I>(p.out_dims[last]), m = static_cast<I>(p.kept[last]);
  const I lo = static_cast<I>(p.lo[last]), stride = static_cast<I>(p.in_stride[last]);
  const I warps = I(gridDim.x) * (blockDim.x / 32);
  for (I row = blockIdx.x * I(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    I rem = row, src = static_cast<I>(p.in_base);
    bool inside = true;
    for (int d = last - 1; d >= 0; --d) {
      const I od = static_cast<I>(p.out_dims[d]);
      const I o = rem % od;
      rem /= od;
      I j = o - static_cast<I>(p.lo[d]);
      const I md = static_cast<I>(p.kept[d]);
      if (j < 0 || j >= md) {
        if constexpr (M == PadMode::kConstant) {
          inside = false;
          break;
        } else {
          j = MapOutside<M>(j, md);
        }
      }
      src += j * static_cast<I>(p.in_stride[d]);
    }
    U* out = y + row * row_len;
    for (I k = lane; k < row_len; k += 32) {
      I j = k - lo;
      bool take = inside;
      if (j < 0 || j >= m) {
        if constexpr (M == PadMode::kConstant)
          take = false;
        else
          j = MapOutside<M>(j, m);
      }
      out[k] = take ? x[src + j * stride] : value;
    }
  }
}

template <class U, class I, PadMode M>
void LaunchTyped(const void* x, void* y, const PadParams& p, int64_t n, U value, cudaStream_t st) {
  const int64_t row_len = p.out_dims[p.rank - 1], rows = n / row_len;
  if (row_len >= 32 && rows >= 1024) {
    const int64_t blocks = std::min<int64_t>((rows + kThreads / 32 - 1) / (kThreads / 32), 65535 * 8);
    PadRowKernel<U, I, M><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(
        static_cast<const U*>(x), static_cast<U*>(y), p, static_cast<I>(rows), value);
  } else {
    PadKernel<U, I, M>
        <<<GridFor(n), kThreads, 0, st>>>(static_cast<const U*>(x), static_cast<U*>(y), p, static_cast<I>(n), value);
  }
}

template <class U, PadMode M>
cudaError_t Pad(const void* x, void* y, const PadParams& p, cudaStream_t st) {
  int64_t n = 1;
  for (int d = 0; d < p.rank; ++d) n *= p.out_dims[d];
  if (n == 0) return cudaSuccess;
  U value;
  std::memcpy(&value, &p.value, sizeof(U));
  // Every input offset is below in_numel and every output index below n: 32-bit math when
  // both fit (64-bit division is several times slower).
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (n < kLimit && p.in_numel < kLimit)
    LaunchTyped<U, int32_t, M>(x, y, p, n, value, st);
  else
    LaunchTyped<U, int64_t, M>(x, y, p, n, value, st);
  return cudaGetLastError();
}

template <class U>
cudaError_t PadBySize(const void* x, void* y, const PadParams& p, cudaStream_t st) {
  switch (p.mode) {
    case PadMode::kConstant:
      return Pad<U, PadMode::kConstant>(x, y, p, st);
    case PadMode::kReflect:
      return Pad<U, PadMode::kReflect>(x, y, p, st);
    case PadMode::kEdge:
      return Pad<U, PadMode::kEdge>(x, y, p, st);
    case PadMode::kWrap:
      return Pad<U, PadMode::kWrap>(x, y, p, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchPad(size_t elem_size, const void* x, void* y, const PadParams& p, cudaStream_t stream) {
  if (p.rank < 1 || p.rank > kMaxRank) return cudaErrorInvalidValue;
  switch (elem_size) {
    case 1:
      return PadBySize<uint8_t>(x, y, p, stream);
    case 2:
      return PadBySize<uint16_t>(x, y, p, stream);
    case 4:
      return PadBySize<uint32_t>(x, y, p, stream);
    case 8:
      return PadBySize<uint64_t>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
