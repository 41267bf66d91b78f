// Conv + bias + activation + MaxPool in one kernel (conv_pool.h).
// Block = (tile of tph x tpw pooled outputs, image n, 64 output channels). Steps:
//  1. the input patch those pooled outputs depend on -> smem, 4 channels per pixel
//     (zeros for missing channels and for the conv's padding), 8 bytes a pixel;
//     the block's 64 filters, packed once per run as [n][k] with k = (kh * KW + kw) * 4 + c
//     (LaunchPackConvPoolFilters), -> smem by cp.async;
//  2. implicit GEMM on tensor cores: rows = the ch x cw conv outputs of the tile (halo
//     included), columns = 64 channels, K = KH * KW * 4. A fragments are read straight
//     from the patch (two consecutive k are two channels of one pixel: one 32-bit load),
//     warp w owns GEMM row tiles w, w + warps, ... (kMtw of them), all 64 columns;
//  3. bias + activation in float, rounded to T, staged in smem (reusing the patch and
//     filter memory), then max-pooled and written, 8 channels (16 bytes) per store.
// Conv outputs outside [0, OH) x [0, OW) (the pool's padding, ragged edges) are computed
// from zeros and never enter a max.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/conv_pool.h"
#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/mma.cuh"

namespace sampan::cuda {
namespace {

constexpr int kCols = 64;        // output channels per block
constexpr int kNB = kCols / 8;   // n-blocks of 8
constexpr int kLdc = kCols + 8;  // staged row pitch (elements)
constexpr size_t kMaxSmem = 160 * 1024;

struct Variant {
  int warps, mtw, min_blocks;  // min_blocks: resident blocks per SM asked of the register allocator
  bool lean;                   // the lean-issue GEMM loop (ldmatrix filters, 32-bit shared addresses)
};
constexpr Variant kVariants[] = {{8, 2, 1, false}, {4, 4, 1, false}, {8, 4, 1, false}, {8, 2, 3, false},
                                 {4, 2, 6, false}, {8, 2, 1, true},  {8, 4, 1, true},  {8, 2, 2, true}};

template <class T>
struct Args {
  const T* x;
  const T* w;
  const T* bias;
  T* y;
  ConvPoolParams p;
  int tph, tpw, ch, cw, pin_h, pin_w, ksteps, tiles_w, kpos;
};

__host__ __device__ constexpr size_t Align16(size_t b) {
  return (b + 15) / 16 * 16;
}

struct Geometry {
  int ch, cw, pin_h, pin_w, ksteps;
  size_t patch_bytes, w_bytes, koff_bytes, stage_bytes;
  size_t smem() const { return std::max(patch_bytes + w_bytes + koff_bytes, stage_bytes); }
};

Geometry GeometryOf(const ConvPoolParams& p, int tph, int tpw, size_t elem) {
  Geometry g{};
  g.ch = (tph - 1) * p.ps_h + p.pk_h;
  g.cw = (tpw - 1) * p.ps_w + p.pk_w;
  g.pin_h = (g.ch - 1) * p.sh + p.kh;
  g.pin_w = (g.cw - 1) * p.sw + p.kw;
  g.ksteps = (p.kh * p.kw + 3) / 4;
  g.patch_bytes = Align16(static_cast<size_t>(g.pin_h) * g.pin_w * 4 * elem);
  g.w_bytes = Align16(static_cast<size_t>(kCols) * (g.ksteps * 16 + 8) * elem);
  g.koff_bytes = Align16(static_cast<size_t>(g.ksteps) * 4 * sizeof(int));
  g.stage_bytes = Align16(static_cast<size_t>(g.ch) * g.cw * kLdc * elem);
  return g;
}

template <class T, int kWarps, int kMtw, int kMinBlocks, bool kLean>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) ConvMaxPoolKernel(Args<T> a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const ConvPoolParams p = a.p;
  const int ldb = a.ksteps * 16 + 8;
  T* const patch = reinterpret_cast<T*>(smem_raw);
  T* const wsm = reinterpret_cast<T*>(smem_raw + Align16(static_cast<size_t>(a.pin_h) * a.pin_w * 4 * sizeof(T)));
  int* const koff = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(wsm) +
                                           Align16(static_cast<size_t>(kCols) * ldb * sizeof(T)));
  const int tid = threadIdx.x;
  const int64_t n = blockIdx.y;
  const int n0 = blockIdx.z * kCols;
  const int py0 = static_cast<int>(blockIdx.x / a.tiles_w) * a.tph;
  const int px0 = static_cast<int>(blockIdx.x % a.tiles_w) * a.tpw;
  const int oy0 = py0 * p.ps_h - p.pp_h, ox0 = px0 * p.ps_w - p.pp_w;  // conv tile origin
  const int iy0 = oy0 * p.sh - p.pad_h, ix0 = ox0 * p.sw - p.pad_w;    // patch origin

