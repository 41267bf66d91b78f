// Tile and Pad. Pad: modes constant/reflect/edge/wrap; pads come from an
// attribute before opset 11 ("paddings" in opset 1) and from input 1 after, with
// optional constant_value (input 2) and axes (input 3, opset 18). Negative pads
// crop; the remaining region is then padded.
#include <cstring>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

// Walks the rows (all dims but the last) of `out_shape`; calls fn(row, index).
template <class Fn>
void ForEachRow(const Shape& out_shape, Fn&& fn) {
  const size_t r = out_shape.size();
  const int64_t rows = SpanProduct(out_shape, 0, r - 1);
  if (rows == 0 || NumElements(out_shape) == 0) return;
  std::vector<int64_t> idx(r - 1, 0);
  for (int64_t row = 0; row < rows; ++row) {
    fn(row, idx);
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
}

// ---- Tile -------------------------------------------------------------------------

Status InferTile(InferContext& ctx) {
  if (ctx.opset() < 6) return ctx.NotSupported("Tile before opset 6 (tiles/axis inputs)");
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.Error("repeats must be int64, got ", DTypeName(ctx.input_dtype(1)));
  const DType dtype = ctx.input_dtype(0);
  const auto& in = ctx.input_dims(0);
  if (const auto& rd = ctx.input_dims(1); rd && rd->size() != 1)
    return ctx.Error("repeats must be 1-D, got rank ", rd->size());
  const Tensor* rep = ctx.input_value(1);
  if (!in) {
    if (rep)
      ctx.set_output(0, dtype, UnknownDims(static_cast<size_t>(rep->numel())));
    else
      ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  if (!rep) {
    ctx.set_output(0, dtype, UnknownDims(in->size()));
    return Status::Ok();
  }
  if (rep->numel() != static_cast<int64_t>(in->size()))
    return ctx.Error("repeats has ", rep->numel(), " values but input has rank ", in->size());
  ir::Dims out = *in;
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t r = rep->data<int64_t>()[d];
    if (r < 0) return ctx.Error("repeats[", d, "] = ", r, " is negative");
    if (r == 1) continue;
    out[d] = out[d].known() ? ir::Dim::Known(out[d].value * r) : (r == 0 ? ir::Dim::Known(0) : ir::Dim::Unknown());
  }
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunTile(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const size_t es = DTypeSize(x.dtype());
  if (y.numel() == 0) return Status::Ok();
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  if (x.rank() == 0) {
    std::memcpy(dst, src, es);
    return Status::Ok();
  }
  const Shape& in = x.shape();
  const Shape& out = y.shape();
  const Shape istr = StridesOf(in);
  const size_t r = in.size();
  const int64_t in_last = in[r - 1], out_last = out[r - 1];
  const size_t in_row = static_cast<size_t>(in_last) * es;
  ForEachRow(out, [&](int64_t row, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < r; ++d) off += (idx[d] % in[d]) * istr[d];
    char* o = dst + static_cast<size_t>(row * out_last) * es;
    for (int64_t k = 0; k < out_last; k += in_last, o += in_row)
      std::memcpy(o, src + static_cast<size_t>(off) * es, in_row);
  });
  return Status::Ok();
}

// ---- Pad ----------------------------------------------------------------------------

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

Result<PadMode> ParsePadMode(const InferContext& ctx) {
  const std::string m = ctx.node().attr_string("mode", "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  if (m == "wrap") return PadMode::kWrap;
  return ctx.Error("unknown mode '", m, "' (expected constant, reflect, edge or wrap)");
}

// Per-axis (begin, end) pads for every axis of a rank-`rank` input; nullopt when
// the pads (or axes) are not known yet.
Result<std::optional<std::vector<std::pair<int64_t, int64_t>>>> PadsPerAxis(const InferContext& ctx, size_t rank) {
  std::vector<int64_t> pads;
  std::vector<int64_t> axes;
  const ir::Node& node = ctx.node();
  if (ctx.opset() < 11) {
    if (node.has_attr("pads")) {
      SP_ASSIGN_OR_RETURN(pads, node.required_ints("pads"));
    } else if (node.has_attr("paddings")) {
      SP_ASSIGN_OR_RETURN(pads, node.required_ints("paddings"));
    } else {
      return ctx.Error("missing required attribute 'pads'");
    }
  } else {
    if (!ctx.has_input(1)) return ctx.Error("missing required input 'pads'");
    const Tensor* p = ctx.input_value(1);
    if (!p) return std::optional<std::vector<std::pair<int64_t, int64_t>>>();
    SP_ASSIGN_OR_RETURN(pads, ToInt64Vector(*p, node.Label() + ": pads"));
  }
  if (ctx.opset() >= 11 && ctx.has_input(3)) {
    const Tensor* a = ctx.input_value(3);
    if (!a) return std::optional<std::vector<std::pair<int64_t, int64_t>>>();
    SP_ASSIGN_OR_RETURN(axes, ToInt64Vector(*a, node.Label() + ": axes"));
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  if (pads.size() != 2 * axes.size())
    return ctx.Error("pads has ", pads.size(), " values, expected ", 2 * axes.size(), " (2 per padded axis)");
  std::vector<std::pair<int64_t, int64_t>> per(rank, {0, 0});
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    SP_ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(ctx, axes[i], static_cast<int64_t>(rank)));
    if (seen[a]) return ctx.Error("axis ", axes[i], " appears twice in axes");
    seen[a] = true;
    per[a] = {pads[i], pads[i + axes.size()]};
  }
  return std::optional(std::move(per));
}

Status InferPad(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, ctx.opset() < 11 ? 1 : 4));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_ASSIGN_OR_RETURN(PadMode mode, ParsePadMode(ctx));
  const DType dtype = ctx.input_dtype(0);
  if (ctx.opset() >= 11 && ctx.has_input(2) && ctx.input_dtype(2) != dtype)
    return ctx.Error("constant_value type ", DTypeName(ctx.input_dtype(2)), " differs from data type ",
                     DTypeName(dtype));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(auto per, PadsPerAxis(ctx, in->size()));
  if (!per) {
    ctx.set_output(0, dtype, UnknownDims(in->size()));
    return Status::Ok();
  }
  ir::Dims out = *in;
  for (size_t d = 0; d < out.size(); ++d) {
    const auto [b, e] = (*per)[d];
    if (b == 0 && e == 0) continue;
    if (!out[d].known()) {
      out[d] = ir::Dim::Unknown();
      continue;
    }
    const int64_t n = out[d].value;
    const int64_t size = n + b + e;
    const int64_t kept = n - std::max<int64_t>(0, -b) - std::max<int64_t>(0, -e);
    if (size < 0 || kept < 0)
      return ctx.Error("pads (", b, ", ", e, ") on axis ", d, " of size ", n, " crop more than the axis holds");
    if (mode != PadMode::kConstant && kept == 0 && size > 0)
      return ctx.Error("cannot pad an empty axis ", d, " in non-constant mode");
    out[d] = ir::Dim::Known(size);
  }
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunPad(KernelContext& ctx) {
  if (ctx.infer == nullptr) return Internal(ctx.node.Label(), ": Pad needs the inference context");
  const InferContext& ictx = *ctx.infer;
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(PadMode mode, ParsePadMode(ictx));
  const size_t r = x.shape().size();
  SP_ASSIGN_OR_RETURN(auto per, PadsPerAxis(ictx, r));
  if (!per) return ctx.Error("pads are not known");
  const size_t es = DTypeSize(x.dtype());
  if (y.numel() == 0) return Status::Ok();
  if (r == 0) {
    std::memcpy(y.mutable_raw(), x.raw(), es);
    return Status::Ok();
  }
  // Output index -> input index along each axis; -1 = constant.
  std::vector<std::vector<int64_t>> map(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t n = x.dim(d);
    const auto [b, e] = (*per)[d];
    const int64_t lo = std::max<int64_t>(0, b), crop = std::max<int64_t>(0, -b);
    const int64_t m = n - crop - std::max<int64_t>(0, -e);
    const int64_t size = y.dim(d);
    map[d].resize(static_cast<size_t>(size));
    for (int64_t o = 0; o < size; ++o) {
      int64_t j = o - lo;
      if (j < 0 || j >= m) {
        switch (mode) {
          case PadMode::kConstant:
            j = -1;
            break;
          case PadMode::kEdge:
            j = j < 0 ? 0 : m - 1;
            break;
          case PadMode::kWrap:
            j = ((j % m) + m) % m;
            break;
          case PadMode::kReflect:
            if (m == 1) {
              j = 0;
            } else {
              const int64_t period = 2 * (m - 1);
              j = ((j % period) + period) % period;
              if (j >= m) j = period - j;
            }
            break;
        }
      }
      map[d][static_cast<size_t>(o)] = j < 0 ? -1 : j + crop;
    }
  }
  // The constant as raw element bits.
  std::vector<unsigned char> cval(es, 0);
  if (mode == PadMode::kConstant) {
    if (ctx.opset >= 11) {
      if (ctx.has_input(2) && ctx.in(2).numel() > 0) std::memcpy(cval.data(), ctx.in(2).raw(), es);
    } else {
      const double v = ctx.node.attr_float("value", 0.f);
      SP_RETURN_IF_ERROR(DispatchDType(x.dtype(), [&]<class T>() {
        const T t = ConvertElement<T>(v);
        std::memcpy(cval.data(), &t, es);
      }));
    }
  }
  const Shape istr = StridesOf(x.shape());
  const int64_t out_last = y.dim(static_cast<int64_t>(r) - 1);
  const std::vector<int64_t>& last_map = map[r - 1];
  DispatchBySize(es, [&]<class U>() {
    U c;
    std::memcpy(&c, cval.data(), sizeof(U));
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.mutable_raw());
    ForEachRow(y.shape(), [&](int64_t row, const std::vector<int64_t>& idx) {
      U* o = dst + row * out_last;
      int64_t off = 0;
      for (size_t d = 0; d + 1 < r; ++d) {
        const int64_t j = map[d][static_cast<size_t>(idx[d])];
        if (j < 0) {
          std::fill(o, o + out_last, c);
          return;
        }
        off += j * istr[d];
      }
      const U* s = src + off;
      for (int64_t k = 0; k < out_last; ++k) {
        const int64_t j = last_map[static_cast<size_t>(k)];
        o[k] = j < 0 ? c : s[j];
      }
    });
  });
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Tile", InferTile, RunTile);
SAMPAN_REGISTER_OP("Pad", InferPad, RunPad);

}  // namespace
}  // namespace sampan::ops
