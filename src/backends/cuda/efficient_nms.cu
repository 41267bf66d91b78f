#include "backends/cuda/efficient_nms.h"
#include "backends/cuda/kernel_math.cuh"
#include "backends/cuda/libm_expf.h"

namespace sampan::cuda {
namespace {

constexpr int kSelectThreads = 1024;
constexpr int kTile = 64;  // candidates a suppression word covers
__constant__ uint64_t kExpTable[32] = {SAMPAN_EXPF_TABLE};

size_t Aligned(size_t b) {
  return (b + 255) / 256 * 256;
}

// The workspace, cut into its buffers.
struct Buffers {
  uint32_t* keys = nullptr;  // [n, anchors * classes]: score keys, 0 for no candidate
  float4* box = nullptr;     // [n, slots]: the candidates' corners, best first
  int32_t* index = nullptr;  // [n, slots]: anchor * classes + class
  int32_t* count = nullptr;  // [n]: candidates taken
  uint64_t* mask = nullptr;  // [n, slots, words]: suppression bits
  int64_t words = 0;         // per row: slots / 64, rounded up
};

Buffers Carve(const NmsParams& p, void* base, size_t* bytes) {
  Buffers b;
  const int64_t k = p.slots();
  b.words = (k + kTile - 1) / kTile;
  const size_t sizes[] = {static_cast<size_t>(p.n * p.anchors * p.classes) * 4, static_cast<size_t>(p.n * k) * 16,
                          static_cast<size_t>(p.n * k) * 4, static_cast<size_t>(p.n) * 4,
                          static_cast<size_t>(p.n * k * b.words) * 8};
  void** slots[] = {reinterpret_cast<void**>(&b.keys), reinterpret_cast<void**>(&b.box),
                    reinterpret_cast<void**>(&b.index), reinterpret_cast<void**>(&b.count),
                    reinterpret_cast<void**>(&b.mask)};
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {
    if (base) *slots[i] = static_cast<char*>(base) + at;
    at += Aligned(sizes[i]);
  }
  *bytes = at;
  return b;
}

// The reference's 1 / (1 + std::exp(-s)), each step rounded as the host rounds it.
__device__ __forceinline__ float Activate(float s, bool sigmoid, const uint64_t* table) {
  return sigmoid ? __fdiv_rn(1.f, __fadd_rn(1.f, LibmExpf(-s, table))) : s;
}

// Order-preserving bits of a score that passed the threshold (so not NaN): -0 as +0, as the
// reference's comparison ties them; never 0.
__device__ __forceinline__ uint32_t ScoreKey(float v) {
  if (v == 0.f) v = 0.f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// A candidate's sort item: higher is better; among equal scores the lower index is higher.
__device__ __forceinline__ uint64_t Item(uint32_t key, int64_t i) {
  return (static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

template <class T>
__device__ __forceinline__ float4 Corners(const T* p, bool center) {
  const float x = ToFloat(p[0]), y = ToFloat(p[1]), z = ToFloat(p[2]), w = ToFloat(p[3]);
  if (!center) return make_float4(x, y, z, w);
  const float hw = __fmul_rn(z, 0.5f), hh = __fmul_rn(w, 0.5f);
  return make_float4(__fsub_rn(x, hw), __fsub_rn(y, hh), __fadd_rn(x, hw), __fadd_rn(y, hh));
}

// ops/efficient_nms.cpp's Iou: corners put in order, std::min/std::max as they treat NaN, 0
// for no overlap or an empty union, every step rounded (no contraction into FMAs).
__device__ __forceinline__ float Min(float a, float b) {
  return b < a ? b : a;
}
__device__ __forceinline__ float Max(float a, float b) {
  return a < b ? b : a;
}
__device__ __forceinline__ float4 Ordered(float4 c) {
  if (c.x > c.z) {
    const float t = c.x;
    c.x = c.z;
    c.z = t;
  }
  if (c.y > c.w) {
    const float t = c.y;
    c.y = c.w;
    c.w = t;
  }
  return c;
}
__device__ __forceinline__ float Iou(float4 a, float4 b) {
  a = Ordered(a);
  b = Ordered(b);
  const float iw = __fsub_rn(Min(a.z, b.z), Max(a.x, b.x));
  const float ih = __fsub_rn(Min(a.w, b.w), Max(a.y, b.y));
  if (iw <= 0.f || ih <= 0.f) return 0.f;
  const float inter = __fmul_rn(iw, ih);
  const float area_a = __fmul_rn(__fsub_rn(a.z, a.x), __fsub_rn(a.w, a.y));
  const float area_b = __fmul_rn(__fsub_rn(b.z, b.x), __fsub_rn(b.w, b.y));
  const float uni = __fsub_rn(__fadd_rn(area_a, area_b), inter);
  if (uni <= 0.f) return 0.f;
  return __fdiv_rn(inter, uni);
}

// Kernel 1: the score key of every (image, anchor, class).
template <class T>
__global__ void ScoreKeysKernel(const T* scores, uint32_t* keys, NmsParams p, int64_t total) {
  __shared__ uint64_t table[32];
  if (threadIdx.x < 32) table[threadIdx.x] = kExpTable[threadIdx.x];
  __syncthreads();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t key = 0;
    if (i % p.classes != p.background) {
      const float s = Activate(ToFloat(scores[i]), p.sigmoid, table);
      if (s >= p.score_threshold) key = ScoreKey(s);
    }
    keys[i] = key;
  }
}

// Warp 0 of a block: the digit d of `hist` (256 bins, higher digits better) holding the need-th
// best item, and how many items the higher digits hold; `total` the sum of the bins.
__device__ void FindDigit(const uint32_t* hist, uint32_t need, uint32_t* digit, uint32_t* above, uint32_t* total) {
  const int lane = threadIdx.x;
  uint32_t own = 0;
  for (int j = 0; j < 8; ++j) own += hist[lane * 8 + j];
  uint32_t suffix = own;  // this lane's bins and every higher lane's
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_down_sync(0xffffffffu, suffix, o);
    if (lane + o < 32) suffix += v;
  }
  if (lane == 0) *total = suffix;
  uint32_t cum = suffix - own;
  if (cum < need && need <= suffix)
    for (int d = lane * 8 + 7; d >= lane * 8; --d) {
      if (cum + hist[d] >= need) {
        *digit = static_cast<uint32_t>(d);
        *above = cum;
        break;
      }
      cum += hist[d];
    }
}

// Kernel 2, one block per image: the best min(candidates, 4096) items, sorted, their corners.
template <class T>
__global__ void __launch_bounds__(kSelectThreads) SelectKernel(const T* boxes, Buffers buf, NmsParams p) {
  __shared__ uint64_t items[kNmsMaxCandidates];
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_digit, s_above, s_total;
  __shared__ int s_count;
  const int64_t b = blockIdx.x, m = p.anchors * p.classes, k = p.slots();
  const uint32_t* keys = buf.keys + b * m;
  const int lane = threadIdx.x & 31;

  // Radix select, 8 bits a pass from the top: the items taken are those >= threshold.
  uint64_t prefix = 0, threshold = uint64_t{1} << 32;  // 1 << 32: every candidate
  uint32_t need = kNmsMaxCandidates;
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int64_t base = threadIdx.x - lane; base < m; base += blockDim.x) {  // whole warps a step
      const int64_t i = base + lane;
      uint32_t digit = 256;
      if (i < m && keys[i] != 0) {
        const uint64_t item = Item(keys[i], i);
        if (pass == 0 || (item >> (shift + 8)) == (prefix >> (shift + 8)))
          digit = static_cast<uint32_t>(item >> shift) & 255;
      }
      // One atomic per distinct digit of the warp: scores crowd into few top digits.
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x < 32) FindDigit(hist, need, &s_digit, &s_above, &s_total);
    __syncthreads();
    if (pass == 0 && s_total <= need) break;  // every candidate fits
    prefix |= static_cast<uint64_t>(s_digit) << shift;
    need -= s_above;
    threshold = prefix;
    const bool exact = hist[s_digit] == need;  // the digit's items are all taken: done
    __syncthreads();
    if (exact) break;
  }