  // 1. Filters (asynchronous), the k -> patch offset table, then the patch: each thread
  // issues all its loads before its first store, so one memory latency covers the patch.
  const int kchunks = a.ksteps * 2;  // 16-byte chunks of a packed filter row
  const T* wchunk = a.w + static_cast<int64_t>(blockIdx.z) * kCols * a.ksteps * 16;
  for (int i = tid; i < kCols * kchunks; i += blockDim.x)
    CpAsync16(wsm + (i / kchunks) * ldb + (i % kchunks) * 8, wchunk + i * 8, true);
  for (int i = tid; i < a.ksteps * 4; i += blockDim.x) koff[i] = i < a.kpos ? ((i / p.kw) * a.pin_w + i % p.kw) * 4 : 0;
  const T zero = FromFloat<T>(0.f);
  const T* xn = a.x + n * p.xs[0];
  const int npix = a.pin_h * a.pin_w;
  // Offsets within one image fit 32 bits (PlanConvPool checks); a thread's pixels advance by
  // blockDim.x, walked as (row, column) steps instead of a division per pixel.
  const int xs1 = static_cast<int>(p.xs[1]), xs2 = static_cast<int>(p.xs[2]), xs3 = static_cast<int>(p.xs[3]);
  const int step_r = static_cast<int>(blockDim.x) / a.pin_w, step_c = static_cast<int>(blockDim.x) % a.pin_w;
  int pr = tid / a.pin_w, pc = tid % a.pin_w;  // patch row and column of pixel i
  constexpr int kUnroll = 8;
  for (int i0 = tid; i0 < npix; i0 += kUnroll * blockDim.x) {
    T v[kUnroll][4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      const int iy = iy0 + pr, ix = ix0 + pc;
      const bool in = i < npix && iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
      const T* px = xn + (in ? iy * xs2 + ix * xs3 : 0);
#pragma unroll
      for (int c = 0; c < 4; ++c) v[u][c] = in && c < p.cin ? px[c * xs1] : zero;
      pc += step_c;
      pr += step_r;
      if (pc >= a.pin_w) {
        pc -= a.pin_w;
        ++pr;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < npix)
        *reinterpret_cast<uint2*>(patch + i * 4) =
            make_uint2(Bits16(v[u][0]) | Bits16(v[u][1]) << 16, Bits16(v[u][2]) | Bits16(v[u][3]) << 16);
    }
  }
  CpAsyncWaitAll();
  __syncthreads();

