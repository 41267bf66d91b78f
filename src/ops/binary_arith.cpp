// Add, Sub, Mul, Div: element-wise with multidirectional broadcasting.
#include <functional>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferArith(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

template <class Op>
Status RunArith(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else {
      using C = ComputeType<T>;
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* py = y.mutable_data<T>();
      Op op;
      ForEachBroadcast<2>(y.shape(), {a.shape(), b.shape()}, [&](int64_t i, const std::array<int64_t, 2>& o) {
        py[i] = ConvertElement<T>(op(static_cast<C>(pa[o[0]]), static_cast<C>(pb[o[1]])));
      });
    }
  });
}

struct DivOp {
  template <class C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;  // undefined in ONNX; keep it deterministic and crash-free
      if constexpr (std::is_signed_v<C>)
        if (y == -1) return static_cast<C>(-x);
    }
    return static_cast<C>(x / y);
  }
};

SAMPAN_REGISTER_OP("Add", InferArith, RunArith<std::plus<>>);
SAMPAN_REGISTER_OP("Sub", InferArith, RunArith<std::minus<>>);
SAMPAN_REGISTER_OP("Mul", InferArith, RunArith<std::multiplies<>>);
SAMPAN_REGISTER_OP("Div", InferArith, RunArith<DivOp>);

}  // namespace
}  // namespace sampan::ops
