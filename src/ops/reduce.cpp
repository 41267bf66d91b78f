// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.
// Axes: attribute before opset 13 (ReduceSum) / 18 (the others), optional
// input 1 from then on. Empty axes reduce everything unless
// noop_with_empty_axes=1 (then the op is an identity).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

enum class Kind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Opset from which `axes` is an input.
int64_t AxesInputOpset(Kind k) {
  return k == Kind::kSum ? 13 : 18;
}

// What the node asks to reduce: axes == nullopt means not known (statically).
struct AxesSpec {
  std::optional<std::vector<int64_t>> axes;
  bool noop_if_empty = false;
  bool keepdims = true;
};

Result<AxesSpec> ReadAxes(const ir::Node& node, int64_t opset, Kind kind, bool has_axes_input,
                          const Tensor* axes_value) {
  AxesSpec spec;
  spec.keepdims = node.attr_int("keepdims", 1) != 0;
  if (opset >= AxesInputOpset(kind)) {
    spec.noop_if_empty = node.attr_int("noop_with_empty_axes", 0) != 0;
    if (node.has_attr("axes"))
      return InvalidArgument(node.Label(), ": 'axes' is an input (not an attribute) from opset ", AxesInputOpset(kind));
    if (!has_axes_input) {
      spec.axes = std::vector<int64_t>{};
    } else if (axes_value != nullptr) {
      if (axes_value->rank() > 1)
        return InvalidArgument(node.Label(), ": 'axes' must be 1-D, got ", axes_value->Describe());
      SP_ASSIGN_OR_RETURN(auto v, ToInt64Vector(*axes_value, node.Label() + ": axes"));
      spec.axes = std::move(v);
    }
  } else {
    if (has_axes_input)
      return InvalidArgument(node.Label(), ": 'axes' input is only allowed from opset ", AxesInputOpset(kind));
    spec.axes = node.attr_ints("axes");
  }
  return spec;
}

// Reduced-dims mask for known axes; error on out-of-range / repeated axes.
Result<std::vector<char>> AxesMask(const ir::Node& node, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<char> mask(static_cast<size_t>(rank), axes.empty() ? 1 : 0);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return InvalidArgument(node.Label(), ": axis ", a, " is out of range for rank ", rank);
    int64_t w = a < 0 ? a + rank : a;
    if (mask[static_cast<size_t>(w)]) return InvalidArgument(node.Label(), ": axis ", a, " is repeated in 'axes'");
    mask[static_cast<size_t>(w)] = 1;
  }
  return mask;
}

bool AllowedDType(Kind kind, DType t, int64_t opset) {
  if (t == DType::kBool) return (kind == Kind::kMax || kind == Kind::kMin) && opset >= 20;
  for (DType a : kNumericTypes)
    if (a == t) return true;
  return false;
}

template <Kind K>
Status InferReduce(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 2));
  const DType dt = ctx.input_dtype(0);
  if (!AllowedDType(K, dt, ctx.opset())) return ctx.NotSupported("input of type ", DTypeName(dt));
  // Opset 28 takes the integer types out of ReduceLogSum/ReduceLogSumExp.
  if ((K == Kind::kLogSum || K == Kind::kLogSumExp) && ctx.opset() >= 28 && !IsFloatDType(dt))
    return ctx.Error("input of type ", DTypeName(dt), " is not allowed from opset 28 (floating-point types only)");
  if (ctx.has_input(1) && !IsIntegerDType(ctx.input_dtype(1)))
    return ctx.Error("'axes' must be an integer tensor, got ", DTypeName(ctx.input_dtype(1)));
  SP_ASSIGN_OR_RETURN(AxesSpec spec, ReadAxes(ctx.node(), ctx.opset(), K, ctx.has_input(1), ctx.input_value(1)));
  const int64_t rank = ctx.input_rank(0);
  if (spec.axes && spec.axes->empty() && spec.noop_if_empty) {
    ctx.set_output(0, dt, ctx.input_dims(0));
    return Status::Ok();
  }
  if (rank < 0) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  const ir::Dims& in = *ctx.input_dims(0);
  if (!spec.axes) {  // axes known only at run time
    if (spec.keepdims) {
      ctx.set_output(0, dt, ir::Dims(static_cast<size_t>(rank), ir::Dim::Unknown()));
      return Status::Ok();
    }
    const auto& ad = ctx.input_dims(1);
    if (ad && ad->size() == 1 && (*ad)[0].known() && (*ad)[0].value > 0 && (*ad)[0].value <= rank) {
      ctx.set_output(0, dt, ir::Dims(static_cast<size_t>(rank - (*ad)[0].value), ir::Dim::Unknown()));
    } else {
      ctx.set_output(0, dt, std::nullopt);
    }
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(auto mask, AxesMask(ctx.node(), *spec.axes, rank));
  ir::Dims out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!mask[static_cast<size_t>(d)])
      out.push_back(in[static_cast<size_t>(d)]);
    else if (spec.keepdims)
      out.push_back(ir::Dim::Known(1));
  }
  ctx.set_output(0, dt, out);
  return Status::Ok();
}

