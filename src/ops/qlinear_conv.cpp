// QLinearConv (opset 10): y = saturate(round((conv(x - x_zp, w - w_zp) + B) * (x_scale * w_scale
// / y_scale)) + y_zp), an N-D grouped convolution with Conv's attributes (auto_pad, pads,
// strides, dilations, group, kernel_shape). x, y: int8/uint8 with per-tensor scale and zero point;
// w: int8/uint8 with per-tensor or per-output-channel ([M]) scale and zero point; B: int32 [M].
// As the ONNX reference: the int32 result times the float32 multiplier (x_scale * w_scale rounded
// to float, then / y_scale) in double, plus y_zp, rounded half to even.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/conv_util.h"

namespace sampan::ops {
namespace {

enum Input : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kBias };

bool IsInt8Type(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8;
}

// Element count of input i when its dims are all known, else -1.
int64_t KnownCount(const InferContext& ctx, size_t i) {
  const auto& d = ctx.input_dims(i);
  if (!d) return -1;
  int64_t n = 1;
  for (const auto& v : *d) n = v.known() && n >= 0 ? n * v.value : -1;
  return n;
}

Status CheckTypes(const InferContext& ctx) {
  for (size_t i : {kX, kW, kYZp})
    if (!IsInt8Type(ctx.input_dtype(i)))
      return ctx.Error("input ", i, " must be int8 or uint8, got ", DTypeName(ctx.input_dtype(i)));
  for (auto [q, zp, name] : {std::tuple{kX, kXZp, "x"}, std::tuple{kW, kWZp, "w"}})
    if (ctx.input_dtype(zp) != ctx.input_dtype(q))
      return ctx.Error(name, "_zero_point is ", DTypeName(ctx.input_dtype(zp)), " but ", name, " is ",
                       DTypeName(ctx.input_dtype(q)));
  for (size_t i : {kXScale, kWScale, kYScale})
    if (ctx.input_dtype(i) != DType::kFloat32)
      return ctx.Error("input ", i, " (a scale) must be float32, got ", DTypeName(ctx.input_dtype(i)));
  if (ctx.has_input(kBias) && ctx.input_dtype(kBias) != DType::kInt32)
    return ctx.Error("B must be int32, got ", DTypeName(ctx.input_dtype(kBias)));
  return Status::Ok();
}

// x's and y's scale and zero point: one element; w's: one element or one per output channel.
Status CheckParamCounts(const InferContext& ctx, std::optional<int64_t> m) {
  for (size_t i : {kXScale, kXZp, kYScale, kYZp})
    if (const int64_t n = KnownCount(ctx, i); n >= 0 && n != 1)
      return ctx.Error("input ", i, " must have one element (per tensor), got ", n);
  for (size_t i : {kWScale, kWZp}) {
    const auto& d = ctx.input_dims(i);
    if (d && d->size() > 1) return ctx.Error("input ", i, " must be a scalar or 1-D, got rank ", d->size());
    const int64_t n = KnownCount(ctx, i);
    if (n >= 0 && n != 1 && m && n != *m)
      return ctx.Error("input ", i, " has ", n, " elements, expected 1 or ", *m, " (one per output channel)");
  }
  if (ctx.has_input(kBias) && ctx.input_dims(kBias)) {
    const auto& bd = *ctx.input_dims(kBias);
    if (bd.size() != 1) return ctx.Error("B must be 1-D, got rank ", bd.size());
    if (bd[0].known() && m && bd[0].value != *m) return ctx.Error("B has ", bd[0].value, " elements, expected ", *m);
  }
  return Status::Ok();
}

Status InferQLinearConv(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(8, 9));
  SP_RETURN_IF_ERROR(CheckTypes(ctx));
  const ir::Node& node = ctx.node();
  const DType out_type = ctx.input_dtype(kYZp);
  const auto& xd = ctx.input_dims(kX);
  const auto& wd = ctx.input_dims(kW);
  const int64_t group = node.attr_int("group", 1);
  if (group <= 0 || group > kMaxSpatialAttr)
    return ctx.Error("group must be in [1, ", kMaxSpatialAttr, "], got ", group);
  const ir::Dim m = wd && !wd->empty() ? (*wd)[0] : ir::Dim::Unknown();
  SP_RETURN_IF_ERROR(CheckParamCounts(ctx, m.known() ? std::optional<int64_t>(m.value) : std::nullopt));
  // ConvRank reads inputs 0 and 1; ours are 0 and 3, so check ranks here.
  const int64_t rank = xd ? static_cast<int64_t>(xd->size()) : (wd ? static_cast<int64_t>(wd->size()) : -1);
  if (rank < 0) {
    ctx.set_output(0, out_type, std::nullopt);
    return Status::Ok();
  }
  if (rank < 3) return ctx.Error("x must have rank >= 3 (N, C, spatial...), got rank ", rank);
  if (xd && wd && xd->size() != wd->size()) return ctx.Error("x has rank ", xd->size(), " but w has rank ", wd->size());
  if (m.known() && m.value % group != 0)
    return ctx.Error("w's ", m.value, " output channels are not divisible by group ", group);
  if (xd && wd && (*xd)[1].known() && (*wd)[1].known() && (*xd)[1].value != (*wd)[1].value * group)
    return ctx.Error("x has ", (*xd)[1].value, " channels but w expects ", (*wd)[1].value, " x group ", group);
  const size_t r = static_cast<size_t>(rank - 2);
  SpatialAttrs a;
  bool kernel_known = true;
  if (node.has_attr("kernel_shape")) {
    a.kernel = node.attr_ints("kernel_shape");
    if (a.kernel.size() != r) return ctx.Error("kernel_shape has ", a.kernel.size(), " values, expected ", r);
    if (wd)
      for (size_t i = 0; i < r; ++i)
        if ((*wd)[2 + i].known() && (*wd)[2 + i].value != a.kernel[i])
          return ctx.Error("kernel_shape does not match w's spatial dims");
  } else {
    a.kernel.assign(r, 1);
    for (size_t i = 0; i < r; ++i)
      if (!wd || !(*wd)[2 + i].known())
        kernel_known = false;
      else
        a.kernel[i] = (*wd)[2 + i].value;
  }
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(node, &a, /*allow_ceil=*/false));
  if (!xd || !kernel_known) {
    ir::Dims out(static_cast<size_t>(rank), ir::Dim::Unknown());
    if (xd) out[0] = (*xd)[0];
    out[1] = m;
    ctx.set_output(0, out_type, out);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(ir::Dims out, InferSpatialOutput(ctx, *xd, a, m));
  ctx.set_output(0, out_type, out);
  return Status::Ok();
}

