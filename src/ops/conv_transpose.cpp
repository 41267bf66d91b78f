// ConvTranspose: GEMM (W^T * X) into columns, then col2im scatter-add, over
// tiles of input positions. Pads/output size follow the ONNX reference.
#include "ops/common.h"
#include "ops/conv_util.h"
#include "ops/gemm_util.h"

namespace sampan::ops {
namespace {

int64_t FloorDiv2(int64_t v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}

struct TransposeAttrs {
  SpatialAttrs a;                       // kernel, strides, dilations, pads, auto_pad
  std::vector<int64_t> output_padding;  // one per spatial dim
  std::vector<int64_t> output_shape;    // empty, or one per spatial dim
  int64_t group = 1;
};

Status ReadTransposeAttrs(const ir::Node& node, size_t r, TransposeAttrs* t) {
  t->group = node.attr_int("group", 1);
  if (t->group <= 0 || t->group > kMaxSpatialAttr)
    return InvalidArgument(node.Label(), ": group must be in [1, ", kMaxSpatialAttr, "], got ", t->group);
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(node, &t->a, false));
  t->output_padding = node.attr_ints("output_padding", std::vector<int64_t>(r, 0));
  if (t->output_padding.size() != r)
    return InvalidArgument(node.Label(), ": output_padding has ", t->output_padding.size(), " values, expected ", r);
  for (int64_t v : t->output_padding)
    if (v < 0 || v > kMaxSpatialAttr)
      return InvalidArgument(node.Label(), ": output_padding must be in [0, ", kMaxSpatialAttr, "], got ", v);
  t->output_shape = node.attr_ints("output_shape");
  if (t->output_shape.size() == r + 2) t->output_shape.erase(t->output_shape.begin(), t->output_shape.begin() + 2);
  if (!t->output_shape.empty() && t->output_shape.size() != r)
    return InvalidArgument(node.Label(), ": output_shape has ", t->output_shape.size(), " values, expected ", r);
  for (int64_t v : t->output_shape)
    if (v < 0 || v > (int64_t{1} << 40)) return InvalidArgument(node.Label(), ": output_shape must be in [0, 2^40]");
  return Status::Ok();
}

// Output size and begin pad of spatial dim i for input size `in`.
int64_t TransposeOutDim(const TransposeAttrs& t, size_t i, int64_t in, int64_t* pb) {
  const SpatialAttrs& a = t.a;
  const int64_t s = a.strides[i], ek = a.effective_kernel(i), op = t.output_padding[i];
  const int64_t full = s * (in - 1) + op + ek;
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower) {
    const int64_t out = t.output_shape.empty() ? in * s : t.output_shape[i];
    const int64_t total = full - out;
    *pb = a.auto_pad == AutoPad::kSameUpper ? FloorDiv2(total) : total - FloorDiv2(total);
    return out;
  }
  *pb = a.pads[i];
  if (!t.output_shape.empty()) return t.output_shape[i];
  return full - a.pads[i] - a.pads[a.rank() + i];
}

