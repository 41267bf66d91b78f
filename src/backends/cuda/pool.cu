#include <cfloat>
#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/pool.h"

namespace sampan::cuda {
namespace {

// I: index type (32-bit when the tensors allow: 64-bit division is several times slower).
template <class T, class I>
__global__ void Pool2dKernel(const T* x, T* y, Pool2dParams p, I total) {
  const I C = static_cast<I>(p.c), OW = static_cast<I>(p.ow), OH = static_cast<I>(p.oh);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    // Output coordinates from i in the output's storage order; x addressed as
    // plane[(iy * w + ix) * step] in either layout.
    I ox, oy, n, c, r = i;
    if (p.out_nhwc) {
      c = r % C;
      r /= C;
      ox = r % OW;
      r /= OW;
      oy = r % OH;
      n = r / OH;
    } else {
      ox = r % OW;
      r /= OW;
      oy = r % OH;
      r /= OH;
      c = r % C;
      n = r / C;
    }
    const T* plane = p.in_nhwc ? x + int64_t(n) * p.h * p.w * p.c + c : x + (int64_t(n) * p.c + c) * p.h * p.w;
    const int64_t step = p.in_nhwc ? p.c : 1;
    const int64_t y0 = oy * p.sh - p.pad_top, x0 = ox * p.sw - p.pad_left;
    float acc = p.is_max ? -FLT_MAX : 0.f;
    bool any = false;
    int count = 0;
    for (int ky = 0; ky < p.kh; ++ky) {
      const int64_t iy = y0 + int64_t(ky) * p.dh;
      if (iy < 0 || iy >= p.h) continue;
      for (int kx = 0; kx < p.kw; ++kx) {
        const int64_t ix = x0 + int64_t(kx) * p.dw;
        if (ix < 0 || ix >= p.w) continue;
        const float v = ToFloat(plane[(iy * p.w + ix) * step]);
        if (p.is_max) {
          acc = isnan(v) || v > acc ? v : acc;
          any = true;
        } else {
          acc += v;
        }
        ++count;
      }
    }
    if (!p.is_max) {
      int div = count;
      if (p.count_include_pad) {
        // Window clipped to the padded input (ONNX reference semantics).
        const int64_t ye = min(y0 + int64_t(p.kh - 1) * p.dh + 1, p.h_padded - p.pad_top);
        const int64_t xe = min(x0 + int64_t(p.kw - 1) * p.dw + 1, p.w_padded - p.pad_left);
        const int64_t ny = (ye - y0 + p.dh - 1) / p.dh, nx = (xe - x0 + p.dw - 1) / p.dw;
        div = static_cast<int>(ny * nx);
      }
      acc = div > 0 ? acc / static_cast<float>(div) : 0.f;
    } else if (!any) {
      acc = 0.f;
    }
    y[i] = FromFloat<T>(acc);
  }
}

// One warp per row.
template <class T>
__global__ void GlobalPoolKernel(const T* x, T* y, int64_t rows, int64_t inner, bool is_max) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* p = x + row * inner;
  float acc = is_max ? -FLT_MAX : 0.f;
  for (int64_t k = lane; k < inner; k += 32) {
    const float v = ToFloat(p[k]);
    acc = is_max ? fmaxf(acc, v) : acc + v;
  }
  acc = is_max ? WarpMax(acc) : WarpSum(acc);
  if (lane == 0) y[row] = FromFloat<T>(is_max ? acc : acc / static_cast<float>(inner));
}

