// Lowering rewrites of the CUDA backend for FP8 builds: a per-tensor float8 QuantizeLinear
// (constant positive scale, zero point absent or 0) of an activation becomes an output of the
// kernel that makes the activation, so the activation is not read back by a quantize pass.
// Same values bit for bit: the kernels quantize their output as rounded to its type, as
// QuantizeLinear does (backends/cuda/quantize_math.cuh). Other backends keep the
// QuantizeLinear, which their own kernels run, so this lives here.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/node_kernel.h"
#include "backends/cuda/quantize.h"
#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! A QuantizeLinear of a LayerNormalization's or AddLayerNorm's output becomes that norm's
//! second output (sampan::AddLayerNorm's YQ, B absent for a plain LayerNormalization): the
//! norm kernel writes the float8 copy beside its own output, which the next residual still
//! reads (BERT: two per layer). Returns one line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseNormQuantize(plan::Plan& plan);

//! A QuantizeLinear of a sampan::Attention's output, directly or through views (Reshape,
//! Flatten, Squeeze, Unsqueeze) that nothing else reads, becomes the attention's quantized
//! output (its YScale input): the attention kernel writes float8 and the views carry float8
//! (BERT: the activation the output projection reads, one per layer). Returns one line per
//! rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseAttentionQuantize(plan::Plan& plan);

//! The quotient type of a quantized output as QuantizeLinear computes it (ops/quantize.cpp):
//! the node's `precision` attribute, else x's type when the scale has it, else float32. Only
//! float32/float16/bfloat16 scales and quotients run on the device: others are Unsupported,
//! naming the node. Shared by the rewrites (which leave such a QuantizeLinear alone) and the
//! kernels.
Result<DType> QuantizedOutputQuotientType(const ir::Node& node, DType x, DType scale);

//! The device parameters of `node`'s quantized output of type `yq` (float8 e4m3fn or e5m2)
//! from x's type and the scale input (one constant value, positive and finite), rounded to
//! the quotient type as QuantizeLinear rounds it; `saturate` from the node. Unsupported,
//! naming the node, otherwise. Float8Out::y is left null (the kernel's output pointer).
Result<Float8Out> Float8OutputParams(const ir::Node& node, DType x, const KernelInput& scale, DType yq);

}  // namespace sampan::cuda
