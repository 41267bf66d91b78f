// Fused attention (attention.h). One block = one slice x up to 128 query rows, one warp
// per 16 rows (BERT's 128-token sequences: one block per head, K and V read once).
// Key tiles (64 keys; 32 for head size 128) are double-buffered: the next tile's K and V
// (and a row mask's tile) are in flight (cp.async) while this one is computed; the Q tile
// loads beside the first K/V tile when it fits in the second stage. Per tile:
//   S = Q K^T        mma m16n8k16 (Q fragments kept in registers, K fragments by ldmatrix)
//   logits           one FFMA each: S * scale * log2e + a shared key row (the key-only
//                    mask, -inf past Sk), plus the row mask's value (MaskMode)
//   online softmax   running row max / sum in float, in log2 units (ex2.approx)
//   O += P V         P re-packed from S's accumulators as the A operand (no smem trip),
//                    V fragments by ldmatrix.trans
// (Fragment layouts: mma.cuh.)
// Head sizes up to 128 run as 32, 64 or 128 with zero padding; keys past Sk get -inf
// logits and zero K/V rows, query rows past Sq are computed and not stored. A quantized
// output (sampan::Attention's YScale) is written as float8 codes of the values rounded to T,
// QuantizeLinear's bit for bit (quantize_math.cuh) — NaNs aside: the products and Pack2
// give the canonical NaN, so a NaN output's code has the positive sign whatever the
// reference's NaN was.
// H200, BERT-base b128 (S 128, D 64, a [B, 1, S, S] mask; SAMPAN_CUDA_PROFILE): 102 -> 65 us
// a layer when the per-element global mask loads, their 64-bit index math and branches left
// the inner loop.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/attention.h"
#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/quantize_math.cuh"

namespace sampan::cuda {
namespace {

constexpr int kMaxWarps = kAttentionMaxWarps;
constexpr int kMaxRows = kMaxWarps * 16;  // query rows per block (8 warps x 16)
// Keys per tile: two K and two V buffers stay within 48 KB of static shared memory.
template <int kD>
constexpr int TileKeys() {
  return kD <= 64 ? 64 : 32;
}
constexpr float kLog2e = 1.4426950408889634f;

// How a tile is read from global memory.
enum TileMode : int {
  kRowVec = 0,  // channels contiguous, 16-byte aligned: 8 channels per load
  kColVec = 1,  // rows contiguous (pre-transposed K), 16-byte aligned: 8 rows per load
  kScalar = 2,  // anything else, one element at a time
};

struct KernelArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const void* mask;
  int64_t heads;
  AttentionStrides sq_, sk_, sv_, so_;  // strides of Q, K, V, out
  int64_t m_div, m_mod, m_batch, m_row, m_col;
  int sq, sk, d;
  int q_tiles;  // blocks per slice
  float scale_log2;
  int q_mode, k_mode, v_mode, m_mode;
  bool out_vec;
  Float8Out q8;  // kQuant: the output is float8 codes at q8.y (out unused)
};

// Copies rows [0, nrows) x channels [0, kD) of a tile into dst (row pitch kLd elements):
// element (r, c) = src[r * rs + c * cs] when r < valid and c < d, else 0. The row-vector
// mode copies asynchronously: CpAsyncWaitAll, then a barrier, before dst is read.
template <class T, int kD>
__device__ __forceinline__ void LoadTile(T* dst, const T* src, int valid, int nrows, int d, int64_t rs, int64_t cs,
                                         int mode) {
  constexpr int kLd = kD + 8;
  const T zero = FromFloat<T>(0.f);
  if (mode == kRowVec) {  // d % 8 == 0: a chunk is all in or all out
    constexpr int kChunks = kD / 8;
    for (int idx = threadIdx.x; idx < nrows * kChunks; idx += blockDim.x) {
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      const bool in = r < valid && c < d;
      CpAsync16(dst + r * kLd + c, in ? src + r * rs + c : src, in);
    }
  } else if (mode == kColVec) {  // rs == 1, cs % 8 == 0: 8 consecutive rows of one channel per load
    const int rchunks = nrows / 8;
    for (int idx = threadIdx.x; idx < rchunks * kD; idx += blockDim.x) {
      const int c = idx / rchunks, r = (idx % rchunks) * 8;
      T vals[8];
      if (c < d && r + 8 <= valid) {
        const uint4 v = *reinterpret_cast<const uint4*>(src + c * cs + r);
        const T* pv = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int e = 0; e < 8; ++e) vals[e] = pv[e];
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) vals[e] = c < d && r + e < valid ? src[c * cs + r + e] : zero;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[(r + e) * kLd + c] = vals[e];
    }
  } else {
    for (int idx = threadIdx.x; idx < nrows * kD; idx += blockDim.x) {
      const int r = idx / kD, c = idx % kD;
      dst[r * kLd + c] = r < valid && c < d ? src[r * rs + c * cs] : zero;
    }
  }
}

