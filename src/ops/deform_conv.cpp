// DeformConv (opsets 19, 22): a grouped N-D convolution whose kernel taps sample X at learned
// fractional offsets. X [N, C, in...], W [oC, C/group, k...], offset [N, offset_group * prod(k) * r,
// out...] (per offset group and tap, one offset per spatial dim, in that order), optional B [oC]
// and mask [N, offset_group * prod(k), out...] (each tap's sample is multiplied by it). Tap t of
// output position o samples at o * strides - pads_begin + t * dilations + offset by multilinear
// interpolation; samples outside X read zero. Input channel c uses offset group c / (C / offset_group).
#include <cmath>

#include "ops/common.h"
#include "ops/conv_util.h"

namespace sampan::ops {
namespace {

enum Input : size_t { kX = 0, kW, kOffset, kBias, kMask };

struct DeformAttrs {
  SpatialAttrs a;
  int64_t group = 1, offset_group = 1;
};

// Attributes for `r` spatial dims, the kernel from kernel_shape or W's spatial dims (`w`, may be null).
Result<DeformAttrs> ReadAttrs(const InferContext& ctx, size_t r, const ir::Dims* w) {
  const ir::Node& node = ctx.node();
  DeformAttrs d;
  d.group = node.attr_int("group", 1);
  d.offset_group = node.attr_int("offset_group", 1);
  if (d.group < 1 || d.group > kMaxSpatialAttr || d.offset_group < 1 || d.offset_group > kMaxSpatialAttr)
    return ctx.Error("group and offset_group must be in [1, ", kMaxSpatialAttr, "], got ", d.group, " and ",
                     d.offset_group);
  if (node.has_attr("kernel_shape")) {
    d.a.kernel = node.attr_ints("kernel_shape");
    if (d.a.kernel.size() != r) return ctx.Error("kernel_shape has ", d.a.kernel.size(), " values, expected ", r);
    if (w)
      for (size_t i = 0; i < r; ++i)
        if ((*w)[2 + i].known() && (*w)[2 + i].value != d.a.kernel[i])
          return ctx.Error("kernel_shape does not match W's spatial dims");
  } else {
    if (!w) return ctx.NotSupported("a kernel of unknown shape (no kernel_shape and W's shape unknown)");
    for (size_t i = 0; i < r; ++i) {
      if (!(*w)[2 + i].known()) return ctx.NotSupported("a kernel of unknown shape (W's spatial dims unknown)");
      d.a.kernel.push_back((*w)[2 + i].value);
    }
  }
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(node, &d.a, /*allow_ceil=*/false));
  if (d.a.auto_pad != AutoPad::kNotSet) return ctx.Error("DeformConv has no auto_pad attribute");
  return d;
}

// Dim `d` of input i must be `want` when both are known.
Status ExpectDim(const InferContext& ctx, size_t i, size_t d, const ir::Dim& want, const char* what) {
  const auto& dims = ctx.input_dims(i);
  if (!dims || !want.known() || !(*dims)[d].known() || (*dims)[d].value == want.value) return Status::Ok();
  return ctx.Error(what, " is ", (*dims)[d].value, ", expected ", want.value);
}

Status InferDeformConv(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 5));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, kX, kFloatTypes));
  for (size_t i : {kW, kOffset, kBias, kMask})
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, kX, i));
  const auto& xd = ctx.input_dims(kX);
  const auto& wd = ctx.input_dims(kW);
  if (!xd && !wd) {
    ctx.set_output(0, ctx.input_dtype(kX), std::nullopt);
    return Status::Ok();
  }
  const size_t rank = xd ? xd->size() : wd->size();
  if (rank < 3) return ctx.Error("X must have rank >= 3 (N, C, spatial...), got rank ", rank);
  for (size_t i : {kW, kOffset, kMask})
    if (ctx.has_input(i) && ctx.input_dims(i) && ctx.input_dims(i)->size() != rank)
      return ctx.Error("input ", i, " has rank ", ctx.input_dims(i)->size(), " but X has rank ", rank);
  const size_t r = rank - 2;
  SP_ASSIGN_OR_RETURN(DeformAttrs d, ReadAttrs(ctx, r, wd ? &*wd : nullptr));
  const ir::Dim oc = wd ? (*wd)[0] : ir::Dim::Unknown();
  if (oc.known() && oc.value % d.group != 0)
    return ctx.Error("W's ", oc.value, " output channels are not divisible by group ", d.group);
  if (xd && (*xd)[1].known()) {
    const int64_t c = (*xd)[1].value;
    if (wd && (*wd)[1].known() && c != (*wd)[1].value * d.group)
      return ctx.Error("X has ", c, " channels but W expects ", (*wd)[1].value, " x group ", d.group);
    if (c % d.offset_group != 0)
      return ctx.Error("X's ", c, " channels are not divisible by offset_group ", d.offset_group);
  }
  int64_t kprod = 1;
  for (int64_t k : d.a.kernel) kprod *= k;
  const ir::Dim batch = xd ? (*xd)[0] : ir::Dim::Unknown();
  SP_RETURN_IF_ERROR(ExpectDim(ctx, kOffset, 0, batch, "offset's batch dim"));
  SP_RETURN_IF_ERROR(ExpectDim(ctx, kOffset, 1, ir::Dim::Known(d.offset_group * kprod * static_cast<int64_t>(r)),
                               "offset's dim 1 (offset_group * prod(kernel) * spatial rank)"));
  if (ctx.has_input(kBias) && ctx.input_dims(kBias)) {
    if (ctx.input_dims(kBias)->size() != 1) return ctx.Error("B must be 1-D, got rank ", ctx.input_dims(kBias)->size());
    SP_RETURN_IF_ERROR(ExpectDim(ctx, kBias, 0, oc, "B's length"));
  }
  if (ctx.has_input(kMask)) {
    SP_RETURN_IF_ERROR(ExpectDim(ctx, kMask, 0, batch, "mask's batch dim"));
    SP_RETURN_IF_ERROR(
        ExpectDim(ctx, kMask, 1, ir::Dim::Known(d.offset_group * kprod), "mask's dim 1 (offset_group * prod(kernel))"));
  }
  ir::Dims out(rank, ir::Dim::Unknown());
  out[0] = batch;
  out[1] = oc;
  if (xd) {
    SP_ASSIGN_OR_RETURN(out, InferSpatialOutput(ctx, *xd, d.a, oc));
    for (size_t i = 0; i < r; ++i) {
      SP_RETURN_IF_ERROR(ExpectDim(ctx, kOffset, 2 + i, out[2 + i], "an offset spatial dim"));
      if (ctx.has_input(kMask)) SP_RETURN_IF_ERROR(ExpectDim(ctx, kMask, 2 + i, out[2 + i], "a mask spatial dim"));
    }
  }
  ctx.set_output(0, ctx.input_dtype(kX), out);
  return Status::Ok();
}

