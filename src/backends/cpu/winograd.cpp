#include "backends/cpu/winograd.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/isa.h"

namespace sampan::cpu {
namespace {

constexpr int64_t kMr = 6;   // tiles per micro-kernel call (rows)
constexpr int64_t kNr = 16;  // output channels per micro-kernel call (two AVX registers)
// Weights are prefetched this far ahead of the micro-kernel (1 KiB: measured best of 64..2048 B).
constexpr int64_t kPrefetchFloats = 256;
// Target bytes of one chunk's transformed input, and the most tiles a chunk takes.
constexpr int64_t kChunkBytes = int64_t{160} << 10;
constexpr int64_t kMaxChunkRows = 48;

int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t RoundUp(int64_t a, int64_t b) {
  return CeilDiv(a, b) * b;
}

float* AllocFloats(size_t n) {
  void* p = std::aligned_alloc(64, RoundUp(static_cast<int64_t>(std::max<size_t>(n, 1) * sizeof(float)), 64));
  return static_cast<float*>(p);
}

#define SP_AVX2 __attribute__((target("avx2,fma")))

// The transforms of F(m x m, 3x3) along one dimension, applied to vectors of 8
// channels: In (B^T, alpha -> alpha values), Out (A^T, alpha -> m), and G (3 -> alpha,
// for the weights, in double). alpha = m + 2.
template <int kM>
struct Transform;

template <>
struct Transform<4> {
  static constexpr int kAlpha = 6;
  static constexpr double G[6][3] = {{1.0 / 4, 0, 0},
                                     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                     {0, 0, 1}};
  SP_AVX2 static void In(const __m256* in, int stride, __m256* out, int ostride) {
    const __m256 four = _mm256_set1_ps(4.f), five = _mm256_set1_ps(5.f), two = _mm256_set1_ps(2.f);
    const __m256 d0 = in[0], d1 = in[stride], d2 = in[2 * stride], d3 = in[3 * stride], d4 = in[4 * stride],
                 d5 = in[5 * stride];
    out[0] = _mm256_add_ps(_mm256_fnmadd_ps(five, d2, _mm256_mul_ps(four, d0)), d4);
    out[ostride] = _mm256_fnmadd_ps(four, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));
    out[2 * ostride] = _mm256_fmadd_ps(four, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));
    out[3 * ostride] = _mm256_fmadd_ps(two, _mm256_sub_ps(d3, d1), _mm256_sub_ps(d4, d2));
    out[4 * ostride] = _mm256_fnmadd_ps(two, _mm256_sub_ps(d3, d1), _mm256_sub_ps(d4, d2));
    out[5 * ostride] = _mm256_add_ps(_mm256_fnmadd_ps(five, d3, _mm256_mul_ps(four, d1)), d5);
  }
  SP_AVX2 static void Out(const __m256* m, int stride, __m256* out, int ostride) {
    const __m256 two = _mm256_set1_ps(2.f), four = _mm256_set1_ps(4.f), eight = _mm256_set1_ps(8.f);
    const __m256 s12 = _mm256_add_ps(m[stride], m[2 * stride]), d12 = _mm256_sub_ps(m[stride], m[2 * stride]);
    const __m256 s34 = _mm256_add_ps(m[3 * stride], m[4 * stride]), d34 = _mm256_sub_ps(m[3 * stride], m[4 * stride]);
    out[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
    out[ostride] = _mm256_fmadd_ps(two, d34, d12);
    out[2 * ostride] = _mm256_fmadd_ps(four, s34, s12);
    out[3 * ostride] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5 * stride]);
  }
};

template <>
struct Transform<2> {
  static constexpr int kAlpha = 4;
  static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  SP_AVX2 static void In(const __m256* in, int stride, __m256* out, int ostride) {
    const __m256 d0 = in[0], d1 = in[stride], d2 = in[2 * stride], d3 = in[3 * stride];
    out[0] = _mm256_sub_ps(d0, d2);
    out[ostride] = _mm256_add_ps(d1, d2);
    out[2 * ostride] = _mm256_sub_ps(d2, d1);
    out[3 * ostride] = _mm256_sub_ps(d1, d3);
  }
  SP_AVX2 static void Out(const __m256* m, int stride, __m256* out, int ostride) {
    out[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[stride]), m[2 * stride]);
    out[ostride] = _mm256_sub_ps(_mm256_sub_ps(m[stride], m[2 * stride]), m[3 * stride]);
  }
};

