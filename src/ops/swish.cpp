// Swish (opset 24): y = x * sigmoid(alpha * x).
#include <cmath>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferSwish(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunSwish(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const float alpha = ctx.node.attr_float("alpha", 1.0f);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) {
      using C = ComputeType<T>;
      const T* p = x.data<T>();
      T* q = y.mutable_data<T>();
      const int64_t n = x.numel();
      const C a = static_cast<C>(alpha);
      for (int64_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(p[i]);
        q[i] = ConvertElement<T>(v / (C(1) + std::exp(-a * v)));
      }
    }
  });
}

SAMPAN_REGISTER_OP("Swish", InferSwish, RunSwish);

}  // namespace
}  // namespace sampan::ops
