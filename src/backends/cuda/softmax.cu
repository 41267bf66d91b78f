#include <cfloat>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/softmax.h"

namespace sampan::cuda {
namespace {

__device__ __forceinline__ float BlockReduce(float v, bool is_max, float* smem) {
  v = is_max ? WarpMax(v) : WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? smem[lane] : (is_max ? -FLT_MAX : 0.f);
    w = is_max ? WarpMax(w) : WarpSum(w);
    if (lane == 0) smem[0] = w;
  }
  __syncthreads();
  return smem[0];
}

template <class T>
__device__ __forceinline__ float Logit(const T* row, const T* mask_row, const SoftmaxParams& p, int64_t j) {
  float v = ToFloat(row[j]) * p.scale;
  if (mask_row) v += ToFloat(mask_row[j * p.mask_col_stride]);
  return v;
}

// inner == 1: one block per row; the row is read three times (max, sum, write), from L2 for typical sizes.
template <class T>
__global__ void SoftmaxRowKernel(const T* x, T* y, SoftmaxParams p) {
  __shared__ float smem[32];
  const int64_t o = blockIdx.x;
  const T* row = x + o * p.n;
  T* out = y + o * p.n;
  const T* mask_row = nullptr;
  if (p.mask) {
    const int64_t b = ((o / p.mask_rows_per_batch) / p.mask_batch_div) % p.mask_batch_mod;
    const int64_t r = o % p.mask_rows_per_batch;
    mask_row = static_cast<const T*>(p.mask) + b * p.mask_batch_stride + r * p.mask_row_stride;
  }
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) m = fmaxf(m, Logit(row, mask_row, p, j));
  m = BlockReduce(m, true, smem);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) s += expf(Logit(row, mask_row, p, j) - m);
  s = BlockReduce(s, false, smem);
  if (p.zero_invalid_rows && !(s > 0.f)) {
    for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) out[j] = FromFloat<T>(0.f);
    return;
  }
  const float log_s = logf(s), inv = 1.f / s;
  for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
    const float v = Logit(row, mask_row, p, j) - m;
    out[j] = FromFloat<T>(p.log ? v - log_s : expf(v) * inv);
  }
}

// inner == 1 and n <= 32 * kPerLane: one warp per row, the row held in registers
// (read once, reductions by shuffles). Attention's rows (n = Sk, often 128) are
// too short to fill a block each: a block per row spends its time in barriers.
constexpr int kPerLane = 16;
constexpr int kWarpRowsPerBlock = 8;

template <class T>
__global__ void SoftmaxWarpKernel(const T* x, T* y, SoftmaxParams p) {
  const int64_t o = blockIdx.x * int64_t(kWarpRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (o >= p.outer) return;
  const T* row = x + o * p.n;
  T* out = y + o * p.n;
  const T* mask_row = nullptr;
  if (p.mask) {
    const int64_t b = ((o / p.mask_rows_per_batch) / p.mask_batch_div) % p.mask_batch_mod;
    const int64_t r = o % p.mask_rows_per_batch;
    mask_row = static_cast<const T*>(p.mask) + b * p.mask_batch_stride + r * p.mask_row_stride;
  }
  float v[kPerLane];
  float m = -FLT_MAX;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t j = lane + 32 * k;
    v[k] = j < p.n ? Logit(row, mask_row, p, j) : -INFINITY;
    m = fmaxf(m, v[k]);
  }
  m = WarpMax(m);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) s += lane + 32 * k < p.n ? expf(v[k] - m) : 0.f;
  s = WarpSum(s);
  const bool zero = p.zero_invalid_rows && !(s > 0.f);
  const float log_s = logf(s), inv = 1.f / s;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t j = lane + 32 * k;
    if (j < p.n) out[j] = FromFloat<T>(zero ? 0.f : p.log ? v[k] - m - log_s : expf(v[k] - m) * inv);
  }
}

// inner > 1: one thread per (outer, inner) column.
template <class T>
__global__ void SoftmaxColumnKernel(const T* x, T* y, SoftmaxParams p) {
  const int64_t total = p.outer * p.inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / p.inner, k = i % p.inner;
    const T* col = x + o * p.n * p.inner + k;
    T* out = y + o * p.n * p.inner + k;
    float m = -FLT_MAX;
    for (int64_t j = 0; j < p.n; ++j) m = fmaxf(m, ToFloat(col[j * p.inner]) * p.scale);
    float s = 0.f;
    for (int64_t j = 0; j < p.n; ++j) s += expf(ToFloat(col[j * p.inner]) * p.scale - m);
    const float log_s = logf(s), inv = 1.f / s;
    for (int64_t j = 0; j < p.n; ++j) {
      const float v = ToFloat(col[j * p.inner]) * p.scale - m;
      out[j * p.inner] = FromFloat<T>(p.log ? v - log_s : expf(v) * inv);
    }
  }
}

template <class T>
cudaError_t Softmax(const void* x, void* y, const SoftmaxParams& p, cudaStream_t st) {
  if (p.outer * p.n * p.inner == 0) return cudaSuccess;
  if (p.inner == 1 && p.n <= 32 * kPerLane) {
    const unsigned blocks = static_cast<unsigned>((p.outer + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    SoftmaxWarpKernel<T><<<blocks, 32 * kWarpRowsPerBlock, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  } else if (p.inner == 1) {
    const int threads = p.n >= 1024 ? 512 : p.n >= 256 ? 256 : 128;
    SoftmaxRowKernel<T>
        <<<static_cast<unsigned>(p.outer), threads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  } else {
    if (p.mask) return cudaErrorInvalidValue;
    SoftmaxColumnKernel<T>
        <<<GridFor(p.outer * p.inner), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSoftmax(FloatType t, const void* x, void* y, const SoftmaxParams& p, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Softmax<float>(x, y, p, stream);
    case FloatType::kF16:
      return Softmax<__half>(x, y, p, stream);
    case FloatType::kBF16:
      return Softmax<__nv_bfloat16>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
