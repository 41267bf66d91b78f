#include "backends/cpu/vec.h"

#include <limits>

#include "backends/cpu/isa.h"

namespace sampan::cpu::vec {

namespace {
// Eight floats: one AVX register in the x86-64-v3 clone, two SSE registers in the baseline one.
typedef float V8 __attribute__((vector_size(32)));
__attribute__((always_inline)) inline void Load8(V8* v, const float* p) {
  __builtin_memcpy(v, p, sizeof(V8));
}
__attribute__((always_inline)) inline void Store8(float* p, const V8& v) {
  __builtin_memcpy(p, &v, sizeof(V8));
}
typedef int32_t I8 __attribute__((vector_size(32)));

// Exp (vec.h) on eight lanes at once, written with vector types: the scalar one's
// clamps and floor keep GCC from vectorising a loop around it. Same constants.
__attribute__((always_inline)) inline void Exp8(const float* in, float* out) {
  V8 x;
  Load8(&x, in);
  x = x < -87.33654f ? V8{} - 87.33654f : x;
  x = x > 88.72283f ? V8{} + 88.72283f : x;
  const V8 t = x * 1.44269504088896341f + 0.5f;
  V8 n = __builtin_convertvector(__builtin_convertvector(t, I8), V8);  // truncation
  n = n > t ? n - 1.f : n;                                             // floor
  V8 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V8 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const I8 e = (__builtin_convertvector(n, I8) + 127) << 23;
  V8 scale;
  __builtin_memcpy(&scale, &e, sizeof(V8));
  const V8 y = p * scale;
  Store8(out, y);
}

// y[i] = exp(x[i] - shift)
__attribute__((always_inline)) inline void ExpShifted(const float* x, float shift, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float t[8];
    for (int j = 0; j < 8; ++j) t[j] = x[i + j] - shift;
    Exp8(t, y + i);
  }
  for (; i < n; ++i) y[i] = Exp(x[i] - shift);
}

// Reductions with eight partial results, so the compiler can keep them in one
// vector register (a plain float accumulator is a serial chain it may not reorder).
__attribute__((always_inline)) inline float Max8(const float* x, int64_t n) {
  float acc[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = -INFINITY;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < 8; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}
__attribute__((always_inline)) inline float Sum8(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += x[i];
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}
// sum((x - mean)^2)
__attribute__((always_inline)) inline float SquaredDeviation8(const float* x, float mean, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float d = x[i + j] - mean;
      acc[j] += d * d;
    }
  float s = 0.f;
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}
}  // namespace

__attribute__((always_inline)) inline void ExpInPlaceBody(float* x, int64_t n) {
  ExpShifted(x, 0.f, x, n);
}

__attribute__((always_inline)) inline void SoftmaxRowBody(const float* x, float* y, int64_t n) {
  float m = Max8(x, n);
  if (std::isinf(m) && m < 0) m = 0.f;  // all -inf: exp gives 0s, the division NaNs like the reference
  ExpShifted(x, m, y, n);
  const float inv = 1.f / Sum8(y, n);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

__attribute__((always_inline)) inline void AttentionSoftmaxRowBody(float* s, int64_t n, float scale, const float* mask,
                                                                   int64_t mask_stride) {
  if (mask == nullptr) {
    for (int64_t i = 0; i < n; ++i) s[i] *= scale;
  } else if (mask_stride == 1) {
    for (int64_t i = 0; i < n; ++i) s[i] = s[i] * scale + mask[i];
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = s[i] * scale + mask[i * mask_stride];
  }
  const float m = Max8(s, n);
  float sum = 0.f;
  if (!(std::isinf(m) && m < 0)) {
    ExpShifted(s, m, s, n);
    sum = Sum8(s, n);
  }
  if (!(sum > 0.f) || std::isnan(sum)) {
    for (int64_t i = 0; i < n; ++i) s[i] = 0.f;
    return;
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) s[i] *= inv;
}

__attribute__((always_inline)) inline void LayerNormRowBody(const float* x, const float* scale, const float* bias,
                                                            float eps, float* y, int64_t n) {
  const float mean = Sum8(x, n) / static_cast<float>(n);
  const float var = SquaredDeviation8(x, mean, n);
  const float rstd = 1.f / std::sqrt(var / static_cast<float>(n) + eps);
  if (bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * scale[i];
  }
}

// y = LayerNorm(a + b): the sum, rounded to float as Add then LayerNormalization round it, is
// written to y and summed in the same pass, then normalised in place (the row stays in L1).
__attribute__((always_inline)) inline void AddLayerNormRowBody(const float* a, const float* b, const float* scale,
                                                               const float* bias, float eps, float* y, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float s = a[i + j] + b[i + j];
      y[i + j] = s;
      acc[j] += s;
    }
  float sum = 0.f;
  for (; i < n; ++i) {
    y[i] = a[i] + b[i];
    sum += y[i];
  }
  for (int j = 0; j < 8; ++j) sum += acc[j];
  const float mean = sum / static_cast<float>(n);
  const float var = SquaredDeviation8(y, mean, n);
  const float rstd = 1.f / std::sqrt(var / static_cast<float>(n) + eps);
  if (bias) {
    for (int64_t k = 0; k < n; ++k) y[k] = (y[k] - mean) * rstd * scale[k] + bias[k];
  } else {
    for (int64_t k = 0; k < n; ++k) y[k] = (y[k] - mean) * rstd * scale[k];
  }
}

