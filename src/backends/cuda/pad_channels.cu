#include <algorithm>

#include "backends/cuda/pad_channels.h"

namespace sampan::cuda {
namespace {

// One thread per output pixel; cp of 8 (16 bytes) is written as one vector store.
__global__ void PadChannels2Kernel(const uint16_t* src, uint16_t* dst, PadChannelsShape s, int64_t pixels) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pixels; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = p % s.w, h = (p / s.w) % s.h, n = p / (s.w * s.h);
    const uint16_t* in = src + n * s.sn + h * s.sh + w * s.sw;
    uint16_t* out = dst + p * s.cp;
    if (s.cp == 8) {
      uint4 vec = make_uint4(0, 0, 0, 0);
      uint16_t* v = reinterpret_cast<uint16_t*>(&vec);
      for (int k = 0; k < s.c; ++k) v[k] = in[k * s.sc];
      *reinterpret_cast<uint4*>(out) = vec;
    } else {
      for (int64_t k = 0; k < s.cp; ++k) out[k] = k < s.c ? in[k * s.sc] : uint16_t{0};
    }
  }
}

// One thread per destination pixel: its cp channels as 16-byte vector stores.
__global__ void SpaceToDepth2Kernel(const uint16_t* src, uint16_t* dst, SpaceToDepthShape s, int64_t pixels) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pixels; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = p % s.ws, i = (p / s.ws) % s.hs, n = p / (s.ws * s.hs);
    uint4* out = reinterpret_cast<uint4*>(dst + p * s.cp);
    for (int64_t k0 = 0; k0 < s.cp; k0 += 8) {
      uint4 vec = make_uint4(0, 0, 0, 0);
      uint16_t* v = reinterpret_cast<uint16_t*>(&vec);
      for (int e = 0; e < 8; ++e) {
        const int64_t k = k0 + e;
        const int64_t c = k / 4, dy = (k / 2) % 2, dx = k % 2;
        const int64_t y = 2 * i + dy - s.pad_h, x = 2 * j + dx - s.pad_w;
        if (c < s.c && y >= 0 && y < s.h && x >= 0 && x < s.w) v[e] = src[n * s.sn + c * s.sc + y * s.sh + x * s.sw];
      }
      out[k0 / 8] = vec;
    }
  }
}

}  // namespace

cudaError_t LaunchSpaceToDepth2(const void* src, void* dst, const SpaceToDepthShape& s, cudaStream_t stream) {
  const int64_t pixels = s.n * s.hs * s.ws;
  if (pixels == 0) return cudaSuccess;
  if (s.c < 1 || s.cp < 4 * s.c || s.cp % 8 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0)
    return cudaErrorInvalidValue;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((pixels + threads - 1) / threads, 132 * 32);
  SpaceToDepth2Kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const uint16_t*>(src),
                                                                             static_cast<uint16_t*>(dst), s, pixels);
  return cudaGetLastError();
}

cudaError_t LaunchPadChannels2(const void* src, void* dst, const PadChannelsShape& s, cudaStream_t stream) {
  const int64_t pixels = s.n * s.h * s.w;
  if (pixels == 0) return cudaSuccess;
  if (s.c > s.cp || s.c < 1 || (s.cp == 8 && reinterpret_cast<uintptr_t>(dst) % 16 != 0)) return cudaErrorInvalidValue;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((pixels + threads - 1) / threads, 132 * 32);
  PadChannels2Kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const uint16_t*>(src),
                                                                            static_cast<uint16_t*>(dst), s, pixels);
  return cudaGetLastError();
}

}  // namespace sampan::cuda
