#include <cstdint>
#include <cstring>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/resize.h"

namespace sampan::cuda {
namespace {

// The source coordinate of output index x along axis a, as ops/resize.cpp computes it.
// The explicit _rn intrinsics keep nvcc from contracting a*b+c into an FMA: the host
// reference rounds every step, and a different last bit can move a nearest-neighbour
// pick across a .5 boundary or a crop coordinate across the input's edge.
__device__ __forceinline__ double SourceCoord(ResizeCoord coord, const ResizeAxis& a, int64_t x) {
  const double xd = static_cast<double>(x), fin = static_cast<double>(a.in);
  switch (coord) {
    case ResizeCoord::kAlignCorners:
      return a.out_w == 1 ? 0.0 : __ddiv_rn(__dmul_rn(xd, fin - 1), a.out_w - 1);
    case ResizeCoord::kAsymmetric:
      return __ddiv_rn(xd, a.scale);
    case ResizeCoord::kTfCropAndResize: {
      const double span = a.roi_end - a.roi_start;
      const double xo = a.out_w == 1 ? __ddiv_rn(__dmul_rn(span, fin - 1), 2.0)
                                     : __ddiv_rn(__dmul_rn(__dmul_rn(xd, span), fin - 1), a.out_w - 1);
      return __dadd_rn(xo, __dmul_rn(a.roi_start, fin - 1));
    }
    case ResizeCoord::kPytorchHalfPixel:
      return a.out_w == 1 ? -0.5 : __ddiv_rn(xd + 0.5, a.scale) - 0.5;
    case ResizeCoord::kHalfPixelSymmetric: {
      const double adjustment = __ddiv_rn(static_cast<double>(a.out), a.out_w);
      const double center = fin / 2;
      return __dadd_rn(__dmul_rn(center, 1 - adjustment), __ddiv_rn(xd + 0.5, a.scale)) - 0.5;
    }
    case ResizeCoord::kTfHalfPixelForNN:
      return __ddiv_rn(xd + 0.5, a.scale);
    case ResizeCoord::kHalfPixel:
      break;
  }
  return __ddiv_rn(xd + 0.5, a.scale) - 0.5;
}

__device__ __forceinline__ bool Outside(ResizeCoord coord, const ResizeAxis& a, double xo) {
  return coord == ResizeCoord::kTfCropAndResize && (xo < 0 || xo > static_cast<double>(a.in) - 1);
}

__device__ __forceinline__ int64_t NearestIndex(ResizeNearest m, double xo, double scale, int64_t in) {
  int64_t i;
  if (m == ResizeNearest::kSimple) {
    i = scale < 1 ? static_cast<int64_t>(ceil(xo)) : static_cast<int64_t>(xo);
  } else {
    const double fl = floor(xo);
    const double ratio = xo - fl;
    const int64_t x0 = static_cast<int64_t>(fl);
    if (ratio == 0)
      i = x0;
    else if (m == ResizeNearest::kRoundPreferFloor)
      i = ratio <= 0.5 ? x0 : x0 + 1;
    else if (m == ResizeNearest::kRoundPreferCeil)
      i = ratio < 0.5 ? x0 : x0 + 1;
    else if (m == ResizeNearest::kFloor)
      i = x0;
    else
      i = x0 + 1;
  }
  return i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
}

template <class U, class I>
__global__ void ResizeNearestKernel(const U* x, U* y, ResizeParams p, U extrapolation, I total) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    I rem = i, src = 0;
    bool outside = false;
    for (int k = p.rank - 1; k >= 0; --k) {
      const ResizeAxis& a = p.axis[k];
      const I q = rem % static_cast<I>(a.out);
      rem /= static_cast<I>(a.out);
      I idx = q;
      if (a.resized) {
        const double xo = SourceCoord(p.coord, a, q);
        if (Outside(p.coord, a, xo)) {
          outside = true;
          break;
        }
        idx = static_cast<I>(NearestIndex(p.nearest, xo, a.scale, a.in));
      }
      src += idx * static_cast<I>(a.in_stride);
    }
    y[i] = outside ? extrapolation : x[src];
  }
}

__device__ __forceinline__ double CubicCoeff(double x, double A) {
  x = fabs(x);
  const double x2 = x * x, x3 = x2 * x;
  if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
  if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
  return 0.0;
}

