// Conv and ConvInteger: N-D convolution (1D/2D/3D...) with groups, via im2col
// over tiles of output positions plus the shared GEMM (gemm_util.h).
#include <cstring>

#include "ops/common.h"
#include "ops/conv_util.h"
#include "ops/gemm_util.h"

namespace sampan::ops {
namespace {

struct ConvParams {
  int64_t N = 0, C = 0, M = 0, group = 1;
  SpatialAttrs a;
  SpatialGeometry g;
};

// col[Cg*Kprod, pn] for output positions [p0, p0 + pn) of one group's input block x[Cg, in_size].
template <class A>
void Im2Col(const A* x, int64_t Cg, const ConvParams& p, int64_t p0, int64_t pn, A* col) {
  const SpatialAttrs& a = p.a;
  const SpatialGeometry& g = p.g;
  const size_t r = a.rank();
  const size_t last = r - 1;
  int64_t kprod = 1;
  for (int64_t k : a.kernel) kprod *= k;
  std::vector<int64_t> kidx(r), oidx(r);
  const int64_t in_last = g.in[last], out_last = g.out[last], s_last = a.strides[last];
  for (int64_t c = 0; c < Cg; ++c) {
    const A* xc = x + c * g.in_size;
    for (int64_t kk = 0; kk < kprod; ++kk) {
      for (size_t d = r, rem = static_cast<size_t>(kk); d-- > 0;) {
        kidx[d] = static_cast<int64_t>(rem) % a.kernel[d];
        rem /= static_cast<size_t>(a.kernel[d]);
      }
      A* dst = col + (c * kprod + kk) * pn;
      for (size_t d = r, rem = static_cast<size_t>(p0); d-- > 0;) {
        oidx[d] = static_cast<int64_t>(rem) % g.out[d];
        rem /= static_cast<size_t>(g.out[d]);
      }
      int64_t pos = p0;
      const int64_t end = p0 + pn;
      while (pos < end) {
        const int64_t seg = std::min(end - pos, out_last - oidx[last]);
        bool valid = true;
        int64_t off = 0;
        for (size_t d = 0; d < last; ++d) {
          const int64_t ip = oidx[d] * a.strides[d] - g.pad_begin[d] + kidx[d] * a.dilations[d];
          if (ip < 0 || ip >= g.in[d]) {
            valid = false;
            break;
          }
          off = off * g.in[d] + ip;
        }
        if (!valid) {
          std::fill(dst, dst + seg, A(0));
        } else {
          const A* row = xc + off * in_last;
          const int64_t start = oidx[last] * s_last - g.pad_begin[last] + kidx[last] * a.dilations[last];
          if (s_last == 1) {
            const int64_t lo = std::clamp<int64_t>(-start, 0, seg);
            const int64_t hi = std::clamp<int64_t>(in_last - start, lo, seg);
            std::fill(dst, dst + lo, A(0));
            if (hi > lo) std::memcpy(dst + lo, row + start + lo, static_cast<size_t>(hi - lo) * sizeof(A));
            std::fill(dst + hi, dst + seg, A(0));
          } else {
            for (int64_t t = 0; t < seg; ++t) {
              const int64_t ip = start + t * s_last;
              dst[t] = (ip >= 0 && ip < in_last) ? row[ip] : A(0);
            }
          }
        }
        dst += seg;
        pos += seg;
        oidx[last] += seg;
        if (oidx[last] == out_last) {
          oidx[last] = 0;
          for (size_t d = last; d-- > 0;) {
            if (++oidx[d] < g.out[d]) break;
            oidx[d] = 0;
          }
        }
      }
    }
  }
}

// y[N, M, out...] = conv(x[N, C, in...], w[M, C/group, k...]) + bias[M].
template <class A>
void ConvForward(const ConvParams& p, const A* x, const A* w, const A* bias, A* y) {
  const SpatialAttrs& a = p.a;
  const SpatialGeometry& g = p.g;
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
  int64_t kprod = 1;
  for (int64_t k : a.kernel) kprod *= k;
  const int64_t kdim = Cg * kprod;
  const int64_t P = g.out_size;
  bool pointwise = true;
  for (size_t i = 0; i < a.rank(); ++i)
    if (a.kernel[i] != 1 || a.strides[i] != 1 || g.pad_begin[i] != 0 || g.out[i] != g.in[i]) pointwise = false;
  int64_t tile = P;
  if (!pointwise) {
    const int64_t budget = int64_t{1} << 20;  // elements of the im2col buffer
    tile = std::max<int64_t>(64, budget / std::max<int64_t>(kdim, 1));
    tile = std::min(tile, P);
  }
  std::vector<A> col(pointwise ? 0 : static_cast<size_t>(kdim * std::max<int64_t>(tile, 0)));
  for (int64_t n = 0; n < p.N; ++n) {
    for (int64_t grp = 0; grp < p.group; ++grp) {
      const A* xg = x + (n * p.C + grp * Cg) * g.in_size;
      A* yg = y + (n * p.M + grp * Mg) * P;
      const A* wg = w + grp * Mg * kdim;
      for (int64_t m = 0; m < Mg; ++m) std::fill(yg + m * P, yg + (m + 1) * P, bias ? bias[grp * Mg + m] : A(0));
      if (pointwise) {
        GemmAccumulate<A>(Mg, P, kdim, wg, kdim, xg, P, yg, P);
        continue;
      }
      for (int64_t p0 = 0; p0 < P; p0 += tile) {
        const int64_t pn = std::min(tile, P - p0);
        Im2Col<A>(xg, Cg, p, p0, pn, col.data());
        GemmAccumulate<A>(Mg, pn, kdim, wg, kdim, col.data(), pn, yg + p0, P);
      }
    }
  }
}

// Shared inference for Conv / ConvInteger (input 2 is the bias only for Conv).
Status InferConvShape(InferContext& ctx, DType out_dtype, bool has_bias_input) {
  const ir::Node& node = ctx.node();
  const int64_t group = node.attr_int("group", 1);
  if (group <= 0) return ctx.Error("group must be positive, got ", group);
  const auto& xd = ctx.input_dims(0);
  const auto& wd = ctx.input_dims(1);
  SP_ASSIGN_OR_RETURN(const int64_t rank, ConvRank(ctx, out_dtype));
  if (rank < 0) return Status::Ok();
  const size_t r = static_cast<size_t>(rank - 2);
  ir::Dim m = wd ? (*wd)[0] : ir::Dim::Unknown();
  if (m.known() && m.value % group != 0)
    return ctx.Error("W's output channels ", m.value, " are not divisible by group ", group);
  if (group > kMaxSpatialAttr) return ctx.Error("group ", group, " is larger than ", kMaxSpatialAttr);
  if (wd && (*wd)[1].known() && (*wd)[1].value > (int64_t{1} << 32))
    return ctx.Error("W has ", (*wd)[1].value, " input channels per group (too many)");
  if (xd && wd && (*xd)[1].known() && (*wd)[1].known() && (*xd)[1].value != (*wd)[1].value * group)
    return ctx.Error("X has ", (*xd)[1].value, " channels but W expects ", (*wd)[1].value, " x group ", group);
  if (has_bias_input && ctx.has_input(2) && ctx.input_dims(2)) {
    const auto& bd = *ctx.input_dims(2);
    if (bd.size() != 1) return ctx.Error("B must be 1-D");
    if (bd[0].known() && m.known() && bd[0].value != m.value)
      return ctx.Error("B has ", bd[0].value, " elements, expected ", m.value);
  }
  SpatialAttrs a;
  bool kernel_known = true;
  if (node.has_attr("kernel_shape")) {
    a.kernel = node.attr_ints("kernel_shape");
    if (a.kernel.size() != r) return ctx.Error("kernel_shape has ", a.kernel.size(), " values, expected ", r);
    if (wd)
      for (size_t i = 0; i < r; ++i)
        if ((*wd)[2 + i].known() && (*wd)[2 + i].value != a.kernel[i])
          return ctx.Error("kernel_shape does not match W's spatial dims");
  } else {
    a.kernel.assign(r, 1);
    if (!wd)
      kernel_known = false;
    else
      for (size_t i = 0; i < r; ++i) {
        if (!(*wd)[2 + i].known())
          kernel_known = false;
        else
          a.kernel[i] = (*wd)[2 + i].value;
      }
  }
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(node, &a, /*allow_ceil=*/false));
  if (!xd) {
    ir::Dims out(static_cast<size_t>(rank), ir::Dim::Unknown());
    out[1] = m;
    ctx.set_output(0, out_dtype, out);
    return Status::Ok();
  }
  if (!kernel_known) {
    ir::Dims out(static_cast<size_t>(rank), ir::Dim::Unknown());
    out[0] = (*xd)[0];
    out[1] = m;
    ctx.set_output(0, out_dtype, out);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(ir::Dims out, InferSpatialOutput(ctx, *xd, a, m));
  ctx.set_output(0, out_dtype, out);
  return Status::Ok();
}

ConvParams MakeParams(const ir::Node& node, const Shape& x, const Shape& w) {
  ConvParams p;
  p.N = x[0];
  p.C = x[1];
  p.M = w[0];
  p.group = node.attr_int("group", 1);
  p.a.kernel.assign(w.begin() + 2, w.end());
  (void)ReadSpatialAttrs(node, &p.a, false);  // validated by inference
  p.g = ComputeGeometry(p.a, x);
  return p;
}

Status InferConv(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  return InferConvShape(ctx, ctx.input_dtype(0), true);
}

Status RunConv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  Tensor& y = ctx.out(0);
  const ConvParams p = MakeParams(ctx.node, x.shape(), w.shape());
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      using A = GemmAccType<T>;
      std::vector<A> xb, wb, bb, yb;
      const A* xa = AsAccumType<A>(x.data<T>(), x.numel(), xb);
      const A* wa = AsAccumType<A>(w.data<T>(), w.numel(), wb);
      const A* ba = b ? AsAccumType<A>(b->data<T>(), b->numel(), bb) : nullptr;
      if constexpr (std::is_same_v<A, T>) {
        ConvForward<A>(p, xa, wa, ba, y.mutable_data<T>());
      } else {
        yb.assign(static_cast<size_t>(y.numel()), A(0));
        ConvForward<A>(p, xa, wa, ba, yb.data());
        T* py = y.mutable_data<T>();
        for (size_t i = 0; i < yb.size(); ++i) py[i] = ConvertElement<T>(yb[i]);
      }
    }
  });
}

