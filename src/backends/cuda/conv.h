// Convolutions through cuDNN: FusedConv/Conv as act(conv(x, w) + bias + z) in one
// cudnnConvolutionBiasActivationForward where cuDNN supports the combination
// (ReLU or identity, f32/f16), otherwise cudnnConvolutionForward followed by our
// element-wise epilogue kernels. NCHW, 1-D/2-D/3-D, groups and dilations.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_types.h"
#include "base/status.h"

namespace sampan::cuda {

struct ConvShape {
  std::vector<int64_t> x, w, y;                   //!< NC(D)HW shapes; 1-D convs are given as 2-D with H = 1
  std::vector<int64_t> pads, strides, dilations;  //!< per spatial dim (symmetric pads)
  int64_t groups = 1;
  FloatType type = FloatType::kF32;
  bool tf32 = false;
  bool has_bias = false, has_z = false;
  UnaryOp act = UnaryOp::kIdentity;
  float act_p0 = 0.f, act_p1 = 0.f;
  bool nhwc = false;  //!< x, z, y channels-last and w as [K, R, S, C] (2-D only)
};

class Conv {
 public:
  Conv() = default;
  ~Conv();
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;

  //! Builds descriptors; `algo` >= 0 forces a forward algorithm (a recorded tactic),
  //! -1 takes cuDNN's heuristic choice.
  Status Prepare(cudnnHandle_t handle, const ConvShape& shape, int algo);
  size_t workspace_needed() const { return workspace_; }
  //! Algorithms cuDNN's heuristic offers for this convolution (the builder times them).
  std::vector<int> candidates() const { return candidates_; }
  //! Switches to `algo` (one of candidates()).
  Status SetAlgo(cudnnHandle_t handle, int algo);
  int algo() const { return static_cast<int>(algo_); }
  bool fused() const { return fused_; }
  //! y = act(conv(x, w) + bias + z); `zero_bias` must hold C_out zeros when there is no bias.
  Status Run(cudnnHandle_t handle, const void* x, const void* w, const void* bias, const void* z, void* y,
             void* workspace, size_t workspace_bytes, cudaStream_t stream);

 private:
  ConvShape s_;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr, bd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudnnActivationDescriptor_t ad_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_ = 0;
  bool fused_ = false;  //!< one cudnnConvolutionBiasActivationForward call
  std::vector<int> candidates_;
};

}  // namespace sampan::cuda
