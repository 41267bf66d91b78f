#include <cuda_fp8.h>

#include <limits>
#include <type_traits>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/quantize.h"
#include "backends/cuda/quantize_math.cuh"

namespace sampan::cuda {
namespace {

// Storage of each quantized type (float8 as its bits).
template <QType T>
struct QTraits {
  using type = uint8_t;
};
template <>
struct QTraits<QType::kI8> {
  using type = int8_t;
};
template <>
struct QTraits<QType::kI16> {
  using type = int16_t;
};
template <>
struct QTraits<QType::kU16> {
  using type = uint16_t;
};
template <>
struct QTraits<QType::kI32> {
  using type = int32_t;
};
template <QType T>
using QS = typename QTraits<T>::type;
template <QType T>
constexpr bool kFp8 = T == QType::kE4M3 || T == QType::kE5M2;

template <QType T>
__device__ __forceinline__ float QToFloat(QS<T> v) {
  if constexpr (T == QType::kE4M3)
    return E4M3ToFloat(v);
  else if constexpr (T == QType::kE5M2)
    return E5M2ToFloat(v);
  else if constexpr (T == QType::kI32)
    return __int2float_rn(v);
  else
    return static_cast<float>(v);
}

template <class X, QType T>
struct QuantizeOp {
  const void* scale;
  const QS<T>* zp;
  QFloat scale_t, prec;
  bool has_zp, saturate;
  struct Chan {
    float s, z, inv;
  };
  // The scale rounded to the quotient type (and its reciprocal, for float8); the zero point as
  // float (exact: at most 16 bits).
  __device__ __forceinline__ Chan Channel(int64_t a) const {
    Chan c{RoundTo(prec, LoadScale(scale, scale_t, a)), 0.f, 0.f};
    if constexpr (kFp8<T>) c.inv = DivRnReciprocal(c.s);
    if constexpr (!kFp8<T>) c.z = has_zp ? static_cast<float>(zp[a]) : 0.f;
    return c;
  }
  //! Eight values with one channel (per-tensor scales): float8 codes in pairs
  //! (QuantizePairToFloat8) when saturating, the exact scalar path for NaN quotients.
  static constexpr bool kVec8 = kFp8<T>;
  __device__ __forceinline__ void Vec8(const X (&x)[8], QS<T> (&y)[8], const Chan& c) const {
    bool special = !saturate;
    if (!special) {
      uint16_t* pairs = reinterpret_cast<uint16_t*>(y);
#pragma unroll
      for (int j = 0; j < 8; j += 2)
        pairs[j / 2] = QuantizePairToFloat8<T>(RoundTo(prec, Widen(x[j])), RoundTo(prec, Widen(x[j + 1])), c.s, c.inv,
                                               prec, special);
    }
    if (special) {
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = (*this)(x[j], c);
    }
  }
  __device__ __forceinline__ QS<T> operator()(X x, const Chan& c) const {
    if constexpr (kFp8<T>) {
      return QuantizeToFloat8<T>(x, c.s, c.inv, prec, saturate);  // a float8 zero point is 0 and not added
    } else {
      const float xp = RoundTo(prec, Widen(x));
      const float q = RoundTo(prec, __fdiv_rn(xp, c.s));
      // round(q) + zp: exact while the sum can land in range (|round(q)| < 2^24), and beyond
      // that saturating either way.
      float v = __fadd_rn(rintf(q), c.z);
      if (isnan(v)) v = 0.f;
      v = fminf(fmaxf(v, static_cast<float>(std::numeric_limits<QS<T>>::lowest())),
                static_cast<float>(std::numeric_limits<QS<T>>::max()));
      return static_cast<QS<T>>(static_cast<int>(v));
    }
  }
};

template <QType T, class Y>
struct DequantizeOp {
  const void* scale;
  const QS<T>* zp;
  QFloat scale_t;
  bool has_zp;
  struct Chan {
    float s;
    QS<T> z;
  };
  __device__ __forceinline__ Chan Channel(int64_t a) const {
    return Chan{LoadScale(scale, scale_t, a), has_zp ? zp[a] : QS<T>(0)};
  }
  __device__ __forceinline__ Y operator()(QS<T> x, const Chan& c) const {
    const float xf = QToFloat<T>(x);
    if constexpr (T == QType::kI32) {
      if (has_zp) {  // the difference in float64 (x first rounded to float32), and the product
        const double d = __dsub_rn(static_cast<double>(xf), static_cast<double>(c.z));
        return FromFloat<Y>(__double2float_rn(__dmul_rn(d, static_cast<double>(c.s))));
      }
    }
    return FromFloat<Y>(__fmul_rn(__fsub_rn(xf, QToFloat<T>(c.z)), c.s));
  }
};

// 8 elements to or from registers with one (8 or 16 bytes) or two (32 bytes) vector accesses.
template <class T>
__device__ __forceinline__ void Load8(const T* p, T (&v)[8]) {
  constexpr size_t bytes = 8 * sizeof(T);
  if constexpr (bytes == 8) {
    *reinterpret_cast<uint2*>(v) = *reinterpret_cast<const uint2*>(p);
  } else if constexpr (bytes == 16) {
    *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(p);
  } else {
    static_assert(bytes == 32);
    reinterpret_cast<uint4*>(v)[0] = reinterpret_cast<const uint4*>(p)[0];
    reinterpret_cast<uint4*>(v)[1] = reinterpret_cast<const uint4*>(p)[1];
  }
}
template <class T>
__device__ __forceinline__ void Store8(T* p, const T (&v)[8]) {
  constexpr size_t bytes = 8 * sizeof(T);
  if constexpr (bytes == 8) {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(v);
  } else if constexpr (bytes == 16) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
  } else {
    static_assert(bytes == 32);
    reinterpret_cast<uint4*>(p)[0] = reinterpret_cast<const uint4*>(v)[0];
    reinterpret_cast<uint4*>(p)[1] = reinterpret_cast<const uint4*>(v)[1];
  }
}

// Whether Op has an eight-value form (Vec8) for per-tensor channels.
template <class Op, class = void>
struct VecOp : std::false_type {};
template <class Op>
struct VecOp<Op, std::void_t<decltype(Op::kVec8)>> : std::integral_constant<bool, Op::kVec8> {};

struct Channels {
  bool per_axis;
  int64_t inner, axis_len;
};

// y[i] = op(x[i], channel of i): `chunks` groups of 8 elements with vector accesses, then the
// remaining elements (all of them when chunks is 0) one at a time; grid-stride loops.
template <class In, class Out, class Op>
__global__ void __launch_bounds__(kThreads)
    MapKernel(const In* __restrict__ x, Out* __restrict__ y, int64_t n, int64_t chunks, Channels ch, Op op) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  typename Op::Chan c = op.Channel(0);
  for (int64_t k = t0; k < chunks; k += stride) {
    const int64_t i = 8 * k;
    alignas(16) In xv[8];
    alignas(16) Out yv[8];
    Load8(x + i, xv);
    if (!ch.per_axis) {
      if constexpr (VecOp<Op>::value) {
        op.Vec8(xv, yv, c);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) yv[j] = op(xv[j], c);
      }
    } else {
      int64_t a = (i / ch.inner) % ch.axis_len, r = i % ch.inner, loaded = -1;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (a != loaded) c = op.Channel(loaded = a);
        yv[j] = op(xv[j], c);
        if (++r == ch.inner) {
          r = 0;
          if (++a == ch.axis_len) a = 0;
        }
      }
    }
    Store8(y + i, yv);
  }
  for (int64_t i = 8 * chunks + t0; i < n; i += stride)
    y[i] = op(x[i], ch.per_axis ? op.Channel((i / ch.inner) % ch.axis_len) : c);
}

bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % (bytes < 16 ? bytes : 16) == 0;
}

template <class In, class Out, class Op>
cudaError_t Map(const QuantParams& p, const void* x, void* y, const Op& op, cudaStream_t stream) {
  const bool vec = Aligned(x, 8 * sizeof(In)) && Aligned(y, 8 * sizeof(Out));
  const int64_t chunks = vec ? p.n / 8 : 0;
  const Channels ch{p.per_axis, p.per_axis ? p.inner : 1, p.per_axis ? p.axis_len : 1};
  MapKernel<In, Out, Op><<<GridFor(chunks > 0 ? chunks : p.n), kThreads, 0, stream>>>(
      static_cast<const In*>(x), static_cast<Out*>(y), p.n, chunks, ch, op);
  return cudaGetLastError();
}

template <class X, QType T>
cudaError_t Quantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y, cudaStream_t st) {
  const QuantizeOp<X, T> op{scale,       static_cast<const QS<T>*>(zp), p.scale,
                            p.precision, p.has_zp && zp != nullptr,     p.saturate};
  return Map<X, QS<T>>(p, x, y, op, st);
}

template <class X>
cudaError_t QuantizeFrom(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                         cudaStream_t st) {
  switch (p.q) {
    case QType::kI8:
      return Quantize<X, QType::kI8>(p, x, scale, zp, y, st);
    case QType::kU8:
      return Quantize<X, QType::kU8>(p, x, scale, zp, y, st);
    case QType::kI16:
      return Quantize<X, QType::kI16>(p, x, scale, zp, y, st);
    case QType::kU16:
      return Quantize<X, QType::kU16>(p, x, scale, zp, y, st);
    case QType::kE4M3:
      return Quantize<X, QType::kE4M3>(p, x, scale, zp, y, st);
    case QType::kE5M2:
      return Quantize<X, QType::kE5M2>(p, x, scale, zp, y, st);
    case QType::kI32:
      break;
  }
  return cudaErrorInvalidValue;
}

