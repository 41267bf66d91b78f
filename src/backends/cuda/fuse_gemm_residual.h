// A lowering rewrite of the CUDA backend: a residual Add whose other operand is a matrix
// product (Gemm, MatMul or their fused forms, without an activation), possibly seen
// through reshapes, becomes input Z of sampan::FusedGemm / sampan::FusedMatMul
// (ops/fused.h): cuBLASLt adds it as its C operand in the product's epilogue, so the sum
// costs no pass of its own (ViT's and Swin's pre-LN residual streams, whose sums are
// also read by the next block and so cannot go into AddLayerNorm). Runs after
// FuseAddLayerNorm and FoldAttentionViews. Other backends keep the Add.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place; the product keeps its name (and plan choice), the Add's
//! choice is dropped and its output value is kept (it may be a graph output). Returns one
//! line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseGemmResidual(plan::Plan& plan);

}  // namespace sampan::cuda
