#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/norm.h"

namespace sampan::cuda {
namespace {

// V elements moved as one load/store (16 bytes at the widest).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

__device__ __forceinline__ float LoadParam(const ParamVec& p, int64_t i) {
  switch (p.t) {
    case ParamType::kF32:
      return static_cast<const float*>(p.p)[i];
    case ParamType::kF16:
      return __half2float(static_cast<const __half*>(p.p)[i]);
    case ParamType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p.p)[i]);
    case ParamType::kF64:
      return static_cast<float>(static_cast<const double*>(p.p)[i]);
  }
  return 0.f;
}

__device__ __forceinline__ float BlockSum(float v, float* smem) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // smem may still be read from the previous call
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

bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The widest vector (16 bytes, then 2 elements, then 1) that divides `dim` and suits both pointers.
template <class T>
int VecWidth(int64_t dim, const void* x, const void* y) {
  for (int v : {static_cast<int>(16 / sizeof(T)), 2})
    if (dim % v == 0 && Aligned(x, v * sizeof(T)) && Aligned(y, v * sizeof(T))) return v;
  return 1;
}

// Calls fn(std::integral_constant<int, V>) for the vector width `v` VecWidth chose.
template <class T, class Fn>
void WithWidth(int v, Fn&& fn) {
  constexpr int kWide = 16 / sizeof(T);
  if (v == kWide)
    fn(std::integral_constant<int, kWide>{});
  else if (v == 2)
    fn(std::integral_constant<int, 2>{});
  else
    fn(std::integral_constant<int, 1>{});
}

// ---------------------------------------------------------------- BatchNormalization

struct BnArgs {
  ParamVec p[4];  // scale, bias, mean, var
  float eps;
  UnaryOp act;  // applied to the normalised value (sampan::FusedBatchNorm); kIdentity: none
  float act_p0, act_p1;
};

// The reference's fold a = scale / sqrt(var + eps), b = bias - mean * a, in float.
__device__ __forceinline__ void BnCoef(const BnArgs& a, int64_t c, float* s, float* b) {
  const float k = LoadParam(a.p[0], c) / sqrtf(LoadParam(a.p[3], c) + a.eps);
  *s = k;
  *b = LoadParam(a.p[1], c) - LoadParam(a.p[2], c) * k;
}

// NCHW: grid.y walks the (n, c) planes, grid.x the plane's vectors; one fold per plane.
template <class T, int V>
__global__ void BnPlaneKernel(const Vec<T, V>* x, Vec<T, V>* y, BnArgs a, int64_t planes, int64_t c, int64_t inner_v) {
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    float s, b;
    BnCoef(a, p % c, &s, &b);
    const Vec<T, V>* xp = x + p * inner_v;
    Vec<T, V>* yp = y + p * inner_v;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < inner_v;
         i += int64_t(gridDim.x) * blockDim.x) {
      Vec<T, V> v = xp[i];
#pragma unroll
      for (int e = 0; e < V; ++e)
        v.v[e] = FromFloat<T>(ApplyUnary(a.act, fmaf(ToFloat(v.v[e]), s, b), a.act_p0, a.act_p1));
      yp[i] = v;
    }
  }
}

// Channels innermost ([rows, c] memory): a thread owns V adjacent channels (threadIdx.x) and
// strides over rows (threadIdx.y, grid.y), folding its coefficients once.
template <class T, int V>
__global__ void BnChannelsLastKernel(const Vec<T, V>* x, Vec<T, V>* y, BnArgs a, int64_t rows, int64_t cols) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  float s[V], b[V];
#pragma unroll
  for (int e = 0; e < V; ++e) BnCoef(a, col * V + e, &s[e], &b[e]);
  for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; r < rows; r += int64_t(gridDim.y) * blockDim.y) {
    Vec<T, V> v = x[r * cols + col];
#pragma unroll
    for (int e = 0; e < V; ++e)
      v.v[e] = FromFloat<T>(ApplyUnary(a.act, fmaf(ToFloat(v.v[e]), s[e], b[e]), a.act_p0, a.act_p1));
    y[r * cols + col] = v;
  }
}

