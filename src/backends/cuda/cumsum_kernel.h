// Kernel factory for ONNX CumSum (cumsum.cu).
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! CumSum (family "cumsum") on f32/f16/bf16/i32/i64, attributes exclusive and reverse; the
//! axis (input 1) must be known on the host.
Result<KernelChoice> MakeCumSum(const KernelRequest& r);

}  // namespace sampan::cuda
