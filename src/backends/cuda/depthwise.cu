#include <algorithm>

#include "backends/cuda/depthwise.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Channels-last output: thread = (pixel, group of V channels), channels fastest, so a
// warp reads V * 32 consecutive channels of one input pixel per filter tap.
template <class T, int V>
__global__ void DepthwiseNhwc(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                              const T* __restrict__ z, T* __restrict__ y, DepthwiseShape s, int total) {
  const int kv = static_cast<int>(s.k) / V;
  const int mult = static_cast<int>(s.k / s.c);
  const int H = static_cast<int>(s.h), W = static_cast<int>(s.w), OH = static_cast<int>(s.oh),
            OW = static_cast<int>(s.ow), R = static_cast<int>(s.r), S = static_cast<int>(s.s),
            K = static_cast<int>(s.k);
  const int xsn = static_cast<int>(s.xs[0]), xsc = static_cast<int>(s.xs[1]), xsh = static_cast<int>(s.xs[2]),
            xsw = static_cast<int>(s.xs[3]);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int k0 = (i % kv) * V;
    int p = i / kv;
    const int ox = p % OW;
    p /= OW;
    const int oy = p % OH;
    const int n = p / OH;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.f;
    const int iy0 = oy * static_cast<int>(s.stride_h) - static_cast<int>(s.pad_h);
    const int ix0 = ox * static_cast<int>(s.stride_w) - static_cast<int>(s.pad_w);
    const T* xb = x + n * xsn + (V > 1 ? k0 : k0 / mult) * xsc;
    for (int r = 0; r < R; ++r) {
      const int iy = iy0 + r * static_cast<int>(s.dil_h);
      if (iy < 0 || iy >= H) continue;
      for (int q = 0; q < S; ++q) {
        const int ix = ix0 + q * static_cast<int>(s.dil_w);
        if (ix < 0 || ix >= W) continue;
        const T* xp = xb + iy * xsh + ix * xsw;
        const T* wp = w + (r * S + q) * K + k0;
        if constexpr (V > 1) {  // multiplier 1 and channel stride 1 (checked by the launcher)
          const Pack<T, V> xv = *reinterpret_cast<const Pack<T, V>*>(xp);
          const Pack<T, V> wv = *reinterpret_cast<const Pack<T, V>*>(wp);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] = fmaf(ToFloat(xv.v[j]), ToFloat(wv.v[j]), acc[j]);
        } else {
          acc[0] = fmaf(ToFloat(*xp), ToFloat(*wp), acc[0]);
        }
      }
    }
    const int yo = i * V;  // [N, OH, OW, K] flat: ((n*OH + oy)*OW + ox)*K + k0
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float v = acc[j];
      if (bias) v += ToFloat(bias[k0 + j]);
      if (z) v += ToFloat(z[yo + j]);
      out.v[j] = FromFloat<T>(ApplyUnary(s.act, v, s.p0, s.p1));
    }
    *reinterpret_cast<Pack<T, V>*>(y + yo) = out;
  }
}

// Channels-first output: thread = output element, columns fastest.
template <class T>
__global__ void DepthwiseNchw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                              const T* __restrict__ z, T* __restrict__ y, DepthwiseShape s, int total) {
  const int mult = static_cast<int>(s.k / s.c);
  const int H = static_cast<int>(s.h), W = static_cast<int>(s.w), OH = static_cast<int>(s.oh),
            OW = static_cast<int>(s.ow), R = static_cast<int>(s.r), S = static_cast<int>(s.s),
            K = static_cast<int>(s.k);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int ox = i % OW;
    int p = i / OW;
    const int oy = p % OH;
    p /= OH;
    const int k = p % K;
    const int n = p / K;
    const T* xb = x + n * static_cast<int>(s.xs[0]) + (k / mult) * static_cast<int>(s.xs[1]);
    const int iy0 = oy * static_cast<int>(s.stride_h) - static_cast<int>(s.pad_h);
    const int ix0 = ox * static_cast<int>(s.stride_w) - static_cast<int>(s.pad_w);
    float acc = 0.f;
    for (int r = 0; r < R; ++r) {
      const int iy = iy0 + r * static_cast<int>(s.dil_h);
      if (iy < 0 || iy >= H) continue;
      for (int q = 0; q < S; ++q) {
        const int ix = ix0 + q * static_cast<int>(s.dil_w);
        if (ix < 0 || ix >= W) continue;
        acc = fmaf(ToFloat(xb[iy * static_cast<int>(s.xs[2]) + ix * static_cast<int>(s.xs[3])]),
                   ToFloat(w[(r * S + q) * K + k]), acc);
      }
    }
    if (bias) acc += ToFloat(bias[k]);
    if (z) acc += ToFloat(z[i]);
    y[i] = FromFloat<T>(ApplyUnary(s.act, acc, s.p0, s.p1));
  }
}

