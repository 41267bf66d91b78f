#include "backends/cpu/packed_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/isa.h"

// GCC 12 warns inside its own AVX-512 headers (an intrinsic's "undefined" pass-through operand, __Y)
// wherever they are inlined: a false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sampan::cpu {
namespace {

#define SP_AVX2 __attribute__((target("avx2,fma")))

constexpr int64_t kMr = 6;      // rows of X per micro-kernel call (AVX2: 12 YMM accumulators)
constexpr int64_t kMr512 = 12;  // the same on AVX-512 (12 ZMM accumulators)
constexpr int64_t kNr = 16;     // columns of W per panel (two AVX registers)
// W is prefetched this far ahead on a panel's first pass (it streams from memory in a network).
constexpr int64_t kPrefetchFloats = 256;
// Target bytes of the X rows one block of row groups covers (L2 is 512 KiB here).
constexpr int64_t kBlockBytes = int64_t{192} << 10;

int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

float* AllocFloats(size_t n) {
  const size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  return static_cast<float*>(std::aligned_alloc(64, bytes));
}

struct Epilogue {
  GemmAct act;
  float p0, p1;
};

// exp(x) with vec::Exp's range reduction and polynomial (vec.h), eight lanes.
SP_AVX2 inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 0.5 x (1 + erf(x / sqrt(2))), erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, the
// approximation oneDNN's gelu_erf uses too).
SP_AVX2 inline __m256 GeluErf8(__m256 x) {
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
  const __m256 sign = _mm256_and_ps(z, _mm256_set1_ps(-0.f));
  const __m256 az = _mm256_andnot_ps(_mm256_set1_ps(-0.f), z);
  // t = 1 / d by the approximate reciprocal and one Newton step (~23 bits; a division is 5x slower).
  const __m256 d = _mm256_fmadd_ps(az, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.f));
  __m256 t = _mm256_rcp_ps(d);
  t = _mm256_mul_ps(t, _mm256_fnmadd_ps(d, t, _mm256_set1_ps(2.f)));
  __m256 poly = _mm256_set1_ps(1.061405429f);
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-1.453152027f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
  poly = _mm256_mul_ps(poly, t);
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(az, az)));
  const __m256 erf = _mm256_or_ps(_mm256_fnmadd_ps(poly, e, _mm256_set1_ps(1.f)), sign);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.f), erf));
}

SP_AVX2 inline __m256 Activate(__m256 v, const Epilogue& ep) {
  const __m256 zero = _mm256_setzero_ps();
  switch (ep.act) {
    case GemmAct::kNone:
      return v;
    case GemmAct::kRelu:
      return _mm256_max_ps(v, zero);
    case GemmAct::kLeakyRelu:
      return _mm256_blendv_ps(_mm256_mul_ps(v, _mm256_set1_ps(ep.p0)), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
    case GemmAct::kClip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.p0)), _mm256_set1_ps(ep.p1));
    case GemmAct::kGelu:
      return GeluErf8(v);
    case GemmAct::kHardSigmoid: {
      const __m256 t = _mm256_fmadd_ps(v, _mm256_set1_ps(ep.p0), _mm256_set1_ps(ep.p1));
      return _mm256_min_ps(_mm256_max_ps(t, zero), _mm256_set1_ps(1.f));
    }
  }
  return v;
}

// y[r][0..ncols) = act(bias + sum_i x[r * k + i] * b[i * 16 + 0..15]) for r < R.
template <int R, bool kPrefetch>
SP_AVX2 void Micro(const float* x, const float* b, int64_t k, const float* bias, const Epilogue& ep, float* y,
                   int64_t ldy, int ncols) {
  __m256 acc[R][2];
  const __m256 bias0 = _mm256_load_ps(bias), bias1 = _mm256_load_ps(bias + 8);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc[r][0] = bias0;
    acc[r][1] = bias1;
  }
  for (int64_t i = 0; i < k; ++i) {
    const __m256 b0 = _mm256_load_ps(b + i * kNr), b1 = _mm256_load_ps(b + i * kNr + 8);
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(b + i * kNr + kPrefetchFloats), _MM_HINT_T0);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 v = _mm256_broadcast_ss(x + r * k + i);
      acc[r][0] = _mm256_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(v, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    const __m256 v0 = Activate(acc[r][0], ep), v1 = Activate(acc[r][1], ep);
    if (ncols == kNr) {
      _mm256_storeu_ps(y + r * ldy, v0);
      _mm256_storeu_ps(y + r * ldy + 8, v1);
    } else {
      alignas(32) float t[kNr];
      _mm256_store_ps(t, v0);
      _mm256_store_ps(t + 8, v1);
      std::memcpy(y + r * ldy, t, sizeof(float) * static_cast<size_t>(ncols));
    }
  }
}

