#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/layer_norm.h"

namespace sampan::cuda {
namespace {

__device__ __forceinline__ float BlockSum(float v, float* smem) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? smem[lane] : 0.f;
    w = WarpSum(w);
    if (lane == 0) smem[0] = w;
  }
  __syncthreads();
  return smem[0];
}

// One block per row; two-pass (mean, then centred variance) for accuracy.
template <class T>
__global__ void LayerNormKernel(const T* x, const T* scale, const T* bias, T* y, int64_t n, float eps, bool rms) {
  __shared__ float smem[32];
  const T* row = x + blockIdx.x * n;
  T* out = y + blockIdx.x * n;
  float mean = 0.f;
  if (!rms) {
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += ToFloat(row[j]);
    mean = BlockSum(s, smem) / static_cast<float>(n);
  }
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float d = ToFloat(row[j]) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(BlockSum(v, smem) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float r = (ToFloat(row[j]) - mean) * inv * ToFloat(scale[j]);
    if (bias) r += ToFloat(bias[j]);
    out[j] = FromFloat<T>(r);
  }
}

template <class T>
cudaError_t Norm(const void* x, const void* scale, const void* bias, void* y, int64_t rows, int64_t n, float eps,
                 bool rms, cudaStream_t st) {
  if (rows * n == 0) return cudaSuccess;
  const int threads = n >= 2048 ? 512 : n >= 512 ? 256 : 128;
  LayerNormKernel<T><<<static_cast<unsigned>(rows), threads, 0, st>>>(
      static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias), static_cast<T*>(y), n, eps,
      rms);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchLayerNorm(FloatType t, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                            int64_t n, float eps, bool rms, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32: return Norm<float>(x, scale, bias, y, rows, n, eps, rms, stream);
    case FloatType::kF16: return Norm<__half>(x, scale, bias, y, rows, n, eps, rms, stream);
    case FloatType::kBF16: return Norm<__nv_bfloat16>(x, scale, bias, y, rows, n, eps, rms, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
