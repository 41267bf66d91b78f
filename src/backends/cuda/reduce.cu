#include <cstring>
#include <type_traits>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/reduce.h"

namespace sampan::cuda {
namespace {

// ---------------------------------------------------------------- the reductions
// Each reducer says what one element contributes (Load), how two partial results
// combine (Combine: associative and commutative, so any summation tree gives the
// reference's answer up to float rounding) and what the output is (Finish).

template <class T>
struct IntLimits;
template <>
struct IntLimits<int32_t> {
  static constexpr long long kLowest = -2147483647LL - 1, kMax = 2147483647LL;
};
template <>
struct IntLimits<int64_t> {
  static constexpr long long kLowest = -9223372036854775807LL - 1, kMax = 9223372036854775807LL;
};

// f16/bf16 accumulate in f32. f32 sums and products accumulate in f64: a long row's sum
// can cancel to a fraction of its terms, and f32 then loses the 1e-5 relative accuracy the
// reference (f64) has. The loads stay the bottleneck: f64 adds are plentiful next to them.
template <ReduceOp OP, class T>
struct FloatReduce {
  static constexpr bool kWide = std::is_same_v<T, float> && OP != ReduceOp::kMax && OP != ReduceOp::kMin;
  using Acc = std::conditional_t<kWide, double, float>;
  using Out = T;
  int64_t r;
  __device__ Acc Init() const {
    if constexpr (OP == ReduceOp::kMax) return -INFINITY;
    if constexpr (OP == ReduceOp::kMin) return INFINITY;
    if constexpr (OP == ReduceOp::kProd) return 1;
    return 0;
  }
  __device__ Acc Load(T v, int64_t) const {
    const Acc x = ToFloat(v);
    if constexpr (OP == ReduceOp::kL1) return x < 0 ? -x : x;
    if constexpr (OP == ReduceOp::kL2 || OP == ReduceOp::kSumSquare) return x * x;
    return x;
  }
  __device__ Acc Combine(Acc a, Acc b) const {
    // NaN wins either way round, as in the reference's `v > s || isnan(v)`.
    if constexpr (OP == ReduceOp::kMax) return b > a || isnan(b) ? b : a;
    if constexpr (OP == ReduceOp::kMin) return b < a || isnan(b) ? b : a;
    if constexpr (OP == ReduceOp::kProd) return a * b;
    return a + b;
  }
  __device__ Out Finish(Acc a) const {
    if constexpr (OP == ReduceOp::kMean) a /= static_cast<Acc>(r);  // r == 0: 0 / 0 = NaN, as the reference
    if constexpr (OP == ReduceOp::kL2) a = sqrt(a);
    if constexpr (OP == ReduceOp::kLogSum) a = log(a);
    return FromFloat<T>(static_cast<float>(a));
  }
};

// log(sum(exp(x))) in one pass: the running max and the sum of exp(x - max).
struct MaxSum {
  float m, s;
};

template <class T>
struct LogSumExpReduce {
  using Acc = MaxSum;
  using Out = T;
  int64_t r;
  __device__ Acc Init() const { return {-INFINITY, 0.f}; }
  __device__ Acc Load(T v, int64_t) const { return {ToFloat(v), 1.f}; }
  __device__ Acc Combine(Acc a, Acc b) const {
    if (isnan(a.m) || isnan(b.m)) return {NAN, 0.f};
    const Acc& hi = a.m >= b.m ? a : b;
    const Acc& lo = a.m >= b.m ? b : a;
    // Only -inf so far (the sum is 0), or a +inf (the result is +inf): no exp(inf - inf).
    if (isinf(hi.m)) return {hi.m, 0.f};
    return {hi.m, hi.s + lo.s * expf(lo.m - hi.m)};
  }
  __device__ Out Finish(Acc a) const {
    // The reference: -inf for an empty or all -inf slice, +inf when one is +inf, NaN with a NaN.
    return FromFloat<T>(isnan(a.m) || isinf(a.m) ? a.m : a.m + logf(a.s));
  }
};

// Integers: sums and products in unsigned 64 bits (wrap-around, the same low bits as the
// reference's int64 accumulator), max/min in signed 64 bits.
template <ReduceOp OP, class T>
struct IntReduce {
  static constexpr bool kOrder = OP == ReduceOp::kMax || OP == ReduceOp::kMin;
  using Acc = std::conditional_t<kOrder, long long, unsigned long long>;
  using Out = T;
  int64_t r;
  __device__ Acc Init() const {
    if constexpr (OP == ReduceOp::kMax) return IntLimits<T>::kLowest;
    if constexpr (OP == ReduceOp::kMin) return IntLimits<T>::kMax;
    if constexpr (OP == ReduceOp::kProd) return 1;
    return 0;
  }
  __device__ Acc Load(T v, int64_t) const {
    const long long x = v;
    if constexpr (kOrder) return x;
    if constexpr (OP == ReduceOp::kL1) return x < 0 ? 0ull - static_cast<Acc>(x) : static_cast<Acc>(x);
    if constexpr (OP == ReduceOp::kSumSquare) return static_cast<Acc>(x) * static_cast<Acc>(x);
    return static_cast<Acc>(x);
  }
  __device__ Acc Combine(Acc a, Acc b) const {
    if constexpr (OP == ReduceOp::kMax) return a > b ? a : b;
    if constexpr (OP == ReduceOp::kMin) return a < b ? a : b;
    if constexpr (OP == ReduceOp::kProd) return a * b;
    return a + b;
  }
  __device__ Out Finish(Acc a) const {
    if constexpr (OP == ReduceOp::kMean) return r == 0 ? T(0) : static_cast<T>(static_cast<long long>(a) / r);
    return static_cast<T>(static_cast<long long>(a));
  }
};

template <class V>
struct ValueIndex {
  V v;
  long long i;  // -1: nothing seen yet
};

// ArgMax/ArgMin: a NaN is the extreme and the first NaN wins (the reference stops there);
// equal values resolve by index, which makes the order a total one (any tree gives the same).
template <class T, bool kMax>
struct ArgReduce {
  using V = std::conditional_t<std::is_integral_v<T>, long long, float>;
  using Acc = ValueIndex<V>;
  using Out = int64_t;
  int64_t r;
  bool last;
  __device__ static bool IsNan(V v) {
    if constexpr (std::is_integral_v<V>)
      return false;
    else
      return isnan(v);
  }
  __device__ Acc Init() const { return {V(0), -1}; }
  __device__ Acc Load(T v, int64_t j) const {
    if constexpr (std::is_integral_v<T>)
      return {static_cast<long long>(v), j};
    else
      return {ToFloat(v), j};
  }
  __device__ Acc Combine(Acc a, Acc b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = IsNan(a.v), bn = IsNan(b.v);
    if (an && bn) return a.i < b.i ? a : b;
    if (an || bn) return an ? a : b;
    if (a.v == b.v) return (last ? a.i > b.i : a.i < b.i) ? a : b;
    return (kMax ? a.v > b.v : a.v < b.v) ? a : b;
  }
  __device__ Out Finish(Acc a) const { return a.i; }
};

// ---------------------------------------------------------------- kernels

template <class A>
__device__ __forceinline__ A ShflXor(A a, int offset) {
  static_assert(sizeof(A) % 4 == 0, "shuffled in 32-bit words");
  unsigned w[sizeof(A) / 4];
  memcpy(w, &a, sizeof(A));
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(A) / 4); ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], offset);
  memcpy(&a, w, sizeof(A));
  return a;
}

