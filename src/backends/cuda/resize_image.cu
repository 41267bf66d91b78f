#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/resize_image.h"

namespace sampan::cuda {
namespace {

constexpr int kCoefOne = 1 << 11;  // OpenCV's INTER_RESIZE_COEF_BITS

// The steps of ops/image_geometry.cpp's ResizeBilinear, each rounded as the host rounds it: the
// _rn intrinsics keep nvcc from contracting a multiply and an add into one FMA, whose single
// rounding could move a source position, and so a weight, by a bit.
__device__ __forceinline__ float SourcePos(int64_t d, double inv_scale) {
  return __double2float_rn(__dsub_rn(__dmul_rn(__dadd_rn(static_cast<double>(d), 0.5), inv_scale), 0.5));
}

// (1 - f, f) in fixed point, each rounded half to even (std::nearbyint, cvRound).
__device__ __forceinline__ void FixedWeights(float f, int32_t* w0, int32_t* w1) {
  *w0 = __float2int_rn(__fmul_rn(__fsub_rn(1.f, f), static_cast<float>(kCoefOne)));
  *w1 = __float2int_rn(__fmul_rn(f, static_cast<float>(kCoefOne)));
}

__device__ __forceinline__ int64_t Clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// One thread per output pixel (b, y, x), all channels: the pixel's taps and weights are worked out
// once, then each channel is interpolated and normalised into its plane.
__global__ void ResizeImageKernel(const uint8_t* x, float* y, float* transform, ResizeImageParams p, int64_t total) {
  if (transform != nullptr && blockIdx.x == 0 && threadIdx.x < 4) transform[threadIdx.x] = p.transform[threadIdx.x];
  const int64_t plane = p.oh * p.ow;
  const int c = static_cast<int>(p.c);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t xo = i % p.ow, t = i / p.ow, yo = t % p.oh, b = t / p.oh;
    float* dst = y + b * c * plane + yo * p.ow + xo;
    const int64_t ry = yo - p.top, rx = xo - p.left;
    if (ry < 0 || ry >= p.rh || rx < 0 || rx >= p.rw) {
      for (int k = 0; k < c; ++k) dst[k * plane] = p.pad[k];
      continue;
    }
    const uint8_t* img = x + b * p.h * p.w * c;
    int32_t px[kMaxResizeImageChannels];
    if (p.copy) {
      const uint8_t* s = img + (ry * p.w + rx) * c;
      for (int k = 0; k < c; ++k) px[k] = s[k];
    } else {
      // Columns: positions past either edge take the edge pixel alone.
      float fx = SourcePos(rx, p.inv_scale_x);
      int64_t sx = static_cast<int64_t>(floorf(fx));
      fx = __fsub_rn(fx, static_cast<float>(sx));
      if (sx < 0) fx = 0.f, sx = 0;
      if (sx >= p.w - 1) fx = 0.f, sx = p.w - 1;
      int32_t a0, a1;
      FixedWeights(fx, &a0, &a1);
      const int64_t x0 = sx * c, x1 = (sx + 1 < p.w - 1 ? sx + 1 : p.w - 1) * c;
      // Rows are clamped but keep their fraction (OpenCV's vertical pass).
      float fy = SourcePos(ry, p.inv_scale_y);
      const int64_t sy = static_cast<int64_t>(floorf(fy));
      fy = __fsub_rn(fy, static_cast<float>(sy));
      int32_t b0, b1;
      FixedWeights(fy, &b0, &b1);
      const uint8_t* s0 = img + Clamp(sy, 0, p.h - 1) * p.w * c;
      const uint8_t* s1 = img + Clamp(sy + 1, 0, p.h - 1) * p.w * c;
      for (int k = 0; k < c; ++k) {
        const int32_t r0 = s0[x0 + k] * a0 + s0[x1 + k] * a1;
        const int32_t r1 = s1[x0 + k] * a0 + s1[x1 + k] * a1;
        // OpenCV's vectorised rounding: each product pre-shifted, then (sum + 2) >> 2.
        const int32_t v = (((b0 * (r0 >> 4)) >> 16) + ((b1 * (r1 >> 4)) >> 16) + 2) >> 2;
        px[k] = v < 0 ? 0 : (v > 255 ? 255 : v);
      }
    }
    for (int k = 0; k < c; ++k) {
      const int from = p.swap_rb ? c - 1 - k : k;
      dst[k * plane] = __fdiv_rn(__fsub_rn(static_cast<float>(px[from]), p.mean[k]), p.stdev[k]);
    }
  }
}

}  // namespace

cudaError_t LaunchResizeImage(const uint8_t* x, float* y, float* transform, const ResizeImageParams& p,
                              cudaStream_t stream) {
  const int64_t total = p.n * p.oh * p.ow;
  if (total == 0 && transform == nullptr) return cudaSuccess;
  ResizeImageKernel<<<GridFor(total), kThreads, 0, stream>>>(x, y, transform, p, total);
  return cudaGetLastError();
}

}  // namespace sampan::cuda
