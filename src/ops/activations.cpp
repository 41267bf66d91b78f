// Activation functions: Relu, LeakyRelu, PRelu, Sigmoid, HardSigmoid, HardSwish,
// Tanh, Elu, Selu, Celu, Softplus, Softsign, Mish, Gelu, ThresholdedRelu,
// Shrink, Clip.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

// A unary activation is a functor F with
//   static constexpr kind: which dtypes it accepts,
//   void Init(const ir::Node&) reading its attributes (optional),
//   template <class C> C operator()(C x) const  computing in C (float/double/int).
enum class Kinds { kFloat, kSignedNumeric, kNumeric };

template <class F>
Status InferActivation(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if constexpr (F::kKinds == Kinds::kFloat)
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  else if constexpr (F::kKinds == Kinds::kSignedNumeric)
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kSignedNumericTypes));
  else
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  if constexpr (requires(const InferContext& c) { F::Check(c); }) SP_RETURN_IF_ERROR(F::Check(ctx));
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

template <class F>
Status RunActivation(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  F f;
  if constexpr (requires(F & g, const ir::Node& n) { g.Init(n); }) f.Init(ctx.node);
  return DispatchDType(x.dtype(), [&]<class T>() {
    constexpr bool ok = F::kKinds == Kinds::kFloat           ? kIsFloatElem<T>
                        : F::kKinds == Kinds::kSignedNumeric ? (kIsFloatElem<T> || std::is_signed_v<T>)
                                                             : !std::is_same_v<T, bool>;
    if constexpr (ok) {
      using C = ComputeType<T>;
      UnaryLoop<T, T>(x, y, [&](T v) { return ConvertElement<T>(f(static_cast<C>(v))); });
    }
  });
}

template <class C>
C SigmoidOf(C x) {
  // Stable for large |x|.
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

template <class C>
C SoftplusOf(C x) {
  // log(1 + exp(x)) without overflow.
  return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

struct ReluF {
  static constexpr Kinds kKinds = Kinds::kSignedNumeric;
  template <class C>
  C operator()(C x) const {
    return x < C(0) ? C(0) : x;
  }  // NaN passes through
};

struct LeakyReluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 0.01f;
  void Init(const ir::Node& n) { alpha = n.attr_float("alpha", 0.01f); }
  template <class C>
  C operator()(C x) const {
    return x >= C(0) ? x : static_cast<C>(alpha) * x;
  }
};

struct SigmoidF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return SigmoidOf(x);
  }
};

struct HardSigmoidF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 0.2f, beta = 0.5f;
  void Init(const ir::Node& n) {
    alpha = n.attr_float("alpha", 0.2f);
    beta = n.attr_float("beta", 0.5f);
  }
  template <class C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), static_cast<C>(alpha) * x + static_cast<C>(beta)));
  }
};

struct HardSwishF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)));
  }
};

struct TanhF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return std::tanh(x);
  }
};

struct EluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 1.f;
  void Init(const ir::Node& n) { alpha = n.attr_float("alpha", 1.f); }
  template <class C>
  C operator()(C x) const {
    return x > C(0) ? x : static_cast<C>(alpha) * std::expm1(x);
  }
};

struct SeluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  void Init(const ir::Node& n) {
    alpha = n.attr_float("alpha", alpha);
    gamma = n.attr_float("gamma", gamma);
  }
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(gamma) * (x > C(0) ? x : static_cast<C>(alpha) * std::expm1(x));
  }
};

struct CeluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 1.f;
  static Status Check(const InferContext& ctx) {
    if (ctx.node().attr_float("alpha", 1.f) == 0.f) return ctx.Error("attribute alpha must not be 0");
    return Status::Ok();
  }
  void Init(const ir::Node& n) { alpha = n.attr_float("alpha", 1.f); }
  template <class C>
  C operator()(C x) const {
    const C a = static_cast<C>(alpha);
    return std::max(C(0), x) + std::min(C(0), a * std::expm1(x / a));
  }
};

struct SoftplusF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return SoftplusOf(x);
  }
};

struct SoftsignF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return x / (C(1) + std::fabs(x));
  }
};

struct MishF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  template <class C>
  C operator()(C x) const {
    return x * std::tanh(SoftplusOf(x));
  }
};

struct GeluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  bool tanh_approx = false;
  static Status Check(const InferContext& ctx) {
    const std::string a = ctx.node().attr_string("approximate", "none");
    if (a != "none" && a != "tanh")
      return ctx.Error("attribute approximate must be \"none\" or \"tanh\", got \"", a, "\"");
    return Status::Ok();
  }
  void Init(const ir::Node& n) { tanh_approx = n.attr_string("approximate", "none") == "tanh"; }
  template <class C>
  C operator()(C x) const {
    if (tanh_approx) {
      const C k = static_cast<C>(0.79788456080286535587989211986876);  // sqrt(2/pi)
      return C(0.5) * x * (C(1) + std::tanh(k * (x + static_cast<C>(0.044715) * x * x * x)));
    }
    return C(0.5) * x * (C(1) + std::erf(x * static_cast<C>(0.70710678118654752440084436210485)));
  }
};

struct ThresholdedReluF {
  static constexpr Kinds kKinds = Kinds::kFloat;
  float alpha = 1.f;
  void Init(const ir::Node& n) { alpha = n.attr_float("alpha", 1.f); }
  template <class C>
  C operator()(C x) const {
    return x > static_cast<C>(alpha) ? x : C(0);
  }
};

