#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/topk.h"

namespace sampan::cuda {
namespace {

// Order-preserving unsigned keys: NaN (any payload) above +inf, -0 equal to +0.
__device__ __forceinline__ uint32_t Key32(float v) {
  if (isnan(v)) return 0xFFFFFFFFu;
  if (v == 0.f) v = 0.f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ uint32_t Key32(__half v) {
  return Key32(__half2float(v));
}
__device__ __forceinline__ uint32_t Key32(__nv_bfloat16 v) {
  return Key32(__bfloat162float(v));
}
__device__ __forceinline__ uint32_t Key32(int32_t v) {
  return static_cast<uint32_t>(v) ^ 0x80000000u;
}
__device__ __forceinline__ uint64_t Key64(double v) {
  if (isnan(v)) return ~0ull;
  if (v == 0.0) v = 0.0;
  const uint64_t b = static_cast<uint64_t>(__double_as_longlong(v));
  return (b >> 63) ? ~b : (b | (1ull << 63));
}
__device__ __forceinline__ uint64_t Key64(int64_t v) {
  return static_cast<uint64_t>(v) ^ (1ull << 63);
}

// Items sort descending by Before(); smallest-first flips the key, so one order serves both.
// 32-bit keys pack with the complemented index into one uint64 (higher = earlier).
template <class T>
struct Packed32 {
  using Item = uint64_t;
  static constexpr int kTile = 4096;  // 32 KB of shared memory
  __device__ static Item Make(T v, int64_t i, bool largest) {
    const uint32_t k = largest ? Key32(v) : ~Key32(v);
    return (static_cast<uint64_t>(k) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  }
  __device__ static Item Pad() { return 0; }  // below every real item (their low word is >= 1)
  __device__ static int64_t Index(Item a) { return 0xFFFFFFFFu - static_cast<uint32_t>(a); }
  __device__ static bool Before(Item a, Item b) { return a > b; }
};

struct alignas(16) Wide {
  uint64_t key;
  uint32_t idx;
};

template <class T>
struct Wide64 {
  using Item = Wide;
  static constexpr int kTile = 2048;  // 32 KB of shared memory
  __device__ static Item Make(T v, int64_t i, bool largest) {
    return Wide{largest ? Key64(v) : ~Key64(v), static_cast<uint32_t>(i)};
  }
  __device__ static Item Pad() { return Wide{0, 0xFFFFFFFFu}; }
  __device__ static int64_t Index(Item a) { return a.idx; }
  __device__ static bool Before(Item a, Item b) { return a.key > b.key || (a.key == b.key && a.idx < b.idx); }
};

// One compare-exchange step of a bitonic sort over items [0, len) of `a`, whose first item
// has global position `base`: pairs (i, i + stride) inside runs of `size`, descending where
// (position & size) == 0 and ascending elsewhere, so runs merge into a descending whole.
template <class K>
__device__ __forceinline__ void BitonicStep(typename K::Item* a, int64_t len, int64_t base, int64_t size,
                                            int64_t stride) {
  for (int64_t t = threadIdx.x; t < len / 2; t += blockDim.x) {
    const int64_t i = 2 * t - (t & (stride - 1)), j = i + stride;
    const typename K::Item x = a[i], y = a[j];
    const bool desc = ((base + i) & size) == 0;
    if (desc ? K::Before(y, x) : K::Before(x, y)) {
      a[i] = y;
      a[j] = x;
    }
  }
}

// Block per row (grid-stride). `p` is the row length rounded up to a power of two; rows
// longer than a tile use `ws` (p items per block) for the merges with strides >= a tile.
template <class T, class K>
__global__ void TopKKernel(const T* x, T* values, int64_t* indices, TopKShape s, int64_t p, typename K::Item* ws) {
  using Item = typename K::Item;
  __shared__ Item tile[K::kTile];
  const int64_t tl = p < K::kTile ? p : K::kTile;
  const bool global = p > tl;
  Item* g = global ? ws + blockIdx.x * p : nullptr;
  const int64_t rows = s.outer * s.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t o = row / s.inner, in = row % s.inner;
    const T* xr = x + o * s.n * s.inner + in;
    // Sort each tile (the whole row when it fits), with directions from global positions.
    for (int64_t t0 = 0; t0 < p; t0 += tl) {
      for (int64_t j = threadIdx.x; j < tl; j += blockDim.x) {
        const int64_t gi = t0 + j;
        tile[j] = gi < s.n ? K::Make(xr[gi * s.inner], gi, s.largest) : K::Pad();
      }
      __syncthreads();
      for (int64_t size = 2; size <= tl; size <<= 1)
        for (int64_t stride = size / 2; stride > 0; stride >>= 1) {
          BitonicStep<K>(tile, tl, t0, size, stride);
          __syncthreads();
        }
      if (global) {
        for (int64_t j = threadIdx.x; j < tl; j += blockDim.x) g[t0 + j] = tile[j];
        __syncthreads();
      }
    }
    // Merge runs beyond a tile: long strides in global memory, the rest tile by tile.
    for (int64_t size = 2 * tl; size <= p; size <<= 1) {
      for (int64_t stride = size / 2; stride >= tl; stride >>= 1) {
        BitonicStep<K>(g, p, 0, size, stride);
        __syncthreads();
      }
      for (int64_t t0 = 0; t0 < p; t0 += tl) {
        for (int64_t j = threadIdx.x; j < tl; j += blockDim.x) tile[j] = g[t0 + j];
        __syncthreads();
        for (int64_t stride = tl / 2; stride > 0; stride >>= 1) {
          BitonicStep<K>(tile, tl, t0, size, stride);
          __syncthreads();
        }
        for (int64_t j = threadIdx.x; j < tl; j += blockDim.x) g[t0 + j] = tile[j];
        __syncthreads();
      }
    }
    const Item* best = global ? g : tile;
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) {
      const int64_t src = K::Index(best[j]);
      const int64_t dst = (o * s.k + j) * s.inner + in;
      if (values) values[dst] = xr[src * s.inner];
      if (indices) indices[dst] = src;
    }
    __syncthreads();  // the tile is reloaded for the next row
  }
}

// Rows longer than a tile with a moderate k, stage 1: a block per (row, tile) sorts the tile
// in shared memory and keeps its first k2 items (k2 = k rounded up to a power of two); the
// row's k best are among those. Spreads one long row (a vocabulary) over many SMs.
template <class T, class K>
__global__ void TopKTilesKernel(const T* x, TopKShape s, int64_t tiles, int64_t k2, typename K::Item* ws) {
  using Item = typename K::Item;
  __shared__ Item tile[K::kTile];
  const int64_t units = s.outer * s.inner * tiles;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t row = u / tiles, t0 = (u % tiles) * K::kTile;
    const T* xr = x + (row / s.inner) * s.n * s.inner + row % s.inner;
    for (int64_t j = threadIdx.x; j < K::kTile; j += blockDim.x) {
      const int64_t gi = t0 + j;
      tile[j] = gi < s.n ? K::Make(xr[gi * s.inner], gi, s.largest) : K::Pad();
    }
    __syncthreads();
    for (int64_t size = 2; size <= K::kTile; size <<= 1)
      for (int64_t stride = size / 2; stride > 0; stride >>= 1) {
        BitonicStep<K>(tile, K::kTile, 0, size, stride);
        __syncthreads();
      }
    for (int64_t j = threadIdx.x; j < k2; j += blockDim.x) ws[u * k2 + j] = tile[j];
    __syncthreads();
  }
}

// Stage 2: a block per row sorts the tiles' candidates (at most a tile of them) and writes
// the first k.
template <class T, class K>
__global__ void TopKMergeKernel(const T* x, T* values, int64_t* indices, TopKShape s, int64_t m,
                                const typename K::Item* ws) {
  using Item = typename K::Item;
  __shared__ Item tile[K::kTile];
  int64_t p = 1;
  while (p < m) p <<= 1;
  for (int64_t row = blockIdx.x; row < s.outer * s.inner; row += gridDim.x) {
    const int64_t o = row / s.inner, in = row % s.inner;
    for (int64_t j = threadIdx.x; j < p; j += blockDim.x) tile[j] = j < m ? ws[row * m + j] : K::Pad();
    __syncthreads();
    for (int64_t size = 2; size <= p; size <<= 1)
      for (int64_t stride = size / 2; stride > 0; stride >>= 1) {
        BitonicStep<K>(tile, p, 0, size, stride);
        __syncthreads();
      }
    const T* xr = x + o * s.n * s.inner + in;
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) {
      const int64_t src = K::Index(tile[j]);
      const int64_t dst = (o * s.k + j) * s.inner + in;
      if (values) values[dst] = xr[src * s.inner];
      if (indices) indices[dst] = src;
    }
    __syncthreads();
  }
}

