// Fused scaled dot-product attention for FP16 / BF16 (flash-attention style):
//   out = softmax(Q K^T * scale + mask) V
// computed per (slice, up to 128 query rows) in one block: Q in registers, K/V tiles of 64
// keys in shared memory, online softmax in float, both products on tensor cores
// (mma.sync m16n8k16, sm_80+). The [Sq, Sk] scores never reach global memory.
// Operands are read through strides, so [B, H, S, D], [B, S, H, D] (heads inside
// the rows) and a pre-transposed K ([.., D, Sk]) all run without copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"
#include "backends/cuda/quantize.h"

namespace sampan::cuda {

//! Where element (slice b, row i, channel c) lives: with b = (outer, head) = (b / heads, b % heads),
//! offset = outer * batch + head * head + i * row + c * col (elements).
struct AttentionStrides {
  int64_t batch = 0, head = 0, row = 0, col = 1;
};

struct AttentionParams {
  int64_t slices = 1;             //!< B * H
  int64_t heads = 1;              //!< divisor splitting a slice index into (outer, head) for the strides
  int64_t sq = 0, sk = 0, d = 0;  //!< head size d of Q, K and V alike
  float scale = 1.f;
  AttentionStrides q, k, v, out;  //!< k: (key j, channel c) as (row, col); out.col must be 1 (out: elements of
                                  //!< the output's type, bytes when quantized)
  //! Additive mask of the operands' type, SoftmaxParams' addressing: slice b reads mask row
  //! ((b / mask_batch_div) % mask_batch_mod) * mask_batch_stride + i * mask_row_stride
  //! + j * mask_col_stride. Rows whose logits are all -inf, or hold a NaN, give zeros.
  const void* mask = nullptr;
  int64_t mask_batch_div = 1, mask_batch_mod = 1, mask_batch_stride = 0, mask_row_stride = 0, mask_col_stride = 0;
  //! Query warps per block (16 rows each, at most kAttentionMaxWarps; fewer when Sq is short).
  //! 0: the most. The builder times the choices (AttentionKernel's tactics).
  int warps = 0;
  //! Quantized output (sampan::Attention's YScale): `out` receives the float8 codes of the
  //! output as rounded to the operands' type, QuantizeLinear's with q8's scale (q8.y unused).
  bool quantized = false;
  Float8Out q8;
};

constexpr int kAttentionMaxWarps = 8;

//! Whether the fused kernel covers this type and head size on a device of compute capability
//! `cc_major`.x (FP16/BF16, d == dv <= 128, sm_80+); otherwise the GEMM path runs.
bool FusedAttentionSupports(FloatType t, int64_t d, int64_t dv, int cc_major);

//! Lets the row-mask kernels (a mask that differs between query rows) use the shared memory
//! their mask tiles need on the current device. Call once per device before
//! LaunchFusedAttention, outside stream capture.
cudaError_t PrepareFusedAttention();

cudaError_t LaunchFusedAttention(FloatType t, const void* q, const void* k, const void* v, void* out,
                                 const AttentionParams& p, cudaStream_t stream);

}  // namespace sampan::cuda