template <class T>
struct alignas(16) Pack {
  T e[16 / sizeof(T)];
};

constexpr size_t kMaxAcc = 16;  // partial-result slot size (ReduceWorkspace)

// Rows: each (column, split) task is reduced by `lanes` threads (1..32 within a warp, or
// the whole block), lane t taking elements t, t + lanes, ... of its chunk; element j of
// column c = (o, i) is x[(o * r + j) * inner + i]. inner == 1 is the contiguous case
// (`vec`: 16-byte loads, row and chunk starts aligned, lengths multiples of the pack);
// a small inner > 1 reads strided rows whose neighbours share the cache lines.
template <class R, class T>
__global__ void RowKernel(R red, const T* x, typename R::Out* y, typename R::Acc* partial, int64_t tasks, int64_t r,
                          int64_t inner, int64_t chunk, int splits, int lanes, bool vec) {
  using Acc = typename R::Acc;
  static_assert(sizeof(Acc) <= kMaxAcc, "partial slot too small");
  __shared__ Acc smem[32];
  const int64_t task = blockIdx.x * int64_t(blockDim.x / lanes) + threadIdx.x / lanes;
  const int t = threadIdx.x % lanes;
  Acc acc = red.Init();
  if (task < tasks) {
    // (64-bit divisions are slow next to a short row's loads: skip the trivial ones)
    const int64_t c = splits == 1 ? task : task / splits, o = inner == 1 ? c : c / inner;
    const int64_t i = c - o * inner, b = (task - c * splits) * chunk;
    const int64_t e = b + chunk < r ? b + chunk : r;
    const T* base = x + o * r * inner + i;
    if (vec) {
      constexpr int kV = 16 / sizeof(T);
      for (int64_t j = b + int64_t(t) * kV; j < e; j += int64_t(lanes) * kV) {
        const Pack<T> v = *reinterpret_cast<const Pack<T>*>(base + j);
#pragma unroll
        for (int k = 0; k < kV; ++k) acc = red.Combine(acc, red.Load(v.e[k], j + k));
      }
    } else {
#pragma unroll 4
      for (int64_t j = b + t; j < e; j += lanes) acc = red.Combine(acc, red.Load(base[j * inner], j));
    }
  }
  // Lanes of a task are an aligned group within the warp: xor offsets below `lanes` stay in it.
  for (int off = (lanes < 32 ? lanes : 32) / 2; off > 0; off >>= 1) acc = red.Combine(acc, ShflXor(acc, off));
  if (lanes > 32) {  // one task per block: combine the warps' results (lanes is uniform, so is the barrier)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < lanes / 32 ? smem[lane] : red.Init();
      for (int off = 16; off > 0; off >>= 1) acc = red.Combine(acc, ShflXor(acc, off));
    }
  }
  if (t != 0 || task >= tasks) return;
  if (splits == 1)
    y[task] = red.Finish(acc);
  else
    partial[task] = acc;  // [columns, splits]
}

