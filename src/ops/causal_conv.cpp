// CausalConvWithState (opset 27): causal depthwise 1-D convolution that carries
// its left context between calls.
//   input       [B, C, L]
//   weight      [C, 1, K]        one kernel per channel
//   bias        [C]              optional
//   past_state  [B, C, K-1]      optional; zeros when omitted
//   output        [B, C, L]      y[t] = bias + sum_j w[j] * padded[t + j],
//                                padded = concat(past_state, input) along L
//   present_state [B, C, K-1]    the last K-1 positions of padded
// activation: "none", or "silu" / "swish" (y * sigmoid(y)) fused after the bias.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status ExpectRank3(const InferContext& ctx, size_t i, const char* what) {
  const int64_t r = ctx.input_rank(i);
  if (r >= 0 && r != 3) return ctx.Error(what, " must be rank 3, got rank ", r);
  return Status::Ok();
}

Status InferCausalConv(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 4));
  if (ctx.opset() < 27)
    return ctx.Error("CausalConvWithState is defined from opset 27 (the model imports opset ", ctx.opset(), ")");
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2)
    return ctx.Error("expects 1 or 2 outputs (output, present_state), got ", ctx.num_outputs());
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16}));
  for (size_t i = 1; i < 4; ++i)
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  const std::string act = ctx.node().attr_string("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    return ctx.Error("attribute activation must be \"none\", \"silu\" or \"swish\", got \"", act, "\"");
  SP_RETURN_IF_ERROR(ExpectRank3(ctx, 0, "input"));
  SP_RETURN_IF_ERROR(ExpectRank3(ctx, 1, "weight"));
  if (ctx.has_input(2) && ctx.input_rank(2) >= 0 && ctx.input_rank(2) != 1)
    return ctx.Error("bias must be rank 1 [channels], got rank ", ctx.input_rank(2));
  if (ctx.has_input(3)) SP_RETURN_IF_ERROR(ExpectRank3(ctx, 3, "past_state"));

  ir::Dim b = InputDim(ctx, 0, 0), c = InputDim(ctx, 0, 1), l = InputDim(ctx, 0, 2), k = InputDim(ctx, 1, 2);
  SP_RETURN_IF_ERROR(UnifyDim(ctx, c, InputDim(ctx, 1, 0), "channels (input dim 1, weight dim 0)"));
  const ir::Dim one = InputDim(ctx, 1, 1);
  if (one.known() && one.value != 1) return ctx.Error("weight must be [channels, 1, k], got dim 1 = ", one.value);
  if (k.known() && k.value < 1) return ctx.Error("kernel size (weight dim 2) must be >= 1, got ", k.value);
  ir::Dim state_len = k.known() ? ir::Dim::Known(k.value - 1) : ir::Dim::Unknown();
  if (ctx.has_input(2) && ctx.input_dims(2))
    SP_RETURN_IF_ERROR(UnifyDim(ctx, c, (*ctx.input_dims(2))[0], "channels (input dim 1, bias dim 0)"));
  if (ctx.has_input(3)) {
    SP_RETURN_IF_ERROR(UnifyDim(ctx, b, InputDim(ctx, 3, 0), "batch (input dim 0, past_state dim 0)"));
    SP_RETURN_IF_ERROR(UnifyDim(ctx, c, InputDim(ctx, 3, 1), "channels (input dim 1, past_state dim 1)"));
    SP_RETURN_IF_ERROR(
        UnifyDim(ctx, state_len, InputDim(ctx, 3, 2), "state length (weight dim 2 - 1, past_state dim 2)"));
  }
  const DType dt = ctx.input_dtype(0);
  ctx.set_output(0, dt, ir::Dims{b, c, l});
  if (ctx.num_outputs() > 1) ctx.set_output(1, dt, ir::Dims{b, c, state_len});
  return Status::Ok();
}

Status RunCausalConv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor* bias = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const Tensor* past = ctx.has_input(3) ? &ctx.in(3) : nullptr;
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), K = w.dim(2), S = K - 1;
  const std::string act = ctx.node.attr_string("activation", "none");
  const bool silu = act == "silu" || act == "swish";
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_same_v<T, float>) {
      const T* px = x.data<T>();
      const T* pw = w.data<T>();
      std::vector<T> padded(static_cast<size_t>(S + L));
      T* py = ctx.out(0).mutable_data<T>();
      T* pstate = ctx.outputs.size() > 1 ? ctx.out(1).mutable_data<T>() : nullptr;
      for (int64_t n = 0; n < B; ++n)
        for (int64_t ch = 0; ch < C; ++ch) {
          const int64_t row = n * C + ch;
          if (past != nullptr)
            std::copy_n(past->data<T>() + row * S, S, padded.begin());
          else
            std::fill_n(padded.begin(), S, ConvertElement<T>(0.0f));
          std::copy_n(px + row * L, L, padded.begin() + S);
          const T* k = pw + ch * K;
          for (int64_t t = 0; t < L; ++t) {
            // Summed in float (as NumPy's float16 matmul), the sum and the bias each
            // rounded to T, the activation in float.
            float acc = 0;
            for (int64_t j = 0; j < K; ++j)
              acc += static_cast<float>(k[j]) * static_cast<float>(padded[static_cast<size_t>(t + j)]);
            T v = ConvertElement<T>(acc);
            if (bias != nullptr) v = ConvertElement<T>(static_cast<float>(v) + static_cast<float>(bias->data<T>()[ch]));
            if (silu) {
              const float f = static_cast<float>(v);
              v = ConvertElement<T>(f * (1.0f / (1.0f + std::exp(-f))));
            }
            py[row * L + t] = v;
          }
          if (pstate != nullptr) std::copy_n(padded.begin() + L, S, pstate + row * S);
        }
    }
  });
}

SAMPAN_REGISTER_OP("CausalConvWithState", InferCausalConv, RunCausalConv);

}  // namespace
}  // namespace sampan::ops
