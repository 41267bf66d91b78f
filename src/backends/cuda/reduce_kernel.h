// Kernel factories for the reductions (reduce.cu): the ONNX Reduce* ops and
// ArgMax/ArgMin. Axes that are not adjacent are first gathered into contiguous
// ones by a strided copy into the kernel's workspace.
#pragma once

#include <optional>

#include "backends/cuda/node_kernel.h"
#include "backends/cuda/reduce.h"

namespace sampan::cuda {

//! ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
//! ReduceLogSum, ReduceLogSumExp (family "reduce"). Axes from the attribute (before opset 13
//! for ReduceSum, 18 for the others) or from input 1, which must then be known on the host.
Result<KernelChoice> MakeReduce(const KernelRequest& r);
//! ArgMax, ArgMin (family "argmax"): int64 indices, keepdims, select_last_index.
Result<KernelChoice> MakeArgReduce(const KernelRequest& r);

//! The reduction/scan kernel type of `t`; nullopt for types without kernels (f64, small ints...).
std::optional<NumType> NumTypeOf(DType t);

}  // namespace sampan::cuda