// Columns (inner >= 32, or enough columns to fill the GPU): one thread per (outer, inner)
// column and split, loads coalesced across inner; four accumulators keep four loads in flight.
template <class R, class T>
__global__ void ColumnKernel(R red, const T* x, typename R::Out* y, typename R::Acc* partial, int64_t outer, int64_t r,
                             int64_t inner, int64_t chunk, int splits) {
  using Acc = typename R::Acc;
  const int64_t cols = outer * inner;
  const int s = blockIdx.y;
  const int64_t b = s * chunk, e = b + chunk < r ? b + chunk : r;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const T* col = x + o * r * inner + i;
    Acc a0 = red.Init(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = b;
    for (; j + 4 <= e; j += 4) {
      a0 = red.Combine(a0, red.Load(col[j * inner], j));
      a1 = red.Combine(a1, red.Load(col[(j + 1) * inner], j + 1));
      a2 = red.Combine(a2, red.Load(col[(j + 2) * inner], j + 2));
      a3 = red.Combine(a3, red.Load(col[(j + 3) * inner], j + 3));
    }
    for (; j < e; ++j) a0 = red.Combine(a0, red.Load(col[j * inner], j));
    const Acc acc = red.Combine(red.Combine(a0, a1), red.Combine(a2, a3));
    if (splits == 1)
      y[c] = red.Finish(acc);
    else
      partial[(o * splits + s) * inner + i] = acc;  // [outer, splits, inner]
  }
}

// Second pass with splits: `width` lanes per column (a thread, or a warp when there are many
// partials) combine its partial results ([columns, splits] from the row kernel, [outer,
// splits, inner] from the column kernel).
template <class R>
__global__ void CombineKernel(R red, const typename R::Acc* partial, typename R::Out* y, int64_t outer, int64_t inner,
                              int splits, bool by_column, int width) {
  const int64_t c = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / width;
  const int lane = threadIdx.x % width;
  if (c >= outer * inner) return;  // whole groups: c is the same in all lanes of one
  const int64_t o = c / inner, i = c - o * inner;
  const typename R::Acc* p = by_column ? partial + c * splits : partial + o * splits * inner + i;
  const int64_t step = by_column ? 1 : inner;
  typename R::Acc acc = red.Init();
  for (int s = lane; s < splits; s += width) acc = red.Combine(acc, p[s * step]);
  for (int off = width / 2; off > 0; off >>= 1) acc = red.Combine(acc, ShflXor(acc, off));
  if (lane == 0) y[c] = red.Finish(acc);
}

