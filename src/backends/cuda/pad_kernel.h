// Kernel factory for ONNX Pad (pad.cu).
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! Pad (family "pad"): opset 2 attributes (`pads`, `value`; opset 1 `paddings`) or opset 11+
//! inputs (pads, constant_value, opset 18 axes), which must be known on the host. Any storable
//! element type; modes constant, reflect, edge, wrap; negative pads crop. A 4-D input stored
//! channels-last stays so when the output is too (pads permuted to [N, H, W, C] memory); a
//! mixed layout is Unsupported.
Result<KernelChoice> MakePad(const KernelRequest& r);

}  // namespace sampan::cuda
