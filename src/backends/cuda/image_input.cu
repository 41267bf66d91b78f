#include "backends/cuda/image_input.h"
#include "backends/cuda/kernel_math.cuh"

namespace sampan::cuda {
namespace {

// One thread per input byte; reads are coalesced, NCHW writes are strided per channel.
template <class T>
__global__ void ImageInputKernel(const uint8_t* x, T* y, ImageInputParams p, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % p.c, pix = i / p.c;  // pix = (n * H + h) * W + w
    const float v = (static_cast<float>(x[i]) - p.mean[c]) * p.scale[c];
    int64_t o = i;
    if (!p.out_nhwc) {
      const int64_t hw = p.h * p.w, n = pix / hw;
      o = (n * p.c + c) * hw + pix % hw;
    }
    y[o] = FromFloat<T>(v);
  }
}

template <class T>
cudaError_t Run(const void* x, void* y, const ImageInputParams& p, cudaStream_t st) {
  const int64_t total = p.n * p.h * p.w * p.c;
  if (total == 0) return cudaSuccess;
  ImageInputKernel<T>
      <<<GridFor(total), kThreads, 0, st>>>(static_cast<const uint8_t*>(x), static_cast<T*>(y), p, total);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchImageInput(FloatType to, const void* x, void* y, const ImageInputParams& p, cudaStream_t stream) {
  switch (to) {
    case FloatType::kF32:
      return Run<float>(x, y, p, stream);
    case FloatType::kF16:
      return Run<__half>(x, y, p, stream);
    case FloatType::kBF16:
      return Run<__nv_bfloat16>(x, y, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
