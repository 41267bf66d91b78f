#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/logical.h"

namespace sampan::cuda {
namespace {

inline int64_t Count(const StridedShape& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  return n;
}

template <class T>
__device__ __forceinline__ auto Val(T v) {
  return v;
}
__device__ __forceinline__ float Val(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float Val(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T, class I>
__global__ void CompareKernel(CompareOp op, const T* a, const T* b, uint8_t* out, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    const auto x = Val(a[off[0]]), y = Val(b[off[1]]);
    bool r = false;
    switch (op) {
      case CompareOp::kEqual:
        r = x == y;
        break;
      case CompareOp::kLess:
        r = x < y;
        break;
      case CompareOp::kGreater:
        r = x > y;
        break;
      case CompareOp::kLessOrEqual:
        r = x <= y;
        break;
      case CompareOp::kGreaterOrEqual:
        r = x >= y;
        break;
    }
    out[i] = r ? 1 : 0;
  }
}

template <class I>
__global__ void LogicalKernel(LogicOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    const bool x = a[off[0]] != 0, y = b[off[1]] != 0;
    out[i] = op == LogicOp::kAnd ? (x && y) : op == LogicOp::kOr ? (x || y) : (x != y);
  }
}

__global__ void NotKernel(const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] == 0 ? 1 : 0;
}

template <class T>
__global__ void IsSpecialKernel(const T* x, uint8_t* y, int64_t n, bool inf, bool pos, bool neg) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    y[i] = inf ? ((pos && v == INFINITY) || (neg && v == -INFINITY)) : isnan(v);
  }
}

template <class T, class I>
__global__ void WhereKernel(const uint8_t* c, const T* x, const T* y, T* out, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[3];
    StridedOffsets<I, 3>(s, i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

template <class T>
cudaError_t Compare(CompareOp op, const void* a, const void* b, void* out, const StridedShape& s, cudaStream_t st) {
  const int64_t n = Count(s);
  if (n == 0) return cudaSuccess;
  if (FitsInt32(s, 2))
    CompareKernel<T, int32_t><<<GridFor(n), kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                               static_cast<uint8_t*>(out), s, static_cast<int32_t>(n));
  else
    CompareKernel<T, int64_t><<<GridFor(n), kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                               static_cast<uint8_t*>(out), s, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t IsSpecial(const void* x, void* y, int64_t n, bool inf, bool pos, bool neg, cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  IsSpecialKernel<T>
      <<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<uint8_t*>(y), n, inf, pos, neg);
  return cudaGetLastError();
}

template <class T>
cudaError_t Where(const void* c, const void* x, const void* y, void* out, const StridedShape& s, cudaStream_t st) {
  const int64_t n = Count(s);
  if (n == 0) return cudaSuccess;
  if (FitsInt32(s, 3))
    WhereKernel<T, int32_t><<<GridFor(n), kThreads, 0, st>>>(static_cast<const uint8_t*>(c), static_cast<const T*>(x),
                                                             static_cast<const T*>(y), static_cast<T*>(out), s,
                                                             static_cast<int32_t>(n));
  else
    WhereKernel<T, int64_t><<<GridFor(n), kThreads, 0, st>>>(static_cast<const uint8_t*>(c), static_cast<const T*>(x),
                                                             static_cast<const T*>(y), static_cast<T*>(out), s, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCompare(CompareOp op, CompareType t, const void* a, const void* b, void* out,
                          const StridedShape& shape, cudaStream_t stream) {
  switch (t) {
    case CompareType::kF32:
      return Compare<float>(op, a, b, out, shape, stream);
    case CompareType::kF16:
      return Compare<__half>(op, a, b, out, shape, stream);
    case CompareType::kBF16:
      return Compare<__nv_bfloat16>(op, a, b, out, shape, stream);
    case CompareType::kI32:
      return Compare<int32_t>(op, a, b, out, shape, stream);
    case CompareType::kI64:
      return Compare<int64_t>(op, a, b, out, shape, stream);
    case CompareType::kBool:
    case CompareType::kU8:
      return Compare<uint8_t>(op, a, b, out, shape, stream);
    case CompareType::kI8:
      return Compare<int8_t>(op, a, b, out, shape, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchLogical(LogicOp op, const void* a, const void* b, void* out, const StridedShape& shape,
                          cudaStream_t stream) {
  const int64_t n = Count(shape);
  if (n == 0) return cudaSuccess;
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  auto* po = static_cast<uint8_t*>(out);
  if (FitsInt32(shape, 2))
    LogicalKernel<int32_t><<<GridFor(n), kThreads, 0, stream>>>(op, pa, pb, po, shape, static_cast<int32_t>(n));
  else
    LogicalKernel<int64_t><<<GridFor(n), kThreads, 0, stream>>>(op, pa, pb, po, shape, n);
  return cudaGetLastError();
}

cudaError_t LaunchNot(const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  NotKernel<<<GridFor(n), kThreads, 0, stream>>>(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), n);
  return cudaGetLastError();
}

cudaError_t LaunchIsSpecial(FloatType t, const void* x, void* y, int64_t n, bool inf, bool positive, bool negative,
                            cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return IsSpecial<float>(x, y, n, inf, positive, negative, stream);
    case FloatType::kF16:
      return IsSpecial<__half>(x, y, n, inf, positive, negative, stream);
    case FloatType::kBF16:
      return IsSpecial<__nv_bfloat16>(x, y, n, inf, positive, negative, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchWhere(size_t elem_size, const void* cond, const void* x, const void* y, void* out,
                        const StridedShape& shape, cudaStream_t stream) {
  switch (elem_size) {
    case 1:
      return Where<uint8_t>(cond, x, y, out, shape, stream);
    case 2:
      return Where<uint16_t>(cond, x, y, out, shape, stream);
    case 4:
      return Where<uint32_t>(cond, x, y, out, shape, stream);
    case 8:
      return Where<uint64_t>(cond, x, y, out, shape, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
