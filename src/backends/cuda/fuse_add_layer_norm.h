// A lowering rewrite of the CUDA backend: LayerNormalization(Add(a, b), scale, bias)
// whose Add is read by nothing else becomes sampan::AddLayerNorm(a, b, scale, bias)
// (ops/add_layer_norm.cpp), one kernel instead of two and one activation round trip
// less (BERT's post-LN residual blocks). Other backends keep the two ops, which their
// own kernels run, so this lives here and not in the shared pass pipeline.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place; the fused node takes the LayerNormalization's name (and
//! plan choice), the Add's choice is dropped. Returns one line per rewrite (also appended
//! to plan.rewrites).
Result<std::vector<std::string>> FuseAddLayerNorm(plan::Plan& plan);

//! FP8 builds: a per-tensor float8 QuantizeLinear (constant scale, zero point absent or 0) of a
//! LayerNormalization's or AddLayerNorm's output becomes that norm's second output
//! (sampan::AddLayerNorm's YQ, B absent for a plain LayerNormalization): the norm kernel writes
//! the float8 copy beside its own output, which the next residual still reads, so the
//! activation is not read back by a quantize pass (BERT: two per layer). Same values bit for
//! bit. Returns one line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseNormQuantize(plan::Plan& plan);

//! The quotient type of a norm's quantized copy as QuantizeLinear computes it (ops/quantize.cpp):
//! the node's `precision` attribute, else x's type when the scale has it, else float32. Only
//! float32/float16/bfloat16 scales and quotients run on the device: others are Unsupported,
//! naming the node. Shared by FuseNormQuantize (which leaves such a QuantizeLinear alone) and
//! the norm kernel.
Result<DType> NormQuotientType(const ir::Node& node, DType x, DType scale);

}  // namespace sampan::cuda
