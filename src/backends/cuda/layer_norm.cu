#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/layer_norm.h"
#include "backends/cuda/quantize_math.cuh"

namespace sampan::cuda {
namespace {

struct NormArgs {
  const void* x;
  const void* residual;  // null: plain LayerNorm
  const void* scale;
  const void* bias;  // may be null
  void* y;
  int64_t rows, n, x_rows, residual_rows;
  float eps;
  bool rms;
  Float8Out q;  // q.y null: no quantized copy
};

// The QFloat of T.
template <class T>
constexpr QFloat QFloatOfT() {
  return std::is_same<T, float>::value ? QFloat::kF32 : std::is_same<T, __half>::value ? QFloat::kF16 : QFloat::kBF16;
}

// The float8 codes of kE outputs (as stored in T), in pairs; `special` set when one needs the
// exact scalar path (QuantizedCopy).
template <class T, int kE>
__device__ __forceinline__ void QuantizeVector(const Float8Out& q, const T* v, uint16_t* pairs, bool& special) {
  float f[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e)
    f[e] = QFloatOfT<T>() == q.precision ? ToFloat(v[e]) : RoundTo(q.precision, ToFloat(v[e]));
  if (q.e5m2) {
#pragma unroll
    for (int e = 0; e < kE; e += 2)
      pairs[e / 2] = QuantizePairToFloat8<QType::kE5M2>(f[e], f[e + 1], q.scale, q.inv_scale, q.precision, special);
  } else {
#pragma unroll
    for (int e = 0; e < kE; e += 2)
      pairs[e / 2] = QuantizePairToFloat8<QType::kE4M3>(f[e], f[e + 1], q.scale, q.inv_scale, q.precision, special);
  }
}

// The float8 code of the output element v (as stored in T).
template <class T>
__device__ __forceinline__ uint8_t QuantizedCopy(const Float8Out& q, T v) {
  return q.e5m2 ? QuantizeToFloat8<QType::kE5M2>(v, q.scale, q.inv_scale, q.precision, q.saturate)
                : QuantizeToFloat8<QType::kE4M3>(v, q.scale, q.inv_scale, q.precision, q.saturate);
}

constexpr int kWarpRowsPerBlock = 4;
constexpr int kMaxVecsPerLane = 8;

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

// Element j of the row to normalise: x, or x + residual rounded to T.
template <class T>
__device__ __forceinline__ float Input(const T* x, const T* r, int64_t j) {
  return r ? ToFloat(FromFloat<T>(ToFloat(x[j]) + ToFloat(r[j]))) : ToFloat(x[j]);
}

// One block per row; two-pass (mean, then centred variance) for accuracy.
template <class T>
__global__ void LayerNormKernel(NormArgs a) {
  __shared__ float smem[32];
  const int64_t n = a.n;
  const T* row = static_cast<const T*>(a.x) + (blockIdx.x % a.x_rows) * n;
  const T* res = a.residual ? static_cast<const T*>(a.residual) + (blockIdx.x % a.residual_rows) * n : nullptr;
  const T* scale = static_cast<const T*>(a.scale);
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.y) + blockIdx.x * n;
  float mean = 0.f;
  if (!a.rms) {
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += Input(row, res, j);
    mean = BlockSum(s, smem) / static_cast<float>(n);
  }
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float d = Input(row, res, j) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(BlockSum(v, smem) / static_cast<float>(n) + a.eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float r = (Input(row, res, j) - mean) * inv * ToFloat(scale[j]);
    if (bias) r += ToFloat(bias[j]);
    out[j] = FromFloat<T>(r);
    if (a.q.y) static_cast<uint8_t*>(a.q.y)[blockIdx.x * n + j] = QuantizedCopy(a.q, out[j]);
  }
}

// One warp per row, the row in registers as kVecs 16-byte vectors per lane (vector c of the
// row is lane c % 32's number c / 32), kept packed in T (the sum x + residual is rounded to
// T anyway): 4 kVecs registers for the row, so short rows run at full occupancy. Every load
// of the row (x, residual, and scale/bias for short rows) is issued before the first
// reduction (scale/bias too when kEarlyAffine), so a warp has its bytes in flight at once. Needs n % (16 / sizeof(T))
// == 0 and aligned pointers.
template <class T, int kVecs, bool kEarlyAffine = (kVecs <= 4)>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock) WarpLayerNormKernel(NormArgs a) {
  constexpr int kE = 16 / sizeof(T);
  const int64_t row = blockIdx.x * int64_t(kWarpRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  const int chunks = static_cast<int>(a.n / kE);
  const int64_t xr = a.x_rows == a.rows ? row : row % a.x_rows;
  const T* x = static_cast<const T*>(a.x) + xr * a.n;
  const T* res = nullptr;
  if (a.residual)
    res = static_cast<const T*>(a.residual) + (a.residual_rows == a.rows ? row : row % a.residual_rows) * a.n;
  const uint4* scale = static_cast<const uint4*>(a.scale);
  const uint4* bias = static_cast<const uint4*>(a.bias);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 pk[kVecs], rv[kVecs], sv[kVecs], bv[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = lane + 32 * i;
    pk[i] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(x) + c) : zero;
  }
  if (res) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = lane + 32 * i;
      rv[i] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(res) + c) : zero;
    }
  }
  if (kEarlyAffine) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = lane + 32 * i;
      sv[i] = c < chunks ? __ldg(scale + c) : zero;
      bv[i] = c < chunks && bias ? __ldg(bias + c) : zero;
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    T* xe = reinterpret_cast<T*>(&pk[i]);
    if (res) {
      const T* re = reinterpret_cast<const T*>(&rv[i]);
#pragma unroll
      for (int e = 0; e < kE; ++e) xe[e] = FromFloat<T>(ToFloat(xe[e]) + ToFloat(re[e]));
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) sum += ToFloat(xe[e]);  // lanes past the row hold zeros
  }
  const float inv_n = 1.f / static_cast<float>(a.n);
  const float mean = a.rms ? 0.f : WarpSum(sum) * inv_n;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (lane + 32 * i < chunks) {
      const T* xe = reinterpret_cast<const T*>(&pk[i]);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float d = ToFloat(xe[e]) - mean;
        q += d * d;
      }
    }
  }
  const float inv = rsqrtf(WarpSum(q) * inv_n + a.eps);
  T* y = static_cast<T*>(a.y) + row * a.n;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = lane + 32 * i;
    if (c >= chunks) continue;
    if (!kEarlyAffine) {
      sv[i] = __ldg(scale + c);
      bv[i] = bias ? __ldg(bias + c) : zero;
    }
    const T* xe = reinterpret_cast<const T*>(&pk[i]);
    const T* se = reinterpret_cast<const T*>(&sv[i]);
    const T* be = reinterpret_cast<const T*>(&bv[i]);
    uint4 ov;
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int e = 0; e < kE; ++e) oe[e] = FromFloat<T>((ToFloat(xe[e]) - mean) * inv * ToFloat(se[e]) + ToFloat(be[e]));
    *reinterpret_cast<uint4*>(y + c * kE) = ov;
    if (a.q.y) {  // kE float8 codes: 8 or 4 bytes, aligned as the row offset is a multiple of kE
      union {
        uint8_t b[kE];
        uint16_t h[kE / 2];
        typename std::conditional<kE == 8, uint2, uint32_t>::type v;
      } qv;
      bool special = !a.q.saturate;
      if (!special) QuantizeVector<T, kE>(a.q, oe, qv.h, special);
      if (special) {
#pragma unroll
        for (int e = 0; e < kE; ++e) qv.b[e] = QuantizedCopy(a.q, oe[e]);
      }
      *reinterpret_cast<decltype(qv.v)*>(static_cast<uint8_t*>(a.q.y) + row * a.n + c * kE) = qv.v;
    }
  }
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <class T>
cudaError_t Norm(const NormArgs& a, cudaStream_t st) {
  if (a.rows * a.n == 0) return cudaSuccess;
  if (a.x_rows < 1 || (a.residual && a.residual_rows < 1)) return cudaErrorInvalidValue;
  constexpr int kE = 16 / sizeof(T);
  const bool vec = a.n % kE == 0 && Aligned16(a.x) && Aligned16(a.scale) && Aligned16(a.y) && Aligned16(a.q.y) &&
                   (!a.residual || Aligned16(a.residual)) && (!a.bias || Aligned16(a.bias));
  const int64_t per_lane = (a.n / kE + 31) / 32;
  if (vec && per_lane <= kMaxVecsPerLane) {
    const unsigned blocks = static_cast<unsigned>((a.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    const int threads = 32 * kWarpRowsPerBlock;
    if (per_lane <= 1)
      WarpLayerNormKernel<T, 1><<<blocks, threads, 0, st>>>(a);
    else if (per_lane <= 2)
      WarpLayerNormKernel<T, 2><<<blocks, threads, 0, st>>>(a);
    else if (per_lane <= 3)
      WarpLayerNormKernel<T, 3><<<blocks, threads, 0, st>>>(a);
    else if (per_lane <= 4)
      WarpLayerNormKernel<T, 4><<<blocks, threads, 0, st>>>(a);
    else if (per_lane <= 6)
      WarpLayerNormKernel<T, 6><<<blocks, threads, 0, st>>>(a);
    else
      WarpLayerNormKernel<T, 8><<<blocks, threads, 0, st>>>(a);
  } else {
    const int threads = a.n >= 2048 ? 512 : a.n >= 512 ? 256 : 128;
    LayerNormKernel<T><<<static_cast<unsigned>(a.rows), threads, 0, st>>>(a);
  }
  return cudaGetLastError();
}

cudaError_t Dispatch(FloatType t, const NormArgs& a, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF32:
      return Norm<float>(a, stream);
    case FloatType::kF16:
      return Norm<__half>(a, stream);
    case FloatType::kBF16:
      return Norm<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchLayerNorm(FloatType t, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                            int64_t n, float eps, bool rms, cudaStream_t stream, const Float8Out& q) {
  return Dispatch(t, NormArgs{x, nullptr, scale, bias, y, rows, n, rows, 1, eps, rms, q}, stream);
}

cudaError_t LaunchAddLayerNorm(FloatType t, const void* x, int64_t x_rows, const void* residual, int64_t residual_rows,
                               const void* scale, const void* bias, void* y, int64_t rows, int64_t n, float eps,
                               cudaStream_t stream, const Float8Out& q) {
  return Dispatch(t, NormArgs{x, residual, scale, bias, y, rows, n, x_rows, residual_rows, eps, false, q}, stream);
}

}  // namespace sampan::cuda
