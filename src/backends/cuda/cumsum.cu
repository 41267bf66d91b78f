#include <type_traits>

#include "backends/cuda/cumsum.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

// f16/bf16 sum in f32, f32 in f64 (the reference's accuracy where running sums cancel),
// integers in unsigned 64 bits (defined wrap-around, the reference's bits).
template <class T>
using ScanAcc = std::conditional_t<std::is_integral_v<T>, unsigned long long,
                                   std::conditional_t<std::is_same_v<T, float>, double, float>>;

template <class T>
__device__ __forceinline__ ScanAcc<T> LoadAcc(T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<unsigned long long>(static_cast<long long>(v));
  else
    return ToFloat(v);
}
template <class T>
__device__ __forceinline__ T StoreAcc(ScanAcc<T> a) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<long long>(a));
  else
    return FromFloat<T>(static_cast<float>(a));
}

constexpr int kItems = 4;  // consecutive elements per thread per tile
constexpr int kMaxWarps = kThreads / 32;

// Elements [b, e) of the task's chunk (logical order: reversed scans count from the end).
struct Chunk {
  int64_t b, e;
};
__device__ __forceinline__ Chunk ChunkOf(int64_t s, int64_t chunk, int64_t n) {
  const int64_t b = s * chunk;
  return {b, b + chunk < n ? b + chunk : n};
}

// Rows (inner == 1): one block per (row, chunk) task, in tiles of blockDim * kItems elements.
// Each thread sums its items, the block scans the thread totals (shuffles within warps, then
// the warp totals) and a carry links the tiles, starting from the chunk's carry-in. Exclusive
// outputs are running sums taken before adding the element, not inclusive ones minus it.
template <class T>
__global__ void ScanRowKernel(const T* x, T* y, int64_t n, int64_t chunk, int splits, const ScanAcc<T>* carries,
                              bool exclusive, bool reverse) {
  using A = ScanAcc<T>;
  __shared__ A warp_total[kMaxWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t task = blockIdx.x, row = task / splits;
  const Chunk ch = ChunkOf(task - row * splits, chunk, n);
  const T* xr = x + row * n;
  T* yr = y + row * n;
  A carry = carries ? carries[task] : A(0);
  for (int64_t base = ch.b; base < ch.e; base += int64_t(blockDim.x) * kItems) {
    const int64_t first = base + int64_t(threadIdx.x) * kItems;
    A v[kItems];
    A local = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t t = first + k;
      v[k] = t < ch.e ? LoadAcc(xr[reverse ? n - 1 - t : t]) : A(0);
      local += v[k];
    }
    A incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const A u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    A ex = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) ex = 0;
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    A before = 0, tile = 0;  // totals of the earlier warps and of the whole tile (same order in every thread)
    for (int w = 0; w < warps; ++w) {
      if (w < warp) before += warp_total[w];
      tile += warp_total[w];
    }
    A run = carry + before + ex;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t t = first + k;
      if (t >= ch.e) break;
      T* out = yr + (reverse ? n - 1 - t : t);
      if (exclusive) {
        *out = StoreAcc<T>(run);
        run += v[k];
      } else {
        run += v[k];
        *out = StoreAcc<T>(run);
      }
    }
    carry += tile;
    __syncthreads();  // warp_total is rewritten by the next tile
  }
}

// Columns (inner > 1, or short rows): one thread per (column, chunk) walks the chunk from its
// carry-in, loads coalesced across inner.
template <class T>
__global__ void ScanColumnKernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, int64_t chunk,
                                 const ScanAcc<T>* carries, bool exclusive, bool reverse) {
  using A = ScanAcc<T>;
  const int64_t cols = outer * inner;
  const int splits = gridDim.y, s = blockIdx.y;
  const Chunk ch = ChunkOf(s, chunk, n);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const int64_t base = o * n * inner + i;
    A run = carries ? carries[c * splits + s] : A(0);
    for (int64_t t = ch.b; t < ch.e; ++t) {
      const int64_t off = base + (reverse ? n - 1 - t : t) * inner;
      const A v = LoadAcc(x[off]);
      if (exclusive) {
        y[off] = StoreAcc<T>(run);
        run += v;
      } else {
        run += v;
        y[off] = StoreAcc<T>(run);
      }
    }
  }
}

// With splits, first pass: the total of every (column, chunk), into totals[c * splits + s]
// (rows: a block per task; columns: a thread per task).
template <class T>
__global__ void RowTotalsKernel(const T* x, ScanAcc<T>* totals, int64_t n, int64_t chunk, int splits, bool reverse) {
  using A = ScanAcc<T>;
  __shared__ A warp_sum[kMaxWarps];
  const int64_t task = blockIdx.x, row = task / splits;
  const Chunk ch = ChunkOf(task - row * splits, chunk, n);
  const T* xr = x + row * n;
  A sum = 0;
  for (int64_t t = ch.b + threadIdx.x; t < ch.e; t += blockDim.x) sum += LoadAcc(xr[reverse ? n - 1 - t : t]);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    A total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sum[w];
    totals[task] = total;
  }
}

