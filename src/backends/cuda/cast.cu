#include <type_traits>

#include "backends/cuda/cast.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

// Reads any source type as double (exact for every source type but i64 > 2^53,
// whose i64->i64 / i64->i32 paths below avoid the round trip).
template <class S> __device__ __forceinline__ double Load(const S* p, int64_t i) { return static_cast<double>(p[i]); }
template <> __device__ __forceinline__ double Load<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ double Load<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

template <class D> __device__ __forceinline__ D Store(double v) {
  if constexpr (std::is_same_v<D, bool>) return v != 0.0;
  else if constexpr (std::is_integral_v<D>) return isnan(v) ? D(0) : static_cast<D>(v);  // truncates
  else return FromFloat<D>(static_cast<float>(v));
}

template <class S, class D>
__global__ void CastKernel(const S* x, D* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_integral_v<S> && std::is_integral_v<D> && !std::is_same_v<D, bool>)
      y[i] = static_cast<D>(x[i]);
    else
      y[i] = Store<D>(Load<S>(x, i));
  }
}

template <class S>
cudaError_t From(CastType to, const void* x, void* y, int64_t n, cudaStream_t st) {
  const S* src = static_cast<const S*>(x);
  const unsigned g = GridFor(n);
  switch (to) {
    case CastType::kF32: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<float*>(y), n); break;
    case CastType::kF16: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<__half*>(y), n); break;
    case CastType::kBF16: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<__nv_bfloat16*>(y), n); break;
    case CastType::kI32: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<int32_t*>(y), n); break;
    case CastType::kI64: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<int64_t*>(y), n); break;
    case CastType::kBool: CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<bool*>(y), n); break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCast(CastType from, CastType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (from) {
    case CastType::kF32: return From<float>(to, x, y, n, stream);
    case CastType::kF16: return From<__half>(to, x, y, n, stream);
    case CastType::kBF16: return From<__nv_bfloat16>(to, x, y, n, stream);
    case CastType::kI32: return From<int32_t>(to, x, y, n, stream);
    case CastType::kI64: return From<int64_t>(to, x, y, n, stream);
    case CastType::kBool: return From<bool>(to, x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