template <bool kPrefetch>
SP_AVX2 void MicroRows(int rows, const float* x, const float* b, int64_t k, const float* bias, const Epilogue& ep,
                       float* y, int64_t ldy, int ncols) {
  switch (rows) {
    case 6:
      Micro<6, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 5:
      Micro<5, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 4:
      Micro<4, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 3:
      Micro<3, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 2:
      Micro<2, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    default:
      Micro<1, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
  }
}

// ---- AVX-512: the same panels, one ZMM register (16 columns) per row, 12 rows a group ----

// Exp8 on sixteen lanes (same reduction and polynomial).
SP_TARGET_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.72283f));
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// GeluErf8 on sixteen lanes (the reciprocal from rcp14 and one Newton step).
SP_TARGET_AVX512 inline __m512 GeluErf16(__m512 x) {
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  const __m512 sign = _mm512_and_ps(z, _mm512_set1_ps(-0.f));
  const __m512 az = _mm512_andnot_ps(_mm512_set1_ps(-0.f), z);
  const __m512 d = _mm512_fmadd_ps(az, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.f));
  __m512 t = _mm512_rcp14_ps(d);
  t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2.f)));
  __m512 poly = _mm512_set1_ps(1.061405429f);
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  poly = _mm512_mul_ps(poly, t);
  const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(az, az)));
  const __m512 erf = _mm512_or_ps(_mm512_fnmadd_ps(poly, e, _mm512_set1_ps(1.f)), sign);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.f), erf));
}

SP_TARGET_AVX512 inline __m512 Activate16(__m512 v, const Epilogue& ep) {
  const __m512 zero = _mm512_setzero_ps();
  switch (ep.act) {
    case GemmAct::kNone:
      return v;
    case GemmAct::kRelu:
      return _mm512_max_ps(v, zero);
    case GemmAct::kLeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(ep.p0));
    case GemmAct::kClip:
      return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.p0)), _mm512_set1_ps(ep.p1));
    case GemmAct::kGelu:
      return GeluErf16(v);
    case GemmAct::kHardSigmoid: {
      const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(ep.p0), _mm512_set1_ps(ep.p1));
      return _mm512_min_ps(_mm512_max_ps(t, zero), _mm512_set1_ps(1.f));
    }
  }
  return v;
}

// Micro on ZMM registers: R rows x 16 columns, each k step one panel row loaded and R
// broadcast-FMAs (the broadcast folded into the FMA's memory operand).
template <int R, bool kPrefetch>
SP_TARGET_AVX512 void Micro16(const float* x, const float* b, int64_t k, const float* bias, const Epilogue& ep,
                              float* y, int64_t ldy, int ncols) {
  __m512 acc[R];
  const __m512 bias0 = _mm512_load_ps(bias);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r] = bias0;
  for (int64_t i = 0; i < k; ++i) {
    const __m512 b0 = _mm512_load_ps(b + i * kNr);
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(b + i * kNr + kPrefetchFloats), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * k + i]), b0, acc[r]);
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << ncols) - 1u);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    const __m512 v = Activate16(acc[r], ep);
    if (ncols == kNr)
      _mm512_storeu_ps(y + r * ldy, v);
    else
      _mm512_mask_storeu_ps(y + r * ldy, mask, v);
  }
}

template <bool kPrefetch>
SP_TARGET_AVX512 void MicroRows16(int rows, const float* x, const float* b, int64_t k, const float* bias,
                                  const Epilogue& ep, float* y, int64_t ldy, int ncols) {
  switch (rows) {
    case 12:
      Micro16<12, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 11:
      Micro16<11, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 10:
      Micro16<10, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 9:
      Micro16<9, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 8:
      Micro16<8, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 7:
      Micro16<7, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 6:
      Micro16<6, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 5:
      Micro16<5, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 4:
      Micro16<4, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 3:
      Micro16<3, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    case 2:
      Micro16<2, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
    default:
      Micro16<1, kPrefetch>(x, b, k, bias, ep, y, ldy, ncols);
      break;
  }
}

