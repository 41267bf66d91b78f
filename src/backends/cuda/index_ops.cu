#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/index_ops.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

__device__ __forceinline__ int64_t LoadIndex(const void* p, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

// [-n, n) -> [0, n); -1 when out of range.
__device__ __forceinline__ int64_t Wrap(int64_t v, int64_t n) {
  if (v < -n || v >= n) return -1;
  return v < 0 ? v + n : v;
}

__device__ __forceinline__ void FlagBad(int* bad) {
  if (bad) *bad = 1;
}

// ---------------------------------------------------------------- scatter combines

template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 2, unsigned short,
                                  std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>>;

// *p = f(*p) atomically, by compare-and-swap on the element's bits (16-bit CAS needs sm_70).
template <class T, class F>
__device__ __forceinline__ void AtomicUpdate(T* p, F f) {
  using U = BitsOf<T>;
  U* a = reinterpret_cast<U*>(p);
  U old = *a, assumed;
  do {
    assumed = old;
    T cur;
    memcpy(&cur, &assumed, sizeof(T));
    const T next = f(cur);
    U bits;
    memcpy(&bits, &next, sizeof(T));
    if (bits == assumed) return;  // max/min that keep the value: no write needed
    old = atomicCAS(a, assumed, bits);
  } while (old != assumed);
}

// The reference's Combine in compute type C: max/min as std::max/std::min (NaN handling included).
template <class C>
__device__ __forceinline__ C Reduce(C a, C b, ScatterReduction r) {
  switch (r) {
    case ScatterReduction::kAdd:
      return a + b;
    case ScatterReduction::kMul:
      return a * b;
    case ScatterReduction::kMax:
      return a < b ? b : a;
    case ScatterReduction::kMin:
      return b < a ? b : a;
    case ScatterReduction::kNone:
      break;
  }
  return b;
}

// Byte moves (any type): reduction none only.
template <class T>
__device__ __forceinline__ void Combine(T* p, T v, ScatterReduction) {
  *p = v;
}
__device__ __forceinline__ void Combine(float* p, float v, ScatterReduction r) {
  if (r == ScatterReduction::kNone)
    *p = v;
  else if (r == ScatterReduction::kAdd)
    atomicAdd(p, v);
  else
    AtomicUpdate(p, [&](float a) { return Reduce(a, v, r); });
}
__device__ __forceinline__ void Combine(double* p, double v, ScatterReduction r) {
  if (r == ScatterReduction::kNone)
    *p = v;
  else if (r == ScatterReduction::kAdd)
    atomicAdd(p, v);
  else
    AtomicUpdate(p, [&](double a) { return Reduce(a, v, r); });
}
// Half types compute in float and round once per update, as the reference does.
__device__ __forceinline__ void Combine(__half* p, __half v, ScatterReduction r) {
  if (r == ScatterReduction::kNone)
    *p = v;
  else if (r == ScatterReduction::kAdd)
    atomicAdd(p, v);
  else
    AtomicUpdate(p, [&](__half a) { return __float2half_rn(Reduce(__half2float(a), __half2float(v), r)); });
}
__device__ __forceinline__ void Combine(__nv_bfloat16* p, __nv_bfloat16 v, ScatterReduction r) {
  if (r == ScatterReduction::kNone)
    *p = v;
  else if (r == ScatterReduction::kAdd)
    atomicAdd(p, v);
  else
    AtomicUpdate(
        p, [&](__nv_bfloat16 a) { return __float2bfloat16_rn(Reduce(__bfloat162float(a), __bfloat162float(v), r)); });
}
// Integers wrap on overflow (unsigned arithmetic), as two's complement hardware does.
__device__ __forceinline__ void Combine(int32_t* p, int32_t v, ScatterReduction r) {
  switch (r) {
    case ScatterReduction::kNone:
      *p = v;
      break;
    case ScatterReduction::kAdd:
      atomicAdd(p, v);
      break;
    case ScatterReduction::kMax:
      atomicMax(p, v);
      break;
    case ScatterReduction::kMin:
      atomicMin(p, v);
      break;
    case ScatterReduction::kMul:
      AtomicUpdate(
          p, [&](int32_t a) { return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(v)); });
      break;
  }
}
__device__ __forceinline__ void Combine(int64_t* p, int64_t v, ScatterReduction r) {
  auto* u = reinterpret_cast<unsigned long long*>(p);
  auto* s = reinterpret_cast<long long*>(p);
  switch (r) {
    case ScatterReduction::kNone:
      *p = v;
      break;
    case ScatterReduction::kAdd:
      atomicAdd(u, static_cast<unsigned long long>(v));
      break;
    case ScatterReduction::kMax:
      atomicMax(s, static_cast<long long>(v));
      break;
    case ScatterReduction::kMin:
      atomicMin(s, static_cast<long long>(v));
      break;
    case ScatterReduction::kMul:
      AtomicUpdate(
          p, [&](int64_t a) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(v)); });
      break;
  }
}

