// Concat and Split along one axis.
#include <cstring>

#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

// ---------------------------------------------------------------- Concat

Status InferConcat(InferContext& ctx) {
  if (ctx.num_inputs() == 0) return ctx.Error("expects at least 1 input");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is missing");
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  int64_t axis_attr = 1;
  if (ctx.opset() >= 4) {
    SP_ASSIGN_OR_RETURN(axis_attr, ctx.node().required_int("axis"));
  } else {
    axis_attr = ctx.node().attr_int("axis", 1);
  }
  int64_t rank = -1;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const int64_t r = ctx.input_rank(i);
    if (r < 0) continue;
    if (rank >= 0 && r != rank) return ctx.Error("inputs have different ranks (", rank, " and ", r, ")");
    rank = r;
  }
  if (rank < 0) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  if (rank == 0) return ctx.Error("cannot concatenate scalars");
  SP_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(ctx, axis_attr, rank));
  ir::Dims out(static_cast<size_t>(rank));
  bool first = true;
  bool axis_known = true;
  int64_t axis_sum = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const auto& in = ctx.input_dims(i);
    if (!in) {
      axis_known = false;
      continue;
    }
    for (int64_t d = 0; d < rank; ++d) {
      const ir::Dim& di = (*in)[static_cast<size_t>(d)];
      if (d == axis) {
        if (di.known())
          axis_sum += di.value;
        else
          axis_known = false;
        continue;
      }
      ir::Dim& o = out[static_cast<size_t>(d)];
      if (first) {
        o = di;
      } else if (di.known()) {
        if (o.known() && o.value != di.value)
          return ctx.Error("input ", i, " has size ", di.value, " in dimension ", d, " but an earlier input has ",
                           o.value);
        o = di;
      } else if (!o.known() && o.param.empty()) {
        o = di;
      }
    }
    first = false;
  }
  out[static_cast<size_t>(axis)] = axis_known ? ir::Dim::Known(axis_sum) : ir::Dim::Unknown();
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

Status RunConcat(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 1), y.rank());
  const size_t esize = DTypeSize(y.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= y.dim(d);
  for (int64_t d = axis + 1; d < y.rank(); ++d) inner *= y.dim(d);
  char* dst = static_cast<char*>(y.mutable_raw());
  const size_t out_row = static_cast<size_t>(y.dim(axis) * inner) * esize;
  size_t col = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const Tensor& x = ctx.in(i);
    const size_t row = static_cast<size_t>(x.dim(axis) * inner) * esize;
    if (row == 0) continue;
    const char* src = static_cast<const char*>(x.raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * out_row + col, src + o * row, row);
    col += row;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- Split

Status InferSplit(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, ctx.opset() >= 13 ? 2 : 1));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  const size_t n_out = ctx.num_outputs();
  if (n_out == 0) return ctx.Error("has no outputs");
  const auto& in = ctx.input_dims(0);

  std::optional<std::vector<int64_t>> split;
  bool split_unknown = false;
  if (ctx.opset() < 13) {
    if (ctx.node().has_attr("split")) split = ctx.node().attr_ints("split");
  } else if (ctx.has_input(1)) {
    if (ctx.input_dtype(1) != DType::kInt64) return ctx.Error("split input must be int64");
    if (const Tensor* v = ctx.input_value(1)) {
      SP_ASSIGN_OR_RETURN(split, ReadInts(ctx, *v, "split"));
    } else {
      split_unknown = true;
    }
  }
  std::optional<int64_t> num_outputs;
  if (ctx.opset() >= 18 && ctx.node().has_attr("num_outputs")) {
    num_outputs = ctx.node().attr_int("num_outputs", 0);
    if (split || split_unknown) return ctx.Error("either the split input or num_outputs may be given, not both");
    if (*num_outputs < 1) return ctx.Error("num_outputs must be >= 1, got ", *num_outputs);
    if (static_cast<size_t>(*num_outputs) != n_out)
      return ctx.Error("num_outputs is ", *num_outputs, " but the node has ", n_out, " outputs");
  }
  if (split) {
    if (split->size() != n_out)
      return ctx.Error("split has ", split->size(), " entries but the node has ", n_out, " outputs");
    for (int64_t s : *split)
      if (s < 0) return ctx.Error("split sizes must be >= 0, got ", s);
  }
  if (!in) {
    for (size_t i = 0; i < n_out; ++i) ctx.set_output(i, dt, std::nullopt);
    return Status::Ok();
  }
  const int64_t rank = static_cast<int64_t>(in->size());
  SP_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), rank));
  const ir::Dim& d = (*in)[static_cast<size_t>(axis)];

  std::vector<ir::Dim> sizes(n_out, ir::Dim::Unknown());
  if (split) {
    int64_t sum = 0;
    for (size_t i = 0; i < n_out; ++i) {
      sizes[i] = ir::Dim::Known((*split)[i]);
      sum += (*split)[i];
    }
    if (d.known() && sum != d.value)
      return ctx.Error("split sizes add up to ", sum, " but dimension ", axis, " has size ", d.value);
  } else if (split_unknown) {
    // sizes stay unknown
  } else if (n_out == 1) {
    sizes[0] = d;
  } else if (d.known()) {
    const int64_t n = static_cast<int64_t>(n_out);
    if (d.value % n == 0) {
      for (auto& s : sizes) s = ir::Dim::Known(d.value / n);
    } else if (ctx.opset() >= 18) {
      // Uneven: every chunk ceil(d/n), the last one gets the remainder.
      const int64_t chunk = d.value / n + 1;
      const int64_t last = d.value - chunk * (n - 1);
      if (last < 0) return ctx.Error("dimension ", axis, " of size ", d.value, " cannot be split into ", n, " chunks");
      for (auto& s : sizes) s = ir::Dim::Known(chunk);
      sizes.back() = ir::Dim::Known(last);
    } else {
      return ctx.Error("dimension ", axis, " of size ", d.value, " does not split evenly into ", n, " outputs");
    }
  }
  for (size_t i = 0; i < n_out; ++i) {
    ir::Dims o = *in;
    o[static_cast<size_t>(axis)] = sizes[i];
    ctx.set_output(i, dt, std::move(o));
  }
  return Status::Ok();
}

Status RunSplit(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), x.rank());
  const size_t esize = DTypeSize(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const char* src = static_cast<const char*>(x.raw());
  const size_t in_row = static_cast<size_t>(x.dim(axis) * inner) * esize;
  size_t col = 0;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    Tensor& y = ctx.out(i);
    const size_t row = static_cast<size_t>(y.dim(axis) * inner) * esize;
    if (row != 0) {
      char* dst = static_cast<char*>(y.mutable_raw());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * row, src + o * in_row + col, row);
    }
    col += row;
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Concat", InferConcat, RunConcat);
SAMPAN_REGISTER_OP("Split", InferSplit, RunSplit);

}  // namespace
}  // namespace sampan::ops
