#include <algorithm>

#include "backends/cuda/fill.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

// SplitMix64's finaliser: a bijective 64-bit mix, good enough for test data.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void FillUniformKernel(T* p, int64_t n, uint64_t seed, float lo, float span) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = static_cast<uint32_t>(Mix(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1)) >> 40);
    p[i] = FromFloat<T>(lo + span * (static_cast<float>(bits) * (1.f / 16777216.f)));  // 24 bits: [0, 1)
  }
}

template <class T>
cudaError_t Fill(void* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t st) {
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 132 * 16);
  FillUniformKernel<T><<<static_cast<unsigned>(blocks), threads, 0, st>>>(static_cast<T*>(p), n, seed, lo, hi - lo);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFillUniform(FloatType t, void* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!p || !(hi >= lo)) return cudaErrorInvalidValue;
  switch (t) {
    case FloatType::kF32:
      return Fill<float>(p, n, seed, lo, hi, stream);
    case FloatType::kF16:
      return Fill<__half>(p, n, seed, lo, hi, stream);
    case FloatType::kBF16:
      return Fill<__nv_bfloat16>(p, n, seed, lo, hi, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