// ---- ConvInteger -------------------------------------------------------------

Status InferConvInteger(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 4));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8, DType::kInt8}));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kUInt8, DType::kInt8}));
  if (ctx.has_input(2)) {
    SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
    if (ctx.input_dims(2)) {
      int64_t n = 1;
      for (const auto& d : *ctx.input_dims(2)) n = d.known() && n >= 0 ? n * d.value : -1;
      if (n > 1) return ctx.NotSupported("per-channel x_zero_point is not supported");
    }
  }
  if (ctx.has_input(3)) {
    SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 1, 3));
    if (ctx.input_dims(3) && ctx.input_dims(3)->size() > 1) return ctx.Error("w_zero_point must be a scalar or 1-D");
  }
  return InferConvShape(ctx, DType::kInt32, false);
}

template <class T>
std::vector<int32_t> ShiftedInt32(const Tensor& t, const Tensor* zp, int64_t per_outer) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  const T* p = t.data<T>();
  const int64_t n = t.numel();
  const int64_t nzp = zp ? zp->numel() : 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t z = 0;
    if (nzp == 1)
      z = static_cast<int32_t>(ElementAsInt64(*zp, 0));
    else if (nzp > 1)
      z = static_cast<int32_t>(ElementAsInt64(*zp, i / per_outer));
    out[static_cast<size_t>(i)] = static_cast<int32_t>(p[i]) - z;
  }
  return out;
}

