#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

template <class T, class I>
__global__ void StridedCopyKernel(const T* src, T* dst, StridedShape s, I n) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I off[2];
    StridedOffsets<I, 2>(s, i, off);
    dst[off[1]] = src[off[0]];
  }
}

template <class T>
cudaError_t Copy(const void* src, void* dst, const StridedShape& s, cudaStream_t st) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  if (n == 0) return cudaSuccess;
  if (FitsInt32(s, 2))
    StridedCopyKernel<T, int32_t>
        <<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, static_cast<int32_t>(n));
  else
    StridedCopyKernel<T, int64_t>
        <<<GridFor(n), kThreads, 0, st>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, n);
  return cudaGetLastError();
}

// When the innermost dim is contiguous on both sides, copies `wide` bytes per thread
// instead of one element: dims and strides rescaled to units of `wide` bytes. False
// when the sizes, strides or pointers do not allow it.
bool Widen(size_t elem, size_t wide, const void* src, const void* dst, const StridedShape& in, StridedShape* out) {
  const int last = in.rank - 1;
  const int64_t v = static_cast<int64_t>(wide / elem);
  if (last < 0 || v <= 1 || in.stride[0][last] != 1 || in.stride[1][last] != 1 || in.dims[last] % v != 0) return false;
  if (reinterpret_cast<uintptr_t>(src) % wide != 0 || reinterpret_cast<uintptr_t>(dst) % wide != 0) return false;
  for (int d = 0; d < last; ++d)
    if (in.stride[0][d] % v != 0 || in.stride[1][d] % v != 0) return false;
  *out = in;
  out->dims[last] /= v;
  for (int d = 0; d < last; ++d) {
    out->stride[0][d] /= v;
    out->stride[1][d] /= v;
  }
  return true;
}

// A true transpose: the source's contiguous dim (a) is not the destination's (b). Each
// block moves 32 x 32 tiles of the (a, b) plane through shared memory, reading along a and
// writing along b, so both sides are coalesced (the element-wise copy reads or writes
// with a stride). `rest` enumerates the other dims (their offsets for both sides).
constexpr int kTile = 32, kTileRows = 8;

template <class T, class I>
__global__ void __launch_bounds__(kTile* kTileRows)
    TransposeTileKernel(const T* src, T* dst, StridedShape rest, I outer, int a_dim, int b_dim, I src_b, I dst_a) {
  __shared__ T tile[kTile][kTile + 1];
  const int tiles_a = (a_dim + kTile - 1) / kTile;
  const int a0 = static_cast<int>(blockIdx.x % tiles_a) * kTile, b0 = static_cast<int>(blockIdx.x / tiles_a) * kTile;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (I o = blockIdx.y; o < outer; o += gridDim.y) {
    I off[2];
    StridedOffsets<I, 2>(rest, o, off);
    const int a = a0 + tx;
#pragma unroll
    for (int j = ty; j < kTile; j += kTileRows) {
      const int b = b0 + j;
      if (a < a_dim && b < b_dim) tile[j][tx] = src[off[0] + a + b * src_b];
    }
    __syncthreads();
    const int b = b0 + tx;
#pragma unroll
    for (int j = ty; j < kTile; j += kTileRows) {
      const int aa = a0 + j;
      if (aa < a_dim && b < b_dim) dst[off[1] + b + aa * dst_a] = tile[tx][j];
    }
    __syncthreads();
  }
}

template <class T>
cudaError_t TransposeTiles(const void* src, void* dst, const StridedShape& s, int ia, int ib, cudaStream_t st) {
  StridedShape rest;
  rest.rank = 0;
  int64_t outer = 1;
  for (int d = 0; d < s.rank; ++d) {
    if (d == ia || d == ib) continue;
    rest.dims[rest.rank] = s.dims[d];
    rest.stride[0][rest.rank] = s.stride[0][d];
    rest.stride[1][rest.rank] = s.stride[1][d];
    ++rest.rank;
    outer *= s.dims[d];
  }
  if (rest.rank == 0) {
    rest.rank = 1;
    rest.dims[0] = 1;
  }
  const int a_dim = static_cast<int>(s.dims[ia]), b_dim = static_cast<int>(s.dims[ib]);
  const int64_t tiles = static_cast<int64_t>((a_dim + kTile - 1) / kTile) * ((b_dim + kTile - 1) / kTile);
  if (tiles > 0x7fffffff || outer == 0) return outer == 0 ? cudaSuccess : cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(outer < 65535 ? outer : 65535));
  if (FitsInt32(s, 2))
    TransposeTileKernel<T, int32_t><<<grid, kTile * kTileRows, 0, st>>>(
        static_cast<const T*>(src), static_cast<T*>(dst), rest, static_cast<int32_t>(outer), a_dim, b_dim,
        static_cast<int32_t>(s.stride[0][ib]), static_cast<int32_t>(s.stride[1][ia]));
  else
    TransposeTileKernel<T, int64_t><<<grid, kTile * kTileRows, 0, st>>>(
        static_cast<const T*>(src), static_cast<T*>(dst), rest, outer, a_dim, b_dim, s.stride[0][ib], s.stride[1][ia]);
  return cudaGetLastError();
}

