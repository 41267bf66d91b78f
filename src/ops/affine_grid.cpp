// AffineGrid (opset 20): the sampling grid of theta applied to normalised output
// coordinates, GridSample's companion. theta [N, 2, 3] with size [N, C, H, W] gives
// [N, H, W, 2]; theta [N, 3, 4] with size [N, C, D, H, W] gives [N, D, H, W, 3]. A length-L
// axis has coordinates -1 + 2i/(L-1) with align_corners, else -1 + (2i+1)/L.
#include "ops/common.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Status InferAffineGrid(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  if (ctx.input_dtype(1) != DType::kInt64) return ctx.Error("size must be int64, got ", DTypeName(ctx.input_dtype(1)));
  const auto& th = ctx.input_dims(0);
  if (th && th->size() != 3) return ctx.Error("theta must be [N, 2, 3] or [N, 3, 4], got rank ", th->size());
  const Tensor* size = ctx.input_value(1);
  if (!size) {
    const auto& sd = ctx.input_dims(1);
    if (!sd || sd->size() != 1 || !(*sd)[0].known()) return ctx.NotSupported("a size of unknown length");
    const int64_t spatial = (*sd)[0].value - 2;
    if (spatial != 2 && spatial != 3) return ctx.Error("size must have 4 or 5 values, got ", (*sd)[0].value);
    ctx.set_output(0, ctx.input_dtype(0), UnknownDims(static_cast<size_t>(spatial + 2)));
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> s, ToInt64Vector(*size, "size"));
  if (s.size() != 4 && s.size() != 5) return ctx.Error("size must have 4 or 5 values, got ", s.size());
  const int64_t spatial = static_cast<int64_t>(s.size()) - 2;
  for (int64_t v : s)
    if (v < 1) return ctx.Error("size values must be >= 1, got ", v);
  if (th && (*th)[1].known() && (*th)[2].known() && ((*th)[1].value != spatial || (*th)[2].value != spatial + 1))
    return ctx.Error("theta must be [N, ", spatial, ", ", spatial + 1, "] for a ", spatial, "-D size, got [.., ",
                     (*th)[1].value, ", ", (*th)[2].value, "]");
  if (th && (*th)[0].known() && (*th)[0].value != s[0])
    return ctx.Error("theta has ", (*th)[0].value, " matrices for a batch of ", s[0]);
  ir::Dims out{ir::Dim::Known(s[0])};
  for (int64_t i = 0; i < spatial; ++i) out.push_back(ir::Dim::Known(s[static_cast<size_t>(2 + i)]));
  out.push_back(ir::Dim::Known(spatial));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

Status RunAffineGrid(KernelContext& ctx) {
  const Tensor& theta = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t k = y.dim(y.rank() - 1);  // 2 or 3 spatial dims
  const int64_t n = y.dim(0);
  if (theta.dim(0) != n || theta.dim(1) != k || theta.dim(2) != k + 1) return ctx.Error("theta does not match size");
  const bool align = ctx.node.attr_int("align_corners", 0) != 0;
  // Output spatial dims, outermost first (D, H, W or H, W); coordinate j of a point is the
  // normalised position along the spatial dim k-1-j (x along W first).
  std::vector<int64_t> dims;
  for (int64_t i = 1; i <= k; ++i) dims.push_back(y.dim(i));
  auto coord = [&](int64_t i, int64_t len) {
    if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len);
  };
  const int64_t points = SpanProduct(Shape(dims.begin(), dims.end()), 0, dims.size());
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      const T* pt = theta.data<T>();
      T* py = y.mutable_data<T>();
      std::vector<double> h(static_cast<size_t>(k + 1));
      for (int64_t b = 0; b < n; ++b)
        for (int64_t p = 0; p < points; ++p) {
          int64_t rest = p;
          for (int64_t d = k - 1; d >= 0; --d) {  // innermost spatial dim (W) is coordinate 0 (x)
            const int64_t len = dims[static_cast<size_t>(d)], i = rest % len;
            rest /= len;
            h[static_cast<size_t>(k - 1 - d)] = coord(i, len);
          }
          h[static_cast<size_t>(k)] = 1.0;
          for (int64_t r = 0; r < k; ++r) {
            double acc = 0;
            for (int64_t c = 0; c <= k; ++c)
              acc += static_cast<double>(ComputeType<T>(pt[(b * k + r) * (k + 1) + c])) * h[static_cast<size_t>(c)];
            py[(b * points + p) * k + r] = ConvertElement<T>(acc);
          }
        }
    }
  });
}

SAMPAN_REGISTER_OP("AffineGrid", InferAffineGrid, RunAffineGrid);

}  // namespace
}  // namespace sampan::ops