template <class A>
bool IsNan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return std::isnan(v);
  else
    return false;
}
template <class A>
A Abs(A v) {
  if constexpr (std::is_signed_v<A>)
    return v < A(0) ? -v : v;
  else
    return v;
}

template <Kind K, class T>
void ReduceTyped(const Tensor& x, const std::vector<char>& mask, Tensor& y) {
  using Acc = AccType<T>;
  using C = ComputeType<T>;
  const ReducePlan plan = MakeReducePlan(x.shape(), mask);
  const int64_t out_n = plan.out_numel;
  const int64_t count = out_n == 0 ? 0 : plan.in_numel / out_n;
  const T* px = x.data<T>();
  T* py = y.mutable_data<T>();
  if (out_n == 0) return;

  Acc init{};
  if constexpr (K == Kind::kProd) init = Acc(1);
  if constexpr (K == Kind::kMax) {
    if constexpr (std::is_floating_point_v<Acc>)
      init = -std::numeric_limits<Acc>::infinity();
    else
      init = static_cast<Acc>(std::numeric_limits<C>::lowest());
  }
  if constexpr (K == Kind::kMin) {
    if constexpr (std::is_floating_point_v<Acc>)
      init = std::numeric_limits<Acc>::infinity();
    else
      init = static_cast<Acc>(std::numeric_limits<C>::max());
  }
  std::vector<Acc> acc(static_cast<size_t>(out_n), init);

  auto val = [&](int64_t i) { return static_cast<Acc>(static_cast<C>(px[i])); };

  if constexpr (K == Kind::kLogSumExp) {
    // Stable: max first, then sum of exp(x - max).
    std::vector<double> mx(static_cast<size_t>(out_n), -std::numeric_limits<double>::infinity());
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      for (int64_t j = 0; j < n; ++j) {
        double v = static_cast<double>(val(i0 + j));
        double& m = mx[static_cast<size_t>(o0 + j * step)];
        if (v > m || std::isnan(v)) m = v;
      }
    });
    std::vector<double> sum(static_cast<size_t>(out_n), 0.0);
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      for (int64_t j = 0; j < n; ++j) {
        size_t o = static_cast<size_t>(o0 + j * step);
        sum[o] += std::isinf(mx[o]) ? std::exp(static_cast<double>(val(i0 + j)))
                                    : std::exp(static_cast<double>(val(i0 + j)) - mx[o]);
      }
    });
    for (int64_t o = 0; o < out_n; ++o) {
      double m = mx[static_cast<size_t>(o)];
      double r = std::isinf(m) ? (m > 0 ? m : std::log(sum[static_cast<size_t>(o)]))
                               : m + std::log(sum[static_cast<size_t>(o)]);
      py[o] = ConvertElement<T>(static_cast<C>(r));
    }
    return;
  } else {
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      Acc* a = acc.data() + o0;
      for (int64_t j = 0; j < n; ++j) {
        const Acc v = val(i0 + j);
        Acc& s = a[j * step];
        if constexpr (K == Kind::kSum || K == Kind::kMean || K == Kind::kLogSum)
          s += v;
        else if constexpr (K == Kind::kProd)
          s *= v;
        else if constexpr (K == Kind::kMax) {
          if (v > s || IsNan(v)) s = v;
        } else if constexpr (K == Kind::kMin) {
          if (v < s || IsNan(v)) s = v;
        } else if constexpr (K == Kind::kL1)
          s += Abs(v);
        else if constexpr (K == Kind::kL2 || K == Kind::kSumSquare)
          s += v * v;
      }
    });
    for (int64_t o = 0; o < out_n; ++o) {
      const Acc s = acc[static_cast<size_t>(o)];
      if constexpr (K == Kind::kMean) {
        if constexpr (std::is_floating_point_v<Acc>)
          py[o] = ConvertElement<T>(static_cast<C>(s / static_cast<double>(count)));
        else
          py[o] = count == 0 ? T(0) : static_cast<T>(s / static_cast<Acc>(count));
      } else if constexpr (K == Kind::kL2) {
        py[o] = ConvertElement<T>(static_cast<C>(std::sqrt(static_cast<double>(s))));
      } else if constexpr (K == Kind::kLogSum) {
        py[o] = ConvertElement<T>(static_cast<C>(std::log(static_cast<double>(s))));
      } else if constexpr (std::is_floating_point_v<Acc>) {
        py[o] = ConvertElement<T>(static_cast<C>(s));
      } else {
        py[o] = static_cast<T>(s);  // integer wrap-around like the input type
      }
    }
  }
}

