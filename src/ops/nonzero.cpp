// Ops whose output shape depends on input values: NonZero, Compress, Unique.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

// ---- NonZero ------------------------------------------------------------------

Status InferNonZero(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, DType::kInt64, ir::Dims{ir::Dim::Unknown(), ir::Dim::Unknown()});
    return Status::Ok();
  }
  ctx.set_output(0, DType::kInt64, ir::Dims{ir::Dim::Known(static_cast<int64_t>(in->size())), ir::Dim::Unknown()});
  return Status::Ok();
}

// Flags (x != 0) per element.
Status NonZeroMask(const Tensor& x, std::vector<uint8_t>* mask) {
  mask->resize(static_cast<size_t>(x.numel()));
  return DispatchDType(x.dtype(), [&]<class T>() {
    const T* p = x.data<T>();
    for (size_t i = 0; i < mask->size(); ++i) {
      if constexpr (std::is_same_v<T, bool>)
        (*mask)[i] = p[i] ? 1 : 0;
      else
        (*mask)[i] = static_cast<ComputeType<T>>(p[i]) != ComputeType<T>(0) ? 1 : 0;
    }
  });
}

Status RunNonZero(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<uint8_t> mask;
  SP_RETURN_IF_ERROR(NonZeroMask(x, &mask));
  const int64_t nnz = std::count(mask.begin(), mask.end(), uint8_t{1});
  const int64_t r = x.rank();
  SP_ASSIGN_OR_RETURN(Tensor y, Tensor::Zeros(DType::kInt64, {r, nnz}));
  int64_t* out = y.mutable_data<int64_t>();
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t col = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) {
      for (int64_t d = 0; d < r; ++d) out[d * nnz + col] = idx[static_cast<size_t>(d)];
      ++col;
    }
    for (int64_t d = r; d-- > 0;) {
      if (++idx[static_cast<size_t>(d)] < x.dim(d)) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
  ctx.out(0) = std::move(y);
  return Status::Ok();
}

// ---- Compress ------------------------------------------------------------------

Status InferCompress(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  if (ctx.input_dtype(0) != DType::kString) SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  if (ctx.input_dtype(1) != DType::kBool)
    return ctx.Error("condition must be bool, got ", DTypeName(ctx.input_dtype(1)));
  if (const auto& cd = ctx.input_dims(1); cd && cd->size() != 1)
    return ctx.Error("condition must be 1-D, got rank ", cd->size());
  const DType dtype = ctx.input_dtype(0);
  const Tensor* cond = ctx.input_value(1);
  ir::Dim count = ir::Dim::Unknown();
  if (cond) count = ir::Dim::Known(std::count(cond->data<bool>(), cond->data<bool>() + cond->numel(), true));
  const auto& in = ctx.input_dims(0);
  if (!ctx.node().has_attr("axis")) {
    ctx.set_output(0, dtype, ir::Dims{count});
    return Status::Ok();
  }
  if (!in) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  if (in->empty()) return ctx.Error("input must have rank >= 1 when axis is given");
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), in->size()));
  ir::Dims out = *in;
  out[axis] = count;
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunCompress(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& cond = ctx.in(1);
  const bool has_axis = ctx.node.has_attr("axis");
  const int64_t axis = has_axis ? WrapAxis(ctx.node.attr_int("axis", 0), x.rank()) : 0;
  const int64_t n = has_axis ? x.dim(axis) : x.numel();
  const int64_t outer = has_axis ? SpanProduct(x.shape(), 0, static_cast<size_t>(axis)) : 1;
  const int64_t inner = has_axis ? SpanProduct(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size()) : 1;
  const bool* c = cond.data<bool>();
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!c[i]) continue;
    if (i >= n) return ctx.Error("condition is true at ", i, " but the compressed axis has only ", n, " entries");
    keep.push_back(i);
  }
  Shape out_shape = has_axis ? x.shape() : Shape{n};
  out_shape[has_axis ? static_cast<size_t>(axis) : 0] = static_cast<int64_t>(keep.size());
  if (x.is_string()) {  // elements are objects: copied one by one
    std::vector<std::string> out;
    out.reserve(static_cast<size_t>(outer * inner) * keep.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : keep)
        out.insert(out.end(), x.strings() + (o * n + k) * inner, x.strings() + (o * n + k + 1) * inner);
    ctx.out(0) = Tensor::FromStrings(std::move(out), out_shape);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(Tensor y, Tensor::Zeros(x.dtype(), out_shape));
  const size_t es = DTypeSize(x.dtype());
  const size_t row = static_cast<size_t>(inner) * es;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  if (row > 0) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : keep) {
        std::memcpy(dst, src + static_cast<size_t>(o * n + k) * row, row);
        dst += row;
      }
  }
  ctx.out(0) = std::move(y);
  return Status::Ok();
}

// ---- Unique ---------------------------------------------------------------------

