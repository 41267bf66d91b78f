// Det (opset 11): determinants of the trailing M x M matrices, by LU decomposition with
// partial pivoting in double.
#include <cmath>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferDet(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  const auto& in = ctx.input_dims(0);
  if (!in) return ctx.NotSupported("input of unknown rank");
  if (in->size() < 2) return ctx.Error("input must have rank >= 2 ([..., M, M]), got ", in->size());
  const ir::Dim& m = (*in)[in->size() - 2];
  const ir::Dim& n = in->back();
  if (m.known() && n.known() && m.value != n.value)
    return ctx.Error("matrices must be square, got ", m.value, " x ", n.value);
  ctx.set_output(0, ctx.input_dtype(0), ir::Dims(in->begin(), in->end() - 2));
  return Status::Ok();
}

Status RunDet(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t m = x.dim(x.rank() - 1);
  if (x.dim(x.rank() - 2) != m) return ctx.Error("matrices must be square");
  const int64_t count = y.numel();
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      std::vector<double> a(static_cast<size_t>(m * m));
      for (int64_t b = 0; b < count; ++b) {
        for (int64_t k = 0; k < m * m; ++k)
          a[static_cast<size_t>(k)] = static_cast<double>(ComputeType<T>(px[b * m * m + k]));
        double det = 1.0;
        for (int64_t c = 0; c < m && det != 0.0; ++c) {
          int64_t p = c;  // the largest pivot in column c
          for (int64_t r = c + 1; r < m; ++r)
            if (std::fabs(a[static_cast<size_t>(r * m + c)]) > std::fabs(a[static_cast<size_t>(p * m + c)])) p = r;
          const double piv = a[static_cast<size_t>(p * m + c)];
          if (piv == 0.0) {
            det = 0.0;
            break;
          }
          if (p != c) {
            for (int64_t k = 0; k < m; ++k)
              std::swap(a[static_cast<size_t>(p * m + k)], a[static_cast<size_t>(c * m + k)]);
            det = -det;
          }
          det *= piv;
          for (int64_t r = c + 1; r < m; ++r) {
            const double f = a[static_cast<size_t>(r * m + c)] / piv;
            for (int64_t k = c; k < m; ++k) a[static_cast<size_t>(r * m + k)] -= f * a[static_cast<size_t>(c * m + k)];
          }
        }
        py[b] = ConvertElement<T>(det);
      }
    }
  });
}

SAMPAN_REGISTER_OP("Det", InferDet, RunDet);

}  // namespace
}  // namespace sampan::ops
