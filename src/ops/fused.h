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
// LeakyRelu, Gelu, GeluTanh, Tanh (absent or "": none); its parameters are `activation_params`,
// exactly as many as it takes (Clip: min, max; HardSigmoid: alpha, beta; LeakyRelu: alpha;
// the others none). ParseActivation is the one reader of the two attributes.
// `output_scale` and `output_bias` (floats, default 1 and 0) follow the activation:
// y = act(...) * output_scale + output_bias (the CPU lowering's learnable affine after a
// HardSwish, PaddleOCR's LCNet; cpu/fuse_conv_output_affine.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::ops {

constexpr const char* kSampanDomain = "sampan";

//! A fused epilogue's activation; backends map it to their own ops with a switch.
enum class Activation {
  kNone,
  kRelu,
  kLeakyRelu,
  kClip,
  kSigmoid,
  kSiLU,
  kTanh,
  kHardSigmoid,
  kHardSwish,
  kGelu,
  kGeluTanh,
};

//! An activation and its parameters: LeakyRelu y = x >= 0 ? x : p0 * x; Clip min(max(x, p0), p1);
//! HardSigmoid max(0, min(1, p0 * x + p1)); unused parameters are 0.
struct FusedActivation {
  Activation kind = Activation::kNone;
  float p0 = 0.f, p1 = 0.f;
};

//! The `activation` attribute's name of `kind` ("" for kNone).
const char* ActivationName(Activation kind);
//! How many `activation_params` `kind` takes (0, 1 or 2).
size_t ActivationParamCount(Activation kind);
//! The `activation_params` that describe `a` (ActivationParamCount(a.kind) values).
std::vector<float> ActivationParams(const FusedActivation& a);

//! Parses `activation` and `activation_params`; InvalidArgument, naming the attribute, for an
//! unknown name or a parameter count other than the activation takes.
Result<FusedActivation> ParseActivation(const std::string& activation, const std::vector<float>& params);
//! ParseActivation of a node's attributes (absent: kNone); its errors name the node.
Result<FusedActivation> ReadActivation(const ir::Node& node);
//! Writes `a` as a fused node's `activation` and, when it takes any, `activation_params`.
void SetActivationAttrs(const FusedActivation& a, std::map<std::string, ir::Attribute>& attrs);
//! Applies the activation to one value (float math): the reference every backend matches.
float ApplyActivation(const FusedActivation& a, float x);

}  // namespace sampan::ops