// One call of the variant's micro-kernel over `rows` rows of a group.
template <bool kPrefetch>
void RunGroup(bool avx512, int rows, const float* x, const float* b, int64_t k, const float* bias, const Epilogue& ep,
              float* y, int64_t ldy, int ncols) {
  if (avx512)
    MicroRows16<kPrefetch>(rows, x, b, k, bias, ep, y, ldy, ncols);
  else
    MicroRows<kPrefetch>(rows, x, b, k, bias, ep, y, ldy, ncols);
}

}  // namespace

void PackedWeights::Free::operator()(float* p) const {
  std::free(p);
}

PackedWeights::PackedWeights(const float* w, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                             const float* bias, int64_t bias_n)
    : k_(k), n_(n) {
  const int64_t p = panels();
  w_.reset(AllocFloats(static_cast<size_t>(p * k * kNr)));
  bias_.reset(AllocFloats(static_cast<size_t>(p * kNr)));
  float* dst = w_.get();
  for (int64_t pn = 0; pn < p; ++pn)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < kNr; ++j) {
        const int64_t col = pn * kNr + j;
        dst[(pn * k + i) * kNr + j] = col < n ? w[i * stride_k + col * stride_n] : 0.f;
      }
  for (int64_t col = 0; col < p * kNr; ++col)
    bias_.get()[col] = bias == nullptr || col >= n ? 0.f : bias[bias_n == 1 ? 0 : col];
}

bool PackedGemm::CpuSupported() {
#if defined(__x86_64__) && defined(__GNUC__)
  return static_cast<int>(KernelVariant()) >= static_cast<int>(Isa::kAvx2);
#else
  return false;
#endif
}

PackedGemm::PackedGemm(std::shared_ptr<const PackedWeights> w, int64_t m, GemmAct act, float p0, float p1, int threads)
    : w_(std::move(w)), m_(m), act_(act), p0_(p0), p1_(p1), threads_(std::max(1, threads)) {
  avx512_ = KernelVariant() == Isa::kAvx512;
  mr_ = avx512_ ? kMr512 : kMr;
  groups_ = CeilDiv(m, mr_);
  // Rows are taken in blocks whose X rows (block x K floats) stay in L2 while every
  // panel of the thread passes over them: X is read from L3 once per thread, not once
  // per panel (measured: 5-10% faster for M = 1024, K = 384 or 1536).
  block_groups_ = std::clamp<int64_t>(kBlockBytes / (mr_ * w_->k() * 4), 1, 32);
}

void PackedGemm::Run(const float* x, float* y) const {
  const int64_t k = w_->k(), n = w_->n(), panels = w_->panels();
  const Epilogue ep{act_, p0_, p1_};
#pragma omp parallel num_threads(threads_)
  {
    // Each thread takes a range of row groups (all panels), or with too few rows, a
    // range of panels (all rows). Splitting rows measured ~7% faster on MiniLM b8
    // (M = 1024) in the network, where each thread then writes whole rows of Y.
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t p0 = 0, p1 = panels, g0 = 0, g1 = groups_;
    if (groups_ >= 2 * nt || panels < nt) {
      g0 = groups_ * t / nt;
      g1 = groups_ * (t + 1) / nt;
    } else {
      p0 = panels * t / nt;
      p1 = panels * (t + 1) / nt;
    }
    for (int64_t gb = g0; gb < g1; gb += block_groups_) {
      const int64_t ge = std::min(g1, gb + block_groups_);
      for (int64_t pn = p0; pn < p1; ++pn) {
        const float* b = w_->data() + pn * k * kNr;
        const float* bias = w_->bias() + pn * kNr;
        const int ncols = static_cast<int>(std::min<int64_t>(kNr, n - pn * kNr));
        for (int64_t g = gb; g < ge; ++g) {
          const int rows = static_cast<int>(std::min<int64_t>(mr_, m_ - g * mr_));
          float* yg = y + g * mr_ * n + pn * kNr;
          if (g == gb)
            RunGroup<true>(avx512_, rows, x + g * mr_ * k, b, k, bias, ep, yg, n, ncols);
          else
            RunGroup<false>(avx512_, rows, x + g * mr_ * k, b, k, bias, ep, yg, n, ncols);
        }
      }
    }
  }
}

}  // namespace sampan::cpu
