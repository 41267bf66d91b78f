// Epilogues of the fused ops the optimizer produces (domain "sampan"):
//   FusedConv(X, W, B?, Z?)   = act(Conv(X, W, B) + Z)       Conv attributes + activation
//   FusedGemm(A, B, C?, Z?)   = act(Gemm(A, B, C) + Z)        Gemm attributes + activation
//   FusedMatMul(A, B, bias?, Z?) = act(MatMul(A, B) + bias + Z)  bias is 1-D [N]
// Z, the residual, has the output's shape (the CUDA backend adds it in cuBLASLt's epilogue).
//   FusedConvPool(X, W, B?)   = MaxPool(act(Conv(X, W, B)))  Conv attributes + activation, and
//       the MaxPool's as pool_kernel_shape, pool_strides, pool_pads, pool_dilations,
//       pool_ceil_mode (the CUDA lowering's network stem: cuda/fuse_conv_pool.h)
//   FusedBatchNorm(X, scale, B, mean, var) = act(BatchNormalization(...))  inference only,
//       one output (the CUDA lowering's BatchNorm + activation: DenseNet's norm after Concat)
// `activation` is one of: Relu, Clip, Sigmoid, SiLU, HardSigmoid, HardSwish,
// LeakyRelu, Gelu, GeluTanh, Tanh; its parameters are `activation_params`
// (Clip: min, max; HardSigmoid: alpha, beta; LeakyRelu: alpha).
// `output_scale` and `output_bias` (floats, default 1 and 0) follow the activation:
// y = act(...) * output_scale + output_bias (the CPU lowering's learnable affine after a
// HardSwish, PaddleOCR's LCNet; cpu/fuse_conv_output_affine.h).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace sampan::ops {

constexpr const char* kSampanDomain = "sampan";

//! Whether `activation` names a supported epilogue with the right number of params.
Status CheckActivation(const std::string& activation, const std::vector<float>& params);
//! Applies the activation to one value (float math).
float ApplyActivation(const std::string& activation, const std::vector<float>& params, float x);

}  // namespace sampan::ops
