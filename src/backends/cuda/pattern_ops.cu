#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/pattern_ops.h"

namespace sampan::cuda {
namespace {

// A float index as a Cast to int64 would give it: truncation, NaN -> 0, saturation.
__device__ __forceinline__ int64_t FloatIndex(double v) {
  if (isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

__device__ __forceinline__ int64_t LoadAnyIndex(IndexType t, const void* p, int64_t i) {
  switch (t) {
    case IndexType::kI8:
      return static_cast<const int8_t*>(p)[i];
    case IndexType::kU8:
      return static_cast<const uint8_t*>(p)[i];
    case IndexType::kI16:
      return static_cast<const int16_t*>(p)[i];
    case IndexType::kU16:
      return static_cast<const uint16_t*>(p)[i];
    case IndexType::kI32:
      return static_cast<const int32_t*>(p)[i];
    case IndexType::kU32:
      return static_cast<const uint32_t*>(p)[i];
    case IndexType::kI64:
      return static_cast<const int64_t*>(p)[i];
    case IndexType::kU64:
      return static_cast<int64_t>(static_cast<const uint64_t*>(p)[i]);
    case IndexType::kF16:
      return FloatIndex(__half2float(static_cast<const __half*>(p)[i]));
    case IndexType::kBF16:
      return FloatIndex(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case IndexType::kF32:
      return FloatIndex(static_cast<const float*>(p)[i]);
    case IndexType::kF64:
      return FloatIndex(static_cast<const double*>(p)[i]);
  }
  return 0;
}

// Output-driven: every element is written (off or on), so no fill pass is needed.
template <class T>
__global__ void OneHotKernel(IndexType it, const void* idx, const T* values, T* out, int64_t total, int64_t depth,
                             int64_t inner) {
  const T off = values[0], on = values[1];
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = q % inner, t = q / inner, v = t % depth, o = t / depth;
    int64_t x = LoadAnyIndex(it, idx, o * inner + j);
    if (x < 0) x += depth;  // below -depth stays negative: a row of off values
    out[q] = x == v ? on : off;
  }
}

template <class T>
__global__ void TriluKernel(const T* x, T* y, int64_t total, int64_t rows, int64_t cols, int64_t k,
                            const int64_t* k_device, bool upper) {
  if (k_device) k = *k_device;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? j - r >= k : j - r <= k;
    y[i] = keep ? x[i] : T{};
  }
}

template <class T>
__global__ void RangeKernel(const T* start, const T* delta, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_floating_point_v<T>) {
      out[i] = static_cast<T>(static_cast<double>(start[0]) + static_cast<double>(i) * static_cast<double>(delta[0]));
    } else {
      const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(start[0])) +
                         static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(delta[0]));
      out[i] = static_cast<T>(static_cast<int64_t>(v));
    }
  }
}

// Calls fn(T{}) with T the unsigned type of `elem` bytes (these ops only move elements).
template <class Fn>
cudaError_t BySize(size_t elem, Fn&& fn) {
  switch (elem) {
    case 1:
      fn(uint8_t{});
      break;
    case 2:
      fn(uint16_t{});
      break;
    case 4:
      fn(uint32_t{});
      break;
    case 8:
      fn(uint64_t{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchOneHot(IndexType it, size_t elem_size, const void* indices, const void* values, void* out,
                         int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream) {
  const int64_t total = outer * depth * inner;
  if (total == 0) return cudaSuccess;
  return BySize(elem_size, [&](auto tag) {
    using T = decltype(tag);
    OneHotKernel<T><<<GridFor(total), kThreads, 0, stream>>>(it, indices, static_cast<const T*>(values),
                                                             static_cast<T*>(out), total, depth, inner);
  });
}

cudaError_t LaunchTrilu(size_t elem_size, const void* x, void* y, int64_t mats, int64_t rows, int64_t cols, int64_t k,
                        const int64_t* k_device, bool upper, cudaStream_t stream) {
  const int64_t total = mats * rows * cols;
  if (total == 0) return cudaSuccess;
  return BySize(elem_size, [&](auto tag) {
    using T = decltype(tag);
    TriluKernel<T><<<GridFor(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), total, rows,
                                                            cols, k, k_device, upper);
  });
}

cudaError_t LaunchRange(RangeType t, const void* start, const void* delta, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    RangeKernel<T><<<GridFor(n), kThreads, 0, stream>>>(static_cast<const T*>(start), static_cast<const T*>(delta),
                                                        static_cast<T*>(out), n);
  };
  switch (t) {
    case RangeType::kF32:
      launch(float{});
      break;
    case RangeType::kF64:
      launch(double{});
      break;
    case RangeType::kI16:
      launch(int16_t{});
      break;
    case RangeType::kI32:
      launch(int32_t{});
      break;
    case RangeType::kI64:
      launch(int64_t{});
      break;
  }
  return cudaGetLastError();
}

}  // namespace sampan::cuda