// Register tiles: R rows x 16 columns, the reduction innermost. Wide (the AVX-512 compilation):
// one 16-float vector per row, a ZMM register; otherwise two 8-float vectors per row (YMM in
// the AVX2 compilation; GCC spills a 16-float vector there). Always inlined, so each
// compilation of the callers gets its own code for them.
typedef float V16 __attribute__((vector_size(64)));
__attribute__((always_inline)) inline void Load16(V16* v, const float* p) {
  __builtin_memcpy(v, p, sizeof(V16));
}
__attribute__((always_inline)) inline void Store16(float* p, const V16& v) {
  __builtin_memcpy(p, &v, sizeof(V16));
}

template <int R, bool kWide>
__attribute__((always_inline)) inline void ScoresTile(const float* q, int64_t qs, int64_t qt, const float* kt,
                                                      int64_t d, int64_t sk, int64_t j, float* s) {
  if constexpr (kWide) {
    V16 a[R] = {};
    for (int64_t t = 0; t < d; ++t) {
      V16 k;
      Load16(&k, kt + t * sk + j);
      for (int r = 0; r < R; ++r) a[r] += q[r * qs + t * qt] * k;
    }
    for (int r = 0; r < R; ++r) Store16(s + r * sk + j, a[r]);
  } else {
    V8 a[R][2] = {};
    for (int64_t t = 0; t < d; ++t) {
      V8 k0, k1;
      Load8(&k0, kt + t * sk + j);
      Load8(&k1, kt + t * sk + j + 8);
      for (int r = 0; r < R; ++r) {
        const float qv = q[r * qs + t * qt];
        a[r][0] += qv * k0;
        a[r][1] += qv * k1;
      }
    }
    for (int r = 0; r < R; ++r) {
      Store8(s + r * sk + j, a[r][0]);
      Store8(s + r * sk + j + 8, a[r][1]);
    }
  }
}

template <int R, bool kWide>
__attribute__((always_inline)) inline void ContextTile(const float* p, int64_t sk, const float* v, int64_t vs,
                                                       int64_t c, float* y, int64_t ys) {
  if constexpr (kWide) {
    V16 a[R] = {};
    for (int64_t j = 0; j < sk; ++j) {
      V16 vv;
      Load16(&vv, v + j * vs + c);
      for (int r = 0; r < R; ++r) a[r] += p[r * sk + j] * vv;
    }
    for (int r = 0; r < R; ++r) Store16(y + r * ys + c, a[r]);
  } else {
    V8 a[R][2] = {};
    for (int64_t j = 0; j < sk; ++j) {
      V8 v0, v1;
      Load8(&v0, v + j * vs + c);
      Load8(&v1, v + j * vs + c + 8);
      for (int r = 0; r < R; ++r) {
        const float pv = p[r * sk + j];
        a[r][0] += pv * v0;
        a[r][1] += pv * v1;
      }
    }
    for (int r = 0; r < R; ++r) {
      Store8(y + r * ys + c, a[r][0]);
      Store8(y + r * ys + c + 8, a[r][1]);
    }
  }
}

