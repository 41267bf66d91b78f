// Types shared by the .cu kernels and their host-side callers. Kept free of
// Sampan headers so nvcc compiles the kernels quickly.
#pragma once

#include <cstdint>

namespace sampan::cuda {

//! Element types our float kernels are instantiated for (one instantiation each).
enum class FloatType { kF32, kF16, kBF16 };

//! Most dims a kernel's strided index handles; higher ranks run on the host.
constexpr int kMaxRank = 8;

//! A rank-r iteration space and the element strides of up to three operands
//! (0 for a broadcast dim). Dims are the output's, outermost first.
struct StridedShape {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};
};

}  // namespace sampan::cuda
