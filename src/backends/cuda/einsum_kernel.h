// Einsum on the GPU: two-operand contractions as one batched cuBLASLt product
// (strided copies bring the operands to [batch, M, K] x [batch, K, N]), one-operand
// permutations as a strided copy. Ellipses, diagonals and labels summed within a
// single operand are Unsupported (they stay on the host, named in the build report).
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

Result<KernelChoice> MakeEinsum(const KernelRequest& r);

}  // namespace sampan::cuda