  if (threadIdx.x == 0) s_count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const uint32_t key = keys[i];
    if (key == 0) continue;
    const uint64_t item = Item(key, i);
    if (item < threshold) continue;
    const int at = atomicAdd(&s_count, 1);
    if (at < kNmsMaxCandidates) items[at] = item;  // exactly min(candidates, 4096) reach here
  }
  __syncthreads();
  const int count = s_count < kNmsMaxCandidates ? s_count : static_cast<int>(kNmsMaxCandidates);
  int n2 = 2;
  while (n2 < count) n2 <<= 1;
  for (int t = count + threadIdx.x; t < n2; t += blockDim.x) items[t] = 0;  // below every item
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= n2; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < n2 / 2; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1)), j = i + stride;
        const uint64_t x = items[i], y = items[j];
        if ((i & size) == 0 ? x < y : x > y) {
          items[i] = y;
          items[j] = x;
        }
      }
      __syncthreads();
    }
  for (int t = threadIdx.x; t < count; t += blockDim.x) {
    const int32_t index = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(items[t]));
    const int64_t a = index / p.classes, c = index % p.classes;
    const int64_t at = p.per_class_boxes ? ((b * p.anchors + a) * p.classes + c) * 4 : (b * p.anchors + a) * 4;
    buf.box[b * k + t] = Corners(boxes + at, p.center);
    buf.index[b * k + t] = index;
  }
  if (threadIdx.x == 0) buf.count[b] = count;
}