  // 2. The GEMM.
  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int rows = a.ch * a.cw;
  int ro[kMtw][2];  // patch offset of this thread's two rows in each of its row tiles
#pragma unroll
  for (int j = 0; j < kMtw; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (warp + j * kWarps) * 16 + g + 8 * h;
      ro[j][h] = r < rows ? ((r / a.cw) * p.sh * a.pin_w + (r % a.cw) * p.sw) * 4 + (t & 1) * 2 : (t & 1) * 2;
    }
  float acc[kMtw][kNB][4];
#pragma unroll
  for (int j = 0; j < kMtw; ++j)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) acc[j][nb][0] = acc[j][nb][1] = acc[j][nb][2] = acc[j][nb][3] = 0.f;
  if constexpr (kLean) {
    // Lean issue: 32-bit shared addresses, filters by ldmatrix (four 8x8 blocks: two
    // n-blocks x two k halves per instruction), no per-tap predicates (a tap past KH*KW
    // reads the row's first pixel against zero filters: 0 unless that pixel is not finite,
    // when the output is not finite either).
    uint32_t abase[kMtw][2];
    const uint32_t patch_s = static_cast<uint32_t>(__cvta_generic_to_shared(patch));
#pragma unroll
    for (int j = 0; j < kMtw; ++j) {
      abase[j][0] = patch_s + ro[j][0] * static_cast<uint32_t>(sizeof(T));
      abase[j][1] = patch_s + ro[j][1] * static_cast<uint32_t>(sizeof(T));
    }
    const uint32_t bbase = static_cast<uint32_t>(
        __cvta_generic_to_shared(wsm + ((lane >> 4) * 8 + (lane & 7)) * ldb + ((lane >> 3) & 1) * 8));
    const uint32_t bpair = 16u * ldb * static_cast<uint32_t>(sizeof(T));  // bytes between n-block pairs
    for (int ks = 0; ks < a.ksteps; ++ks) {
      const int pa = ks * 4 + (t >> 1);
      const uint32_t ko0 = koff[pa] * static_cast<uint32_t>(sizeof(T));
      const uint32_t ko1 = koff[pa + 2] * static_cast<uint32_t>(sizeof(T));
      uint32_t b[kNB][2];
#pragma unroll
      for (int pr = 0; pr < kNB / 2; ++pr) {
        uint32_t r[4];
        LdMatrixX4At(r, bbase + pr * bpair + ks * 16 * static_cast<uint32_t>(sizeof(T)));
        b[2 * pr][0] = r[0];
        b[2 * pr][1] = r[1];
        b[2 * pr + 1][0] = r[2];
        b[2 * pr + 1][1] = r[3];
      }
#pragma unroll
      for (int j = 0; j < kMtw; ++j) {
        const uint32_t af[4] = {Lds32At(abase[j][0] + ko0), Lds32At(abase[j][1] + ko0), Lds32At(abase[j][0] + ko1),
                                Lds32At(abase[j][1] + ko1)};
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) Mma<T>(acc[j][nb], af, b[nb][0], b[nb][1]);
      }
    }
  } else {
    for (int ks = 0; ks < a.ksteps; ++ks) {
      const int pa = ks * 4 + (t >> 1);
      const int ko0 = koff[pa], ko1 = koff[pa + 2];
      const bool v0 = pa < a.kpos, v1 = pa + 2 < a.kpos;  // taps past KH*KW: zero filters, zero A too
      uint32_t b[kNB][2];
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        const T* wr = wsm + (nb * 8 + g) * ldb + ks * 16 + 2 * t;
        b[nb][0] = Lds32(wr);
        b[nb][1] = Lds32(wr + 8);
      }
#pragma unroll
      for (int j = 0; j < kMtw; ++j) {
        const uint32_t af[4] = {v0 ? Lds32(patch + ro[j][0] + ko0) : 0u, v0 ? Lds32(patch + ro[j][1] + ko0) : 0u,
                                v1 ? Lds32(patch + ro[j][0] + ko1) : 0u, v1 ? Lds32(patch + ro[j][1] + ko1) : 0u};
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) Mma<T>(acc[j][nb], af, b[nb][0], b[nb][1]);
      }
    }
  }
  __syncthreads();  // the stage below reuses the patch and filter memory

  // 3. Epilogue into the stage, then the pool.
  T* const stage = reinterpret_cast<T*>(smem_raw);
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    const int c = n0 + nb * 8 + 2 * t;
    const float b0 = a.bias != nullptr && c < p.cout ? ToFloat(a.bias[c]) : 0.f;
    const float b1 = a.bias != nullptr && c + 1 < p.cout ? ToFloat(a.bias[c + 1]) : 0.f;
#pragma unroll
    for (int j = 0; j < kMtw; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = (warp + j * kWarps) * 16 + g + 8 * h;
        if (r >= rows) continue;
        float y0 = acc[j][nb][2 * h] + b0, y1 = acc[j][nb][2 * h + 1] + b1;
        if (p.act == UnaryOp::kRelu) {  // the common stem, without a trip through the stage
          y0 = y0 > 0.f ? y0 : (isnan(y0) ? y0 : 0.f);
          y1 = y1 > 0.f ? y1 : (isnan(y1) ? y1 : 0.f);
        }
        *reinterpret_cast<uint32_t*>(stage + r * kLdc + nb * 8 + 2 * t) = Pack2<T>(y0, y1);
      }
  }
  __syncthreads();
  if (p.act != UnaryOp::kIdentity && p.act != UnaryOp::kRelu) {  // other activations, from the rounded sum
    for (int i = tid; i < rows * kCols; i += blockDim.x) {
      T* e = stage + (i / kCols) * kLdc + i % kCols;
      *e = FromFloat<T>(ApplyUnary(p.act, ToFloat(*e), p.act_p0, p.act_p1));
    }
    __syncthreads();
  }
  for (int i = tid; i < a.tph * a.tpw * kNB; i += blockDim.x) {
    const int cell = i / kNB, chunk = i % kNB;
    const int gy = py0 + cell / a.tpw, gx = px0 + cell % a.tpw;
    const int c0 = n0 + chunk * 8;
    if (gy >= p.ph || gx >= p.pw || c0 >= p.cout) continue;
    // The max in T itself (exact), two channels per instruction; NaNs lose, as in fmaxf.
    uint32_t m[4];
    const uint32_t lowest = Pack2<T>(-INFINITY, -INFINITY);
#pragma unroll
    for (int e = 0; e < 4; ++e) m[e] = lowest;
    for (int dy = 0; dy < p.pk_h; ++dy) {
      const int oy = gy * p.ps_h - p.pp_h + dy;
      if (oy < 0 || oy >= p.oh) continue;
      for (int dx = 0; dx < p.pk_w; ++dx) {
        const int ox = gx * p.ps_w - p.pp_w + dx;
        if (ox < 0 || ox >= p.ow) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(stage + ((oy - oy0) * a.cw + (ox - ox0)) * kLdc + chunk * 8);
        m[0] = Max2<T>(m[0], v.x);
        m[1] = Max2<T>(m[1], v.y);
        m[2] = Max2<T>(m[2], v.z);
        m[3] = Max2<T>(m[3], v.w);
      }
    }
    if (p.out_nhwc) {
      *reinterpret_cast<uint4*>(a.y + ((n * p.ph + gy) * p.pw + gx) * p.cout + c0) = make_uint4(m[0], m[1], m[2], m[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = Unpack2<T>(m[e]);
        a.y[((n * p.cout + c0 + 2 * e) * p.ph + gy) * p.pw + gx] = FromFloat<T>(f.x);
        a.y[((n * p.cout + c0 + 2 * e + 1) * p.ph + gy) * p.pw + gx] = FromFloat<T>(f.y);
      }
    }
  }
#else
  __trap();  // the host never launches this below sm_80 (ConvPoolKernel checks the device)
#endif
}