// Channels-last in and out, 2-byte types, C % 8 == 0: one thread per (n, oy, ox, 8 channels),
// 16-byte loads and stores (the per-element kernel spends its time on index arithmetic).
template <class T>
__global__ void Pool2dNhwc8Kernel(const T* x, T* y, Pool2dParams p, int32_t total) {
  const int32_t C8 = static_cast<int32_t>(p.c / 8), OW = static_cast<int32_t>(p.ow), OH = static_cast<int32_t>(p.oh);
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    int32_t r = i;
    const int32_t c8 = r % C8;
    r /= C8;
    const int32_t ox = r % OW;
    r /= OW;
    const int32_t oy = r % OH;
    const int32_t n = r / OH;
    const int32_t y0 = oy * p.sh - p.pad_top, x0 = ox * p.sw - p.pad_left;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = p.is_max ? -FLT_MAX : 0.f;
    int count = 0;
    for (int ky = 0; ky < p.kh; ++ky) {
      const int32_t iy = y0 + ky * p.dh;
      if (iy < 0 || iy >= p.h) continue;
      for (int kx = 0; kx < p.kw; ++kx) {
        const int32_t ix = x0 + kx * p.dw;
        if (ix < 0 || ix >= p.w) continue;
        const uint4 raw = *reinterpret_cast<const uint4*>(x + ((int64_t(n) * p.h + iy) * p.w + ix) * p.c + c8 * 8);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float v = ToFloat(e[k]);
          acc[k] = p.is_max ? (isnan(v) || v > acc[k] ? v : acc[k]) : acc[k] + v;
        }
        ++count;
      }
    }
    float div = static_cast<float>(count);
    if (!p.is_max && p.count_include_pad) {
      const int64_t ye = min(int64_t(y0) + int64_t(p.kh - 1) * p.dh + 1, p.h_padded - p.pad_top);
      const int64_t xe = min(int64_t(x0) + int64_t(p.kw - 1) * p.dw + 1, p.w_padded - p.pad_left);
      div = static_cast<float>(((ye - y0 + p.dh - 1) / p.dh) * ((xe - x0 + p.dw - 1) / p.dw));
    }
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      o[k] = FromFloat<T>(p.is_max ? (count > 0 ? acc[k] : 0.f) : (div > 0.f ? acc[k] / div : 0.f));
    *reinterpret_cast<uint4*>(y + int64_t(i) * 8) = out;
  }
}

// One thread per (n, c): consecutive threads read consecutive channels.
template <class T>
__global__ void GlobalPoolNhwcKernel(const T* x, T* y, int64_t n, int64_t hw, int64_t c, bool is_max) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * c; i += int64_t(gridDim.x) * blockDim.x) {
    const T* p = x + (i / c) * hw * c + i % c;
    float acc = is_max ? -FLT_MAX : 0.f;
    for (int64_t k = 0; k < hw; ++k) {
      const float v = ToFloat(p[k * c]);
      acc = is_max ? fmaxf(acc, v) : acc + v;
    }
    y[i] = FromFloat<T>(is_max ? acc : acc / static_cast<float>(hw));
  }
}

// Few (n, c) pairs over many pixels (an early squeeze-excitation's pool: 32 x 32 over
// 112 x 112): the pixels are split into `splits` chunks, one grid row each, and the
// partial sums/maxima (fp32, [splits, n*c]) are combined by a second kernel.
template <class T>
__global__ void GlobalPoolNhwcPartial(const T* x, float* part, int64_t n, int64_t hw, int64_t c, int64_t chunk,
                                      bool is_max) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n * c) return;
  const int64_t b = blockIdx.y * chunk, e = min(hw, b + chunk);
  const T* p = x + (i / c) * hw * c + i % c;
  float acc = is_max ? -FLT_MAX : 0.f;
#pragma unroll 4
  for (int64_t k = b; k < e; ++k) {
    const float v = ToFloat(p[k * c]);
    acc = is_max ? fmaxf(acc, v) : acc + v;
  }
  part[blockIdx.y * n * c + i] = acc;
}

template <class T>
__global__ void GlobalPoolNhwcCombine(const float* part, T* y, int64_t nc, int64_t splits, int64_t hw, bool is_max) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nc; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = is_max ? -FLT_MAX : 0.f;
    for (int64_t s = 0; s < splits; ++s) acc = is_max ? fmaxf(acc, part[s * nc + i]) : acc + part[s * nc + i];
    y[i] = FromFloat<T>(is_max ? acc : acc / static_cast<float>(hw));
  }
}