//! 2^x on the SFU, denormal results flushed to 0 (softmax weights that small are 0 in FP16).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The float8 codes (low byte first) of a pair of output values (as rounded to T, packed in 32
// bits) by QuantizeLinear's exact scalar path (quantize_math.cuh): for non-saturating
// conversions and NaN quotients, rare enough to stay out of line (the epilogue that calls it
// is unrolled).
template <class T>
__device__ __noinline__ uint16_t QuantizePairExact(Float8Out q, uint32_t packed) {
  const float2 f = Unpack2<T>(packed);
  const T v[2] = {FromFloat<T>(f.x), FromFloat<T>(f.y)};
  uint16_t code = 0;
  for (int e = 0; e < 2; ++e)
    code |= static_cast<uint16_t>(
                q.e5m2 ? QuantizeToFloat8<QType::kE5M2>(v[e], q.scale, q.inv_scale, q.precision, q.saturate)
                       : QuantizeToFloat8<QType::kE4M3>(v[e], q.scale, q.inv_scale, q.precision, q.saturate))
            << (8 * e);
  return code;
}

// How the mask is read. kKeyMask: it depends on the key only (a padding mask [B, 1, 1, Sk])
// or is absent. Otherwise it differs between query rows (m_row != 0: causal masks,
// relative-position biases, padding masks expanded to [B, 1, Sq, Sk]): kTileMask stages its
// [rows, kBc] tile in dynamic shared memory with K and V (rows of whole 16-byte chunks,
// MaskTileBytes); kGlobalMask reads it element by element from global memory (other
// strides, e.g. Swin's 49-key windows). Always, a shared row of kBc floats per tile holds
// the key-only part: log2e * mask (0 for a row mask), -inf past Sk.
enum MaskMode : int { kKeyMask = 0, kTileMask = 1, kGlobalMask = 2 };

