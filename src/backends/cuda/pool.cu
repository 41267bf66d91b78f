#include <cfloat>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/pool.h"

namespace sampan::cuda {
namespace {

template <class T>
__global__ void Pool2dKernel(const T* x, T* y, Pool2dParams p, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, nc = i / (p.ow * p.oh);
    const T* plane = x + nc * p.h * p.w;
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
        const float v = ToFloat(plane[iy * p.w + ix]);
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

template <class T>
cudaError_t Pool(const void* x, void* y, const Pool2dParams& p, cudaStream_t st) {
  const int64_t total = p.n * p.c * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  Pool2dKernel<T><<<GridFor(total), kThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), p, total);
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
    case FloatType::kF32: return Pool<float>(x, y, p, stream);
    case FloatType::kF16: return Pool<__half>(x, y, p, stream);
    case FloatType::kBF16: return Pool<__nv_bfloat16>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGlobalPool(FloatType t, const void* x, void* y, int64_t rows, int64_t inner, bool is_max,
                             cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32: return Global<float>(x, y, rows, inner, is_max, stream);
    case FloatType::kF16: return Global<__half>(x, y, rows, inner, is_max, stream);
    case FloatType::kBF16: return Global<__nv_bfloat16>(x, y, rows, inner, is_max, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