Status InferUnique(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  const DType dtype = ctx.input_dtype(0);
  const auto& in = ctx.input_dims(0);
  std::optional<ir::Dims> y_dims = ir::Dims{ir::Dim::Unknown()};
  ir::Dim inverse = ir::Dim::Unknown();
  if (ctx.node().has_attr("axis")) {
    if (in) {
      if (in->empty()) return ctx.Error("input must have rank >= 1 when axis is given");
      SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), in->size()));
      y_dims = *in;
      (*y_dims)[axis] = ir::Dim::Unknown();
      inverse = (*in)[axis];
    } else {
      y_dims = std::nullopt;
    }
  } else if (in) {
    if (auto n = KnownProduct(*in, 0, in->size())) inverse = ir::Dim::Known(*n);
  }
  ctx.set_output(0, dtype, y_dims);
  for (size_t i = 1; i < ctx.num_outputs() && i < 4; ++i)
    ctx.set_output(i, DType::kInt64, ir::Dims{i == 2 ? inverse : ir::Dim::Unknown()});
  if (ctx.num_outputs() > 4) return ctx.Error("Unique has at most 4 outputs, got ", ctx.num_outputs());
  return Status::Ok();
}

Status RunUnique(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const bool has_axis = ctx.node.has_attr("axis");
  const bool sorted = ctx.node.attr_int("sorted", 1) != 0;
  const int64_t axis = has_axis ? WrapAxis(ctx.node.attr_int("axis", 0), x.rank()) : 0;
  // Slices k = 0..n-1 along the axis; each slice's elements are (outer, inner).
  const int64_t n = has_axis ? x.dim(axis) : x.numel();
  const int64_t outer = has_axis ? SpanProduct(x.shape(), 0, static_cast<size_t>(axis)) : 1;
  const int64_t inner = has_axis ? SpanProduct(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size()) : 1;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group_of(static_cast<size_t>(n));  // slice -> group id (in sorted order)
  std::vector<int64_t> first;                             // group -> first slice
  std::vector<int64_t> counts;
  SP_RETURN_IF_ERROR(DispatchDType(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* p = x.data<T>();
    // -1 / 0 / 1 lexicographic comparison of slices a and b.
    auto cmp = [&](int64_t a, int64_t b) {
      for (int64_t o = 0; o < outer; ++o) {
        const T* pa = p + (o * n + a) * inner;
        const T* pb = p + (o * n + b) * inner;
        for (int64_t j = 0; j < inner; ++j) {
          const C va = static_cast<C>(pa[j]), vb = static_cast<C>(pb[j]);
          if constexpr (std::is_floating_point_v<C>) {  // NaN sorts last; NaNs are equal
            const bool na = std::isnan(va), nb = std::isnan(vb);
            if (na || nb) {
              if (na != nb) return na ? 1 : -1;
              continue;
            }
          }
          if (va < vb) return -1;
          if (vb < va) return 1;
        }
      }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
        first.push_back(order[i]);
        counts.push_back(0);
      }
      group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(first.size()) - 1;
      ++counts.back();
    }
  }));
  const size_t groups = first.size();
  // Output position of each group: sorted order, or order of first occurrence.
  std::vector<int64_t> pos(groups);
  std::iota(pos.begin(), pos.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(groups);
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    for (size_t i = 0; i < groups; ++i) pos[static_cast<size_t>(by_first[i])] = static_cast<int64_t>(i);
  }
  const int64_t u = static_cast<int64_t>(groups);
  Shape y_shape = has_axis ? x.shape() : Shape{u};
  y_shape[has_axis ? static_cast<size_t>(axis) : 0] = u;
  SP_ASSIGN_OR_RETURN(Tensor y, Tensor::Zeros(x.dtype(), y_shape));
  SP_ASSIGN_OR_RETURN(Tensor indices, Tensor::Zeros(DType::kInt64, {u}));
  SP_ASSIGN_OR_RETURN(Tensor inverse, Tensor::Zeros(DType::kInt64, {n}));
  SP_ASSIGN_OR_RETURN(Tensor count_t, Tensor::Zeros(DType::kInt64, {u}));
  const size_t es = DTypeSize(x.dtype());
  const size_t row = static_cast<size_t>(inner) * es;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  for (size_t g = 0; g < groups; ++g) {
    const int64_t at = pos[g];
    indices.mutable_data<int64_t>()[at] = first[g];
    count_t.mutable_data<int64_t>()[at] = counts[g];
    if (row == 0) continue;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + static_cast<size_t>(o * u + at) * row, src + static_cast<size_t>(o * n + first[g]) * row, row);
  }
  for (int64_t k = 0; k < n; ++k)
    inverse.mutable_data<int64_t>()[k] = pos[static_cast<size_t>(group_of[static_cast<size_t>(k)])];
  Tensor outs[4] = {y, indices, inverse, count_t};
  for (size_t i = 0; i < ctx.outputs.size() && i < 4; ++i) ctx.out(i) = outs[i];
  return Status::Ok();
}

SAMPAN_REGISTER_OP("NonZero", InferNonZero, RunNonZero);
// Compress takes string tensors too, as ONNX defines it (an OCR pipeline drops the lines its score filter rejects).
SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "Compress", .infer = InferCompress, .run = RunCompress, .strings = true});
SAMPAN_REGISTER_OP("Unique", InferUnique, RunUnique);

}  // namespace
}  // namespace sampan::ops