// kQuant: the output is written as float8 codes (a.q8).
template <class T, int kD, int kMask, bool kQuant>
__global__ void __launch_bounds__(32 * kMaxWarps, kD <= 64 ? 2 : 1) FusedAttentionKernel(KernelArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kBc = TileKeys<kD>();
  constexpr int kLd = kD + 8;  // smem row pitch: 16-byte rows, conflict-free fragment reads
  constexpr int kKSteps = kD / 16;
  constexpr int kNB = kBc / 8;  // key blocks of 8 in a tile
  constexpr int kND = kD / 8;   // channel blocks of 8
  constexpr int kTile = kBc * kLd;
  static_assert(4 * kBc >= kMaxRows, "the Q tile and the output stage fit in the K/V buffers");
  // Stage s (s = tile % 2) holds K at 2s * kTile and V at (2s + 1) * kTile; the Q tile
  // and the output are staged through the same memory. krow: the key rows of both stages.
  __shared__ __align__(16) T smem[4 * kTile];
  __shared__ __align__(16) float krow[2][kBc];
  extern __shared__ __align__(16) unsigned char mask_smem[];  // kTileMask: 2 stages of [rows, kMLd]
  constexpr int kMLd = kBc + 8;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(blockDim.x / 32) * 16;
  const int64_t b = blockIdx.x / a.q_tiles;
  const int q0 = static_cast<int>(blockIdx.x % a.q_tiles) * rows;
  const int64_t outer = b / a.heads, head = b % a.heads;
  const T* qb = static_cast<const T*>(a.q) + outer * a.sq_.batch + head * a.sq_.head;
  const T* kb = static_cast<const T*>(a.k) + outer * a.sk_.batch + head * a.sk_.head;
  const T* vb = static_cast<const T*>(a.v) + outer * a.sv_.batch + head * a.sv_.head;
  const T* mb = a.mask ? static_cast<const T*>(a.mask) + ((b / a.m_div) % a.m_mod) * a.m_batch : nullptr;
  const int mcol = static_cast<int>(a.m_col);

  // K and V of `tile` into its stage as one cp.async group. Its key row: the raw mask
  // value of entry threadIdx.x is returned and converted only when stored, once this
  // tile's reads are behind us (so nothing waits on its global load before that); a block
  // narrower than kBc stores the rest now.
  const bool key_mask = kMask == kKeyMask && mb != nullptr;
  auto key_raw = [&](int j) { return key_mask && j < a.sk ? mb[j * mcol] : FromFloat<T>(0.f); };
  auto key_value = [&](int j, T raw) { return j >= a.sk ? -INFINITY : key_mask ? ToFloat(raw) * kLog2e : 0.f; };
  auto issue = [&](int tile) {
    const int k0 = tile * kBc, valid = min(kBc, a.sk - k0);
    T* st = smem + (tile & 1) * 2 * kTile;
    LoadTile<T, kD>(st, kb + k0 * a.sk_.row, valid, kBc, a.d, a.sk_.row, a.sk_.col, a.k_mode);
    LoadTile<T, kD>(st + kTile, vb + k0 * a.sv_.row, valid, kBc, a.d, a.sv_.row, a.sv_.col, a.v_mode);
    if (kMask == kTileMask) {
      T* mt = reinterpret_cast<T*>(mask_smem) + (tile & 1) * rows * kMLd;
      LoadTile<T, kBc>(mt, mb + q0 * a.m_row + k0 * a.m_col, min(rows, a.sq - q0), rows, valid, a.m_row, a.m_col,
                       a.m_mode);
    }
    CpAsyncCommit();
    for (int c = threadIdx.x + blockDim.x; c < kBc; c += blockDim.x)
      krow[tile & 1][c] = key_value(k0 + c, key_raw(k0 + c));
    return threadIdx.x < kBc ? key_raw(k0 + threadIdx.x) : FromFloat<T>(0.f);
  };
  auto store_row = [&](int tile, T pend) {
    const int j = tile * kBc + threadIdx.x;
    if (threadIdx.x < kBc) krow[tile & 1][threadIdx.x] = key_value(j, pend);
  };

  // Q tile through smem into A fragments. When it fits in stage 1, it loads together
  // with the first K/V tile (stage 0); otherwise before it.
  const bool q_beside = rows * kLd <= 2 * kTile;
  T* const qs = q_beside ? smem + 2 * kTile : smem;
  T pend = FromFloat<T>(0.f);
  LoadTile<T, kD>(qs, qb + q0 * a.sq_.row, min(rows, a.sq - q0), rows, a.d, a.sq_.row, a.sq_.col, a.q_mode);
  CpAsyncCommit();
  if (q_beside) {
    pend = issue(0);
    CpAsyncWaitGroup<1>();
  } else {
    CpAsyncWaitGroup<0>();
  }
  __syncthreads();
  uint32_t qf[kKSteps][4];
  {
    const T* qw = qs + warp * 16 * kLd;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      qf[kk][0] = Lds32(qw + g * kLd + kk * 16 + 2 * t);
      qf[kk][1] = Lds32(qw + (g + 8) * kLd + kk * 16 + 2 * t);
      qf[kk][2] = Lds32(qw + g * kLd + kk * 16 + 8 + 2 * t);
      qf[kk][3] = Lds32(qw + (g + 8) * kLd + kk * 16 + 8 + 2 * t);
    }
  }
  __syncthreads();
  if (!q_beside) pend = issue(0);
  store_row(0, pend);

  // This thread's two rows: h = 0 -> row g, h = 1 -> row g + 8 of the warp's 16.
  const int row0 = q0 + warp * 16 + g;
  const uint32_t mask_lane =
      static_cast<uint32_t>(__cvta_generic_to_shared(mask_smem)) + ((warp * 16 + g) * kMLd + 2 * t) * 2;
  // kGlobalMask: this thread's two mask rows (rows past Sq, computed and never stored, read the last).
  const T* mrow[2] = {nullptr, nullptr};
  if (kMask == kGlobalMask) {
    mrow[0] = mb + min(row0, a.sq - 1) * a.m_row;
    mrow[1] = mb + min(row0 + 8, a.sq - 1) * a.m_row;
  }
  float o[kND][4];
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  // -FLT_MAX, not -inf: a row that is all -inf so far keeps 2^(-inf - m) = 0 and alpha = 1.
  float mx[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.f, 0.f};

  // Per-lane shared addresses for ldmatrix: K as B fragments (matrix m = lane / 8 is key
  // block m / 2, channel half m % 2), V transposed (matrix m: keys +8 (m % 2), channels +8 (m / 2)).
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t k_lane = ((lane & 7) + (lane >> 4) * 8) * kLd * 2 + ((lane >> 3) & 1) * 16;
  const uint32_t v_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * kLd * 2 + (lane >> 4) * 16;

  const int ntiles = (a.sk + kBc - 1) / kBc;
  for (int tile = 0; tile < ntiles; ++tile) {
    // The next tile goes into the other stage (last read before the previous barrier).
    const bool more = tile + 1 < ntiles;
    if (more) {
      pend = issue(tile + 1);
      CpAsyncWaitGroup<1>();
    } else {
      CpAsyncWaitGroup<0>();
    }
    __syncthreads();
    const uint32_t kt = smem_base + (tile & 1) * 2 * kTile * 2;
    const uint32_t vt = kt + kTile * 2;
    const float* kr = krow[tile & 1];
    const uint32_t mt = mask_lane + (tile & 1) * rows * kMLd * 2;  // kTileMask: this lane's row g, key 2t

    float s[kNB][4];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
    for (int nb = 0; nb < kNB; nb += 2) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t bk[4];
        LdMatrixX4At(bk, kt + k_lane + nb * 8 * kLd * 2 + kk * 32);
        Mma<T>(s[nb], qf[kk], bk[0], bk[1]);
        Mma<T>(s[nb + 1], qf[kk], bk[2], bk[3]);
      }
    }

    // Logits in log2 units (the key row adds the mask and -inf past Sk); the tile's row
    // maxima over the quad that shares a row.
    float tmax[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      const int jl = nb * 8 + 2 * t;
      const float2 km = *reinterpret_cast<const float2*>(kr + jl);
      float2 rm[2] = {{0.f, 0.f}, {0.f, 0.f}};
      if (kMask == kTileMask) {
        rm[0] = Unpack2<T>(Lds32At(mt + nb * 16));
        rm[1] = Unpack2<T>(Lds32At(mt + 8 * kMLd * 2 + nb * 16));
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        float x = fmaf(s[nb][e], a.scale_log2, (e & 1) ? km.y : km.x);
        if (kMask == kTileMask) x = fmaf((e & 1) ? rm[h].y : rm[h].x, kLog2e, x);
        if (kMask == kGlobalMask) {
          const int j = min(tile * kBc + jl + (e & 1), a.sk - 1);
          x = fmaf(ToFloat(mrow[h][j * mcol]), kLog2e, x);
        }
        s[nb][e] = x;
        tmax[h] = fmaxf(tmax[h], x);
      }
    }
    float alpha[2], rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
      const float m_new = fmaxf(mx[h], tmax[h]);
      alpha[h] = Exp2(mx[h] - m_new);
      mx[h] = m_new;
    }
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = Exp2(s[nb][e] - mx[e >> 1]);
        s[nb][e] = p;
        rsum[e >> 1] += p;
      }
    }
    // Partial row sums stay per thread (the quad's parts are added at the end).
    l[0] = l[0] * alpha[0] + rsum[0];
    l[1] = l[1] * alpha[1] + rsum[1];