// Input offsets and weights of the taps of one axis at source coordinate xo (the
// reference's ComputeTaps for one output index). Unused taps (t >= a.taps) and taps
// whose weight is 0 get weight 0, which the accumulation skips, as the reference does.
template <int kTaps, class I>
__device__ __forceinline__ void AxisTaps(const ResizeParams& p, const ResizeAxis& a, double xo, I (&off)[kTaps],
                                         float (&w)[kTaps]) {
  const double fl = floor(xo);
  int64_t x0 = static_cast<int64_t>(fl);
  double ratio = xo - fl;
  if (ratio == 0) {
    x0 -= 1;
    ratio = 1;
  }
  // Plain linear/cubic filters unroll into registers; wide antialias filters loop.
  constexpr int kUnroll = kTaps <= 4 ? kTaps : 1;
  const double A = p.cubic_a;
  double c[kTaps];
  double sum = 0;
#pragma unroll kUnroll
  for (int t = 0; t < kTaps; ++t) {
    double v = 0;
    if (t < a.taps) {
      if (p.antialias) {
        const double d = static_cast<double>(a.start + t) - ratio;
        v = p.mode == ResizeMode::kLinear ? fmin(fmax(1 - fabs(d * a.aa_scale), 0.0), 1.0)
                                          : CubicCoeff(a.aa_scale * d, A);
      } else if (p.mode == ResizeMode::kLinear) {
        v = t == 0 ? 1 - ratio : ratio;
      } else {
        const double r = 1 - ratio;
        switch (t) {
          case 0:
            v = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A;
            break;
          case 1:
            v = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
            break;
          case 2:
            v = ((A + 2) * r - (A + 3)) * r * r + 1;
            break;
          default:
            v = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
            break;
        }
      }
    }
    c[t] = v;
    sum += v;
  }
  if (p.antialias) {
#pragma unroll kUnroll
    for (int t = 0; t < kTaps; ++t) c[t] /= sum;
  }
  if (p.exclude_outside) {
    double kept = 0;
#pragma unroll kUnroll
    for (int t = 0; t < kTaps; ++t) {
      const int64_t idx = x0 + a.start + t;
      if (idx < 0 || idx >= a.in) c[t] = 0;
      kept += c[t];
    }
    if (kept != 0) {
#pragma unroll kUnroll
      for (int t = 0; t < kTaps; ++t) c[t] /= kept;
    }
  }
#pragma unroll kUnroll
  for (int t = 0; t < kTaps; ++t) {
    int64_t idx = x0 + a.start + t;
    idx = idx < 0 ? 0 : (idx > a.in - 1 ? a.in - 1 : idx);
    off[t] = static_cast<I>(idx) * static_cast<I>(a.in_stride);
    w[t] = t < a.taps ? static_cast<float>(c[t]) : 0.f;
  }
}

// Taps of interpolation slot j for output index q along its axis: the tap count, 1 for
// an unused slot (a single tap of weight 1 at offset 0), or -1 outside a crop region.
template <int kTaps, class I>
__device__ __forceinline__ int SlotTaps(const ResizeParams& p, int j, I q, I (&off)[kTaps], float (&w)[kTaps]) {
  if (j >= p.n_interp) {
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      off[t] = 0;
      w[t] = t == 0 ? 1.f : 0.f;
    }
    return 1;
  }
  const ResizeAxis& a = p.axis[p.interp[j]];
  const double xo = SourceCoord(p.coord, a, q);
  if (Outside(p.coord, a, xo)) return -1;
  AxisTaps<kTaps, I>(p, a, xo, off, w);
  return a.taps;
}

template <class T, class I, int kTaps>
__global__ void ResizeInterpKernel(const T* x, T* y, ResizeParams p, I total) {
  // Small filters stay in registers (fully unrolled); wide antialias filters loop over
  // arrays in local memory (one variant of kMaxResizeTaps serves every wide filter).
  constexpr int kUnroll = kTaps <= 4 ? kTaps : 1;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    I rem = i, base = 0, q0 = 0, q1 = 0, q2 = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      const I n = static_cast<I>(p.axis[k].out);
      const I q = rem % n;
      rem /= n;
      if (!p.axis[k].resized)
        base += q * static_cast<I>(p.axis[k].in_stride);
      else if (k == p.interp[0])
        q0 = q;
      else if (k == p.interp[1])
        q1 = q;
      else
        q2 = q;
    }
    I o0[kTaps], o1[kTaps], o2[kTaps];
    float w0[kTaps], w1[kTaps], w2[kTaps];
    const int n0 = SlotTaps<kTaps, I>(p, 0, q0, o0, w0);
    const int n1 = SlotTaps<kTaps, I>(p, 1, q1, o1, w1);
    const int n2 = SlotTaps<kTaps, I>(p, 2, q2, o2, w2);
    if (n0 < 0 || n1 < 0 || n2 < 0) {
      y[i] = FromFloat<T>(p.extrapolation);
      continue;
    }
    float acc = 0.f;