template <bool kWide>
__attribute__((always_inline)) inline void AttentionScoresBody(const float* q, int64_t qs, int64_t qt, int rows,
                                                               const float* kt, int64_t d, int64_t sk, float* s) {
  int64_t j = 0;
  for (; j + 16 <= sk; j += 16) {
    switch (rows) {
      case 4:
        ScoresTile<4, kWide>(q, qs, qt, kt, d, sk, j, s);
        break;
      case 3:
        ScoresTile<3, kWide>(q, qs, qt, kt, d, sk, j, s);
        break;
      case 2:
        ScoresTile<2, kWide>(q, qs, qt, kt, d, sk, j, s);
        break;
      default:
        ScoresTile<1, kWide>(q, qs, qt, kt, d, sk, j, s);
        break;
    }
  }
  for (; j < sk; ++j)
    for (int r = 0; r < rows; ++r) {
      float acc = 0.f;
      for (int64_t t = 0; t < d; ++t) acc += q[r * qs + t * qt] * kt[t * sk + j];
      s[r * sk + j] = acc;
    }
}

template <bool kWide>
__attribute__((always_inline)) inline void AttentionContextBody(const float* p, int rows, int64_t sk, const float* v,
                                                                int64_t vs, int64_t dv, float* y, int64_t ys) {
  int64_t c = 0;
  for (; c + 16 <= dv; c += 16) {
    switch (rows) {
      case 4:
        ContextTile<4, kWide>(p, sk, v, vs, c, y, ys);
        break;
      case 3:
        ContextTile<3, kWide>(p, sk, v, vs, c, y, ys);
        break;
      case 2:
        ContextTile<2, kWide>(p, sk, v, vs, c, y, ys);
        break;
      default:
        ContextTile<1, kWide>(p, sk, v, vs, c, y, ys);
        break;
    }
  }
  if (c < dv) {
    for (int r = 0; r < rows; ++r)
      for (int64_t i = c; i < dv; ++i) y[r * ys + i] = 0.f;
    for (int64_t j = 0; j < sk; ++j)
      for (int r = 0; r < rows; ++r) {
        const float pj = p[r * sk + j];
        for (int64_t i = c; i < dv; ++i) y[r * ys + i] += pj * v[j * vs + i];
      }
  }
}

__attribute__((always_inline)) inline float DotBody(const float* a, const float* b, int64_t n) {
  // Eight partial sums let the compiler keep one vector accumulator.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}

__attribute__((always_inline)) inline void AxpyBody(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

namespace {
// round_half_even(v) saturated to [lo, hi] (integers): clamp first, then 1.5 * 2^23 added and
// taken away rounds exactly (|v| is small); plain arithmetic, so loops around it vectorize.
__attribute__((always_inline)) inline float RoundClamp(float v, float lo, float hi) {
  constexpr float kMagic = 12582912.f;
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return (v + kMagic) - kMagic;
}

template <class T>
__attribute__((always_inline)) inline void QuantizeImpl(const float* __restrict x, float s, int32_t zp, T* __restrict y,
                                                        int64_t n) {
  const float z = static_cast<float>(zp);
  const float lo = static_cast<float>(std::numeric_limits<T>::lowest()) - z;
  const float hi = static_cast<float>(std::numeric_limits<T>::max()) - z;
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<int32_t>(RoundClamp(x[i] / s, lo, hi) + z));
}

template <class T>
__attribute__((always_inline)) inline void DequantizeImpl(const T* __restrict q, float s, int32_t zp,
                                                          float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int32_t>(q[i]) - zp) * s;
}

template <class T>
__attribute__((always_inline)) inline void QAddImpl(const T* __restrict a, float sa, int32_t za, const T* __restrict b,
                                                    float sb, int32_t zb, float sc, int32_t zc, T* __restrict c,
                                                    int64_t n) {
  const float z = static_cast<float>(zc);
  const float lo = static_cast<float>(std::numeric_limits<T>::lowest()) - z;
  const float hi = static_cast<float>(std::numeric_limits<T>::max()) - z;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int32_t>(a[i]) - za) * sa +
                    static_cast<float>(static_cast<int32_t>(b[i]) - zb) * sb;
    c[i] = static_cast<T>(static_cast<int32_t>(RoundClamp(v / sc, lo, hi) + z));
  }
}
}  // namespace

