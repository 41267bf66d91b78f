#include <type_traits>

#include "backends/cuda/cast.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

// Reads any source type as double (exact for every source type but i64 > 2^53,
// whose i64->i64 / i64->i32 paths below avoid the round trip).
template <class S>
__device__ __forceinline__ double Load(const S* p, int64_t i) {
  return static_cast<double>(p[i]);
}
template <>
__device__ __forceinline__ double Load<__half>(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
template <>
__device__ __forceinline__ double Load<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

template <class D>
__device__ __forceinline__ D Store(double v) {
  if constexpr (std::is_same_v<D, bool>)
    return v != 0.0;
  else if constexpr (std::is_integral_v<D>)
    return isnan(v) ? D(0) : static_cast<D>(v);  // truncates
  else
    return FromFloat<D>(static_cast<float>(v));
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

// float <-> half/bfloat16, 8 elements (two float4, one uint4) per thread: the cast of an
// FP32 graph input into an FP16 plan runs at copy speed.
template <class H>
__global__ void FloatToHalf8(const float4* x, uint4* y, int64_t chunks) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = x[2 * c], b = x[2 * c + 1];
    uint4 out;
    H* h = reinterpret_cast<H*>(&out);
    h[0] = FromFloat<H>(a.x), h[1] = FromFloat<H>(a.y), h[2] = FromFloat<H>(a.z), h[3] = FromFloat<H>(a.w);
    h[4] = FromFloat<H>(b.x), h[5] = FromFloat<H>(b.y), h[6] = FromFloat<H>(b.z), h[7] = FromFloat<H>(b.w);
    y[c] = out;
  }
}
template <class H>
__global__ void HalfToFloat8(const uint4* x, float4* y, int64_t chunks) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    const uint4 in = x[c];
    const H* h = reinterpret_cast<const H*>(&in);
    y[2 * c] = make_float4(ToFloat(h[0]), ToFloat(h[1]), ToFloat(h[2]), ToFloat(h[3]));
    y[2 * c + 1] = make_float4(ToFloat(h[4]), ToFloat(h[5]), ToFloat(h[6]), ToFloat(h[7]));
  }
}

bool Vec8(const void* x, const void* y, int64_t n) {
  return n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
}

template <class S>
cudaError_t From(CastType to, const void* x, void* y, int64_t n, cudaStream_t st) {
  const S* src = static_cast<const S*>(x);
  const unsigned g = GridFor(n);
  if (Vec8(x, y, n)) {
    const unsigned gv = GridFor(n / 8);
    if constexpr (std::is_same_v<S, float>) {
      if (to == CastType::kF16) {
        FloatToHalf8<__half><<<gv, kThreads, 0, st>>>(static_cast<const float4*>(x), static_cast<uint4*>(y), n / 8);
        return cudaGetLastError();
      }
      if (to == CastType::kBF16) {
        FloatToHalf8<__nv_bfloat16>
            <<<gv, kThreads, 0, st>>>(static_cast<const float4*>(x), static_cast<uint4*>(y), n / 8);
        return cudaGetLastError();
      }
    }
    if constexpr (std::is_same_v<S, __half> || std::is_same_v<S, __nv_bfloat16>) {
      if (to == CastType::kF32) {
        HalfToFloat8<S><<<gv, kThreads, 0, st>>>(static_cast<const uint4*>(x), static_cast<float4*>(y), n / 8);
        return cudaGetLastError();
      }
    }
  }
  switch (to) {
    case CastType::kF32:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<float*>(y), n);
      break;
    case CastType::kF16:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<__half*>(y), n);
      break;
    case CastType::kBF16:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<__nv_bfloat16*>(y), n);
      break;
    case CastType::kI32:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<int32_t*>(y), n);
      break;
    case CastType::kI64:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<int64_t*>(y), n);
      break;
    case CastType::kBool:
      CastKernel<<<g, kThreads, 0, st>>>(src, static_cast<bool*>(y), n);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCast(CastType from, CastType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (from) {
    case CastType::kF32:
      return From<float>(to, x, y, n, stream);
    case CastType::kF16:
      return From<__half>(to, x, y, n, stream);
    case CastType::kBF16:
      return From<__nv_bfloat16>(to, x, y, n, stream);
    case CastType::kI32:
      return From<int32_t>(to, x, y, n, stream);
    case CastType::kI64:
      return From<int64_t>(to, x, y, n, stream);
    case CastType::kBool:
      return From<bool>(to, x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