#pragma unroll
    for (int nd = 0; nd < kND; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }

    // O += P V: S's accumulators for key blocks 2kk and 2kk+1 are P's A fragment for keys 16kk..16kk+15.
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      const uint32_t pa[4] = {Pack2<T>(s[2 * kk][0], s[2 * kk][1]), Pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              Pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              Pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nd = 0; nd < kND; nd += 2) {
        uint32_t bv[4];
        LdMatrixX4TransAt(bv, vt + v_lane + kk * 16 * kLd * 2 + nd * 16);
        Mma<T>(o[nd], pa, bv[0], bv[1]);
        Mma<T>(o[nd + 1], pa, bv[2], bv[3]);
      }
    }
    // The next tile's key row, now that its global loads have had this tile's time.
    if (more) store_row(tile + 1, pend);
    __syncthreads();  // before this stage is refilled (two tiles on) and before the epilogue reuses smem
  }

  // Normalise; rows with an undefined softmax (sum 0 or NaN) give zeros, as the reference does.
  float inv[2];
  bool ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    ok[h] = sum > 0.f;
    inv[h] = ok[h] ? 1.f / sum : 0.f;
  }
  // Stage the warp's 16 output rows in smem (as T, or as float8 codes with a row pitch of
  // kLd * 2 bytes), then store rows of 8 channels (16 or 8 bytes) at a time.
  T* ow = smem + warp * 16 * kLd;
  uint8_t* const ow8 = reinterpret_cast<uint8_t*>(ow);
  uint32_t packed[kND][2];  // this thread's output pairs as T: [nd][row g, row g + 8]