template <class R, class T>
cudaError_t Run(R red, const ReduceParams& p, const void* xv, void* yv, void* partials, cudaStream_t st) {
  using Acc = typename R::Acc;
  const int64_t cols = p.outer * p.inner;
  if (cols == 0) return cudaSuccess;
  const bool lanes_ok =
      p.lanes == 0 || p.lanes == kThreads || (p.lanes >= 1 && p.lanes <= 32 && (p.lanes & (p.lanes - 1)) == 0);
  if (!lanes_ok || p.splits < 1 || (p.splits > 1 && (partials == nullptr || p.chunk <= 0)) ||
      (p.splits == 1 && p.chunk != p.r))
    return cudaErrorInvalidValue;  // not planned by PlanReduce
  const T* x = static_cast<const T*>(xv);
  auto* y = static_cast<typename R::Out*>(yv);
  auto* part = static_cast<Acc*>(partials);
  if (p.lanes > 0) {
    const int64_t tasks = cols * p.splits, per_block = kThreads / p.lanes;
    const int64_t blocks = (tasks + per_block - 1) / per_block;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    constexpr int64_t kV = 16 / sizeof(T);
    const bool vec = p.inner == 1 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && p.r % kV == 0 && p.chunk % kV == 0;
    RowKernel<R, T><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(red, x, y, part, tasks, p.r, p.inner, p.chunk,
                                                                        p.splits, p.lanes, vec);
  } else {
    const dim3 grid(GridFor(cols), static_cast<unsigned>(p.splits));
    ColumnKernel<R, T><<<grid, kThreads, 0, st>>>(red, x, y, part, p.outer, p.r, p.inner, p.chunk, p.splits);
  }
  if (p.splits == 1) return cudaGetLastError();
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int width = p.splits >= 64 ? 32 : 1;
  const int64_t combine_blocks = (cols * width + kThreads - 1) / kThreads;
  if (combine_blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  CombineKernel<R><<<static_cast<unsigned>(combine_blocks), kThreads, 0, st>>>(red, part, y, p.outer, p.inner, p.splits,
                                                                               p.lanes > 0, width);
  return cudaGetLastError();
}

template <class T>
cudaError_t RunFloat(const ReduceParams& p, const void* x, void* y, void* ws, cudaStream_t st) {
  switch (p.op) {
    case ReduceOp::kSum:
      return Run<FloatReduce<ReduceOp::kSum, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMean:
      return Run<FloatReduce<ReduceOp::kMean, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMax:
      return Run<FloatReduce<ReduceOp::kMax, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMin:
      return Run<FloatReduce<ReduceOp::kMin, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kProd:
      return Run<FloatReduce<ReduceOp::kProd, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kL1:
      return Run<FloatReduce<ReduceOp::kL1, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kL2:
      return Run<FloatReduce<ReduceOp::kL2, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kSumSquare:
      return Run<FloatReduce<ReduceOp::kSumSquare, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kLogSum:
      return Run<FloatReduce<ReduceOp::kLogSum, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kLogSumExp:
      return Run<LogSumExpReduce<T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kArgMax:
      return Run<ArgReduce<T, true>, T>({p.r, p.select_last}, p, x, y, ws, st);
    case ReduceOp::kArgMin:
      return Run<ArgReduce<T, false>, T>({p.r, p.select_last}, p, x, y, ws, st);
  }
  return cudaErrorInvalidValue;
}

template <class T>
cudaError_t RunInt(const ReduceParams& p, const void* x, void* y, void* ws, cudaStream_t st) {
  switch (p.op) {
    case ReduceOp::kSum:
      return Run<IntReduce<ReduceOp::kSum, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMean:
      return Run<IntReduce<ReduceOp::kMean, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMax:
      return Run<IntReduce<ReduceOp::kMax, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kMin:
      return Run<IntReduce<ReduceOp::kMin, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kProd:
      return Run<IntReduce<ReduceOp::kProd, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kL1:
      return Run<IntReduce<ReduceOp::kL1, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kSumSquare:
      return Run<IntReduce<ReduceOp::kSumSquare, T>, T>({p.r}, p, x, y, ws, st);
    case ReduceOp::kArgMax:
      return Run<ArgReduce<T, true>, T>({p.r, p.select_last}, p, x, y, ws, st);
    case ReduceOp::kArgMin:
      return Run<ArgReduce<T, false>, T>({p.r, p.select_last}, p, x, y, ws, st);
    default:
      return cudaErrorInvalidValue;  // L2, LogSum, LogSumExp: not for integers (ReduceSupported)
  }
}

}  // namespace