template <class T>
__global__ void ColumnTotalsKernel(const T* x, ScanAcc<T>* totals, int64_t outer, int64_t n, int64_t inner,
                                   int64_t chunk, bool reverse) {
  using A = ScanAcc<T>;
  const int64_t cols = outer * inner;
  const int splits = gridDim.y, s = blockIdx.y;
  const Chunk ch = ChunkOf(s, chunk, n);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const T* col = x + o * n * inner + i;
    A sum = 0;
    for (int64_t t = ch.b; t < ch.e; ++t) sum += LoadAcc(col[(reverse ? n - 1 - t : t) * inner]);
    totals[c * splits + s] = sum;
  }
}

// Second pass: each column's chunk totals become the chunks' carry-ins (exclusive scan in place).
template <class A>
__global__ void CarriesKernel(A* totals, int64_t cols, int splits) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    A run = 0;
    for (int s = 0; s < splits; ++s) {
      const A v = totals[c * splits + s];
      totals[c * splits + s] = run;
      run += v;
    }
  }
}

template <class T>
cudaError_t Scan(const CumSumParams& p, const void* xv, void* yv, void* workspace, cudaStream_t st) {
  using A = ScanAcc<T>;
  const int64_t cols = p.outer * p.inner;
  if (cols * p.n == 0) return cudaSuccess;
  if (p.splits < 1 || (p.splits > 1 && (workspace == nullptr || p.chunk <= 0)) || (p.splits == 1 && p.chunk != p.n))
    return cudaErrorInvalidValue;  // not planned by PlanCumSum
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  A* carries = p.splits > 1 ? static_cast<A*>(workspace) : nullptr;
  const int64_t tasks = cols * p.splits;
  if (p.rows && tasks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 column_grid(GridFor(cols), static_cast<unsigned>(p.splits));
  if (carries) {
    if (p.rows)
      RowTotalsKernel<T>
          <<<static_cast<unsigned>(tasks), kThreads, 0, st>>>(x, carries, p.n, p.chunk, p.splits, p.reverse);
    else
      ColumnTotalsKernel<T><<<column_grid, kThreads, 0, st>>>(x, carries, p.outer, p.n, p.inner, p.chunk, p.reverse);
    CarriesKernel<A><<<GridFor(cols), kThreads, 0, st>>>(carries, cols, p.splits);
  }
  if (p.rows) {
    const int threads = p.chunk <= 4 * 32 * kItems ? 32 : kThreads;  // a warp for chunks of up to 4 of its tiles
    ScanRowKernel<T><<<static_cast<unsigned>(tasks), threads, 0, st>>>(x, y, p.n, p.chunk, p.splits, carries,
                                                                       p.exclusive, p.reverse);
  } else {
    ScanColumnKernel<T>
        <<<column_grid, kThreads, 0, st>>>(x, y, p.outer, p.n, p.inner, p.chunk, carries, p.exclusive, p.reverse);
  }
  return cudaGetLastError();
}

}  // namespace

void PlanCumSum(CumSumParams* p) {
  // Enough work to fill the largest GPUs (132 SMs), without querying the device: blocks
  // for rows (one per row), threads for columns (one per column).
  constexpr int64_t kBusyBlocks = 512, kBusyThreads = int64_t(1) << 18;
  constexpr int64_t kMaxSplits = 1024;
  const int64_t cols = p->outer * p->inner;
  p->rows = p->inner == 1 && p->n > 16;  // shorter rows: a thread each (the column kernel)
  p->splits = 1;
  p->chunk = p->n;
  // Chunks long enough to pay for the extra pass over them: several block tiles on rows,
  // a few hundred sequential elements on columns.
  const int64_t min_chunk = p->rows ? 8192 : 256;
  const int64_t target = p->rows ? kBusyBlocks : kBusyThreads;
  if (cols == 0 || cols >= target || p->n < 2 * min_chunk) return;
  int64_t splits = (target + cols - 1) / cols;
  if (splits > p->n / min_chunk) splits = p->n / min_chunk;
  if (splits > kMaxSplits) splits = kMaxSplits;
  if (splits <= 1) return;
  p->chunk = (p->n + splits - 1) / splits;
  p->splits = static_cast<int>((p->n + p->chunk - 1) / p->chunk);
  if (p->splits <= 1) {
    p->splits = 1;
    p->chunk = p->n;
  }
}

size_t CumSumWorkspace(const CumSumParams& p) {
  if (p.splits <= 1) return 0;
  return static_cast<size_t>(p.outer * p.inner) * static_cast<size_t>(p.splits) * 8;  // one 8-byte carry per chunk
}

cudaError_t LaunchCumSum(const CumSumParams& p, const void* x, void* y, void* workspace, cudaStream_t stream) {
  switch (p.type) {
    case NumType::kF32:
      return Scan<float>(p, x, y, workspace, stream);
    case NumType::kF16:
      return Scan<__half>(p, x, y, workspace, stream);
    case NumType::kBF16:
      return Scan<__nv_bfloat16>(p, x, y, workspace, stream);
    case NumType::kI32:
      return Scan<int32_t>(p, x, y, workspace, stream);
    case NumType::kI64:
      return Scan<int64_t>(p, x, y, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