#pragma unroll
  for (int nd = 0; nd < kND; ++nd)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      packed[nd][h] = Pack2<T>(ok[h] ? o[nd][2 * h] * inv[h] : 0.f, ok[h] ? o[nd][2 * h + 1] * inv[h] : 0.f);
  if constexpr (kQuant) {
    // Saturating: FMA-corrected quotients and one packed conversion per pair; the exact
    // scalar path (out of line) when not saturating or a quotient is NaN.
    uint16_t codes[kND][2];
    bool special = !a.q8.saturate;
    if (!special) {
#pragma unroll
      for (int nd = 0; nd < kND; ++nd)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 f = Unpack2<T>(packed[nd][h]);
          const float x0 = RoundTo(a.q8.precision, f.x), x1 = RoundTo(a.q8.precision, f.y);
          codes[nd][h] =
              a.q8.e5m2
                  ? QuantizePairToFloat8<QType::kE5M2>(x0, x1, a.q8.scale, a.q8.inv_scale, a.q8.precision, special)
                  : QuantizePairToFloat8<QType::kE4M3>(x0, x1, a.q8.scale, a.q8.inv_scale, a.q8.precision, special);
        }
    }
    if (special) {
#pragma unroll
      for (int nd = 0; nd < kND; ++nd)
#pragma unroll
        for (int h = 0; h < 2; ++h) codes[nd][h] = QuantizePairExact<T>(a.q8, packed[nd][h]);
    }