template <class T>
cudaError_t GlobalNhwc(const void* x, void* y, int64_t n, int64_t hw, int64_t c, bool is_max, void* ws, size_t ws_bytes,
                       cudaStream_t st) {
  if (n * c == 0) return cudaSuccess;
  const int64_t splits = GlobalPoolNhwcSplits(n, hw, c);
  if (splits > 1 && ws && ws_bytes >= static_cast<size_t>(splits * n * c) * sizeof(float)) {
    const int64_t chunk = (hw + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>((n * c + kThreads - 1) / kThreads), static_cast<unsigned>(splits));
    GlobalPoolNhwcPartial<T>
        <<<grid, kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<float*>(ws), n, hw, c, chunk, is_max);
    GlobalPoolNhwcCombine<T><<<GridFor(n * c), kThreads, 0, st>>>(static_cast<const float*>(ws), static_cast<T*>(y),
                                                                  n * c, splits, hw, is_max);
    return cudaGetLastError();
  }
  GlobalPoolNhwcKernel<T>
      <<<GridFor(n * c), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), n, hw, c, is_max);
  return cudaGetLastError();
}

template <class T>
cudaError_t Pool(const void* x, void* y, const Pool2dParams& p, cudaStream_t st) {
  const int64_t total = p.n * p.c * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  if constexpr (sizeof(T) == 2) {
    const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    if (p.in_nhwc && p.out_nhwc && p.c % 8 == 0 && aligned && p.n * p.h * p.w * p.c < (int64_t(1) << 31) &&
        total < (int64_t(1) << 31)) {
      const int64_t groups = total / 8;
      Pool2dNhwc8Kernel<T><<<GridFor(groups), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p,
                                                                 static_cast<int32_t>(groups));
      return cudaGetLastError();
    }
  }
  if (total < (int64_t(1) << 31))
    Pool2dKernel<T, int32_t><<<GridFor(total), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p,
                                                                  static_cast<int32_t>(total));
  else
    Pool2dKernel<T, int64_t>
        <<<GridFor(total), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p, total);
  return cudaGetLastError();
}

template <class T>
cudaError_t Global(const void* x, void* y, int64_t rows, int64_t inner, bool is_max, cudaStream_t st) {
  if (rows == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((rows + 7) / 8);
  GlobalPoolKernel<T><<<blocks, 256, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, inner, is_max);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPool2d(FloatType t, const void* x, void* y, const Pool2dParams& p, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Pool<float>(x, y, p, stream);
    case FloatType::kF16:
      return Pool<__half>(x, y, p, stream);
    case FloatType::kBF16:
      return Pool<__nv_bfloat16>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGlobalPool(FloatType t, const void* x, void* y, int64_t rows, int64_t inner, bool is_max,
                             cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Global<float>(x, y, rows, inner, is_max, stream);
    case FloatType::kF16:
      return Global<__half>(x, y, rows, inner, is_max, stream);
    case FloatType::kBF16:
      return Global<__nv_bfloat16>(x, y, rows, inner, is_max, stream);
  }
  return cudaErrorInvalidValue;
}

int64_t GlobalPoolNhwcSplits(int64_t n, int64_t hw, int64_t c) {
  constexpr int64_t kWantThreads = 132 * 2048;  // enough to fill an H200's SMs
  const int64_t nc = std::max<int64_t>(n * c, 1);
  return std::max<int64_t>(1, std::min<int64_t>((hw + 31) / 32, kWantThreads / nc));
}

size_t GlobalPoolNhwcWorkspace(int64_t n, int64_t hw, int64_t c) {
  const int64_t s = GlobalPoolNhwcSplits(n, hw, c);
  return s > 1 ? static_cast<size_t>(s * n * c) * sizeof(float) : 0;
}

cudaError_t LaunchGlobalPoolNhwc(FloatType t, const void* x, void* y, int64_t n, int64_t hw, int64_t c, bool is_max,
                                 void* ws, size_t ws_bytes, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return GlobalNhwc<float>(x, y, n, hw, c, is_max, ws, ws_bytes, stream);
    case FloatType::kF16:
      return GlobalNhwc<__half>(x, y, n, hw, c, is_max, ws, ws_bytes, stream);
    case FloatType::kBF16:
      return GlobalNhwc<__nv_bfloat16>(x, y, n, hw, c, is_max, ws, ws_bytes, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
