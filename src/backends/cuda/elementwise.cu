#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

__device__ __forceinline__ float Binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kPow: return powf(a, b);
    case BinaryOp::kMax: return isnan(a) || isnan(b) ? nanf("") : fmaxf(a, b);
    case BinaryOp::kMin: return isnan(a) || isnan(b) ? nanf("") : fminf(a, b);
    case BinaryOp::kPRelu: return a < 0.f ? a * b : a;
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
  const unsigned blocks = GridFor(n);
  if (flat)
    BinaryFlatKernel<T><<<blocks, kThreads, 0, st>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                     static_cast<T*>(out), n);
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
  UnaryKernel<T><<<GridFor(n), kThreads, 0, st>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, p0, p1);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, FloatType t, const void* a, const void* b, void* out, const StridedShape& shape,
                         cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32: return Binary<float>(op, a, b, out, shape, stream);
    case FloatType::kF16: return Binary<__half>(op, a, b, out, shape, stream);
    case FloatType::kBF16: return Binary<__nv_bfloat16>(op, a, b, out, shape, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchUnary(UnaryOp op, FloatType t, const void* x, void* y, int64_t n, float p0, float p1,
                        cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32: return Unary<float>(op, x, y, n, p0, p1, stream);
    case FloatType::kF16: return Unary<__half>(op, x, y, n, p0, p1, stream);
    case FloatType::kBF16: return Unary<__nv_bfloat16>(op, x, y, n, p0, p1, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