// out[6][16] = sum_c a[r * lda + c] * b[c * 16 + 0..15], r < 6. The weights stream
// from L3 or memory on the first call for a panel (kPrefetch: fetch ahead; later
// calls find the panel in L1, where prefetches would only cost load slots).
template <bool kPrefetch>
SP_AVX2 void Micro6x16(const float* a, int64_t lda, const float* b, int64_t c, float* out) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  for (int64_t i = 0; i < c; ++i) {
    const __m256 b0 = _mm256_load_ps(b + i * 16), b1 = _mm256_load_ps(b + i * 16 + 8);
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(b + i * 16 + kPrefetchFloats), _MM_HINT_T0);
    __m256 x = _mm256_broadcast_ss(a0 + i);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + i);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a2 + i);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3 + i);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a4 + i);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a5 + i);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  _mm256_store_ps(out + 0, c00);
  _mm256_store_ps(out + 8, c01);
  _mm256_store_ps(out + 16, c10);
  _mm256_store_ps(out + 24, c11);
  _mm256_store_ps(out + 32, c20);
  _mm256_store_ps(out + 40, c21);
  _mm256_store_ps(out + 48, c30);
  _mm256_store_ps(out + 56, c31);
  _mm256_store_ps(out + 64, c40);
  _mm256_store_ps(out + 72, c41);
  _mm256_store_ps(out + 80, c50);
  _mm256_store_ps(out + 88, c51);
}

// V[xi][row][C] for the tiles of one chunk; rows past the last tile are zeros.
template <int kM>
SP_AVX2 void TransformInput(const WinogradShape& s, int64_t tiles_h, int64_t tiles_w, int64_t t0, int64_t t1,
                            int64_t rows, const float* src, float* v) {
  constexpr int kA = Transform<kM>::kAlpha, kP = kA * kA;
  const int64_t cb_count = s.c / 8, plane = s.h * s.w * 8;
  const int64_t xi_stride = rows * s.c;
  __m256 d[kP], t[kP], r[kP];
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t tile = t0; tile < t1; ++tile) {
    const int64_t row = tile - t0;
    const int64_t n = tile / (tiles_h * tiles_w), rem = tile % (tiles_h * tiles_w);
    const int64_t ih0 = (rem / tiles_w) * kM - s.pad_t, iw0 = (rem % tiles_w) * kM - s.pad_l;
    const bool interior = ih0 >= 0 && iw0 >= 0 && ih0 + kA <= s.h && iw0 + kA <= s.w;
    for (int64_t cb = 0; cb < cb_count; ++cb) {
      const float* base = src + (n * cb_count + cb) * plane;
      if (interior) {
        for (int i = 0; i < kA; ++i)
          for (int j = 0; j < kA; ++j) d[i * kA + j] = _mm256_loadu_ps(base + ((ih0 + i) * s.w + iw0 + j) * 8);
      } else {
        for (int i = 0; i < kA; ++i)
          for (int j = 0; j < kA; ++j) {
            const int64_t ih = ih0 + i, iw = iw0 + j;
            d[i * kA + j] =
                (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) ? _mm256_loadu_ps(base + (ih * s.w + iw) * 8) : zero;
          }
      }
      for (int j = 0; j < kA; ++j) Transform<kM>::In(d + j, kA, t + j, kA);          // columns: t = B^T d
      for (int i = 0; i < kA; ++i) Transform<kM>::In(t + i * kA, 1, r + i * kA, 1);  // rows: r = t B
      float* out = v + row * s.c + cb * 8;
      for (int x = 0; x < kP; ++x) _mm256_storeu_ps(out + x * xi_stride, r[x]);
    }
  }
  for (int64_t row = t1 - t0; row < rows; ++row)
    for (int x = 0; x < kP; ++x) std::memset(v + x * xi_stride + row * s.c, 0, sizeof(float) * s.c);
}