template <QType T, class Y>
cudaError_t Dequantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                       cudaStream_t st) {
  const DequantizeOp<T, Y> op{scale, static_cast<const QS<T>*>(zp), p.scale, p.has_zp && zp != nullptr};
  return Map<QS<T>, Y>(p, x, y, op, st);
}

template <QType T>
cudaError_t DequantizeFrom(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                           cudaStream_t st) {
  switch (p.y) {
    case QFloat::kF32:
      return Dequantize<T, float>(p, x, scale, zp, y, st);
    case QFloat::kF16:
      return Dequantize<T, __half>(p, x, scale, zp, y, st);
    case QFloat::kBF16:
      return Dequantize<T, __nv_bfloat16>(p, x, scale, zp, y, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchQuantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                           cudaStream_t stream) {
  if (p.n == 0) return cudaSuccess;
  if (p.per_axis && (p.inner < 1 || p.axis_len < 1)) return cudaErrorInvalidValue;
  switch (p.x) {
    case QFloat::kF32:
      return QuantizeFrom<float>(p, x, scale, zp, y, stream);
    case QFloat::kF16:
      return QuantizeFrom<__half>(p, x, scale, zp, y, stream);
    case QFloat::kBF16:
      return QuantizeFrom<__nv_bfloat16>(p, x, scale, zp, y, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchDequantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                             cudaStream_t stream) {
  if (p.n == 0) return cudaSuccess;
  if (p.per_axis && (p.inner < 1 || p.axis_len < 1)) return cudaErrorInvalidValue;
  switch (p.q) {
    case QType::kI8:
      return DequantizeFrom<QType::kI8>(p, x, scale, zp, y, stream);
    case QType::kU8:
      return DequantizeFrom<QType::kU8>(p, x, scale, zp, y, stream);
    case QType::kI16:
      return DequantizeFrom<QType::kI16>(p, x, scale, zp, y, stream);
    case QType::kU16:
      return DequantizeFrom<QType::kU16>(p, x, scale, zp, y, stream);
    case QType::kI32:
      return DequantizeFrom<QType::kI32>(p, x, scale, zp, y, stream);
    case QType::kE4M3:
      return DequantizeFrom<QType::kE4M3>(p, x, scale, zp, y, stream);
    case QType::kE5M2:
      return DequantizeFrom<QType::kE5M2>(p, x, scale, zp, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