// ---------------------------------------------------------------- kernels

template <class T, class I>
__global__ void GatherElementsKernel(const T* data, const void* idx, bool i64, T* out, StridedShape walk, I n,
                                     int64_t axis_dim, int64_t axis_stride, int* bad) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[1];
    StridedOffsets<I, 1>(walk, i, off);
    const int64_t w = Wrap(LoadIndex(idx, i64, i), axis_dim);
    if (w < 0) {
      FlagBad(bad);
      out[i] = T{};
      continue;
    }
    out[i] = data[static_cast<int64_t>(off[0]) + w * axis_stride];
  }
}

template <class T, class I>
__global__ void ScatterElementsKernel(const T* upd, const void* idx, bool i64, T* out, StridedShape walk, I n,
                                      int64_t axis_dim, int64_t axis_stride, ScatterReduction red, int* bad) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[1];
    StridedOffsets<I, 1>(walk, i, off);
    const int64_t w = Wrap(LoadIndex(idx, i64, i), axis_dim);
    if (w < 0) {
      FlagBad(bad);
      continue;
    }
    Combine(out + static_cast<int64_t>(off[0]) + w * axis_stride, upd[i], red);
  }
}

// Element offset (in slices) of index tuple `row`, or -1 when an index is out of range.
__device__ __forceinline__ int64_t TupleOffset(const void* idx, bool i64, int64_t row, const IndexedDims& d) {
  int64_t off = 0;
  for (int j = 0; j < d.k; ++j) {
    const int64_t w = Wrap(LoadIndex(idx, i64, row * d.k + j), d.dims[j]);
    if (w < 0) return -1;
    off = off * d.dims[j] + w;
  }
  return off;
}

template <class T>
__global__ void GatherNDKernel(const T* data, const void* idx, bool i64, T* out, int64_t total, int64_t per_batch,
                               IndexedDims d, int64_t slice, int64_t batch_stride, int* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / slice, e = i - row * slice;
    const int64_t off = TupleOffset(idx, i64, row, d);
    if (off < 0) {
      FlagBad(bad);
      out[i] = T{};
      continue;
    }
    out[i] = data[(row / per_batch) * batch_stride + off * slice + e];
  }
}

template <class T>
__global__ void ScatterNDKernel(const T* upd, const void* idx, bool i64, T* out, int64_t total, IndexedDims d,
                                int64_t slice, ScatterReduction red, int* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / slice, e = i - row * slice;
    const int64_t off = TupleOffset(idx, i64, row, d);
    if (off < 0) {
      FlagBad(bad);
      continue;
    }
    Combine(out + off * slice + e, upd[i], red);
  }
}

// ---------------------------------------------------------------- dispatch