int64_t RoundUpPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

constexpr size_t kMaxWorkspace = size_t{256} << 20;

// How a launch sorts: the whole row in shared memory; two stages (tiles, then their
// candidates); or one block per row merging through a buffer of p items.
struct Plan {
  int64_t p = 1;  // row length rounded up to a power of two
  bool two_stage = false;
  int64_t tiles = 1, k2 = 1;
  int64_t blocks = 1;    // single-stage launch
  size_t workspace = 0;  // bytes
};

Plan MakePlan(const TopKShape& s, int64_t tile, size_t item) {
  Plan pl;
  const int64_t rows = s.outer * s.inner;
  pl.p = RoundUpPow2(s.n);
  if (pl.p <= tile || rows == 0 || s.k == 0) {
    pl.blocks = std::clamp<int64_t>(rows, 1, 1 << 20);
    return pl;
  }
  pl.tiles = (s.n + tile - 1) / tile;
  pl.k2 = RoundUpPow2(s.k);
  const size_t two = static_cast<size_t>(rows * pl.tiles * pl.k2) * item;
  if (pl.tiles * pl.k2 <= tile && two <= kMaxWorkspace) {
    pl.two_stage = true;
    pl.workspace = two;
    return pl;
  }
  // Per-block merge buffers kept within kMaxWorkspace; blocks then loop over the rows.
  const int64_t fit = static_cast<int64_t>(kMaxWorkspace / (static_cast<size_t>(pl.p) * item));
  pl.blocks = std::clamp<int64_t>(std::min(rows, fit), 1, 1 << 16);
  pl.workspace = static_cast<size_t>(pl.blocks * pl.p) * item;
  return pl;
}

