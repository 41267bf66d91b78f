// Kernels of the boolean-valued and selection ops that masks are made of:
// comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual -> bool),
// logical And/Or/Xor/Not, IsNaN/IsInf, and Where(cond, x, y). All broadcast
// through a StridedShape; bools are one byte (0 or 1), as in Sampan tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

enum class CompareOp { kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual };
enum class LogicOp { kAnd, kOr, kXor };
//! Element types comparisons are instantiated for.
enum class CompareType { kF32, kF16, kBF16, kI32, kI64, kBool, kU8, kI8 };

//! out (bool) = a op b over `shape` (dims of the output; stride[0] for a, [1] for b).
cudaError_t LaunchCompare(CompareOp op, CompareType t, const void* a, const void* b, void* out,
                          const StridedShape& shape, cudaStream_t stream);
//! out (bool) = a op b on bool operands, broadcast as in LaunchCompare.
cudaError_t LaunchLogical(LogicOp op, const void* a, const void* b, void* out, const StridedShape& shape,
                          cudaStream_t stream);
//! y = !x for n bools.
cudaError_t LaunchNot(const void* x, void* y, int64_t n, cudaStream_t stream);
//! y (bool) = isnan(x), or with `inf` set isinf(x) limited to the signs asked for.
cudaError_t LaunchIsSpecial(FloatType t, const void* x, void* y, int64_t n, bool inf, bool positive, bool negative,
                            cudaStream_t stream);
//! out = cond ? x : y, `elem_size` 1/2/4/8 bytes; stride[0] cond, [1] x, [2] y.
cudaError_t LaunchWhere(size_t elem_size, const void* cond, const void* x, const void* y, void* out,
                        const StridedShape& shape, cudaStream_t stream);

}  // namespace sampan::cuda
