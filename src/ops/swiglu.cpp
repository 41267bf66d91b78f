// SwiGLU (opset 28): Y = Swish_alpha(A) * B with Swish_alpha(a) = a * sigmoid(alpha * a).
// A (the gate) and B (the value) have the same shape; there is no broadcasting.
#include <cmath>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferSwiGLU(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  if (ctx.opset() < 28) return ctx.Error("SwiGLU is defined from opset 28 (the model imports opset ", ctx.opset(), ")");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  const auto& a = ctx.input_dims(0);
  const auto& b = ctx.input_dims(1);
  if (!a || !b) {
    ctx.set_output(0, ctx.input_dtype(0), a ? a : b);
    return Status::Ok();
  }
  if (a->size() != b->size())
    return ctx.Error("A and B must have the same shape (no broadcasting), got ranks ", a->size(), " and ", b->size());
  ir::Dims out = *a;
  for (size_t d = 0; d < out.size(); ++d) {
    const ir::Dim& da = (*a)[d];
    const ir::Dim& db = (*b)[d];
    if (da.known() && db.known() && da.value != db.value)
      return ctx.Error("A and B must have the same shape (no broadcasting), dim ", d, " is ", da.value, " vs ",
                       db.value);
    if (!da.known() && db.known()) out[d] = db;
  }
  ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  return Status::Ok();
}

Status RunSwiGLU(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.shape() != b.shape())
    return ctx.Error("A ", a.Describe(), " and B ", b.Describe(), " must have the same shape (no broadcasting)");
  Tensor& y = ctx.out(0);
  const float alpha = ctx.node.attr_float("alpha", 1.0f);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) {
      using C = ComputeType<T>;
      // Every step is rounded to T, as ONNX's reference computes in T throughout.
      auto r = [](C v) { return static_cast<C>(ConvertElement<T>(v)); };
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* py = y.mutable_data<T>();
      const C al = static_cast<C>(alpha);
      for (int64_t i = 0; i < a.numel(); ++i) {
        const C g = static_cast<C>(pa[i]);
        const C sig = r(C(1) / r(C(1) + r(std::exp(r(-al * g)))));
        py[i] = ConvertElement<T>(r(g * sig) * static_cast<C>(pb[i]));
      }
    }
  });
}

SAMPAN_REGISTER_OP("SwiGLU", InferSwiGLU, RunSwiGLU);

}  // namespace
}  // namespace sampan::ops