// Multilinear sample of one channel x[in...] at fractional position pos; zero outside.
double Sample(const std::vector<double>& x, int64_t base, const std::vector<int64_t>& in,
              const std::vector<double>& pos) {
  const size_t r = in.size();
  std::vector<int64_t> lo(r);
  std::vector<double> frac(r);
  for (size_t d = 0; d < r; ++d) {
    const double f = std::floor(pos[d]);
    lo[d] = static_cast<int64_t>(f);
    frac[d] = pos[d] - f;
  }
  double sum = 0;
  for (uint32_t corner = 0; corner < (1u << r); ++corner) {
    double wgt = 1;
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < r && inside; ++d) {
      const bool up = (corner >> d) & 1u;
      const int64_t i = lo[d] + (up ? 1 : 0);
      inside = i >= 0 && i < in[d];
      wgt *= up ? frac[d] : 1 - frac[d];
      off = off * in[d] + i;
    }
    if (inside && wgt != 0) sum += wgt * x[static_cast<size_t>(base + off)];
  }
  return sum;
}

std::vector<double> AsDouble(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = ElementAsDouble(t, i);
  return v;
}

Status RunDeformConv(KernelContext& ctx) {
  const Tensor& xt = ctx.in(kX);
  const Tensor& wt = ctx.in(kW);
  const size_t r = static_cast<size_t>(xt.rank() - 2);
  const ir::Dims wdims = DimsOf(wt.shape());
  SP_ASSIGN_OR_RETURN(DeformAttrs d, ReadAttrs(*ctx.infer, r, &wdims));
  const SpatialGeometry g = ComputeGeometry(d.a, xt.shape());
  const int64_t N = xt.dim(0), C = xt.dim(1), OC = wt.dim(0);
  const int64_t icg = C / d.group, ocg = OC / d.group, cpo = C / d.offset_group;
  int64_t kprod = 1;
  for (int64_t k : d.a.kernel) kprod *= k;
  const int64_t P = g.out_size;
  const std::vector<double> x = AsDouble(xt), w = AsDouble(wt), off = AsDouble(ctx.in(kOffset));
  const std::vector<double> bias = ctx.has_input(kBias) ? AsDouble(ctx.in(kBias)) : std::vector<double>();
  const std::vector<double> mask = ctx.has_input(kMask) ? AsDouble(ctx.in(kMask)) : std::vector<double>();
  std::vector<std::vector<int64_t>> taps(static_cast<size_t>(kprod), std::vector<int64_t>(r));
  for (int64_t kk = 0; kk < kprod; ++kk)
    for (size_t dd = r, rem = static_cast<size_t>(kk); dd-- > 0;) {
      taps[static_cast<size_t>(kk)][dd] =
          static_cast<int64_t>(rem % static_cast<size_t>(d.a.kernel[dd])) * d.a.dilations[dd];
      rem /= static_cast<size_t>(d.a.kernel[dd]);
    }
  std::vector<double> acc(static_cast<size_t>(N * OC * P), 0.0);
  std::vector<int64_t> origin(r);
  std::vector<double> pos(r);
  // samples[kk * C + c]: tap kk of channel c at the current output position.
  std::vector<double> samples(static_cast<size_t>(kprod * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      for (size_t dd = r, rem = static_cast<size_t>(p); dd-- > 0;) {
        origin[dd] = static_cast<int64_t>(rem % static_cast<size_t>(g.out[dd])) * d.a.strides[dd] - g.pad_begin[dd];
        rem /= static_cast<size_t>(g.out[dd]);
      }
      for (int64_t og = 0; og < d.offset_group; ++og)
        for (int64_t kk = 0; kk < kprod; ++kk) {
          for (size_t dd = 0; dd < r; ++dd) {
            const int64_t ch = (og * kprod + kk) * static_cast<int64_t>(r) + static_cast<int64_t>(dd);
            pos[dd] = static_cast<double>(origin[dd] + taps[static_cast<size_t>(kk)][dd]) +
                      off[static_cast<size_t>((n * d.offset_group * kprod * static_cast<int64_t>(r) + ch) * P + p)];
          }
          const double m =
              mask.empty() ? 1.0 : mask[static_cast<size_t>((n * d.offset_group * kprod + og * kprod + kk) * P + p)];
          for (int64_t c = og * cpo; c < (og + 1) * cpo; ++c)
            samples[static_cast<size_t>(kk * C + c)] = m * Sample(x, (n * C + c) * g.in_size, g.in, pos);
        }
      for (int64_t oc = 0; oc < OC; ++oc) {
        const int64_t grp = oc / ocg;
        double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(oc)];
        for (int64_t ci = 0; ci < icg; ++ci)
          for (int64_t kk = 0; kk < kprod; ++kk)
            sum += w[static_cast<size_t>((oc * icg + ci) * kprod + kk)] *
                   samples[static_cast<size_t>(kk * C + grp * icg + ci)];
        acc[static_cast<size_t>((n * OC + oc) * P + p)] = sum;
      }
    }
  Tensor& y = ctx.out(0);
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      T* py = y.mutable_data<T>();
      for (size_t i = 0; i < acc.size(); ++i) py[i] = ConvertElement<T>(acc[i]);
    }
  });
}

SAMPAN_REGISTER_OP("DeformConv", InferDeformConv, RunDeformConv);

}  // namespace
}  // namespace sampan::ops