// Output tiles of one chunk for output channels [kb*8, kb*8+16) from m[xi][row][16].
template <int kM>
SP_AVX2 void TransformOutput(const WinogradShape& s, const WinogradEpilogue& ep, int64_t tiles_h, int64_t tiles_w,
                             int64_t t0, int64_t t1, int64_t rows, const float* m, const float* bias, int64_t kb,
                             float* dst) {
  constexpr int kA = Transform<kM>::kAlpha, kP = kA * kA;
  const int64_t kb_count = s.k / 8, plane = s.oh * s.ow * 8;
  const __m256 zero = _mm256_setzero_ps(), p0 = _mm256_set1_ps(ep.p0), p1 = _mm256_set1_ps(ep.p1);
  __m256 in[kP], t[kM * kA], y[kM * kM];
  for (int64_t tile = t0; tile < t1; ++tile) {
    const int64_t row = tile - t0;
    const int64_t n = tile / (tiles_h * tiles_w), rem = tile % (tiles_h * tiles_w);
    const int64_t oh0 = (rem / tiles_w) * kM, ow0 = (rem % tiles_w) * kM;
    const int64_t hmax = std::min<int64_t>(kM, s.oh - oh0), wmax = std::min<int64_t>(kM, s.ow - ow0);
    for (int half = 0; half < 2; ++half) {
      for (int x = 0; x < kP; ++x) in[x] = _mm256_load_ps(m + (x * rows + row) * kNr + half * 8);
      for (int j = 0; j < kA; ++j) Transform<kM>::Out(in + j, kA, t + j, kA);         // t[m][alpha] = A^T m
      for (int i = 0; i < kM; ++i) Transform<kM>::Out(t + i * kA, 1, y + i * kM, 1);  // y[m][m] = t A
      const __m256 b = _mm256_loadu_ps(bias + (kb + half) * 8);
      float* base = dst + (n * kb_count + kb + half) * plane;
      for (int64_t i = 0; i < hmax; ++i)
        for (int64_t j = 0; j < wmax; ++j) {
          float* p = base + ((oh0 + i) * s.ow + ow0 + j) * 8;
          __m256 val = _mm256_add_ps(y[i * kM + j], b);
          if (ep.sum) val = _mm256_add_ps(val, _mm256_loadu_ps(p));
          switch (ep.act) {
            case WinogradAct::kNone:
              break;
            case WinogradAct::kRelu:
              val = _mm256_max_ps(val, zero);
              break;
            case WinogradAct::kLeakyRelu:
              val = _mm256_blendv_ps(_mm256_mul_ps(val, p0), val, _mm256_cmp_ps(val, zero, _CMP_GE_OQ));
              break;
            case WinogradAct::kClip:
              val = _mm256_min_ps(_mm256_max_ps(val, p0), p1);
              break;
          }
          _mm256_storeu_ps(p, val);
        }
    }
  }
}

// U[panel][xi][c][16] = (G g G^T)[xi] for output channel panel*16 + lane.
template <int kM>
void TransformWeights(int64_t k, int64_t c, const float* weights, float* u) {
  constexpr int kA = Transform<kM>::kAlpha, kP = kA * kA;
  const auto& G = Transform<kM>::G;
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < c; ++i) {
      const float* g = weights + (o * c + i) * 9;
      double t[kA][3];  // G g
      for (int a = 0; a < kA; ++a)
        for (int j = 0; j < 3; ++j) t[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
      for (int a = 0; a < kA; ++a)
        for (int b = 0; b < kA; ++b) {
          const double val = t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2];
          u[(((o / kNr) * kP + a * kA + b) * c + i) * kNr + o % kNr] = static_cast<float>(val);
        }
    }
}

int Points(int tile) {
  return (tile + 2) * (tile + 2);
}

}  // namespace

bool WinogradConv::CpuSupported() {
#if defined(__x86_64__) && defined(__GNUC__)
  return static_cast<int>(KernelVariant()) >= static_cast<int>(Isa::kAvx2);
#else
  return false;
#endif
}

bool WinogradConv::ShapeSupported(const WinogradShape& s) {
  if (s.n <= 0 || s.c <= 0 || s.k <= 0 || s.c % 8 != 0 || s.k % kNr != 0) return false;
  if (s.pad_t < 0 || s.pad_l < 0 || s.pad_t > 2 || s.pad_l > 2) return false;
  // Stride 1, kernel 3: the output covers the padded input exactly.
  const int64_t pad_b = s.oh + 2 - s.h - s.pad_t, pad_r = s.ow + 2 - s.w - s.pad_l;
  return s.oh > 0 && s.ow > 0 && pad_b >= 0 && pad_b <= 2 && pad_r >= 0 && pad_r <= 2;
}

WinogradWeights::WinogradWeights(int tile, int64_t k, int64_t c, const float* weights) : tile_(tile), k_(k), c_(c) {
  u_.reset(AllocFloats(static_cast<size_t>(Points(tile) * k * c)));
  if (tile == 4)
    TransformWeights<4>(k, c, weights, u_.get());
  else
    TransformWeights<2>(k, c, weights, u_.get());
}