template <class T>
cudaError_t BatchNorm(const void* x, void* y, const BnArgs& a, int64_t n, int64_t c, int64_t inner, bool cl,
                      cudaStream_t st) {
  if (n * c * inner == 0) return cudaSuccess;
  if (cl || inner == 1) {  // [N, C] is channels-last too
    const int64_t rows = n * inner;
    WithWidth<T>(VecWidth<T>(c, x, y), [&](auto vc) {
      constexpr int V = decltype(vc)::value;
      const int64_t cols = c / V;
      const int bx = static_cast<int>(std::min<int64_t>(256, (cols + 31) / 32 * 32));
      const int by = 256 / bx;
      const int64_t gx = (cols + bx - 1) / bx;
      const int64_t gy = std::clamp<int64_t>((rows + by - 1) / by, 1, std::clamp<int64_t>(4096 / gx, 1, 65535));
      BnChannelsLastKernel<T, V><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(bx, by), 0, st>>>(
          static_cast<const Vec<T, V>*>(x), static_cast<Vec<T, V>*>(y), a, rows, cols);
    });
  } else {
    const int64_t planes = n * c;
    WithWidth<T>(VecWidth<T>(inner, x, y), [&](auto vc) {
      constexpr int V = decltype(vc)::value;
      const int64_t inner_v = inner / V;
      const int threads = static_cast<int>(std::min<int64_t>(256, (inner_v + 31) / 32 * 32));
      const int64_t gx = std::min<int64_t>((inner_v + threads - 1) / threads, 1024);
      const int64_t gy = std::min<int64_t>(planes, 65535);
      BnPlaneKernel<T, V><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), threads, 0, st>>>(
          static_cast<const Vec<T, V>*>(x), static_cast<Vec<T, V>*>(y), a, planes, c, inner_v);
    });
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- Instance/GroupNormalization

// Stats: (count, mean, M2) of each block's chunk of an (n, group) region, two-pass (mean,
// then centred squares) in float; the chunk is re-read from L2 for the second pass.
template <class T, int V>
__global__ void GnStatsKernel(const T* x, float* ws, GroupNormPlan p) {
  __shared__ float smem[32];
  const int64_t units = p.n * p.groups * p.splits;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t ng = u / p.splits, begin = (u % p.splits) * p.chunk;
    const int64_t count = std::min(p.len, begin + p.chunk) - begin;
    const Vec<T, V>* v = reinterpret_cast<const Vec<T, V>*>(x + ng * p.len + begin);
    const int64_t nv = count / V;
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const Vec<T, V> e = v[i];
#pragma unroll
      for (int k = 0; k < V; ++k) sum += ToFloat(e.v[k]);
    }
    const float mean = BlockSum(sum, smem) / static_cast<float>(count);
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const Vec<T, V> e = v[i];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = ToFloat(e.v[k]) - mean;
        q += d * d;
      }
    }
    q = BlockSum(q, smem);
    if (threadIdx.x == 0) {
      ws[u * 3] = static_cast<float>(count);
      ws[u * 3 + 1] = mean;
      ws[u * 3 + 2] = q;
    }
  }
}

// Apply: combines the region's partials (Chan et al., in double: a handful of values), then
// y = x * a + b with a = scale * inv_std, b = bias - mean * a per channel (or group).
template <class T, int V>
__global__ void GnApplyKernel(const T* x, T* y, const float* ws, ParamVec scale, ParamVec bias, GroupNormPlan p) {
  __shared__ float stat[2];
  const int64_t units = p.n * p.groups * p.splits;
  const int64_t cg = p.c / p.groups;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t ng = u / p.splits, g = ng % p.groups, begin = (u % p.splits) * p.chunk;
    const int64_t count = std::min(p.len, begin + p.chunk) - begin;
    if (threadIdx.x == 0) {
      double n = 0, mean = 0, m2 = 0;
      for (int64_t s = 0; s < p.splits; ++s) {
        const float* w = ws + (ng * p.splits + s) * 3;
        const double nb = w[0], d = w[1] - mean, tot = n + nb;
        mean += d * nb / tot;
        m2 += w[2] + d * d * n * nb / tot;
        n = tot;
      }
      stat[0] = static_cast<float>(mean);
      stat[1] = static_cast<float>(1.0 / sqrt(m2 / n + static_cast<double>(p.eps)));
    }
    __syncthreads();
    const float mean = stat[0], inv = stat[1];
    const int64_t base = ng * p.len + begin;
    const Vec<T, V>* xv = reinterpret_cast<const Vec<T, V>*>(x + base);
    Vec<T, V>* yv = reinterpret_cast<Vec<T, V>*>(y + base);
    for (int64_t i = threadIdx.x; i < count / V; i += blockDim.x) {
      // V divides inner, so a vector lies within one channel.
      const int64_t pi = p.per_group_affine ? g : g * cg + (begin + i * V) / p.inner;
      const float a = LoadParam(scale, pi) * inv;
      const float b = LoadParam(bias, pi) - mean * a;
      Vec<T, V> v = xv[i];
#pragma unroll
      for (int k = 0; k < V; ++k) v.v[k] = FromFloat<T>(fmaf(ToFloat(v.v[k]), a, b));
      yv[i] = v;
    }
    __syncthreads();  // stat is rewritten for the next unit
  }
}