__attribute__((always_inline)) inline void QuantizeU8Body(const float* x, float s, int32_t zp, uint8_t* y, int64_t n) {
  QuantizeImpl(x, s, zp, y, n);
}
__attribute__((always_inline)) inline void QuantizeS8Body(const float* x, float s, int32_t zp, int8_t* y, int64_t n) {
  QuantizeImpl(x, s, zp, y, n);
}
__attribute__((always_inline)) inline void DequantizeU8Body(const uint8_t* q, float s, int32_t zp, float* x,
                                                            int64_t n) {
  DequantizeImpl(q, s, zp, x, n);
}
__attribute__((always_inline)) inline void DequantizeS8Body(const int8_t* q, float s, int32_t zp, float* x, int64_t n) {
  DequantizeImpl(q, s, zp, x, n);
}
__attribute__((always_inline)) inline void QAddU8Body(const uint8_t* a, float sa, int32_t za, const uint8_t* b,
                                                      float sb, int32_t zb, float sc, int32_t zc, uint8_t* c,
                                                      int64_t n) {
  QAddImpl(a, sa, za, b, sb, zb, sc, zc, c, n);
}
__attribute__((always_inline)) inline void QAddS8Body(const int8_t* a, float sa, int32_t za, const int8_t* b, float sb,
                                                      int32_t zb, float sc, int32_t zc, int8_t* c, int64_t n) {
  QAddImpl(a, sa, za, b, sb, zb, sc, zc, c, n);
}

// The entry points: each body compiled for baseline x86-64, AVX2 and AVX-512 (isa.h).
SP_ISA_DISPATCH(void, ExpInPlace, (float* x, int64_t n), (x, n))
SP_ISA_DISPATCH(void, SoftmaxRow, (const float* x, float* y, int64_t n), (x, y, n))
SP_ISA_DISPATCH(void, AttentionSoftmaxRow, (float* s, int64_t n, float scale, const float* mask, int64_t mask_stride),
                (s, n, scale, mask, mask_stride))
SP_ISA_DISPATCH(void, LayerNormRow,
                (const float* x, const float* scale, const float* bias, float eps, float* y, int64_t n),
                (x, scale, bias, eps, y, n))
SP_ISA_DISPATCH(void, AddLayerNormRow,
                (const float* a, const float* b, const float* scale, const float* bias, float eps, float* y, int64_t n),
                (a, b, scale, bias, eps, y, n))
SP_ISA_DISPATCH_WIDE(void, AttentionScores,
                     (const float* q, int64_t qs, int64_t qt, int rows, const float* kt, int64_t d, int64_t sk,
                      float* s),
                     (q, qs, qt, rows, kt, d, sk, s))
SP_ISA_DISPATCH_WIDE(void, AttentionContext,
                     (const float* p, int rows, int64_t sk, const float* v, int64_t vs, int64_t dv, float* y,
                      int64_t ys),
                     (p, rows, sk, v, vs, dv, y, ys))
SP_ISA_DISPATCH(float, Dot, (const float* a, const float* b, int64_t n), (a, b, n))
SP_ISA_DISPATCH(void, Axpy, (float a, const float* x, float* y, int64_t n), (a, x, y, n))
SP_ISA_DISPATCH(void, QuantizeU8, (const float* x, float s, int32_t zp, uint8_t* y, int64_t n), (x, s, zp, y, n))
SP_ISA_DISPATCH(void, QuantizeS8, (const float* x, float s, int32_t zp, int8_t* y, int64_t n), (x, s, zp, y, n))
SP_ISA_DISPATCH(void, DequantizeU8, (const uint8_t* q, float s, int32_t zp, float* x, int64_t n), (q, s, zp, x, n))
SP_ISA_DISPATCH(void, DequantizeS8, (const int8_t* q, float s, int32_t zp, float* x, int64_t n), (q, s, zp, x, n))
SP_ISA_DISPATCH(void, QAddU8,
                (const uint8_t* a, float sa, int32_t za, const uint8_t* b, float sb, int32_t zb, float sc, int32_t zc,
                 uint8_t* c, int64_t n),
                (a, sa, za, b, sb, zb, sc, zc, c, n))
SP_ISA_DISPATCH(void, QAddS8,
                (const int8_t* a, float sa, int32_t za, const int8_t* b, float sb, int32_t zb, float sc, int32_t zc,
                 int8_t* c, int64_t n),
                (a, sa, za, b, sb, zb, sc, zc, c, n))

}  // namespace sampan::cpu::vec