// Filters [Cout, Cin, KH, KW] -> [Cout rounded up to 64][ksteps * 16] with k = (kh * KW + kw) * 4 + c,
// zeros for c >= Cin, taps past KH * KW and channels past Cout.
template <class T>
__global__ void PackFiltersKernel(const T* w, T* packed, ConvPoolParams p, int kdim, int64_t total) {
  const int kpos = p.kh * p.kw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t nn = i / kdim;
    const int k = static_cast<int>(i % kdim), pos = k >> 2, c = k & 3;
    packed[i] = nn < p.cout && pos < kpos && c < p.cin ? w[(nn * p.cin + c) * kpos + pos] : FromFloat<T>(0.f);
  }
}

int64_t PackedElements(const ConvPoolParams& p) {
  return (p.cout + kCols - 1) / kCols * kCols * ((p.kh * p.kw + 3) / 4 * 16);
}

template <class T, int kWarps, int kMtw, int kMinBlocks, bool kLean>
cudaError_t LaunchTyped(const void* x, const void* w, const void* bias, void* y, const ConvPoolParams& p,
                        const ConvPoolPlan& plan, cudaStream_t st) {
  Args<T> a{};
  a.x = static_cast<const T*>(x);
  a.w = static_cast<const T*>(w);
  a.bias = static_cast<const T*>(bias);
  a.y = static_cast<T*>(y);
  a.p = p;
  a.tph = plan.tph;
  a.tpw = plan.tpw;
  const Geometry geo = GeometryOf(p, plan.tph, plan.tpw, sizeof(T));
  a.ch = geo.ch;
  a.cw = geo.cw;
  a.pin_h = geo.pin_h;
  a.pin_w = geo.pin_w;
  a.ksteps = geo.ksteps;
  a.kpos = p.kh * p.kw;
  a.tiles_w = static_cast<int>((p.pw + plan.tpw - 1) / plan.tpw);
  const int64_t tiles = ((p.ph + plan.tph - 1) / plan.tph) * a.tiles_w;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.n),
                  static_cast<unsigned>((p.cout + kCols - 1) / kCols));
  auto* kernel = ConvMaxPoolKernel<T, kWarps, kMtw, kMinBlocks, kLean>;
  if (plan.smem_bytes > 48 * 1024) {
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes));
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, 32 * kWarps, plan.smem_bytes, st>>>(a);
  return cudaGetLastError();
}