bool ReduceSupported(ReduceOp op, NumType t) {
  if (t == NumType::kI32 || t == NumType::kI64)
    return op != ReduceOp::kL2 && op != ReduceOp::kLogSum && op != ReduceOp::kLogSumExp;
  return true;
}

namespace {

// Lanes per row task for rows (chunks) of n elements: about 16 elements per lane, up to a
// warp; the whole block from 4096 elements on.
int LanesFor(int64_t n) {
  if (n >= 4096) return kThreads;
  int lanes = 1;
  while (lanes < 32 && int64_t(lanes) * 16 < n) lanes *= 2;
  return lanes;
}

}  // namespace

void PlanReduce(ReduceParams* p) {
  // Enough threads to fill the largest GPUs (132 SMs x 2048), without querying the device.
  constexpr int64_t kBusyThreads = int64_t(1) << 18;
  constexpr int64_t kMaxSplits = 1024;
  p->splits = 1;
  p->chunk = p->r;
  const int64_t cols = p->outer * p->inner;
  // Rows for contiguous reductions, and for a small inner when there are too few columns to
  // give each its own thread (the column kernel would leave most of the GPU idle).
  const bool rows = p->inner == 1 || (p->inner < 32 && cols < kBusyThreads && p->r >= 64);
  p->lanes = rows ? LanesFor(p->r) : 0;
  if (cols == 0) return;
  // A split must be long enough to pay for its partial result: a block's worth of loads on
  // rows, a few dozen sequential loads on columns.
  const int64_t min_split = rows ? 4096 : 128;
  const int64_t busy = cols * (rows ? p->lanes : 1);
  if (p->r < 2 * min_split || busy >= kBusyThreads) return;
  int64_t splits = (kBusyThreads + busy - 1) / busy;
  if (splits > p->r / min_split) splits = p->r / min_split;
  if (splits > kMaxSplits) splits = kMaxSplits;
  if (splits <= 1) return;
  // Chunks in multiples of 8 elements keep every chunk start 16-byte aligned for the row kernel.
  int64_t chunk = (p->r + splits - 1) / splits;
  chunk = (chunk + 7) / 8 * 8;
  if ((p->r + chunk - 1) / chunk <= 1) return;
  p->chunk = chunk;
  p->splits = static_cast<int>((p->r + chunk - 1) / chunk);
  if (rows) p->lanes = LanesFor(chunk);
}

size_t ReduceWorkspace(const ReduceParams& p) {
  if (p.splits <= 1) return 0;
  return static_cast<size_t>(p.outer * p.inner) * static_cast<size_t>(p.splits) * kMaxAcc;
}

cudaError_t LaunchReduce(const ReduceParams& p, const void* x, void* y, void* partials, cudaStream_t stream) {
  if (!ReduceSupported(p.op, p.type)) return cudaErrorInvalidValue;
  switch (p.type) {
    case NumType::kF32:
      return RunFloat<float>(p, x, y, partials, stream);
    case NumType::kF16:
      return RunFloat<__half>(p, x, y, partials, stream);
    case NumType::kBF16:
      return RunFloat<__nv_bfloat16>(p, x, y, partials, stream);
    case NumType::kI32:
      return RunInt<int32_t>(p, x, y, partials, stream);
    case NumType::kI64:
      return RunInt<int64_t>(p, x, y, partials, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
