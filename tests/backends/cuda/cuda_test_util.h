// Shared by the CUDA kernel tests that run single nodes against the reference kernels:
// the skip without a GPU (saying why) and typed random inputs.
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "base/tensor.h"
#include "runtime/backend.h"

#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    const ::sampan::runtime::Backend* b = ::sampan::runtime::FindBackend("cuda"); \
    if (b == nullptr) GTEST_SKIP() << "the CUDA backend is not in this build";  \
    ::sampan::Status st = b->available();                                       \
    if (!st.ok()) GTEST_SKIP() << "needs a GPU: " << st.ToString();             \
  } while (0)

namespace sampan::cuda::testing {

inline const char* TypeName(DType t) {
  return t == DType::kFloat16 ? "f16" : t == DType::kBFloat16 ? "bf16" : "f32";
}

//! Uniform in [lo, hi), as f32 cast to `dt`.
inline Tensor Random(DType dt, const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::Alloc(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
  return dt == DType::kFloat32 ? t : *CastTensor(t, dt);
}

inline Tensor AsF32(const Tensor& t) { return t.dtype() == DType::kFloat32 ? t : *CastTensor(t, DType::kFloat32); }

}  // namespace sampan::cuda::testing