#pragma unroll
    for (int nd = 0; nd < kND; ++nd)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint16_t*>(ow8 + (g + 8 * h) * kLd * 2 + nd * 8 + 2 * t) = codes[nd][h];
  } else {
#pragma unroll
    for (int nd = 0; nd < kND; ++nd)
#pragma unroll
      for (int h = 0; h < 2; ++h) *reinterpret_cast<uint32_t*>(ow + (g + 8 * h) * kLd + nd * 8 + 2 * t) = packed[nd][h];
  }
  __syncwarp();
  const int64_t ob = outer * a.so_.batch + head * a.so_.head;
  constexpr int kChunks = kD / 8;
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const int row = q0 + warp * 16 + r;
    if (row >= a.sq || c >= a.d) continue;
    if constexpr (kQuant) {
      uint8_t* dst = static_cast<uint8_t*>(a.q8.y) + ob + row * a.so_.row + c;
      const uint8_t* src = ow8 + r * kLd * 2 + c;
      if (a.out_vec) {
        *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
      } else {
        for (int e = 0; e < 8 && c + e < a.d; ++e) dst[e] = src[e];
      }
    } else {
      T* dst = static_cast<T*>(a.out) + ob + row * a.so_.row + c;
      const T* src = ow + r * kLd + c;
      if (a.out_vec) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int e = 0; e < 8 && c + e < a.d; ++e) dst[e] = src[e];
      }
    }
  }
#else
  __trap();  // the host never launches this below sm_80 (FusedAttentionSupports)
#endif
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
bool Multiple8(int64_t x) {
  return x % 8 == 0;
}

int ModeOf(const void* base, const AttentionStrides& s, int64_t d) {
  const bool outer = Aligned16(base) && Multiple8(s.batch) && Multiple8(s.head);
  if (s.col == 1 && outer && Multiple8(s.row) && Multiple8(d)) return kRowVec;
  if (s.row == 1 && outer && Multiple8(s.col)) return kColVec;
  return kScalar;
}

// Dynamic shared memory of the row-mask kernel: two stages of the [rows, kBc] mask tile.
template <class T, int kD>
constexpr size_t MaskTileBytes(int rows) {
  return 2 * static_cast<size_t>(rows) * (TileKeys<kD>() + 8) * sizeof(T);
}

template <class T, int kD>
cudaError_t AllowMaskTiles() {
  const int bytes = static_cast<int>(MaskTileBytes<T, kD>(kMaxRows));
  for (cudaError_t e : {cudaFuncSetAttribute(FusedAttentionKernel<T, kD, kTileMask, false>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                        cudaFuncSetAttribute(FusedAttentionKernel<T, kD, kTileMask, true>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)})
    if (e != cudaSuccess) return e;
  return cudaSuccess;
}

template <class T, int kD, bool kQuant>
cudaError_t Launch(const KernelArgs& args, int64_t slices, int warps, cudaStream_t st) {
  const int64_t blocks = slices * args.q_tiles;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const unsigned n = static_cast<unsigned>(blocks);
  if (args.mask == nullptr || args.m_row == 0) {
    FusedAttentionKernel<T, kD, kKeyMask, kQuant><<<n, 32 * warps, 0, st>>>(args);
  } else if (args.m_mode == kRowVec) {
    FusedAttentionKernel<T, kD, kTileMask, kQuant><<<n, 32 * warps, MaskTileBytes<T, kD>(16 * warps), st>>>(args);
  } else {
    FusedAttentionKernel<T, kD, kGlobalMask, kQuant><<<n, 32 * warps, 0, st>>>(args);
  }
  return cudaGetLastError();
}

template <class T, bool kQuant>
cudaError_t DispatchHead(const KernelArgs& args, int64_t slices, int warps, cudaStream_t st) {
  if (args.d <= 32) return Launch<T, 32, kQuant>(args, slices, warps, st);
  if (args.d <= 64) return Launch<T, 64, kQuant>(args, slices, warps, st);
  return Launch<T, 128, kQuant>(args, slices, warps, st);
}

template <class T>
cudaError_t Dispatch(const KernelArgs& args, int64_t slices, int warps, cudaStream_t st) {
  return args.q8.y != nullptr ? DispatchHead<T, true>(args, slices, warps, st)
                              : DispatchHead<T, false>(args, slices, warps, st);
}

}  // namespace