template <class T>
cudaError_t DispatchVariant(const void* x, const void* w, const void* bias, void* y, const ConvPoolParams& p,
                            const ConvPoolPlan& plan, cudaStream_t st) {
  switch (plan.variant) {
    case 0:
      return LaunchTyped<T, 8, 2, 1, false>(x, w, bias, y, p, plan, st);
    case 1:
      return LaunchTyped<T, 4, 4, 1, false>(x, w, bias, y, p, plan, st);
    case 2:
      return LaunchTyped<T, 8, 4, 1, false>(x, w, bias, y, p, plan, st);
    case 3:
      return LaunchTyped<T, 8, 2, 3, false>(x, w, bias, y, p, plan, st);
    case 4:
      return LaunchTyped<T, 4, 2, 6, false>(x, w, bias, y, p, plan, st);
    case 5:
      return LaunchTyped<T, 8, 2, 1, true>(x, w, bias, y, p, plan, st);
    case 6:
      return LaunchTyped<T, 8, 4, 1, true>(x, w, bias, y, p, plan, st);
    case 7:
      return LaunchTyped<T, 8, 2, 2, true>(x, w, bias, y, p, plan, st);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

int ConvPoolVariants() {
  return static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
}

bool PlanConvPool(const ConvPoolParams& p, int variant, ConvPoolPlan* plan, std::string* why) {
  auto fail = [&](const char* w) {
    if (why) *why = w;
    return false;
  };
  if (variant < 0 || variant >= ConvPoolVariants()) return fail("no such variant");
  if (p.cin < 1 || p.cin > 4) return fail("more than 4 input channels");
  if (p.cout < 8 || p.cout % 8 != 0) return fail("output channels not a multiple of 8");
  if (p.kh < 1 || p.kw < 1 || p.kh * p.kw > 121) return fail("conv kernel larger than 11x11");
  if (p.sh < 1 || p.sw < 1 || p.ps_h < 1 || p.ps_w < 1 || p.pk_h < 1 || p.pk_w < 1) return fail("bad strides");
  if (p.n < 1 || p.n > 65535 || p.ph < 1 || p.pw < 1) return fail("batch above 65535 or empty output");
  // Offsets within one image (and its strides) in 32 bits.
  if (p.cin * p.h * p.w >= (int64_t(1) << 31) || p.oh * p.ow >= (int64_t(1) << 30) || p.xs[1] >= (int64_t(1) << 31) ||
      p.xs[2] >= (int64_t(1) << 31) || p.xs[3] >= (int64_t(1) << 31))
    return fail("image too large");
  const int cap = 16 * kVariants[variant].warps * kVariants[variant].mtw;
  ConvPoolPlan best{};
  int64_t best_blocks = -1, best_rows = 0;
  for (int tph = 1; tph <= std::min<int64_t>(p.ph, 64); ++tph) {
    for (int tpw = 1; tpw <= std::min<int64_t>(p.pw, 64); ++tpw) {
      const Geometry g = GeometryOf(p, tph, tpw, 2);
      const int64_t rows = static_cast<int64_t>(g.ch) * g.cw;
      if (rows > cap) break;  // grows with tpw
      if (g.smem() > kMaxSmem) break;
      const int64_t blocks = ((p.ph + tph - 1) / tph) * ((p.pw + tpw - 1) / tpw);
      if (best_blocks < 0 || blocks < best_blocks || (blocks == best_blocks && rows < best_rows)) {
        best_blocks = blocks;
        best_rows = rows;
        best = ConvPoolPlan{variant, tph, tpw, g.smem()};
      }
    }
  }
  if (best_blocks < 0) return fail("pool window too large for one block");
  if (best_blocks > 0x7fffffff) return fail("too many tiles");
  *plan = best;
  return true;
}

size_t ConvPoolPackedBytes(const ConvPoolParams& p, size_t elem) {
  return PackedElements(p) * elem;
}

cudaError_t LaunchPackConvPoolFilters(FloatType t, const void* w, void* packed, const ConvPoolParams& p,
                                      cudaStream_t stream) {
  const int64_t total = PackedElements(p);
  const int kdim = (p.kh * p.kw + 3) / 4 * 16;
  switch (t) {
    case FloatType::kF16:
      PackFiltersKernel<__half><<<GridFor(total), kThreads, 0, stream>>>(static_cast<const __half*>(w),
                                                                         static_cast<__half*>(packed), p, kdim, total);
      return cudaGetLastError();
    case FloatType::kBF16:
      PackFiltersKernel<__nv_bfloat16><<<GridFor(total), kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(w), static_cast<__nv_bfloat16*>(packed), p, kdim, total);
      return cudaGetLastError();
    case FloatType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchConvMaxPool(FloatType t, const void* x, const void* w, const void* bias, void* y,
                              const ConvPoolParams& p, const ConvPoolPlan& plan, cudaStream_t stream) {
  switch (t) {
    case FloatType::kF16:
      return DispatchVariant<__half>(x, w, bias, y, p, plan, stream);
    case FloatType::kBF16:
      return DispatchVariant<__nv_bfloat16>(x, w, bias, y, p, plan, stream);
    case FloatType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