// Calls fn(T{}) with T the unsigned type of `elem` bytes (element moves of any type); 16-byte
// elements (whole slices moved as vectors) only where `kWide` asks for them.
template <bool kWide = false, class Fn>
cudaError_t BySize(size_t elem, Fn&& fn) {
  switch (elem) {
    case 1:
      fn(uint8_t{});
      break;
    case 2:
      fn(uint16_t{});
      break;
    case 4:
      fn(uint32_t{});
      break;
    case 8:
      fn(uint64_t{});
      break;
    case 16:
      if constexpr (kWide) {
        fn(uint4{});
        break;
      }
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <bool kWide = false, class Fn>
cudaError_t ByScatterType(ScatterType t, size_t elem, ScatterReduction red, Fn&& fn) {
  switch (t) {
    case ScatterType::kBytes:
      if (red != ScatterReduction::kNone) return cudaErrorInvalidValue;
      return BySize<kWide>(elem, fn);
    case ScatterType::kF32:
      fn(float{});
      break;
    case ScatterType::kF16:
      fn(__half{});
      break;
    case ScatterType::kBF16:
      fn(__nv_bfloat16{});
      break;
    case ScatterType::kF64:
      fn(double{});
      break;
    case ScatterType::kI32:
      fn(int32_t{});
      break;
    case ScatterType::kI64:
      fn(int64_t{});
      break;
  }
  return cudaGetLastError();
}

int64_t Count(const StridedShape& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  return n;
}

// Widest element (16, 8 or 4 bytes) that whole slices of `slice` x `elem` bytes split into with
// both pointers aligned; `elem` itself otherwise. Slices then move as wide elements.
size_t SliceElement(size_t elem, int64_t slice, const void* a, const void* b) {
  for (size_t w : {16, 8, 4}) {
    if (w <= elem) break;
    if ((static_cast<size_t>(slice) * elem) % w == 0 && reinterpret_cast<uintptr_t>(a) % w == 0 &&
        reinterpret_cast<uintptr_t>(b) % w == 0)
      return w;
  }
  return elem;
}

}  // namespace

cudaError_t LaunchGatherElements(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                                 const StridedShape& walk, int64_t axis_dim, int64_t axis_stride, int* bad_index,
                                 cudaStream_t stream) {
  const int64_t n = Count(walk);
  if (n == 0) return cudaSuccess;
  return BySize(elem_size, [&](auto tag) {
    using T = decltype(tag);
    const auto* d = static_cast<const T*>(data);
    auto* o = static_cast<T*>(out);
    if (FitsInt32(walk, 1))
      GatherElementsKernel<T, int32_t><<<GridFor(n), kThreads, 0, stream>>>(
          d, indices, indices_i64, o, walk, static_cast<int32_t>(n), axis_dim, axis_stride, bad_index);
    else
      GatherElementsKernel<T, int64_t>
          <<<GridFor(n), kThreads, 0, stream>>>(d, indices, indices_i64, o, walk, n, axis_dim, axis_stride, bad_index);
  });
}

cudaError_t LaunchScatterElements(ScatterType t, size_t elem_size, ScatterReduction red, const void* updates,
                                  const void* indices, bool indices_i64, void* out, const StridedShape& walk,
                                  int64_t axis_dim, int64_t axis_stride, int* bad_index, cudaStream_t stream) {
  const int64_t n = Count(walk);
  if (n == 0) return cudaSuccess;
  return ByScatterType(t, elem_size, red, [&](auto tag) {
    using T = decltype(tag);
    const auto* u = static_cast<const T*>(updates);
    auto* o = static_cast<T*>(out);
    if (FitsInt32(walk, 1))
      ScatterElementsKernel<T, int32_t><<<GridFor(n), kThreads, 0, stream>>>(
          u, indices, indices_i64, o, walk, static_cast<int32_t>(n), axis_dim, axis_stride, red, bad_index);
    else
      ScatterElementsKernel<T, int64_t><<<GridFor(n), kThreads, 0, stream>>>(u, indices, indices_i64, o, walk, n,
                                                                             axis_dim, axis_stride, red, bad_index);
  });
}

cudaError_t LaunchGatherND(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                           int64_t batches, int64_t per_batch, const IndexedDims& d, int64_t slice,
                           int64_t batch_stride, int* bad_index, cudaStream_t stream) {
  if (batches * per_batch * slice == 0) return cudaSuccess;
  if (per_batch <= 0) return cudaErrorInvalidValue;
  // Whole slices as w-byte elements: slice and batch_stride (a multiple of it) scale down by `ratio`.
  const size_t w = SliceElement(elem_size, slice, data, out);
  const int64_t ratio = static_cast<int64_t>(w / elem_size);
  const int64_t ws = slice / ratio, wb = batch_stride / ratio;
  const int64_t total = batches * per_batch * ws;
  return BySize<true>(w, [&](auto tag) {
    using T = decltype(tag);
    GatherNDKernel<T><<<GridFor(total), kThreads, 0, stream>>>(static_cast<const T*>(data), indices, indices_i64,
                                                               static_cast<T*>(out), total, per_batch, d, ws, wb,
                                                               bad_index);
  });
}

cudaError_t LaunchScatterND(ScatterType t, size_t elem_size, ScatterReduction red, const void* updates,
                            const void* indices, bool indices_i64, void* out, int64_t count, const IndexedDims& d,
                            int64_t slice, int* bad_index, cudaStream_t stream) {
  if (count * slice == 0) return cudaSuccess;
  // Reduction none moves whole slices as wide elements where they allow it.
  const size_t w = t == ScatterType::kBytes ? SliceElement(elem_size, slice, updates, out) : elem_size;
  const int64_t ws = slice / static_cast<int64_t>(w / elem_size);
  const int64_t total = count * ws;
  return ByScatterType<true>(t, w, red, [&](auto tag) {
    using T = decltype(tag);
    ScatterNDKernel<T><<<GridFor(total), kThreads, 0, stream>>>(static_cast<const T*>(updates), indices, indices_i64,
                                                                static_cast<T*>(out), total, d, ws, red, bad_index);
  });
}

}  // namespace sampan::cuda