Status InferConvTranspose(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  const DType dt = ctx.input_dtype(0);
  const ir::Node& node = ctx.node();
  const auto& xd = ctx.input_dims(0);
  const auto& wd = ctx.input_dims(1);
  SP_ASSIGN_OR_RETURN(const int64_t rank, ConvRank(ctx, dt));
  if (rank < 0) return Status::Ok();
  const size_t r = static_cast<size_t>(rank - 2);
  TransposeAttrs t;
  bool kernel_known = true;
  if (node.has_attr("kernel_shape")) {
    t.a.kernel = node.attr_ints("kernel_shape");
    if (t.a.kernel.size() != r) return ctx.Error("kernel_shape has ", t.a.kernel.size(), " values, expected ", r);
    if (wd)
      for (size_t i = 0; i < r; ++i)
        if ((*wd)[2 + i].known() && (*wd)[2 + i].value != t.a.kernel[i])
          return ctx.Error("kernel_shape does not match W's spatial dims");
  } else {
    t.a.kernel.assign(r, 1);
    if (!wd)
      kernel_known = false;
    else
      for (size_t i = 0; i < r; ++i) {
        if (!(*wd)[2 + i].known())
          kernel_known = false;
        else
          t.a.kernel[i] = (*wd)[2 + i].value;
      }
  }
  SP_RETURN_IF_ERROR(ReadTransposeAttrs(node, r, &t));
  ir::Dim m = ir::Dim::Unknown();
  if (wd && (*wd)[1].known()) {
    int64_t channels;
    if (__builtin_mul_overflow((*wd)[1].value, t.group, &channels))
      return ctx.Error("W's ", (*wd)[1].value, " output channels x group ", t.group, " overflow");
    m = ir::Dim::Known(channels);
  }
  if (xd && wd && (*xd)[1].known() && (*wd)[0].known() && (*xd)[1].value != (*wd)[0].value)
    return ctx.Error("X has ", (*xd)[1].value, " channels but W has ", (*wd)[0].value, " input channels");
  if (wd && (*wd)[0].known() && (*wd)[0].value % t.group != 0)
    return ctx.Error("W's input channels ", (*wd)[0].value, " are not divisible by group ", t.group);
  if (ctx.has_input(2) && ctx.input_dims(2)) {
    const auto& bd = *ctx.input_dims(2);
    if (bd.size() != 1) return ctx.Error("B must be 1-D");
    if (bd[0].known() && m.known() && bd[0].value != m.value)
      return ctx.Error("B has ", bd[0].value, " elements, expected ", m.value);
  }
  ir::Dims out(static_cast<size_t>(rank), ir::Dim::Unknown());
  if (xd) out[0] = (*xd)[0];
  out[1] = m;
  for (size_t i = 0; i < r; ++i) {
    if (!t.output_shape.empty()) {
      out[2 + i] = ir::Dim::Known(t.output_shape[i]);
      continue;
    }
    if (!kernel_known || !xd || !(*xd)[2 + i].known()) continue;
    const int64_t in = (*xd)[2 + i].value;
    int64_t span;
    if (in > (int64_t{1} << 40) || __builtin_mul_overflow(t.a.strides[i], in, &span) || span > (int64_t{1} << 50))
      return ctx.Error("spatial dim ", i, " of size ", in, " with stride ", t.a.strides[i], " is too large");
    int64_t pb;
    const int64_t o = TransposeOutDim(t, i, in, &pb);
    if (o < 0) return ctx.Error("computed output size ", o, " for spatial dim ", i, " is negative");
    out[2 + i] = ir::Dim::Known(o);
  }
  ctx.set_output(0, dt, out);
  return Status::Ok();
}

// Scatter-adds col[Mg*kprod, pn] (input positions [p0, p0+pn)) into y[Mg, out_size].
template <class A>
void Col2Im(const A* col, int64_t Mg, const TransposeAttrs& t, const std::vector<int64_t>& in,
            const std::vector<int64_t>& out, const std::vector<int64_t>& pb, int64_t out_size, int64_t p0, int64_t pn,
            A* y) {
  const SpatialAttrs& a = t.a;
  const size_t r = a.rank();
  const size_t last = r - 1;
  int64_t kprod = 1;
  for (int64_t k : a.kernel) kprod *= k;
  std::vector<int64_t> kidx(r), iidx(r);
  const int64_t in_last = in[last], out_last = out[last], s_last = a.strides[last];
  for (int64_t m = 0; m < Mg; ++m) {
    A* ym = y + m * out_size;
    for (int64_t kk = 0; kk < kprod; ++kk) {
      for (size_t d = r, rem = static_cast<size_t>(kk); d-- > 0;) {
        kidx[d] = static_cast<int64_t>(rem) % a.kernel[d];
        rem /= static_cast<size_t>(a.kernel[d]);
      }
      const A* src = col + (m * kprod + kk) * pn;
      for (size_t d = r, rem = static_cast<size_t>(p0); d-- > 0;) {
        iidx[d] = static_cast<int64_t>(rem) % in[d];
        rem /= static_cast<size_t>(in[d]);
      }
      int64_t pos = p0;
      const int64_t end = p0 + pn;
      while (pos < end) {
        const int64_t seg = std::min(end - pos, in_last - iidx[last]);
        bool valid = true;
        int64_t off = 0;
        for (size_t d = 0; d < last; ++d) {
          const int64_t o = iidx[d] * a.strides[d] - pb[d] + kidx[d] * a.dilations[d];
          if (o < 0 || o >= out[d]) {
            valid = false;
            break;
          }
          off = off * out[d] + o;
        }
        if (valid) {
          A* row = ym + off * out_last;
          const int64_t start = iidx[last] * s_last - pb[last] + kidx[last] * a.dilations[last];
          for (int64_t q = 0; q < seg; ++q) {
            const int64_t o = start + q * s_last;
            if (o >= 0 && o < out_last) row[o] += src[q];
          }
        }
        src += seg;
        pos += seg;
        iidx[last] += seg;
        if (iidx[last] == in_last) {
          iidx[last] = 0;
          for (size_t d = last; d-- > 0;) {
            if (++iidx[d] < in[d]) break;
            iidx[d] = 0;
          }
        }
      }
    }
  }
}

