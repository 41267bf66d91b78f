// ReverseSequence: for each batch entry b, reverses the first sequence_lens[b]
// steps along the time axis and copies the rest.
#include <cstring>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Status InferReverseSequence(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.Error("sequence_lens must be int64, got ", DTypeName(ctx.input_dtype(1)));
  const int64_t ta = ctx.node().attr_int("time_axis", 0), ba = ctx.node().attr_int("batch_axis", 1);
  if ((ta != 0 && ta != 1) || (ba != 0 && ba != 1) || ta == ba)
    return ctx.Error("time_axis (", ta, ") and batch_axis (", ba, ") must be 0 and 1 in some order");
  const auto& in = ctx.input_dims(0);
  const auto& sl = ctx.input_dims(1);
  if (in && in->size() < 2) return ctx.Error("input must have rank >= 2, got ", in->size());
  if (sl && sl->size() != 1) return ctx.Error("sequence_lens must be 1-D, got rank ", sl->size());
  if (in && sl && (*in)[ba].known() && (*sl)[0].known() && (*in)[ba].value != (*sl)[0].value)
    return ctx.Error("sequence_lens has ", (*sl)[0].value, " entries but batch size is ", (*in)[ba].value);
  ctx.set_output(0, ctx.input_dtype(0), in);
  return Status::Ok();
}

Status RunReverseSequence(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& lens = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t ta = ctx.node.attr_int("time_axis", 0), ba = ctx.node.attr_int("batch_axis", 1);
  const int64_t T = x.dim(ta), B = x.dim(ba);
  if (lens.numel() != B) return ctx.Error("sequence_lens has ", lens.numel(), " entries but batch size is ", B);
  const int64_t inner = SpanProduct(x.shape(), 2, x.shape().size());
  const size_t row = static_cast<size_t>(inner) * DTypeSize(x.dtype());
  const int64_t t_stride = ta == 0 ? B : 1, b_stride = ba == 0 ? T : 1;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  if (row == 0) return Status::Ok();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lens.data<int64_t>()[b];
    if (len < 0 || len > T) return ctx.Error("sequence_lens[", b, "] = ", len, " is outside [0, ", T, "]");
    for (int64_t t = 0; t < T; ++t) {
      const int64_t st = t < len ? len - 1 - t : t;
      std::memcpy(dst + static_cast<size_t>(t * t_stride + b * b_stride) * row,
                  src + static_cast<size_t>(st * t_stride + b * b_stride) * row, row);
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("ReverseSequence", InferReverseSequence, RunReverseSequence);

}  // namespace
}  // namespace sampan::ops