void WinogradWeights::Free::operator()(float* p) const {
  std::free(p);
}

WinogradConv::WinogradConv(const WinogradShape& s, std::shared_ptr<const WinogradWeights> u, const float* bias,
                           const WinogradEpilogue& ep, int threads)
    : s_(s), u_(std::move(u)), bias_(static_cast<size_t>(s.k), 0.f), ep_(ep), threads_(std::max(1, threads)) {
  if (bias) std::copy(bias, bias + s.k, bias_.begin());
  const int m = u_->tile(), points = Points(m);
  tiles_h_ = CeilDiv(s.oh, m);
  tiles_w_ = CeilDiv(s.ow, m);
  tiles_ = s.n * tiles_h_ * tiles_w_;
  const int64_t panels = s.k / kNr;
  // Chunks of tiles whose transformed input (points x rows x C floats) stays in L2.
  const int64_t target_rows = std::clamp<int64_t>(kChunkBytes / (points * s.c * 4) / kMr * kMr, kMr, kMaxChunkRows);
  chunks_ = CeilDiv(tiles_, target_rows);
  ksplit_ = 1;
  if (chunks_ >= threads_) {
    chunks_ = RoundUp(chunks_, threads_);  // every thread gets as many chunks
  } else {
    // Fewer chunks than threads: split the output channels as well.
    ksplit_ = std::min<int64_t>(panels, CeilDiv(threads_, chunks_));
  }
  chunks_ = std::min(chunks_, tiles_);
  chunk_rows_ = RoundUp(CeilDiv(tiles_, chunks_), kMr);
  thread_floats_ = static_cast<size_t>(RoundUp(points * chunk_rows_ * (s.c + kNr), 16));
  scratch_floats_ = thread_floats_ * static_cast<size_t>(threads_);
}

template <int kM>
void WinogradConv::RunItem(int64_t item, const float* src, float* dst, float* v, float* m) const {
  constexpr int kP = Transform<kM>::kAlpha * Transform<kM>::kAlpha;
  const int64_t chunk = item / ksplit_, part = item % ksplit_;
  const int64_t t0 = tiles_ * chunk / chunks_, t1 = tiles_ * (chunk + 1) / chunks_;
  if (t0 >= t1) return;
  const int64_t rows = RoundUp(t1 - t0, kMr);
  const int64_t panels = s_.k / kNr;
  const int64_t p0 = panels * part / ksplit_, p1 = panels * (part + 1) / ksplit_;
  TransformInput<kM>(s_, tiles_h_, tiles_w_, t0, t1, rows, src, v);
  for (int64_t p = p0; p < p1; ++p) {
    for (int x = 0; x < kP; ++x) {
      const float* up = u_->data() + ((p * kP + x) * s_.c) * kNr;
      Micro6x16<true>(v + x * rows * s_.c, s_.c, up, s_.c, m + x * rows * kNr);
      for (int64_t g = kMr; g < rows; g += kMr)
        Micro6x16<false>(v + (x * rows + g) * s_.c, s_.c, up, s_.c, m + (x * rows + g) * kNr);
    }
    TransformOutput<kM>(s_, ep_, tiles_h_, tiles_w_, t0, t1, rows, m, bias_.data(), p * 2, dst);
  }
}

void WinogradConv::RunItem(int64_t item, const float* src, float* dst, float* v, float* m) const {
  if (u_->tile() == 4)
    RunItem<4>(item, src, dst, v, m);
  else
    RunItem<2>(item, src, dst, v, m);
}

void WinogradConv::Run(const float* src, float* dst, void* scratch) const {
  float* base = reinterpret_cast<float*>(RoundUp(reinterpret_cast<intptr_t>(scratch), 64));
  const int64_t items = chunks_ * ksplit_;
  const size_t v_floats = static_cast<size_t>(Points(u_->tile()) * chunk_rows_ * s_.c);
  if (threads_ == 1 || items == 1) {
    for (int64_t i = 0; i < items; ++i) RunItem(i, src, dst, base, base + v_floats);
    return;
  }
#pragma omp parallel num_threads(threads_)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    float* v = base + thread_floats_ * static_cast<size_t>(t);
    for (int64_t i = t; i < items; i += nt) RunItem(i, src, dst, v, v + v_floats);
  }
}

}  // namespace sampan::cpu