#pragma unroll kUnroll
    for (int t0 = 0; t0 < kTaps; ++t0) {
      if (t0 >= n0 || w0[t0] == 0.f) continue;
#pragma unroll kUnroll
      for (int t1 = 0; t1 < kTaps; ++t1) {
        if (t1 >= n1 || w1[t1] == 0.f) continue;
        const float w01 = w0[t0] * w1[t1];
        const I o01 = base + o0[t0] + o1[t1];
#pragma unroll kUnroll
        for (int t2 = 0; t2 < kTaps; ++t2) {
          if (t2 >= n2 || w2[t2] == 0.f) continue;
          acc += w01 * w2[t2] * ToFloat(x[o01 + o2[t2]]);
        }
      }
    }
    y[i] = FromFloat<T>(acc);
  }
}

// Whether output indices and input offsets fit 32-bit arithmetic.
bool Fits32(const ResizeParams& p, int64_t n) {
  int64_t off = 0;
  for (int k = 0; k < p.rank; ++k) off += (p.axis[k].in - 1) * p.axis[k].in_stride;
  return n < (int64_t(1) << 31) && off < (int64_t(1) << 31);
}

int64_t OutputCount(const ResizeParams& p) {
  int64_t n = 1;
  for (int k = 0; k < p.rank; ++k) n *= p.axis[k].out;
  return n;
}

template <class U>
cudaError_t Nearest(const void* x, void* y, const ResizeParams& p, cudaStream_t st) {
  const int64_t n = OutputCount(p);
  if (n == 0) return cudaSuccess;
  U e;
  std::memcpy(&e, &p.extrapolation_bits, sizeof(U));  // little-endian: the low bytes hold the value
  const auto* xs = static_cast<const U*>(x);
  auto* ys = static_cast<U*>(y);
  if (Fits32(p, n))
    ResizeNearestKernel<U, int32_t><<<GridFor(n), kThreads, 0, st>>>(xs, ys, p, e, static_cast<int32_t>(n));
  else
    ResizeNearestKernel<U, int64_t><<<GridFor(n), kThreads, 0, st>>>(xs, ys, p, e, n);
  return cudaGetLastError();
}

template <class T, class I>
cudaError_t Interp(const void* x, void* y, const ResizeParams& p, int max_taps, I n, cudaStream_t st) {
  const auto* xs = static_cast<const T*>(x);
  auto* ys = static_cast<T*>(y);
  const unsigned blocks = GridFor(n);
  if (max_taps <= 2)
    ResizeInterpKernel<T, I, 2><<<blocks, kThreads, 0, st>>>(xs, ys, p, n);
  else if (max_taps <= 4)
    ResizeInterpKernel<T, I, 4><<<blocks, kThreads, 0, st>>>(xs, ys, p, n);
  else if (max_taps <= kMaxResizeTaps)
    ResizeInterpKernel<T, I, kMaxResizeTaps><<<blocks, kThreads, 0, st>>>(xs, ys, p, n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template <class T>
cudaError_t InterpTyped(const void* x, void* y, const ResizeParams& p, int max_taps, cudaStream_t st) {
  const int64_t n = OutputCount(p);
  if (n == 0) return cudaSuccess;
  if (Fits32(p, n)) return Interp<T, int32_t>(x, y, p, max_taps, static_cast<int32_t>(n), st);
  return Interp<T, int64_t>(x, y, p, max_taps, n, st);
}

}  // namespace

cudaError_t LaunchResizeNearest(size_t elem_size, const void* x, void* y, const ResizeParams& p, cudaStream_t stream) {
  switch (elem_size) {
    case 1:
      return Nearest<uint8_t>(x, y, p, stream);
    case 2:
      return Nearest<uint16_t>(x, y, p, stream);
    case 4:
      return Nearest<uint32_t>(x, y, p, stream);
    case 8:
      return Nearest<uint64_t>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchResizeInterp(FloatType t, const void* x, void* y, const ResizeParams& p, int max_taps,
                               cudaStream_t stream) {
  if (p.n_interp > kMaxResizeInterpAxes) return cudaErrorInvalidValue;
  switch (t) {
    case FloatType::kF32:
      return InterpTyped<float>(x, y, p, max_taps, stream);
    case FloatType::kF16:
      return InterpTyped<__half>(x, y, p, max_taps, stream);
    case FloatType::kBF16:
      return InterpTyped<__nv_bfloat16>(x, y, p, max_taps, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
