// Unary element-wise math: Abs, Neg, Sign, Exp, Log, Sqrt, Reciprocal, Floor,
// Ceil, Round, trigonometric/hyperbolic functions, Erf, IsNaN, IsInf, Not.
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

// ---- Floating-point functions (T -> T, computed in float/double) ----

Status InferFloatUnary(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

template <class F>
Status RunFloatUnary(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) {
      using C = ComputeType<T>;
      F f;
      UnaryLoop<T, T>(x, y, [&](T v) { return ConvertElement<T>(static_cast<C>(f(static_cast<C>(v)))); });
    }
  });
}

#define SP_FLOAT_FN(Name, expr) \
  struct Name {                 \
    template <class C>          \
    C operator()(C x) const {   \
      return expr;              \
    }                           \
  }

SP_FLOAT_FN(ExpF, std::exp(x));
SP_FLOAT_FN(LogF, std::log(x));
SP_FLOAT_FN(SqrtF, std::sqrt(x));
SP_FLOAT_FN(ReciprocalF, C(1) / x);
SP_FLOAT_FN(FloorF, std::floor(x));
SP_FLOAT_FN(CeilF, std::ceil(x));
SP_FLOAT_FN(RoundF, std::nearbyint(x));  // default rounding mode: half to even
SP_FLOAT_FN(SinF, std::sin(x));
SP_FLOAT_FN(CosF, std::cos(x));
SP_FLOAT_FN(TanF, std::tan(x));
SP_FLOAT_FN(AsinF, std::asin(x));
SP_FLOAT_FN(AcosF, std::acos(x));
SP_FLOAT_FN(AtanF, std::atan(x));
SP_FLOAT_FN(SinhF, std::sinh(x));
SP_FLOAT_FN(CoshF, std::cosh(x));
SP_FLOAT_FN(AsinhF, std::asinh(x));
SP_FLOAT_FN(AcoshF, std::acosh(x));
SP_FLOAT_FN(AtanhF, std::atanh(x));
SP_FLOAT_FN(ErfF, std::erf(x));

#undef SP_FLOAT_FN

// ---- Abs, Neg, Sign: numeric ----

Status InferAbs(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

Status InferNeg(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kSignedNumericTypes));
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

struct AbsF {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else if constexpr (std::is_integral_v<C>)
      return x < 0 ? WrapSub(C(0), x) : x;
    else
      return std::fabs(x);
  }
};
struct NegF {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_integral_v<C>)
      return WrapSub(C(0), x);
    else
      return -x;
  }
};
struct SignF {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x > C(0) ? C(1) : C(0);
    } else {
      if constexpr (std::is_floating_point_v<C>)
        if (std::isnan(x)) return x;
      return x > C(0) ? C(1) : (x < C(0) ? static_cast<C>(-1) : C(0));
    }
  }
};

template <class F>
Status RunNumericUnary(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      F f;
      UnaryLoop<T, T>(x, y, [&](T v) { return ConvertElement<T>(f(static_cast<C>(v))); });
    }
  });
}

// ---- IsNaN, IsInf: float -> bool ----

Status InferFloatPredicate(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  return InferSameAsInput(ctx, DType::kBool);
}

Status RunIsNaN(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) {
      using C = ComputeType<T>;
      UnaryLoop<T, bool>(x, y, [](T v) { return std::isnan(static_cast<C>(v)); });
    }
  });
}

Status RunIsInf(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const bool pos = ctx.node.attr_int("detect_positive", 1) != 0;
  const bool neg = ctx.node.attr_int("detect_negative", 1) != 0;
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) {
      using C = ComputeType<T>;
      UnaryLoop<T, bool>(x, y, [&](T v) {
        const C c = static_cast<C>(v);
        return std::isinf(c) && (c > 0 ? pos : neg);
      });
    }
  });
}

// ---- Not: bool -> bool ----

Status InferNot(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kBool}));
  return InferSameAsInput(ctx, DType::kBool);
}

Status RunNot(KernelContext& ctx) {
  UnaryLoop<bool, bool>(ctx.in(0), ctx.out(0), [](bool v) { return !v; });
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Exp", InferFloatUnary, RunFloatUnary<ExpF>);
SAMPAN_REGISTER_OP("Log", InferFloatUnary, RunFloatUnary<LogF>);
SAMPAN_REGISTER_OP("Sqrt", InferFloatUnary, RunFloatUnary<SqrtF>);
SAMPAN_REGISTER_OP("Reciprocal", InferFloatUnary, RunFloatUnary<ReciprocalF>);
SAMPAN_REGISTER_OP("Floor", InferFloatUnary, RunFloatUnary<FloorF>);
SAMPAN_REGISTER_OP("Ceil", InferFloatUnary, RunFloatUnary<CeilF>);
SAMPAN_REGISTER_OP("Round", InferFloatUnary, RunFloatUnary<RoundF>);
SAMPAN_REGISTER_OP("Sin", InferFloatUnary, RunFloatUnary<SinF>);
SAMPAN_REGISTER_OP("Cos", InferFloatUnary, RunFloatUnary<CosF>);
SAMPAN_REGISTER_OP("Tan", InferFloatUnary, RunFloatUnary<TanF>);
SAMPAN_REGISTER_OP("Asin", InferFloatUnary, RunFloatUnary<AsinF>);
SAMPAN_REGISTER_OP("Acos", InferFloatUnary, RunFloatUnary<AcosF>);
SAMPAN_REGISTER_OP("Atan", InferFloatUnary, RunFloatUnary<AtanF>);
SAMPAN_REGISTER_OP("Sinh", InferFloatUnary, RunFloatUnary<SinhF>);
SAMPAN_REGISTER_OP("Cosh", InferFloatUnary, RunFloatUnary<CoshF>);
SAMPAN_REGISTER_OP("Asinh", InferFloatUnary, RunFloatUnary<AsinhF>);
SAMPAN_REGISTER_OP("Acosh", InferFloatUnary, RunFloatUnary<AcoshF>);
SAMPAN_REGISTER_OP("Atanh", InferFloatUnary, RunFloatUnary<AtanhF>);
SAMPAN_REGISTER_OP("Erf", InferFloatUnary, RunFloatUnary<ErfF>);
SAMPAN_REGISTER_OP("Abs", InferAbs, RunNumericUnary<AbsF>);
SAMPAN_REGISTER_OP("Neg", InferNeg, RunNumericUnary<NegF>);
SAMPAN_REGISTER_OP("Sign", InferAbs, RunNumericUnary<SignF>);
SAMPAN_REGISTER_OP("IsNaN", InferFloatPredicate, RunIsNaN);
SAMPAN_REGISTER_OP("IsInf", InferFloatPredicate, RunIsInf);
SAMPAN_REGISTER_OP("Not", InferNot, RunNot);

}  // namespace
}  // namespace sampan::ops