// Kernel 3: block (row tile, word) of an image (blockIdx.y), a thread per row.
__global__ void MaskKernel(Buffers buf, NmsParams p) {
  const int64_t b = blockIdx.y, k = p.slots();
  const int tile = static_cast<int>(blockIdx.x / buf.words), word = static_cast<int>(blockIdx.x % buf.words);
  const int count = buf.count[b];
  const int row0 = tile * kTile, col0 = word * kTile;
  // Rows never read: past the candidates, or words left of a row's own (the scan starts there).
  if (word < tile || row0 >= count || col0 >= count) return;
  __shared__ float4 cols[kTile];
  __shared__ int32_t col_class[kTile];
  const int t = threadIdx.x;
  if (col0 + t < count) {
    cols[t] = buf.box[b * k + col0 + t];
    col_class[t] = static_cast<int32_t>(buf.index[b * k + col0 + t] % p.classes);
  }
  __syncthreads();
  const int i = row0 + t;
  if (i >= count) return;
  const float4 box = buf.box[b * k + i];
  const int32_t cls = static_cast<int32_t>(buf.index[b * k + i] % p.classes);
  const int cols_here = count - col0 < kTile ? count - col0 : kTile;
  uint64_t bits = 0;
  for (int jj = 0; jj < cols_here; ++jj) {
    if (col0 + jj <= i || (!p.agnostic && col_class[jj] != cls)) continue;
    if (Iou(box, cols[jj]) >= p.iou_threshold) bits |= uint64_t{1} << jj;
  }
  buf.mask[(b * k + i) * buf.words + word] = bits;
}