template <class A>
void ConvTransposeForward(const TransposeAttrs& t, const Shape& xs, const Shape& ws, const Shape& ys, const A* x,
                          const A* w, const A* bias, A* y) {
  const size_t r = t.a.rank();
  const int64_t N = xs[0], C = xs[1], group = t.group;
  const int64_t Cg = C / group, Mg = ws[1], M = Mg * group;
  std::vector<int64_t> in(r), out(r), pb(r);
  int64_t in_size = 1, out_size = 1, kprod = 1;
  for (size_t i = 0; i < r; ++i) {
    in[i] = xs[2 + i];
    out[i] = ys[2 + i];
    (void)TransposeOutDim(t, i, in[i], &pb[i]);
    in_size *= in[i];
    out_size *= out[i];
    kprod *= t.a.kernel[i];
  }
  const int64_t kdim = Mg * kprod;
  // W_g is [Cg, kdim]; the GEMM needs its transpose [kdim, Cg].
  std::vector<A> wt(static_cast<size_t>(group * kdim * Cg));
  for (int64_t g = 0; g < group; ++g) TransposeInto<A>(Cg, kdim, w + g * Cg * kdim, kdim, wt.data() + g * kdim * Cg);
  const int64_t budget = int64_t{1} << 20;
  const int64_t tile = std::min(in_size, std::max<int64_t>(64, budget / std::max<int64_t>(kdim, 1)));
  std::vector<A> col(static_cast<size_t>(kdim * std::max<int64_t>(tile, 0)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < group; ++g) {
      A* yg = y + (n * M + g * Mg) * out_size;
      for (int64_t m = 0; m < Mg; ++m)
        std::fill(yg + m * out_size, yg + (m + 1) * out_size, bias ? bias[g * Mg + m] : A(0));
      const A* xg = x + (n * C + g * Cg) * in_size;
      for (int64_t p0 = 0; p0 < in_size; p0 += tile) {
        const int64_t pn = std::min(tile, in_size - p0);
        std::fill(col.begin(), col.begin() + kdim * pn, A(0));
        GemmAccumulate<A>(kdim, pn, Cg, wt.data() + g * kdim * Cg, Cg, xg + p0, in_size, col.data(), pn);
        Col2Im<A>(col.data(), Mg, t, in, out, pb, out_size, p0, pn, yg);
      }
    }
}

Status RunConvTranspose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  Tensor& y = ctx.out(0);
  TransposeAttrs t;
  t.a.kernel.assign(w.shape().begin() + 2, w.shape().end());
  (void)ReadTransposeAttrs(ctx.node, t.a.kernel.size(), &t);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      using A = GemmAccType<T>;
      std::vector<A> xb, wb, bb, yb;
      const A* xa = AsAccumType<A>(x.data<T>(), x.numel(), xb);
      const A* wa = AsAccumType<A>(w.data<T>(), w.numel(), wb);
      const A* ba = b ? AsAccumType<A>(b->data<T>(), b->numel(), bb) : nullptr;
      if constexpr (std::is_same_v<A, T>) {
        ConvTransposeForward<A>(t, x.shape(), w.shape(), y.shape(), xa, wa, ba, y.mutable_data<T>());
      } else {
        yb.assign(static_cast<size_t>(y.numel()), A(0));
        ConvTransposeForward<A>(t, x.shape(), w.shape(), y.shape(), xa, wa, ba, yb.data());
        T* py = y.mutable_data<T>();
        for (size_t i = 0; i < yb.size(); ++i) py[i] = ConvertElement<T>(yb[i]);
      }
    }
  });
}

SAMPAN_REGISTER_OP("ConvTranspose", InferConvTranspose, RunConvTranspose);

}  // namespace
}  // namespace sampan::ops
