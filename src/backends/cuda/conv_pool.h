// A network's stem in one kernel: act(Conv(x, W) + B) followed by a 2-D MaxPool
// (ResNet's 7x7/2 conv + 3x3/2 pool, GoogLeNet's, any k x k conv on up to 4 input
// channels), FP16/BF16 on tensor cores (sm_80+). One block computes the conv outputs a
// tile of pooled outputs needs (halo included) as an implicit GEMM from an input patch
// in shared memory, applies bias and activation, pools them in shared memory and
// writes only the pooled tile: the full-resolution conv output (4x the pooled bytes)
// never reaches global memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

struct ConvPoolParams {
  int64_t n = 0, cin = 0, h = 0, w = 0;  //!< input x
  int64_t cout = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, pad_h = 0, pad_w = 0;        //!< conv (no dilation, one group)
  int64_t oh = 0, ow = 0;                                          //!< conv output
  int pk_h = 1, pk_w = 1, ps_h = 1, ps_w = 1, pp_h = 0, pp_w = 0;  //!< max pool (no dilation)
  int64_t ph = 0, pw = 0;                                          //!< pooled output
  int64_t xs[4] = {0, 0, 0, 0};  //!< element strides of x: n, c, h, w (NCHW or channels-last)
  bool out_nhwc = false;         //!< y channels-last ([N, PH, PW, Cout] in memory)
  UnaryOp act = UnaryOp::kIdentity;
  float act_p0 = 0.f, act_p1 = 0.f;
};

//! Kernel configurations the builder may time (ConvPoolKernel's tactics): warps per block
//! and 16-row GEMM tiles per warp, which set how many conv outputs a block computes.
int ConvPoolVariants();

//! A configuration at given shapes: the tile of pooled outputs one block writes.
struct ConvPoolPlan {
  int variant = 0;
  int tph = 0, tpw = 0;   //!< pooled outputs per block
  size_t smem_bytes = 0;  //!< dynamic shared memory per block
};
//! Whether `variant` covers these shapes (then *plan is set); otherwise `why` says what does not fit.
bool PlanConvPool(const ConvPoolParams& p, int variant, ConvPoolPlan* plan, std::string* why);
//! The filters in the kernel's layout: bytes of the packed copy, and the copy itself
//! (w is [Cout, Cin, KH, KW]; `packed` 16-byte aligned).
size_t ConvPoolPackedBytes(const ConvPoolParams& p, size_t elem);
cudaError_t LaunchPackConvPoolFilters(FloatType t, const void* w, void* packed, const ConvPoolParams& p,
                                      cudaStream_t stream);
//! y = MaxPool(act(Conv(x, w) + bias)); `packed_w` from LaunchPackConvPoolFilters, bias [Cout] or nullptr.
cudaError_t LaunchConvMaxPool(FloatType t, const void* x, const void* packed_w, const void* bias, void* y,
                              const ConvPoolParams& p, const ConvPoolPlan& plan, cudaStream_t stream);

}  // namespace sampan::cuda
