// ArgMax, ArgMin: int64 index of the largest / smallest element along `axis`
// (default 0); keepdims (default 1); select_last_index (opset >= 12, default 0)
// picks the last of equal extremes instead of the first. NaN counts as the
// extreme (NumPy behaviour).
#include <cmath>

#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

template <bool kMax>
Status InferArg(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  const bool keepdims = ctx.node().attr_int("keepdims", 1) != 0;
  const int64_t rank = ctx.input_rank(0);
  if (rank < 0) {
    ctx.set_output(0, DType::kInt64, std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), rank));
  const ir::Dims& in = *ctx.input_dims(0);
  if (in[static_cast<size_t>(axis)].known() && in[static_cast<size_t>(axis)].value == 0)
    return ctx.Error("cannot take ", kMax ? "ArgMax" : "ArgMin", " over an empty axis ", axis);
  ir::Dims out;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis)
      out.push_back(in[static_cast<size_t>(d)]);
    else if (keepdims)
      out.push_back(ir::Dim::Known(1));
  }
  ctx.set_output(0, DType::kInt64, out);
  return Status::Ok();
}

template <bool kMax>
Status RunArg(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), x.rank());
  const bool last = ctx.opset >= 12 && ctx.node.attr_int("select_last_index", 0) != 0;
  const AxisSplit s = SplitAtAxis(x.shape(), axis);
  if (s.n == 0 && s.outer * s.inner > 0) return ctx.Error("cannot reduce over an empty axis");
  int64_t* py = ctx.out(0).mutable_data<int64_t>();
  return DispatchDType(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        const T* row = px + o * s.n * s.inner + i;
        C best = static_cast<C>(row[0]);
        int64_t arg = 0;
        bool best_nan = false;
        if constexpr (std::is_floating_point_v<C>) best_nan = std::isnan(best);
        for (int64_t k = 1; k < s.n && !best_nan; ++k) {
          const C v = static_cast<C>(row[k * s.inner]);
          bool take;
          if constexpr (std::is_floating_point_v<C>) {
            if (std::isnan(v)) {
              best = v;
              arg = k;
              best_nan = true;
              break;
            }
          }
          if constexpr (kMax)
            take = last ? v >= best : v > best;
          else
            take = last ? v <= best : v < best;
          if (take) {
            best = v;
            arg = k;
          }
        }
        py[o * s.inner + i] = arg;
      }
    }
  });
}

SAMPAN_REGISTER_OP("ArgMax", InferArg<true>, RunArg<true>);
SAMPAN_REGISTER_OP("ArgMin", InferArg<false>, RunArg<false>);

}  // namespace
}  // namespace sampan::ops