template <class T>
cudaError_t GroupNorm(const void* x, void* y, ParamVec scale, ParamVec bias, const GroupNormPlan& p, void* ws,
                      cudaStream_t st) {
  const int64_t units = p.n * p.groups * p.splits;
  if (p.len == 0 || p.n * p.groups == 0) return cudaSuccess;
  if (ws == nullptr || p.chunk % 8 != 0) return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(units, 1 << 20));
  WithWidth<T>(VecWidth<T>(p.inner, x, y), [&](auto vc) {
    constexpr int V = decltype(vc)::value;
    const int threads = static_cast<int>(std::clamp<int64_t>((p.chunk / V + 31) / 32 * 32, 32, 256));
    GnStatsKernel<T, V><<<blocks, threads, 0, st>>>(static_cast<const T*>(x), static_cast<float*>(ws), p);
    GnApplyKernel<T, V><<<blocks, threads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                    static_cast<const float*>(ws), scale, bias, p);
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBatchNorm(FloatType t, const void* x, void* y, const ParamVec (&p)[4], int64_t n, int64_t c,
                            int64_t inner, bool channels_last, float eps, UnaryOp act, float act_p0, float act_p1,
                            cudaStream_t stream) {
  BnArgs a{{p[0], p[1], p[2], p[3]}, eps, act, act_p0, act_p1};
  switch (t) {
    case FloatType::kF32:
      return BatchNorm<float>(x, y, a, n, c, inner, channels_last, stream);
    case FloatType::kF16:
      return BatchNorm<__half>(x, y, a, n, c, inner, channels_last, stream);
    case FloatType::kBF16:
      return BatchNorm<__nv_bfloat16>(x, y, a, n, c, inner, channels_last, stream);
  }
  return cudaErrorInvalidValue;
}

GroupNormPlan PlanGroupNorm(int64_t n, int64_t c, int64_t inner, int64_t groups, bool per_group_affine, float eps) {
  GroupNormPlan p;
  p.n = n;
  p.c = c;
  p.inner = inner;
  p.groups = groups;
  p.per_group_affine = per_group_affine;
  p.eps = eps;
  p.len = groups > 0 ? c / groups * inner : 0;
  // Aim for ~1024 blocks in all (a batch-1 GroupNorm has only 32 regions), but keep each
  // block's chunk at >= 4096 elements so the partials stay few and the passes long.
  constexpr int64_t kTargetBlocks = 1024, kMinChunk = 4096;
  const int64_t ng = n * groups;
  int64_t splits = 1;
  if (ng > 0 && ng < kTargetBlocks)
    splits = std::max<int64_t>(1, std::min((kTargetBlocks + ng - 1) / ng, p.len / kMinChunk));
  const int64_t chunk = std::max<int64_t>(8, ((p.len + splits - 1) / splits + 7) / 8 * 8);
  p.chunk = chunk;
  p.splits = std::max<int64_t>(1, (p.len + chunk - 1) / chunk);  // no empty chunks
  return p;
}

cudaError_t LaunchGroupNorm(FloatType t, const void* x, void* y, ParamVec scale, ParamVec bias,
                            const GroupNormPlan& plan, void* workspace, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return GroupNorm<float>(x, y, scale, bias, plan, workspace, stream);
    case FloatType::kF16:
      return GroupNorm<__half>(x, y, scale, bias, plan, workspace, stream);
    case FloatType::kBF16:
      return GroupNorm<__nv_bfloat16>(x, y, scale, bias, plan, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
