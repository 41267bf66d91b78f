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

}  // namespace

cudaError_t LaunchGather(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                         int64_t outer, int64_t axis_dim, int64_t inner, int64_t num_indices, int* bad_index,
                         cudaStream_t stream) {
  switch (elem_size) {
    case 1: return Gather<uint8_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 2: return Gather<uint16_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 4: return Gather<uint32_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
    case 8: return Gather<uint64_t>(data, indices, indices_i64, out, outer, axis_dim, inner, num_indices, bad_index, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
