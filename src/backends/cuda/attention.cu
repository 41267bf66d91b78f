// Fused attention (attention.h). One block = one slice x up to 128 query rows, one warp
// per 16 rows (BERT's 128-token sequences: one block per head, K and V read once).
// Key tiles (64 keys; 32 for head size 128) are double-buffered: the next tile's K and V
// are in flight (cp.async) while this one is computed. Per tile:
//   S = Q K^T        mma m16n8k16 (Q fragments kept in registers, K read from smem)
//   online softmax   running row max / sum in float, in log2 units (exp2f)
//   O += P V         P re-packed from S's accumulators as the A operand (no smem trip),
//                    V fragments by ldmatrix.trans
// (Fragment layouts: mma.cuh.)
// Head sizes up to 128 run as 32, 64 or 128 with zero padding; keys past Sk get -inf
// logits and zero K/V rows, query rows past Sq are computed and not stored.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/attention.h"
#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/mma.cuh"

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
  int q_mode, k_mode, v_mode;
  bool out_vec;
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

template <class T, int kD>
__global__ void __launch_bounds__(32 * kMaxWarps) FusedAttentionKernel(KernelArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kBc = TileKeys<kD>();
  constexpr int kLd = kD + 8;   // smem row pitch: 16-byte rows, conflict-free fragment reads
  constexpr int kKSteps = kD / 16;
  constexpr int kNB = kBc / 8;  // key blocks of 8 in a tile
  constexpr int kND = kD / 8;   // channel blocks of 8
  constexpr int kTile = kBc * kLd;
  static_assert(4 * kBc >= kMaxRows, "the Q tile and the output stage fit in the K/V buffers");
  // K buffers 0 and 1, then V buffers 0 and 1; the Q tile and the output are staged
  // through the same memory before the first and after the last key tile.
  __shared__ __align__(16) T smem[4 * kTile];
  T* const ks[2] = {smem, smem + kTile};
  T* const vs[2] = {smem + 2 * kTile, smem + 3 * kTile};

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(blockDim.x / 32) * 16;
  const int64_t b = blockIdx.x / a.q_tiles;
  const int q0 = static_cast<int>(blockIdx.x % a.q_tiles) * rows;
  const int64_t outer = b / a.heads, head = b % a.heads;
  const T* qb = static_cast<const T*>(a.q) + outer * a.sq_.batch + head * a.sq_.head;
  const T* kb = static_cast<const T*>(a.k) + outer * a.sk_.batch + head * a.sk_.head;
  const T* vb = static_cast<const T*>(a.v) + outer * a.sv_.batch + head * a.sv_.head;

  // Q tile through smem into A fragments.
  LoadTile<T, kD>(smem, qb + q0 * a.sq_.row, min(rows, a.sq - q0), rows, a.d, a.sq_.row, a.sq_.col, a.q_mode);
  CpAsyncWaitAll();
  __syncthreads();
  uint32_t qf[kKSteps][4];
  {
    const T* qw = smem + warp * 16 * kLd;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      qf[kk][0] = Lds32(qw + g * kLd + kk * 16 + 2 * t);
      qf[kk][1] = Lds32(qw + (g + 8) * kLd + kk * 16 + 2 * t);
      qf[kk][2] = Lds32(qw + g * kLd + kk * 16 + 8 + 2 * t);
      qf[kk][3] = Lds32(qw + (g + 8) * kLd + kk * 16 + 8 + 2 * t);
    }
  }
  __syncthreads();

  // This thread's two rows: h = 0 -> row g, h = 1 -> row g + 8 of the warp's 16.
  const int row0 = q0 + warp * 16 + g;
  const T* mrow[2] = {nullptr, nullptr};
  if (a.mask) {
    const T* mb = static_cast<const T*>(a.mask) + ((b / a.m_div) % a.m_mod) * a.m_batch;
    if (row0 < a.sq) mrow[0] = mb + row0 * a.m_row;
    if (row0 + 8 < a.sq) mrow[1] = mb + (row0 + 8) * a.m_row;
  }
  float o[kND][4];
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  // -FLT_MAX, not -inf: a row that is all -inf so far keeps exp2f(-inf - m) = 0 and alpha = 1.
  float mx[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.f, 0.f};

  const int ntiles = (a.sk + kBc - 1) / kBc;
  auto issue = [&](int tile) {  // K and V of `tile` into buffer tile % 2, as one cp.async group
    const int k0 = tile * kBc, valid = min(kBc, a.sk - k0);
    LoadTile<T, kD>(ks[tile & 1], kb + k0 * a.sk_.row, valid, kBc, a.d, a.sk_.row, a.sk_.col, a.k_mode);
    LoadTile<T, kD>(vs[tile & 1], vb + k0 * a.sv_.row, valid, kBc, a.d, a.sv_.row, a.sv_.col, a.v_mode);
    CpAsyncCommit();
  };
  issue(0);
  for (int tile = 0; tile < ntiles; ++tile) {
    const int k0 = tile * kBc;
    // The next tile goes into the other buffer (last read before the previous barrier).
    if (tile + 1 < ntiles) {
      issue(tile + 1);
      CpAsyncWaitGroup<1>();
    } else {
      CpAsyncWaitGroup<0>();
    }
    __syncthreads();
    const T* kt = ks[tile & 1];
    const T* vt = vs[tile & 1];

    float s[kNB][4];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        const T* kr = kt + (nb * 8 + g) * kLd + kk * 16 + 2 * t;
        Mma<T>(s[nb], qf[kk], Lds32(kr), Lds32(kr + 8));
      }
    }

    // Logits in log2 units; the tile's row maxima over the quad that shares a row.
    float tmax[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int j = k0 + nb * 8 + 2 * t + (e & 1);
        float x = s[nb][e] * a.scale_log2;
        if (j >= a.sk) {
          x = -INFINITY;
        } else if (mrow[h] != nullptr) {
          x += ToFloat(mrow[h][j * a.m_col]) * kLog2e;
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
      alpha[h] = exp2f(mx[h] - m_new);
      mx[h] = m_new;
    }
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[nb][e] - mx[e >> 1]);
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
      // Matrices: 0 = keys 16kk..+7 x channels 8nd..+7, 1 = keys +8..+15, 2 and 3 the same for 8(nd+1).
      const T* vrow = vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + (lane >> 4) * 8;