// t (int8/uint8) as int32.
std::vector<int32_t> Widen(const Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] =
        t.dtype() == DType::kUInt8 ? int32_t{t.data<uint8_t>()[i]} : int32_t{t.data<int8_t>()[i]};
  return out;
}

Status RunQLinearConv(KernelContext& ctx) {
  const Tensor& x = ctx.in(kX);
  const Tensor& w = ctx.in(kW);
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), group = ctx.node.attr_int("group", 1);
  for (size_t i : {kWScale, kWZp})
    if (ctx.in(i).numel() != 1 && ctx.in(i).numel() != M)
      return ctx.Error("input ", i, " has ", ctx.in(i).numel(), " elements, expected 1 or ", M);
  SpatialAttrs a;
  a.kernel.assign(w.shape().begin() + 2, w.shape().end());
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(ctx.node, &a, false));
  const SpatialGeometry g = ComputeGeometry(a, x.shape());
  const size_t r = a.rank();
  const int64_t Cg = C / group, Mg = M / group;
  int64_t kprod = 1;
  for (int64_t k : a.kernel) kprod *= k;
  const int32_t xzp = static_cast<int32_t>(ElementAsInt64(ctx.in(kXZp), 0));
  std::vector<int32_t> xs = Widen(x), ws = Widen(w);
  for (auto& v : xs) v -= xzp;
  const int64_t w_per_m = Cg * kprod;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const Tensor& zp = ctx.in(kWZp);
    ws[static_cast<size_t>(i)] -= static_cast<int32_t>(ElementAsInt64(zp, zp.numel() == 1 ? 0 : i / w_per_m));
  }
  // For each kernel tap, its offset per spatial dim (dilated); for each output position, its window origin.
  std::vector<std::vector<int64_t>> taps(static_cast<size_t>(kprod), std::vector<int64_t>(r));
  for (int64_t kk = 0; kk < kprod; ++kk)
    for (size_t d = r, rem = static_cast<size_t>(kk); d-- > 0;) {
      taps[static_cast<size_t>(kk)][d] = static_cast<int64_t>(rem % static_cast<size_t>(a.kernel[d])) * a.dilations[d];
      rem /= static_cast<size_t>(a.kernel[d]);
    }
  const float xsc = ctx.in(kXScale).data<float>()[0], ysc = ctx.in(kYScale).data<float>()[0];
  const double yzp = static_cast<double>(ElementAsInt64(ctx.in(kYZp), 0));
  Tensor& y = ctx.out(0);
  std::vector<int64_t> origin(r);
  return DispatchDType(y.dtype(), [&]<class Q>() {
    if constexpr (std::is_same_v<Q, int8_t> || std::is_same_v<Q, uint8_t>) {
      constexpr double lo = std::numeric_limits<Q>::lowest(), hi = std::numeric_limits<Q>::max();
      Q* py = y.mutable_data<Q>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const int64_t grp = m / Mg;
          const float wsc = ctx.in(kWScale).data<float>()[ctx.in(kWScale).numel() == 1 ? 0 : m];
          const float mult = (xsc * wsc) / ysc;
          const int32_t bias = ctx.has_input(kBias) ? ctx.in(kBias).data<int32_t>()[m] : 0;
          for (int64_t p = 0; p < g.out_size; ++p) {
            for (size_t d = r, rem = static_cast<size_t>(p); d-- > 0;) {
              origin[d] = static_cast<int64_t>(rem % static_cast<size_t>(g.out[d])) * a.strides[d] - g.pad_begin[d];
              rem /= static_cast<size_t>(g.out[d]);
            }
            uint32_t acc = static_cast<uint32_t>(bias);  // int32 arithmetic, wrapping defined
            for (int64_t kk = 0; kk < kprod; ++kk) {
              int64_t off = 0;
              bool inside = true;
              for (size_t d = 0; d < r && inside; ++d) {
                const int64_t ip = origin[d] + taps[static_cast<size_t>(kk)][d];
                inside = ip >= 0 && ip < g.in[d];
                off = off * g.in[d] + ip;
              }
              if (!inside) continue;
              for (int64_t c = 0; c < Cg; ++c) {
                const int32_t xv = xs[static_cast<size_t>((n * C + grp * Cg + c) * g.in_size + off)];
                const int32_t wv = ws[static_cast<size_t>((m * Cg + c) * kprod + kk)];
                acc += static_cast<uint32_t>(xv) * static_cast<uint32_t>(wv);
              }
            }
            double v = std::nearbyint(static_cast<double>(static_cast<int32_t>(acc)) * mult + yzp);
            if (std::isnan(v)) v = 0;
            py[(n * M + m) * g.out_size + p] = static_cast<Q>(std::clamp(v, lo, hi));
          }
        }
    }
  });
}

SAMPAN_REGISTER_OP("QLinearConv", InferQLinearConv, RunQLinearConv);

}  // namespace
}  // namespace sampan::ops
