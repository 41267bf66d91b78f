// Softmax, LogSoftmax, Hardmax.
// Opset < 13: the input is seen as 2-D [prod(shape[:axis]), prod(shape[axis:])]
// (axis default 1) and the op works on each row. Opset >= 13: along one axis
// (default -1). Softmax on float16/bfloat16 rounds each step to the type, as
// the ONNX reference's numpy does (ops/numpy_rounding.h); the rest computes in
// double and rounds once.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/numpy_rounding.h"
#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

enum class Kind { kSoftmax, kLogSoftmax, kHardmax };

int64_t DefaultAxis(int64_t opset) {
  return opset >= 13 ? -1 : 1;
}

Status InferSoftmax(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0) {
    const int64_t axis = ctx.node().attr_int("axis", DefaultAxis(ctx.opset()));
    if (ctx.opset() >= 13 || rank > 0) {
      SP_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, rank).status());
    } else if (axis != 0 && axis != -1) {
      return ctx.Error("axis ", axis, " is out of range for a scalar");
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

// Calls fn(base) with the offset of the first element of every row (rows of
// s.n elements at stride s.inner).
template <class Fn>
void ForEachRow(const AxisSplit& s, Fn&& fn) {
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) fn(o * s.n * s.inner + i);
}

// Softmax of rows of reduced floats: exp(x - max) and its sum and quotient each
// rounded to T.
template <class T>
void ReducedSoftmax(const Tensor& x, Tensor& y, const AxisSplit& s) {
  const DType dt = DTypeOf<T>();
  const T* px = x.data<T>();
  T* py = y.mutable_data<T>();
  std::vector<float> row(static_cast<size_t>(s.n));
  ForEachRow(s, [&](int64_t base) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < s.n; ++k) mx = std::max(mx, static_cast<float>(px[base + k * s.inner]));
    for (int64_t k = 0; k < s.n; ++k)
      row[k] = RoundTo(dt, std::exp(RoundTo(dt, static_cast<float>(px[base + k * s.inner]) - mx)));
    const float sum = SumAs(dt, row.data(), s.n);
    for (int64_t k = 0; k < s.n; ++k) py[base + k * s.inner] = T(row[k] / sum);
  });
}

// Rows of `n` elements at stride `inner`.
template <Kind K, class T>
void SoftmaxTyped(const Tensor& x, Tensor& y, const AxisSplit& s) {
  using C = ComputeType<T>;
  if constexpr (K == Kind::kSoftmax && kIsReducedFloat<T>) return ReducedSoftmax<T>(x, y, s);
  const T* px = x.data<T>();
  T* py = y.mutable_data<T>();
  std::vector<double> row(static_cast<size_t>(s.n));
  ForEachRow(s, [&](int64_t base) {
    double mx = -std::numeric_limits<double>::infinity();
    int64_t arg = 0;
    for (int64_t k = 0; k < s.n; ++k) {
      double v = static_cast<double>(static_cast<C>(px[base + k * s.inner]));
      row[static_cast<size_t>(k)] = v;
      if (v > mx || (k == 0 && !(v <= mx))) {
        mx = v;
        arg = k;
      }
    }
    if constexpr (K == Kind::kHardmax) {
      for (int64_t k = 0; k < s.n; ++k) py[base + k * s.inner] = ConvertElement<T>(static_cast<C>(k == arg ? 1 : 0));
    } else {
      double sum = 0;
      for (int64_t k = 0; k < s.n; ++k) {
        double e = std::exp(row[static_cast<size_t>(k)] - mx);
        sum += e;
        if constexpr (K == Kind::kSoftmax) row[static_cast<size_t>(k)] = e;
      }
      if constexpr (K == Kind::kSoftmax) {
        const double inv = 1.0 / sum;
        for (int64_t k = 0; k < s.n; ++k)
          py[base + k * s.inner] = ConvertElement<T>(static_cast<C>(row[static_cast<size_t>(k)] * inv));
      } else {
        const double lse = mx + std::log(sum);
        for (int64_t k = 0; k < s.n; ++k)
          py[base + k * s.inner] = ConvertElement<T>(static_cast<C>(row[static_cast<size_t>(k)] - lse));
      }
    }
  });
}

template <Kind K>
Status RunSoftmax(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t rank = x.rank();
  int64_t axis = WrapAxis(ctx.node.attr_int("axis", DefaultAxis(ctx.opset)), rank);
  AxisSplit s;
  if (rank == 0) {
    s = AxisSplit{1, 1, 1};
  } else if (ctx.opset >= 13) {
    s = SplitAtAxis(x.shape(), axis);
  } else {
    s = FlattenAtAxis(x.shape(), std::clamp<int64_t>(axis, 0, rank));
  }
  if (x.numel() == 0) return Status::Ok();
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) SoftmaxTyped<K, T>(x, y, s);
  });
}

SAMPAN_REGISTER_OP("Softmax", InferSoftmax, RunSoftmax<Kind::kSoftmax>);
SAMPAN_REGISTER_OP("LogSoftmax", InferSoftmax, RunSoftmax<Kind::kLogSoftmax>);
SAMPAN_REGISTER_OP("Hardmax", InferSoftmax, RunSoftmax<Kind::kHardmax>);

}  // namespace
}  // namespace sampan::ops
