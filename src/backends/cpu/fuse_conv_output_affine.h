// A lowering rewrite of the cpu backend: a scalar affine written after a fused convolution's
// activation becomes the convolution's output_scale / output_bias (ops/fused.h), which oneDNN
// applies as one more post-op (eltwise_linear) instead of two passes over the output:
//   FusedConv{activation=A} -> Mul(., s) -> Add(., t)  =>  FusedConv{activation=A, output_scale=s, output_bias=t}
// Any run of Mul, Div, Add and Sub by a float scalar constant (either operand order, but a
// Div only as y / s), each intermediate read once and not a graph output. PaddleOCR's LCNet
// (PP-OCRv4) writes its learnable affine this way after every HardSwish. The passes fold such
// affines into the weights when no activation comes between (passes/fold_conv_affine.cpp).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cpu {

//! Returns one line per convolution changed ("conv <- Mul m, Add a").
Result<std::vector<std::string>> FuseConvOutputAffine(plan::Plan& plan);

}  // namespace sampan::cpu
