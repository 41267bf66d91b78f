#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

__device__ __forceinline__ float Binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return powf(a, b);
    case BinaryOp::kMax:
      return isnan(a) || isnan(b) ? nanf("") : fmaxf(a, b);
    case BinaryOp::kMin:
      return isnan(a) || isnan(b) ? nanf("") : fminf(a, b);
    case BinaryOp::kPRelu:
      return a < 0.f ? a * b : a;
  }
  return 0.f;
}

template <class T, class I>
__global__ void BinaryKernel(BinaryOp op, const T* a, const T* b, T* out, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    out[i] = FromFloat<T>(Binary(op, ToFloat(a[off[0]]), ToFloat(b[off[1]])));
  }
}

// Same-shape operands: no index arithmetic.
template <class T>
__global__ void BinaryFlatKernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = FromFloat<T>(Binary(op, ToFloat(a[i]), ToFloat(b[i])));
}

// 16 bytes of T per thread: one vector load or store instead of 8 (half) or 4 (float).
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <class T>
__device__ __forceinline__ void LoadVec(const T* p, float (&v)[kVec<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) v[k] = ToFloat(e[k]);
}
template <class T>
__device__ __forceinline__ void StoreVec(T* p, const float (&v)[kVec<T>]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) e[k] = FromFloat<T>(v[k]);
  *reinterpret_cast<uint4*>(p) = raw;
}

template <class T>
__global__ void BinaryFlatVecKernel(BinaryOp op, const T* a, const T* b, T* out, int64_t chunks) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    float va[kVec<T>], vb[kVec<T>];
    LoadVec(a + c * kVec<T>, va);
    LoadVec(b + c * kVec<T>, vb);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) va[k] = Binary(op, va[k], vb[k]);
    StoreVec(out + c * kVec<T>, va);
  }
}

// Broadcasting with an innermost dimension that is a multiple of the vector: one offset
// computation per 16-byte chunk of the output; an operand whose inner stride is 1 is read
// 16 bytes at a time, one whose inner stride is 0 (broadcast along it) one element.
template <class T, class I>
__global__ void BinaryInnerVecKernel(BinaryOp op, const T* a, const T* b, T* out, StridedShape s, I chunks, bool a_vec,
                                     bool b_vec) {
  for (I c = blockIdx.x * I(blockDim.x) + threadIdx.x; c < chunks; c += I(gridDim.x) * blockDim.x) {
    const I i = c * kVec<T>;
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    float va[kVec<T>], vb[kVec<T>];
    if (a_vec) {
      LoadVec(a + off[0], va);
    } else {
      const float x = ToFloat(a[off[0]]);
#pragma unroll
      for (int k = 0; k < kVec<T>; ++k) va[k] = x;
    }
    if (b_vec) {
      LoadVec(b + off[1], vb);
    } else {
      const float x = ToFloat(b[off[1]]);
#pragma unroll
      for (int k = 0; k < kVec<T>; ++k) vb[k] = x;
    }
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) va[k] = Binary(op, va[k], vb[k]);
    StoreVec(out + i, va);
  }
}

template <class T>
__global__ void UnaryVecKernel(UnaryOp op, const T* x, T* y, int64_t chunks, float p0, float p1) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    float v[kVec<T>];
    LoadVec(x + c * kVec<T>, v);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) v[k] = ApplyUnary(op, v[k], p0, p1);
    StoreVec(y + c * kVec<T>, v);
  }
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <class T>
__global__ void UnaryKernel(UnaryOp op, const T* x, T* y, int64_t n, float p0, float p1) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = FromFloat<T>(ApplyUnary(op, ToFloat(x[i]), p0, p1));
}

template <class T>
cudaError_t Binary(BinaryOp op, const void* a, const void* b, void* out, const StridedShape& s, cudaStream_t st) {
  int64_t n = 1;
  bool flat = true;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  if (n == 0) return cudaSuccess;
  int64_t expect = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    if (s.dims[d] != 1 && (s.stride[0][d] != expect || s.stride[1][d] != expect)) flat = false;
    expect *= s.dims[d];
  }
  constexpr int kN = kVec<T>;
  const bool aligned = Aligned16(a) && Aligned16(b) && Aligned16(out);
  if (flat && aligned && n % kN == 0) {
    BinaryFlatVecKernel<T><<<GridFor(n / kN), kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                                 static_cast<T*>(out), n / kN);
    return cudaGetLastError();
  }
  if (!flat && aligned && s.rank >= 1 && s.dims[s.rank - 1] % kN == 0) {
    // Each operand: inner stride 1 (vector loads: its other strides keep 16-byte alignment) or 0.
    bool ok = true, vec[2];
    for (int k = 0; k < 2 && ok; ++k) {
      const int64_t inner = s.stride[k][s.rank - 1];
      vec[k] = inner == 1;
      ok = inner == 0 || inner == 1;
      for (int d = 0; vec[k] && d + 1 < s.rank; ++d) ok = ok && s.stride[k][d] % kN == 0;
    }
    if (ok) {
      const int64_t chunks = n / kN;
      if (FitsInt32(s, 2))
        BinaryInnerVecKernel<T, int32_t><<<GridFor(chunks), kThreads, 0, st>>>(
            op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), s,
            static_cast<int32_t>(chunks), vec[0], vec[1]);
      else
        BinaryInnerVecKernel<T, int64_t><<<GridFor(chunks), kThreads, 0, st>>>(
            op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), s, chunks, vec[0], vec[1]);
      return cudaGetLastError();
    }
  }
  const unsigned blocks = GridFor(n);
  if (flat)
    BinaryFlatKernel<T>
        <<<blocks, kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
  else if (FitsInt32(s, 2))
    BinaryKernel<T, int32_t><<<blocks, kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(out), s, static_cast<int32_t>(n));
  else
    BinaryKernel<T, int64_t><<<blocks, kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(out), s, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t Unary(UnaryOp op, const void* x, void* y, int64_t n, float p0, float p1, cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  if (n % kVec<T> == 0 && Aligned16(x) && Aligned16(y)) {
    UnaryVecKernel<T><<<GridFor(n / kVec<T>), kThreads, 0, st>>>(op, static_cast<const T*>(x), static_cast<T*>(y),
                                                                 n / kVec<T>, p0, p1);
    return cudaGetLastError();
  }
  UnaryKernel<T><<<GridFor(n), kThreads, 0, st>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, p0, p1);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, FloatType t, const void* a, const void* b, void* out, const StridedShape& shape,
                         cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Binary<float>(op, a, b, out, shape, stream);
    case FloatType::kF16:
      return Binary<__half>(op, a, b, out, shape, stream);
    case FloatType::kBF16:
      return Binary<__nv_bfloat16>(op, a, b, out, shape, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchUnary(UnaryOp op, FloatType t, const void* x, void* y, int64_t n, float p0, float p1,
                        cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Unary<float>(op, x, y, n, p0, p1, stream);
    case FloatType::kF16:
      return Unary<__half>(op, x, y, n, p0, p1, stream);
    case FloatType::kBF16:
      return Unary<__nv_bfloat16>(op, x, y, n, p0, p1, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