cudaError_t PrepareFusedAttention() {
  for (cudaError_t e :
       {AllowMaskTiles<__half, 32>(), AllowMaskTiles<__half, 64>(), AllowMaskTiles<__half, 128>(),
        AllowMaskTiles<__nv_bfloat16, 32>(), AllowMaskTiles<__nv_bfloat16, 64>(), AllowMaskTiles<__nv_bfloat16, 128>()})
    if (e != cudaSuccess) return e;
  return cudaSuccess;
}

bool FusedAttentionSupports(FloatType t, int64_t d, int64_t dv, int cc_major) {
  return t != FloatType::kF32 && cc_major >= 8 && d == dv && d >= 1 && d <= 128;
}

cudaError_t LaunchFusedAttention(FloatType t, const void* q, const void* k, const void* v, void* out,
                                 const AttentionParams& p, cudaStream_t stream) {
  if (p.slices * p.sq == 0) return cudaSuccess;
  if (t == FloatType::kF32 || p.d < 1 || p.d > 128 || p.sk < 1 || p.out.col != 1 || p.heads < 1 || p.sq > 0x7fffffff ||
      p.sk > 0x7fffffff || (p.mask && (p.mask_batch_div < 1 || p.mask_batch_mod < 1)))
    return cudaErrorInvalidValue;
  KernelArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  if (p.quantized) {  // float8 codes at `out`
    a.q8 = p.q8;
    a.q8.y = out;
  }
  a.mask = p.mask;
  a.heads = p.heads;
  a.sq_ = p.q;
  a.sk_ = p.k;
  a.sv_ = p.v;
  a.so_ = p.out;
  a.m_div = p.mask ? p.mask_batch_div : 1;
  a.m_mod = p.mask ? p.mask_batch_mod : 1;
  a.m_batch = p.mask_batch_stride;
  a.m_row = p.mask_row_stride;
  a.m_col = p.mask_col_stride;
  a.sq = static_cast<int>(p.sq);
  a.sk = static_cast<int>(p.sk);
  a.d = static_cast<int>(p.d);
  // Short queries (decoding, small Sq) take fewer warps per block rather than idle ones.
  const int max_warps = p.warps > 0 ? std::min(p.warps, kMaxWarps) : kMaxWarps;
  const int warps = static_cast<int>(std::min<int64_t>(max_warps, (p.sq + 15) / 16));
  a.q_tiles = static_cast<int>((p.sq + warps * 16 - 1) / (warps * 16));
  a.scale_log2 = p.scale * kLog2e;
  a.q_mode = ModeOf(q, p.q, p.d);
  a.k_mode = ModeOf(k, p.k, p.d);
  a.v_mode = ModeOf(v, p.v, p.d);
  // A row mask is staged tile by tile when its rows are whole 16-byte chunks (Sk % 8 == 0);
  // otherwise (kScalar) it is read element by element.
  a.m_mode = p.mask && p.mask_col_stride == 1 && Multiple8(p.mask_row_stride) && Multiple8(p.mask_batch_stride) &&
                     Multiple8(p.sk) && Aligned16(p.mask)
                 ? kRowVec
                 : kScalar;
  a.out_vec =
      Aligned16(out) && Multiple8(p.out.batch) && Multiple8(p.out.head) && Multiple8(p.out.row) && Multiple8(p.d);
  switch (t) {
    case FloatType::kF16:
      return Dispatch<__half>(a, p.slices, warps, stream);
    case FloatType::kBF16:
      return Dispatch<__nv_bfloat16>(a, p.slices, warps, stream);
    case FloatType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