template <class T, class K>
cudaError_t TopK(const void* x, void* values, int64_t* indices, const TopKShape& s, void* ws, size_t ws_bytes,
                 cudaStream_t st) {
  using Item = typename K::Item;
  const int64_t rows = s.outer * s.inner;
  if (rows == 0 || s.k == 0) return cudaSuccess;
  if (s.k > s.n || s.n >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const Plan pl = MakePlan(s, K::kTile, sizeof(Item));
  if (ws_bytes < pl.workspace || (pl.workspace > 0 && ws == nullptr)) return cudaErrorInvalidValue;
  const T* xt = static_cast<const T*>(x);
  Item* wi = static_cast<Item*>(ws);
  if (pl.two_stage) {
    const int64_t m = pl.tiles * pl.k2;
    TopKTilesKernel<T, K><<<static_cast<unsigned>(std::min<int64_t>(rows * pl.tiles, 1 << 20)), 512, 0, st>>>(
        xt, s, pl.tiles, pl.k2, wi);
    const int threads = static_cast<int>(std::clamp<int64_t>(RoundUpPow2(m) / 2, 32, 512));
    TopKMergeKernel<T, K><<<static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20)), threads, 0, st>>>(
        xt, static_cast<T*>(values), indices, s, m, wi);
    return cudaGetLastError();
  }
  const int threads = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(pl.p, K::kTile) / 2, 32, 512));
  TopKKernel<T, K>
      <<<static_cast<unsigned>(pl.blocks), threads, 0, st>>>(xt, static_cast<T*>(values), indices, s, pl.p, wi);
  return cudaGetLastError();
}

}  // namespace

size_t TopKWorkspace(TopKType t, const TopKShape& s) {
  const bool wide = t == TopKType::kF64 || t == TopKType::kI64;
  return MakePlan(s, wide ? Wide64<double>::kTile : Packed32<float>::kTile, wide ? sizeof(Wide) : sizeof(uint64_t))
      .workspace;
}

cudaError_t LaunchTopK(TopKType t, const void* x, void* values, int64_t* indices, const TopKShape& s, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream) {
  switch (t) {
    case TopKType::kF32:
      return TopK<float, Packed32<float>>(x, values, indices, s, workspace, workspace_bytes, stream);
    case TopKType::kF16:
      return TopK<__half, Packed32<__half>>(x, values, indices, s, workspace, workspace_bytes, stream);
    case TopKType::kBF16:
      return TopK<__nv_bfloat16, Packed32<__nv_bfloat16>>(x, values, indices, s, workspace, workspace_bytes, stream);
    case TopKType::kI32:
      return TopK<int32_t, Packed32<int32_t>>(x, values, indices, s, workspace, workspace_bytes, stream);
    case TopKType::kF64:
      return TopK<double, Wide64<double>>(x, values, indices, s, workspace, workspace_bytes, stream);
    case TopKType::kI64:
      return TopK<int64_t, Wide64<int64_t>>(x, values, indices, s, workspace, workspace_bytes, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