Status RunConvInteger(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor* xzp = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const Tensor* wzp = ctx.has_input(3) ? &ctx.in(3) : nullptr;
  const ConvParams p = MakeParams(ctx.node, x.shape(), w.shape());
  if (wzp && wzp->numel() != 1 && wzp->numel() != p.M)
    return ctx.Error("w_zero_point has ", wzp->numel(), " elements, expected 1 or ", p.M);
  std::vector<int32_t> xs, ws;
  const int64_t w_per_m = p.M > 0 ? w.numel() / p.M : 1;
  if (x.dtype() == DType::kUInt8)
    xs = ShiftedInt32<uint8_t>(x, xzp, 1);
  else
    xs = ShiftedInt32<int8_t>(x, xzp, 1);
  if (w.dtype() == DType::kUInt8)
    ws = ShiftedInt32<uint8_t>(w, wzp, std::max<int64_t>(w_per_m, 1));
  else
    ws = ShiftedInt32<int8_t>(w, wzp, std::max<int64_t>(w_per_m, 1));
  ConvForward<int32_t>(p, xs.data(), ws.data(), nullptr, ctx.out(0).mutable_data<int32_t>());
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Conv", InferConv, RunConv);
SAMPAN_REGISTER_OP("ConvInteger", InferConvInteger, RunConvInteger);

}  // namespace
}  // namespace sampan::ops
