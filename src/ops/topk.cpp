// TopK: the k largest (or smallest, largest=0) elements along `axis`
// (default -1) and their int64 indices. k is an attribute before opset 10 and a
// 1-element int64 input from then on. Equal values keep the lower index first.
// The output is always sorted (also valid for sorted=0, whose order is unspecified).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

// k, or nullopt when it is an input whose value is not known yet.
Result<std::optional<int64_t>> ReadK(const ir::Node& node, int64_t opset, const Tensor* k_value, bool has_k_input) {
  if (opset < 10) {
    SP_ASSIGN_OR_RETURN(int64_t k, node.required_int("k"));
    return std::optional<int64_t>(k);
  }
  if (!has_k_input) return InvalidArgument(node.Label(), ": required input 'K' is missing");
  if (k_value == nullptr) return std::optional<int64_t>();
  if (k_value->numel() != 1 || k_value->rank() > 1)
    return InvalidArgument(node.Label(), ": 'K' must be a 1-D tensor with one element, got ", k_value->Describe());
  return std::optional<int64_t>(ElementAsInt64(*k_value, 0));
}

Status InferTopK(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(ctx.opset() < 10 ? 1 : 2, ctx.opset() < 10 ? 1 : 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  if (ctx.num_outputs() != 2) return ctx.Error("expects 2 outputs (Values, Indices), got ", ctx.num_outputs());
  if (ctx.opset() >= 10 && ctx.input_dtype(1) != DType::kInt64)
    return ctx.Error("'K' must be int64, got ", DTypeName(ctx.input_dtype(1)));
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> k, ReadK(ctx.node(), ctx.opset(), ctx.input_value(1), ctx.has_input(1)));
  if (k && *k < 0) return ctx.Error("k must be >= 0, got ", *k);
  const DType dt = ctx.input_dtype(0);
  const int64_t rank = ctx.input_rank(0);
  if (rank < 0) {
    ctx.set_output(0, dt, std::nullopt);
    ctx.set_output(1, DType::kInt64, std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", -1), rank));
  ir::Dims out = *ctx.input_dims(0);
  ir::Dim& d = out[static_cast<size_t>(axis)];
  if (k && d.known() && *k > d.value) return ctx.Error("k = ", *k, " is larger than the axis size ", d.value);
  d = k ? ir::Dim::Known(*k) : ir::Dim::Unknown();
  ctx.set_output(0, dt, out);
  ctx.set_output(1, DType::kInt64, out);
  return Status::Ok();
}

Status RunTopK(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> k_opt,
                      ReadK(ctx.node, ctx.opset, ctx.has_input(1) ? &ctx.in(1) : nullptr, ctx.has_input(1)));
  const int64_t k = k_opt.value_or(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", -1), x.rank());
  const bool largest = ctx.opset < 11 || ctx.node.attr_int("largest", 1) != 0;
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(axis)] = k;
  for (int i = 0; i < 2; ++i)
    if (!ctx.out(i).defined()) ctx.out(i) = Tensor::Alloc(i == 0 ? x.dtype() : DType::kInt64, out_shape);
  const AxisSplit s = SplitAtAxis(x.shape(), axis);
  int64_t* pi = ctx.out(1).mutable_data<int64_t>();
  Tensor& values = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    T* pv = values.mutable_data<T>();
    std::vector<int64_t> idx(static_cast<size_t>(s.n));
    std::vector<C> row(static_cast<size_t>(s.n));
    // NaN ranks above everything when largest, below everything when smallest.
    auto before = [&](int64_t a, int64_t b) {
      const C va = row[static_cast<size_t>(a)], vb = row[static_cast<size_t>(b)];
      if constexpr (std::is_floating_point_v<C>) {
        const bool na = std::isnan(va), nb = std::isnan(vb);
        if (na || nb) {
          if (na && nb) return a < b;
          return largest ? na : nb;
        }
      }
      if (va != vb) return largest ? va > vb : va < vb;
      return a < b;
    };
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        const int64_t in_base = o * s.n * s.inner + i;
        for (int64_t j = 0; j < s.n; ++j) row[static_cast<size_t>(j)] = static_cast<C>(px[in_base + j * s.inner]);
        std::iota(idx.begin(), idx.end(), int64_t{0});
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
        const int64_t out_base = o * k * s.inner + i;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t src = idx[static_cast<size_t>(j)];
          pv[out_base + j * s.inner] = px[in_base + src * s.inner];
          pi[out_base + j * s.inner] = src;
        }
      }
    }
  });
}

SAMPAN_REGISTER_OP("TopK", InferTopK, RunTopK);

}  // namespace
}  // namespace sampan::ops
