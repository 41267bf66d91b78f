#include <algorithm>
#include <cstdint>

#include "backends/cuda/gather.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

template <class T>
__global__ void GatherKernel(const T* data, const void* indices, bool i64, T* out, int64_t outer, int64_t axis_dim,
                             int64_t inner, int64_t num_indices, int* bad) {
  const int64_t total = outer * num_indices * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % inner, j = (i / inner) % num_indices, o = i / (inner * num_indices);
    int64_t idx = i64 ? static_cast<const int64_t*>(indices)[j] : static_cast<const int32_t*>(indices)[j];
    if (idx < 0) idx += axis_dim;
    if (idx < 0 || idx >= axis_dim) {
      if (bad) *bad = 1;
      out[i] = T{};
      continue;
    }
    out[i] = data[(o * axis_dim + idx) * inner + k];
  }
}

template <class T>
cudaError_t Gather(const void* data, const void* indices, bool i64, void* out, int64_t outer, int64_t axis_dim,
                   int64_t inner, int64_t num_indices, int* bad, cudaStream_t st) {
  const int64_t total = outer * num_indices * inner;
  if (total == 0) return cudaSuccess;
  GatherKernel<T><<<GridFor(total), kThreads, 0, st>>>(static_cast<const T*>(data), indices, i64, static_cast<T*>(out),
                                                       outer, axis_dim, inner, num_indices, bad);
  return cudaGetLastError();
}

// Whole rows with vector-wide copies and no per-element index arithmetic. Grid x
// splits a row into chunks, grid y walks the rows: an embedding lookup (many rows of
// 768 halves) gets a block per row, a Q/K/V split (Gather of one index along axis 0 of
// [3, S, B, E]: one row of millions of elements) gets the whole GPU on its one row.
constexpr int64_t kRowChunk = 4 * 256;  // vectors per block: 4 per thread

template <class V>
__global__ void GatherRowsKernel(const V* data, const void* indices, bool i64, V* out, int64_t axis_dim,
                                 int64_t inner_v, int64_t num_indices, int64_t rows, int* bad) {
  const int64_t begin = blockIdx.x * kRowChunk;
  const int64_t end = begin + kRowChunk < inner_v ? begin + kRowChunk : inner_v;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t j = row % num_indices, o = row / num_indices;
    int64_t idx = i64 ? static_cast<const int64_t*>(indices)[j] : static_cast<const int32_t*>(indices)[j];
    if (idx < 0) idx += axis_dim;
    const bool ok = idx >= 0 && idx < axis_dim;
    if (!ok && bad && threadIdx.x == 0 && blockIdx.x == 0) *bad = 1;
    const V* src = data + (o * axis_dim + (ok ? idx : 0)) * inner_v;
    V* dst = out + row * inner_v;
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) dst[k] = ok ? src[k] : V{};
  }
}

template <class V>
cudaError_t GatherRows(const void* data, const void* indices, bool i64, void* out, int64_t axis_dim, int64_t inner_v,
                       int64_t num_indices, int64_t rows, int* bad, cudaStream_t st) {
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(256, (inner_v + 31) / 32 * 32));
  const int64_t chunks = (inner_v + kRowChunk - 1) / kRowChunk;
  if (chunks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  GatherRowsKernel<V><<<grid, threads, 0, st>>>(static_cast<const V*>(data), indices, i64, static_cast<V*>(out),
                                                axis_dim, inner_v, num_indices, rows, bad);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGather(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                         int64_t outer, int64_t axis_dim, int64_t inner, int64_t num_indices, int* bad_index,
                         cudaStream_t stream) {
  // Rows of at least 64 bytes go row-wise, in the widest vector that divides them.
  const int64_t row_bytes = inner * static_cast<int64_t>(elem_size);
  const int64_t rows = outer * num_indices;
  if (row_bytes >= 64 && rows > 0) {
    const auto aligned = [&](int64_t v) {
      return row_bytes % v == 0 && reinterpret_cast<uintptr_t>(data) % v == 0 &&
             reinterpret_cast<uintptr_t>(out) % v == 0;
    };
    if (aligned(16))
      return GatherRows<uint4>(data, indices, indices_i64, out, axis_dim, row_bytes / 16, num_indices, rows, bad_index,
                               stream);
    if (aligned(8))
      return GatherRows<uint2>(data, indices, indices_i64, out, axis_dim, row_bytes / 8, num_indices, rows, bad_index,
                               stream);
    if (aligned(4))
      return GatherRows<uint32_t>(data, indices, indices_i64, out, axis_dim, row_bytes / 4, num_indices, rows,
                                  bad_index, stream);
  }
  switch (elem_size) {
    case 1:
      return Gather<uint8_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 2:
      return Gather<uint16_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 4:
      return Gather<uint32_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 8:
      return Gather<uint64_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
