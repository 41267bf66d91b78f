// A lowering rewrite of the CUDA backend: attention whose Q, K and V are views of one
// projection GEMM's output reads that output directly, packed ("bs3hd", ops/attention.h).
//
// Exporters split a [.., 3E] projection into heads in many ways: torch.nn.MultiheadAttention
// (ViT) slices or unflattens/transposes/gathers a sequence-first [S, B, 3E] and reshapes and
// transposes each part to [B*H, S, D] or [B, H, S, D]; timm reshapes [B, S, 3, H, D],
// permutes and gathers. Rather than one pattern per exporter, each operand's chain of view
// ops (Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Gather of one constant index,
// Slice with constant bounds, multiplication or division by a constant on Q) is followed
// back to the projection and composed into a strided view of its storage (sizes and
// strides, dims that cannot merge kept as several); the rewrite applies when the three views
// are exactly parts 0, 1, 2 of the projection read as [B, S, 3, H, D] (K possibly
// transposed). A projection of Transpose(x) {perm=[1,0,2]} (sequence-first) is replaced by
// the projection of x, whose rows are [B, S] ordered: MatMul(Transpose(x)) =
// Transpose(MatMul(x)). The attention then writes [B, S, H, D]; its old output chain is
// followed the same way: a chain that is a plain reshape of it becomes one; a [S*B, E]
// row-permuted read feeding one row-wise GEMM whose output chain undoes the permutation
// becomes reshapes (the GEMM reads rows in [B, S] order); anything else gets one transpose
// back to the old layout. The division of Q becomes the attention's scale. Only where the
// fused attention kernel runs (FP16/BF16, head size <= 128, sm_80+).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place for a device of compute capability `cc_major`. Returns one
//! line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FoldAttentionViews(plan::Plan& plan, int cc_major);

}  // namespace sampan::cuda
