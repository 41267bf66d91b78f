// A lowering rewrite of the CUDA backend: the three projections of self-attention,
// FusedMatMul(x, Wq, bq), FusedMatMul(x, Wk, bk), FusedMatMul(x, Wv, bv), each
// reshaped to [B, S, H, D] for one bshd sampan::Attention, become one FusedMatMul
// with the weights side by side ([K, 3N]) viewed as [B, S, 3, H, D], and the
// attention reads Q, K and V from it (layout "bs3hd", ops/attention.h). One GEMM with
// N = 3 x 768 instead of three of 768 keeps more of the GPU busy. Only where the fused
// attention kernel will run (FP16/BF16, head size <= 128, sm_80+): the other kernels
// and backends read separate Q, K and V. FP8 products (sampan::QMatMul with a float output)
// merge the same way when they share the activation's quantization and have equal weight scales.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place for a device of compute capability `cc_major`; the
//! merged GEMM takes the query projection's name + "_qkv" and its plan choice. Returns
//! one line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseQkvProjections(plan::Plan& plan, int cc_major);

}  // namespace sampan::cuda
