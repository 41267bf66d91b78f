// Add, Sub, Mul, Div, Pow, Mod: element-wise with multidirectional broadcasting.
#include <cmath>

#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

Status InferArith(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

template <class Op>
Status RunArith(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else {
      using C = ComputeType<T>;
      Op op;
      BinaryLoop<T, T, T>(a, b, y,
                          [&](T x, T z) { return ConvertElement<T>(op(static_cast<C>(x), static_cast<C>(z))); });
    }
  });
}

struct AddOp {
  template <class C>
  C operator()(C x, C y) const {
    return WrapAdd(x, y);
  }
};
struct SubOp {
  template <class C>
  C operator()(C x, C y) const {
    return WrapSub(x, y);
  }
};
struct MulOp {
  template <class C>
  C operator()(C x, C y) const {
    return WrapMul(x, y);
  }
};
struct DivOp {
  template <class C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;  // undefined in ONNX; keep it deterministic and crash-free
      if constexpr (std::is_signed_v<C>)
        if (y == -1) return WrapSub(C(0), x);
    }
    return static_cast<C>(x / y);
  }
};

// ---- Pow: base T, exponent T1 (types may differ), output T ----

Status InferPow(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, kNumericTypes));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

template <class T>
T IntPow(T base, int64_t e) {
  if (e < 0) {
    // Integer result of 1 / base^-e (truncated); 0 unless |base| == 1. 0^-n: 0 (undefined).
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return (e % 2 == 0) ? T(1) : T(-1);
    return 0;
  }
  T result = 1;
  while (e > 0) {
    if (e & 1) result = WrapMul(result, base);
    e >>= 1;
    if (e > 0) base = WrapMul(base, base);
  }
  return result;
}

Status RunPow(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      (void)DispatchDType(b.dtype(), [&]<class E>() {
        if constexpr (!std::is_same_v<E, bool>) {
          using C = ComputeType<T>;
          using CE = ComputeType<E>;
          if constexpr (kIsFloatElem<T>) {
            BinaryLoop<T, E, T>(a, b, y, [](T x, E e) {
              return ConvertElement<T>(std::pow(static_cast<C>(x), static_cast<C>(static_cast<CE>(e))));
            });
          } else if constexpr (kIsIntElem<E>) {
            BinaryLoop<T, E, T>(a, b, y, [](T x, E e) {
              const int64_t ee = std::is_unsigned_v<E> && static_cast<uint64_t>(e) > uint64_t{1} << 62
                                     ? int64_t{1} << 62
                                     : static_cast<int64_t>(e);
              return IntPow<T>(x, ee);
            });
          } else {  // integer base, floating exponent
            BinaryLoop<T, E, T>(a, b, y, [](T x, E e) {
              return ConvertElement<T>(std::pow(static_cast<double>(x), static_cast<double>(static_cast<CE>(e))));
            });
          }
        }
      });
    }
  });
}

// ---- Mod ----

// x - floor(x / y) * y, the sign of y (NumPy's np.mod): fmod's remainder moved
// into y's sign; a zero result takes y's sign; y = 0, x = inf or a NaN give NaN;
// y = inf gives x when the signs agree, else y.
template <class C>
C FloorMod(C x, C y) {
  C r = std::fmod(x, y);
  if (r != 0) {
    if ((y < 0) != (r < 0)) r += y;
  } else if (y != 0) {
    r = std::copysign(C(0), y);
  }
  return r;
}

Status InferMod(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  const int64_t fmod = ctx.node().attr_int("fmod", 0);
  if (fmod != 0 && fmod != 1) return ctx.Error("attribute fmod must be 0 or 1, got ", fmod);
  const DType t = ctx.input_dtype(0);
  if (fmod == 0 && IsFloatDType(t) && ctx.opset() < 28)
    return ctx.Error("fmod=0 on floating-point inputs (", DTypeName(t), ") needs opset 28 (the model imports opset ",
                     ctx.opset(), "); use fmod=1");
  return InferBroadcastOutput(ctx, t);
}

Status RunMod(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool fmod = ctx.node.attr_int("fmod", 0) == 1;
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) {
      using C = ComputeType<T>;
      BinaryLoop<T, T, T>(a, b, y, [fmod](T x, T z) {
        return ConvertElement<T>(fmod ? std::fmod(static_cast<C>(x), static_cast<C>(z))
                                      : FloorMod(static_cast<C>(x), static_cast<C>(z)));
      });
    } else if constexpr (kIsIntElem<T>) {
      BinaryLoop<T, T, T>(a, b, y, [fmod](T x, T z) -> T {
        if (z == 0) return 0;  // undefined; deterministic
        if constexpr (std::is_signed_v<T>) {
          if (z == -1) return 0;
          T r = static_cast<T>(x % z);
          if (!fmod && r != 0 && ((r < 0) != (z < 0))) r = static_cast<T>(r + z);
          return r;
        } else {
          return static_cast<T>(x % z);
        }
      });
    }
  });
}

SAMPAN_REGISTER_OP("Add", InferArith, RunArith<AddOp>);
SAMPAN_REGISTER_OP("Sub", InferArith, RunArith<SubOp>);
SAMPAN_REGISTER_OP("Mul", InferArith, RunArith<MulOp>);
SAMPAN_REGISTER_OP("Div", InferArith, RunArith<DivOp>);
SAMPAN_REGISTER_OP("Pow", InferPow, RunPow);
SAMPAN_REGISTER_OP("Mod", InferMod, RunMod);

}  // namespace
}  // namespace sampan::ops