bool Aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <class T, int V>
cudaError_t LaunchNhwc(const DepthwiseShape& s, const void* x, const void* w, const void* bias, const void* z, void* y,
                       cudaStream_t stream) {
  const int64_t total = s.n * s.oh * s.ow * (s.k / V);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t(1) << 20);
  DepthwiseNhwc<T, V><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<const T*>(z),
      static_cast<T*>(y), s, static_cast<int>(total));
  return cudaGetLastError();
}

template <class T>
cudaError_t Launch(const DepthwiseShape& s, const void* x, const void* w, const void* bias, const void* z, void* y,
                   cudaStream_t stream) {
  if (!s.out_nhwc) {
    const int64_t total = s.n * s.k * s.oh * s.ow;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t(1) << 20);
    DepthwiseNchw<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<const T*>(z),
        static_cast<T*>(y), s, static_cast<int>(total));
    return cudaGetLastError();
  }
  // The widest channel vector every pointer and stride allows (multiplier 1, channels
  // adjacent in the input).
  auto fits = [&](int v) {
    const size_t bytes = sizeof(T) * static_cast<size_t>(v);
    return s.k == s.c && s.xs[1] == 1 && s.k % v == 0 && s.xs[0] % v == 0 && s.xs[2] % v == 0 && s.xs[3] % v == 0 &&
           Aligned(x, bytes) && Aligned(w, bytes) && Aligned(bias, bytes) && Aligned(z, bytes) && Aligned(y, bytes);
  };
  constexpr int kWide = 16 / sizeof(T);  // 8 halves or 4 floats: one 16-byte load
  if (fits(kWide)) return LaunchNhwc<T, kWide>(s, x, w, bias, z, y, stream);
  if (fits(2)) return LaunchNhwc<T, 2>(s, x, w, bias, z, y, stream);
  return LaunchNhwc<T, 1>(s, x, w, bias, z, y, stream);
}

}  // namespace

bool DepthwiseFits(const DepthwiseShape& s) {
  const int64_t lim = (int64_t(1) << 31) - 1;
  const int64_t y = s.n * s.k * s.oh * s.ow;
  const int64_t x = (s.n - 1) * s.xs[0] + (s.c - 1) * s.xs[1] + (s.h - 1) * s.xs[2] + (s.w - 1) * s.xs[3] + 1;
  return s.n > 0 && s.c > 0 && s.k % s.c == 0 && y < lim && x < lim && s.r * s.s * s.k < lim;
}

cudaError_t LaunchDepthwise(FloatType t, const DepthwiseShape& s, const void* x, const void* w, const void* bias,
                            const void* z, void* y, cudaStream_t stream) {
  if (!DepthwiseFits(s)) return cudaErrorInvalidValue;
  if (s.n * s.k * s.oh * s.ow == 0) return cudaSuccess;
  switch (t) {
    case FloatType::kF16:
      return Launch<__half>(s, x, w, bias, z, y, stream);
    case FloatType::kBF16:
      return Launch<__nv_bfloat16>(s, x, w, bias, z, y, stream);
    case FloatType::kF32:
      return Launch<float>(s, x, w, bias, z, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
