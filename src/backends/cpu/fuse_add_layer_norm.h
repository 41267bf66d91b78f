#pragma once

// A lowering rewrite of the cpu backend: a residual sum read only by a LayerNormalization
// becomes one sampan::AddLayerNorm (softmax_norm.cpp's kernel sums and normalises each row in
// one pass, so the sum is never written to memory and read back),
//   LayerNormalization(Add(a, b), scale, bias)  =>  sampan::AddLayerNorm(a, b, scale, bias)
// in float32, without the norm's Mean / InvStdDev outputs, where each operand is the sum's
// shape or broadcasts into it along leading dims only, covering the normalised block (BERT's
// residual blocks, and its embeddings plus a [S, H] position table). The CUDA backend forms
// the same op (backends/cuda/fuse_add_layer_norm.cpp) for its kernels.

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cpu {

//! Returns one line per rewrite ("Add 'x' + LayerNormalization 'y' -> ...").
Result<std::vector<std::string>> FuseAddLayerNorm(plan::Plan& plan);

}  // namespace sampan::cpu