struct ShrinkF {
  static constexpr Kinds kKinds = Kinds::kNumeric;
  float lambd = 0.5f, bias = 0.f;
  void Init(const ir::Node& n) {
    lambd = n.attr_float("lambd", 0.5f);
    bias = n.attr_float("bias", 0.f);
  }
  template <class C>
  C operator()(C x) const {
    // Compare and shift in double so integer inputs follow the float attributes exactly.
    const double v = static_cast<double>(x);
    if (v < -static_cast<double>(lambd)) return ConvertElement<C>(v + static_cast<double>(bias));
    if (v > static_cast<double>(lambd)) return ConvertElement<C>(v - static_cast<double>(bias));
    return C(0);
  }
};

// ---- PRelu: y = x < 0 ? slope * x : x, slope broadcast to x ----

Status InferPRelu(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

Status RunPRelu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& slope = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      BinaryLoop<T, T, T>(x, slope, y, [](T v, T s) {
        const C c = static_cast<C>(v);
        return c < C(0) ? ConvertElement<T>(WrapMul(static_cast<C>(s), c)) : v;
      });
    }
  });
}

// ---- Clip: min/max attributes before opset 11, optional scalar inputs from 11 on ----

Status InferClip(InferContext& ctx) {
  if (ctx.opset() < 11) {
    SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  } else {
    SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 3));
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
    for (size_t i = 1; i < 3; ++i) {
      if (!ctx.has_input(i)) continue;
      if (ctx.input_dtype(i) != ctx.input_dtype(0))
        return ctx.Error("input ", i, " (", i == 1 ? "min" : "max", ") must have the type of input 0, got ",
                         DTypeName(ctx.input_dtype(i)), " and ", DTypeName(ctx.input_dtype(0)));
      SP_RETURN_IF_ERROR(ExpectScalarInput(ctx, i, i == 1 ? "min" : "max"));
    }
  }
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

Status RunClip(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      C lo = std::numeric_limits<C>::lowest();
      C hi = std::numeric_limits<C>::max();
      if constexpr (std::is_floating_point_v<C>) {
        lo = -std::numeric_limits<C>::infinity();
        hi = std::numeric_limits<C>::infinity();
      }
      if (ctx.opset < 11) {
        if (ctx.node.has_attr("min")) lo = static_cast<C>(ctx.node.attr_float("min", 0.f));
        if (ctx.node.has_attr("max")) hi = static_cast<C>(ctx.node.attr_float("max", 0.f));
      } else {
        if (ctx.has_input(1) && ctx.in(1).numel() > 0) lo = static_cast<C>(ctx.in(1).data<T>()[0]);
        if (ctx.has_input(2) && ctx.in(2).numel() > 0) hi = static_cast<C>(ctx.in(2).data<T>()[0]);
      }
      // min > max: every value becomes max (the ONNX rule), which min(max(x, lo), hi) gives.
      UnaryLoop<T, T>(x, y, [&](T v) {
        const C c = static_cast<C>(v);
        if constexpr (std::is_floating_point_v<C>)
          if (std::isnan(c)) return v;
        return ConvertElement<T>(std::min(std::max(c, lo), hi));
      });
    }
  });
}

SAMPAN_REGISTER_OP("Relu", InferActivation<ReluF>, RunActivation<ReluF>);
SAMPAN_REGISTER_OP("LeakyRelu", InferActivation<LeakyReluF>, RunActivation<LeakyReluF>);
SAMPAN_REGISTER_OP("Sigmoid", InferActivation<SigmoidF>, RunActivation<SigmoidF>);
SAMPAN_REGISTER_OP("HardSigmoid", InferActivation<HardSigmoidF>, RunActivation<HardSigmoidF>);
SAMPAN_REGISTER_OP("HardSwish", InferActivation<HardSwishF>, RunActivation<HardSwishF>);
SAMPAN_REGISTER_OP("Tanh", InferActivation<TanhF>, RunActivation<TanhF>);
SAMPAN_REGISTER_OP("Elu", InferActivation<EluF>, RunActivation<EluF>);
SAMPAN_REGISTER_OP("Selu", InferActivation<SeluF>, RunActivation<SeluF>);
SAMPAN_REGISTER_OP("Celu", InferActivation<CeluF>, RunActivation<CeluF>);
SAMPAN_REGISTER_OP("Softplus", InferActivation<SoftplusF>, RunActivation<SoftplusF>);
SAMPAN_REGISTER_OP("Softsign", InferActivation<SoftsignF>, RunActivation<SoftsignF>);
SAMPAN_REGISTER_OP("Mish", InferActivation<MishF>, RunActivation<MishF>);
SAMPAN_REGISTER_OP("Gelu", InferActivation<GeluF>, RunActivation<GeluF>);
SAMPAN_REGISTER_OP("ThresholdedRelu", InferActivation<ThresholdedReluF>, RunActivation<ThresholdedReluF>);
SAMPAN_REGISTER_OP("Shrink", InferActivation<ShrinkF>, RunActivation<ShrinkF>);
SAMPAN_REGISTER_OP("PRelu", InferPRelu, RunPRelu);
SAMPAN_REGISTER_OP("Clip", InferClip, RunClip);

}  // namespace
}  // namespace sampan::ops
