// The builder's device-side random fill (fill.h): range, spread, reproducibility.
// Without a GPU these tests skip and say why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/fill.h"

namespace sampan::cuda {
namespace {

std::vector<float> FillAndRead(FloatType t, int64_t n, uint64_t seed, float lo, float hi) {
  const size_t elem = t == FloatType::kF32 ? 4 : 2;
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, static_cast<size_t>(n) * elem), cudaSuccess);
  EXPECT_EQ(LaunchFillUniform(t, d, n, seed, lo, hi, nullptr), cudaSuccess);
  std::vector<uint8_t> raw(static_cast<size_t>(n) * elem);
  EXPECT_EQ(cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == FloatType::kF32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      if (t == FloatType::kF16) {
        __half_raw h;
        h.x = b;
        out[i] = __half2float(__half(h));
      } else {
        uint32_t u = static_cast<uint32_t>(b) << 16;
        std::memcpy(&out[i], &u, 4);
      }
    }
  }
  return out;
}

TEST(CudaFill, UniformInRangeSpreadAndReproducible) {
  SKIP_WITHOUT_GPU();
  const int64_t n = (1 << 20) + 3;  // more elements than one pass of the grid
  for (FloatType t : {FloatType::kF32, FloatType::kF16, FloatType::kBF16}) {
    const std::vector<float> a = FillAndRead(t, n, 7, -1.f, 1.f);
    double sum = 0, sq = 0;
    int64_t low = 0;
    for (float x : a) {
      ASSERT_TRUE(x >= -1.f && x <= 1.f) << x;  // 16-bit rounding may reach the upper end
      sum += x;
      sq += double(x) * x;
      low += x < -0.5f;
    }
    EXPECT_NEAR(sum / n, 0.0, 0.01) << int(t);
    EXPECT_NEAR(sq / n, 1.0 / 3.0, 0.01) << int(t);  // variance of U(-1, 1)
    EXPECT_NEAR(double(low) / n, 0.25, 0.01) << int(t);
    EXPECT_EQ(a, FillAndRead(t, n, 7, -1.f, 1.f)) << "same seed, same values";
    EXPECT_NE(a, FillAndRead(t, n, 8, -1.f, 1.f)) << "another seed, other values";
  }
  EXPECT_EQ(LaunchFillUniform(FloatType::kF16, nullptr, 4, 1, 0.f, 1.f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchFillUniform(FloatType::kF16, nullptr, 0, 1, 0.f, 1.f, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