template <Kind K>
Status RunReduce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  SP_ASSIGN_OR_RETURN(AxesSpec spec,
                      ReadAxes(ctx.node, ctx.opset, K, ctx.has_input(1), ctx.has_input(1) ? &ctx.in(1) : nullptr));
  if (!spec.axes) return Internal(ctx.node.Label(), ": axes unknown at run time");
  const std::vector<int64_t> axes = *spec.axes;
  if (axes.empty() && spec.noop_if_empty) {
    ctx.out(0) = x.Clone();
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(auto mask, AxesMask(ctx.node, axes, x.rank()));
  if (!ctx.out(0).defined()) {
    Shape out;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (!mask[static_cast<size_t>(d)])
        out.push_back(x.dim(d));
      else if (spec.keepdims)
        out.push_back(1);
    }
    ctx.out(0) = Tensor::Alloc(x.dtype(), out);
  }
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (K == Kind::kMax || K == Kind::kMin) {
        const ReducePlan plan = MakeReducePlan(x.shape(), mask);
        const bool* px = x.data<bool>();
        bool* py = y.mutable_data<bool>();
        std::fill(py, py + plan.out_numel, K == Kind::kMin);
        ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
          for (int64_t j = 0; j < n; ++j) {
            bool& s = py[o0 + j * step];
            s = K == Kind::kMax ? (s || px[i0 + j]) : (s && px[i0 + j]);
          }
        });
      }
    } else {
      ReduceTyped<K, T>(x, mask, y);
    }
  });
}

SAMPAN_REGISTER_OP("ReduceSum", InferReduce<Kind::kSum>, RunReduce<Kind::kSum>);
SAMPAN_REGISTER_OP("ReduceMean", InferReduce<Kind::kMean>, RunReduce<Kind::kMean>);
SAMPAN_REGISTER_OP("ReduceMax", InferReduce<Kind::kMax>, RunReduce<Kind::kMax>);
SAMPAN_REGISTER_OP("ReduceMin", InferReduce<Kind::kMin>, RunReduce<Kind::kMin>);
SAMPAN_REGISTER_OP("ReduceProd", InferReduce<Kind::kProd>, RunReduce<Kind::kProd>);
SAMPAN_REGISTER_OP("ReduceL1", InferReduce<Kind::kL1>, RunReduce<Kind::kL1>);
SAMPAN_REGISTER_OP("ReduceL2", InferReduce<Kind::kL2>, RunReduce<Kind::kL2>);
SAMPAN_REGISTER_OP("ReduceLogSum", InferReduce<Kind::kLogSum>, RunReduce<Kind::kLogSum>);
SAMPAN_REGISTER_OP("ReduceLogSumExp", InferReduce<Kind::kLogSumExp>, RunReduce<Kind::kLogSumExp>);
SAMPAN_REGISTER_OP("ReduceSumSquare", InferReduce<Kind::kSumSquare>, RunReduce<Kind::kSumSquare>);

}  // namespace
}  // namespace sampan::ops