#pragma unroll
      for (int nd = 0; nd < kND; nd += 2) {
        uint32_t bv[4];
        LdMatrixX4Trans(bv, vrow + nd * 8);
        Mma<T>(o[nd], pa, bv[0], bv[1]);
        Mma<T>(o[nd + 1], pa, bv[2], bv[3]);
      }
    }
    __syncthreads();  // before this buffer is refilled (two tiles on) and before the epilogue reuses smem
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
  // Stage the warp's 16 output rows in smem, then store rows of 8 channels at a time.
  T* ow = smem + warp * 16 * kLd;
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) {
    const int c = nd * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(ow + g * kLd + c) =
        Pack2<T>(ok[0] ? o[nd][0] * inv[0] : 0.f, ok[0] ? o[nd][1] * inv[0] : 0.f);
    *reinterpret_cast<uint32_t*>(ow + (g + 8) * kLd + c) =
        Pack2<T>(ok[1] ? o[nd][2] * inv[1] : 0.f, ok[1] ? o[nd][3] * inv[1] : 0.f);
  }
  __syncwarp();
  T* ob = static_cast<T*>(a.out) + outer * a.so_.batch + head * a.so_.head;
  constexpr int kChunks = kD / 8;
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const int row = q0 + warp * 16 + r;
    if (row >= a.sq || c >= a.d) continue;
    T* dst = ob + row * a.so_.row + c;
    const T* src = ow + r * kLd + c;
    if (a.out_vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && c + e < a.d; ++e) dst[e] = src[e];
    }
  }
#else
  __trap();  // the host never launches this below sm_80 (FusedAttentionSupports)
#endif
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool Multiple8(int64_t x) { return x % 8 == 0; }

int ModeOf(const void* base, const AttentionStrides& s, int64_t d) {
  const bool outer = Aligned16(base) && Multiple8(s.batch) && Multiple8(s.head);
  if (s.col == 1 && outer && Multiple8(s.row) && Multiple8(d)) return kRowVec;
  if (s.row == 1 && outer && Multiple8(s.col)) return kColVec;
  return kScalar;
}

template <class T, int kD>
cudaError_t Launch(const KernelArgs& args, int64_t slices, int warps, cudaStream_t st) {
  const int64_t blocks = slices * args.q_tiles;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  FusedAttentionKernel<T, kD><<<static_cast<unsigned>(blocks), 32 * warps, 0, st>>>(args);
  return cudaGetLastError();
}

template <class T>
cudaError_t Dispatch(const KernelArgs& args, int64_t slices, int warps, cudaStream_t st) {
  if (args.d <= 32) return Launch<T, 32>(args, slices, warps, st);
  if (args.d <= 64) return Launch<T, 64>(args, slices, warps, st);
  return Launch<T, 128>(args, slices, warps, st);
}

}  // namespace

bool FusedAttentionSupports(FloatType t, int64_t d, int64_t dv, int cc_major) {
  return t != FloatType::kF32 && cc_major >= 8 && d == dv && d >= 1 && d <= 128;
}

cudaError_t LaunchFusedAttention(FloatType t, const void* q, const void* k, const void* v, void* out,
                                 const AttentionParams& p, cudaStream_t stream) {
  if (p.slices * p.sq == 0) return cudaSuccess;
  if (t == FloatType::kF32 || p.d < 1 || p.d > 128 || p.sk < 1 || p.out.col != 1 || p.heads < 1 ||
      p.sq > 0x7fffffff || p.sk > 0x7fffffff || (p.mask && (p.mask_batch_div < 1 || p.mask_batch_mod < 1)))
    return cudaErrorInvalidValue;
  KernelArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
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
  a.out_vec = Aligned16(out) && Multiple8(p.out.batch) && Multiple8(p.out.head) && Multiple8(p.out.row) &&
              Multiple8(p.d);
  switch (t) {
    case FloatType::kF16: return Dispatch<__half>(a, p.slices, warps, stream);
    case FloatType::kBF16: return Dispatch<__nv_bfloat16>(a, p.slices, warps, stream);
    case FloatType::kF32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