// The dims a tiled transpose works on: a with source stride 1, b with destination stride 1,
// a != b, both at least 16 long (smaller ones leave most of a tile idle).
bool TransposePlane(const StridedShape& s, int* ia, int* ib) {
  *ia = *ib = -1;
  for (int d = 0; d < s.rank; ++d) {
    if (s.dims[d] > 1 && s.stride[0][d] == 1) *ia = d;
    if (s.dims[d] > 1 && s.stride[1][d] == 1) *ib = d;
  }
  return *ia >= 0 && *ib >= 0 && *ia != *ib && s.dims[*ia] >= 16 && s.dims[*ib] >= 16 &&
         s.dims[*ia] < (int64_t(1) << 30) && s.dims[*ib] < (int64_t(1) << 30);
}

// blockIdx.y: the part; lengths, offsets and the row in units of U.
template <class U>
__global__ void ConcatRowsKernel(ConcatRows c, U* dst) {
  const int part = blockIdx.y;
  const U* src = static_cast<const U*>(c.src[part]);
  const int64_t len = c.len[part], off = c.off[part], n = c.outer * len;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / len, k = i - r * len;
    dst[r * c.row + off + k] = src[i];
  }
}

template <class U>
cudaError_t ConcatRowsAs(size_t elem, const ConcatRows& c, void* dst, cudaStream_t st) {
  const int64_t v = static_cast<int64_t>(sizeof(U) / elem);
  ConcatRows u = c;
  int64_t most = 0;
  for (int i = 0; i < c.parts; ++i) {
    u.len[i] = c.len[i] / v;
    u.off[i] = c.off[i] / v;
    most = std::max(most, c.outer * u.len[i]);
  }
  u.row = c.row / v;
  if (most == 0) return cudaSuccess;
  const dim3 grid(GridFor(most) < 4096 ? GridFor(most) : 4096, static_cast<unsigned>(c.parts));
  ConcatRowsKernel<U><<<grid, kThreads, 0, st>>>(u, static_cast<U*>(dst));
  return cudaGetLastError();
}

// The widest unit (16, 8, 4 bytes, else the element) that divides every length, offset,
// the row and the pointers.
bool ConcatFits(size_t elem, size_t wide, const ConcatRows& c, const void* dst) {
  if (wide <= elem || wide % elem != 0) return false;
  const int64_t v = static_cast<int64_t>(wide / elem);
  if (c.row % v != 0 || reinterpret_cast<uintptr_t>(dst) % wide != 0) return false;
  for (int i = 0; i < c.parts; ++i)
    if (c.len[i] % v != 0 || c.off[i] % v != 0 || reinterpret_cast<uintptr_t>(c.src[i]) % wide != 0) return false;
  return true;
}

}  // namespace

cudaError_t LaunchConcatRows(size_t elem, const ConcatRows& c, void* dst, cudaStream_t stream) {
  if (c.parts < 1 || c.parts > ConcatRows::kMaxParts || c.outer < 0 || c.row < 0) return cudaErrorInvalidValue;
  if (ConcatFits(elem, 16, c, dst)) return ConcatRowsAs<uint4>(elem, c, dst, stream);
  if (ConcatFits(elem, 8, c, dst)) return ConcatRowsAs<uint2>(elem, c, dst, stream);
  if (ConcatFits(elem, 4, c, dst)) return ConcatRowsAs<uint32_t>(elem, c, dst, stream);
  switch (elem) {
    case 1:
      return ConcatRowsAs<uint8_t>(elem, c, dst, stream);
    case 2:
      return ConcatRowsAs<uint16_t>(elem, c, dst, stream);
    case 4:
      return ConcatRowsAs<uint32_t>(elem, c, dst, stream);
    case 8:
      return ConcatRowsAs<uint64_t>(elem, c, dst, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchStridedCopy(size_t elem_size, const void* src, void* dst, const StridedShape& shape,
                              cudaStream_t stream) {
  StridedShape wide;
  if (Widen(elem_size, 16, src, dst, shape, &wide)) return Copy<uint4>(src, dst, wide, stream);
  if (Widen(elem_size, 8, src, dst, shape, &wide)) return Copy<uint2>(src, dst, wide, stream);
  if (Widen(elem_size, 4, src, dst, shape, &wide)) return Copy<uint32_t>(src, dst, wide, stream);
  int ia, ib;
  if (TransposePlane(shape, &ia, &ib)) {
    switch (elem_size) {
      case 1:
        return TransposeTiles<uint8_t>(src, dst, shape, ia, ib, stream);
      case 2:
        return TransposeTiles<uint16_t>(src, dst, shape, ia, ib, stream);
      case 4:
        return TransposeTiles<uint32_t>(src, dst, shape, ia, ib, stream);
      case 8:
        return TransposeTiles<uint64_t>(src, dst, shape, ia, ib, stream);
    }
  }
  switch (elem_size) {
    case 1:
      return Copy<uint8_t>(src, dst, shape, stream);
    case 2:
      return Copy<uint16_t>(src, dst, shape, stream);
    case 4:
      return Copy<uint32_t>(src, dst, shape, stream);
    case 8:
      return Copy<uint64_t>(src, dst, shape, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