__device__ __forceinline__ float Out(float v, float) {
  return v;
}
// As base/half.h's Half::FromFloat: to nearest even, NaN as the quiet NaN 0x7e00 with its sign.
__device__ __forceinline__ __half Out(float v, __half) {
  if (isnan(v)) return __ushort_as_half(static_cast<unsigned short>(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(v);
}

// Kernel 4, one warp per image: greedy NMS over the sorted candidates. Lane l holds the removed
// bits of words l and l + 32.
template <class T>
__global__ void ScanKernel(const T* scores, Buffers buf, NmsParams p, int32_t* num, T* out_boxes, T* out_scores,
                           int32_t* out_classes) {
  const int64_t b = blockIdx.x, k = p.slots(), m = p.anchors * p.classes;
  const int lane = threadIdx.x;
  const int count = buf.count[b];
  const int used = (count + kTile - 1) / kTile;
  uint64_t removed0 = 0, removed1 = 0;
  int64_t kept = 0;
  for (int i = 0; i < count && kept < p.max_out; ++i) {
    const int w = i / kTile;
    const uint64_t word = __shfl_sync(0xffffffffu, w < 32 ? removed0 : removed1, w & 31);
    if ((word >> (i % kTile)) & 1) continue;
    if (lane == 0) {
      const int64_t slot = b * p.max_out + kept;
      const float4 box = buf.box[b * k + i];
      const int32_t index = buf.index[b * k + i];
      if (out_boxes) {
        T* o = out_boxes + slot * 4;
        o[0] = Out(box.x, T()), o[1] = Out(box.y, T()), o[2] = Out(box.z, T()), o[3] = Out(box.w, T());
      }
      if (out_scores) out_scores[slot] = Out(Activate(ToFloat(scores[b * m + index]), p.sigmoid, kExpTable), T());
      if (out_classes) out_classes[slot] = static_cast<int32_t>(index % p.classes);
    }
    const uint64_t* row = buf.mask + (b * k + i) * buf.words;
    if (lane >= w && lane < used) removed0 |= row[lane];
    if (lane + 32 >= w && lane + 32 < used) removed1 |= row[lane + 32];
    ++kept;
  }
  if (lane == 0 && num) num[b] = static_cast<int32_t>(kept);
}

template <class T>
cudaError_t Run(const T* boxes, const T* scores, int32_t* num, T* out_boxes, T* out_scores, int32_t* out_classes,
                const NmsParams& p, void* workspace, size_t workspace_bytes, cudaStream_t st) {
  if (p.n == 0) return cudaSuccess;
  const size_t slots = static_cast<size_t>(p.n * p.max_out);
  const struct {
    void* ptr;
    size_t bytes;
  } outs[] = {{num, static_cast<size_t>(p.n) * 4},
              {out_boxes, slots * 4 * sizeof(T)},
              {out_scores, slots * sizeof(T)},
              {out_classes, slots * 4}};
  for (const auto& o : outs)
    if (o.ptr) {
      const cudaError_t e = cudaMemsetAsync(o.ptr, 0, o.bytes, st);
      if (e != cudaSuccess) return e;
    }
  if (p.slots() == 0) return cudaSuccess;  // no (anchor, class): no detections
  size_t need = 0;
  Buffers buf = Carve(p, workspace, &need);
  if (workspace == nullptr || workspace_bytes < need) return cudaErrorInvalidValue;
  const int64_t total = p.n * p.anchors * p.classes;
  ScoreKeysKernel<T><<<GridFor(total), kThreads, 0, st>>>(scores, buf.keys, p, total);
  SelectKernel<T><<<static_cast<unsigned>(p.n), kSelectThreads, 0, st>>>(boxes, buf, p);
  const dim3 grid(static_cast<unsigned>(buf.words * buf.words), static_cast<unsigned>(p.n));
  MaskKernel<<<grid, kTile, 0, st>>>(buf, p);
  ScanKernel<T><<<static_cast<unsigned>(p.n), 32, 0, st>>>(scores, buf, p, num, out_boxes, out_scores, out_classes);
  return cudaGetLastError();
}

}  // namespace

size_t EfficientNmsWorkspace(const NmsParams& p) {
  size_t bytes = 0;
  Carve(p, nullptr, &bytes);
  return bytes;
}

cudaError_t LaunchEfficientNms(NmsType t, const void* boxes, const void* scores, int32_t* num, void* out_boxes,
                               void* out_scores, int32_t* out_classes, const NmsParams& p, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  switch (t) {
    case NmsType::kF32:
      return Run(static_cast<const float*>(boxes), static_cast<const float*>(scores), num,
                 static_cast<float*>(out_boxes), static_cast<float*>(out_scores), out_classes, p, workspace,
                 workspace_bytes, stream);
    case NmsType::kF16:
      return Run(static_cast<const __half*>(boxes), static_cast<const __half*>(scores), num,
                 static_cast<__half*>(out_boxes), static_cast<__half*>(out_scores), out_classes, p, workspace,
                 workspace_bytes, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
