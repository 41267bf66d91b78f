// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), logical ops
// (And, Or, Xor), BitShift and the Bitwise* family. Broadcasting throughout.
#include <string>

#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

// ---- Comparisons: T x T -> bool ----

Status InferEqual(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  // Equal-11 compares strings too (byte for byte).
  if (ctx.input_dtype(0) != DType::kBool && ctx.input_dtype(0) != DType::kString)
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, DType::kBool);
}

Status InferOrder(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, DType::kBool);
}

struct EqualOp {
  template <class C>
  bool operator()(C a, C b) const {
    return a == b;
  }
};
struct LessOp {
  template <class C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <class C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
struct LessEqualOp {
  template <class C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};
struct GreaterEqualOp {
  template <class C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};

template <class Op>
Status RunCompare(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (a.is_string()) {
    BinaryLoop<std::string, std::string, bool>(a, b, y,
                                               [](const std::string& x, const std::string& z) { return x == z; });
    return Status::Ok();
  }
  return DispatchDType(a.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    Op op;
    BinaryLoop<T, T, bool>(a, b, y, [&](T x, T z) { return op(static_cast<C>(x), static_cast<C>(z)); });
  });
}

// ---- Logical: bool x bool -> bool ----

Status InferLogical(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kBool}));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, DType::kBool);
}

template <int kOp>  // 0 and, 1 or, 2 xor
Status RunLogical(KernelContext& ctx) {
  BinaryLoop<bool, bool, bool>(ctx.in(0), ctx.in(1), ctx.out(0), [](bool x, bool z) {
    if constexpr (kOp == 0)
      return x && z;
    else if constexpr (kOp == 1)
      return x || z;
    else
      return x != z;
  });
  return Status::Ok();
}

// ---- Bitwise: integer types ----

Status InferBitwise(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kIntegerTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

template <int kOp>  // 0 and, 1 or, 2 xor
Status RunBitwise(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (kIsIntElem<T>) {
      BinaryLoop<T, T, T>(a, b, y, [](T x, T z) {
        if constexpr (kOp == 0)
          return static_cast<T>(x & z);
        else if constexpr (kOp == 1)
          return static_cast<T>(x | z);
        else
          return static_cast<T>(x ^ z);
      });
    }
  });
}

Status InferBitwiseNot(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kIntegerTypes));
  return InferSameAsInput(ctx, ctx.input_dtype(0));
}

Status RunBitwiseNot(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsIntElem<T>) UnaryLoop<T, T>(x, ctx.out(0), [](T v) { return static_cast<T>(~v); });
  });
}

// ---- BitShift: integers, direction LEFT|RIGHT ----
// Unsigned types from opset 11, signed ones from opset 28: a right shift of a
// signed value is arithmetic (sign-extending), a left shift drops the bits moved
// past the sign bit. A shift amount < 0 or >= the bit width leaves only the sign
// fill: -1 for a right shift of a negative value, 0 otherwise.

Status InferBitShift(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kIntegerTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (IsSignedDType(ctx.input_dtype(0)) && ctx.opset() < 28)
    return ctx.Error("signed input type ", DTypeName(ctx.input_dtype(0)), " needs opset 28 (the model imports opset ",
                     ctx.opset(), ")");
  if (!ctx.node().has_attr("direction")) return ctx.Error("missing required attribute 'direction'");
  const std::string dir = ctx.node().attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    return ctx.Error("attribute direction must be \"LEFT\" or \"RIGHT\", got \"", dir, "\"");
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

template <class T>
T ShiftBits(T x, T s, bool left) {
  using U = std::make_unsigned_t<T>;
  constexpr int kBits = static_cast<int>(sizeof(T) * 8);
  bool in_range = true;
  if constexpr (std::is_signed_v<T>) in_range = s >= 0;
  if (!in_range || static_cast<U>(s) >= static_cast<U>(kBits)) {
    if constexpr (std::is_signed_v<T>)
      if (!left && x < 0) return T(-1);
    return T(0);
  }
  const int n = static_cast<int>(s);
  // Shifts go through the unsigned type (no overflow UB); a signed right shift
  // is arithmetic in C++20.
  if (left) return static_cast<T>(static_cast<U>(static_cast<U>(x) << n));
  return static_cast<T>(x >> n);
}

Status RunBitShift(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool left = ctx.node.attr_string("direction", "") == "LEFT";
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (kIsIntElem<T>) BinaryLoop<T, T, T>(a, b, y, [left](T x, T s) { return ShiftBits(x, s, left); });
  });
}

SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "Equal", .infer = InferEqual, .run = RunCompare<EqualOp>, .strings = true});
SAMPAN_REGISTER_OP("Less", InferOrder, RunCompare<LessOp>);
SAMPAN_REGISTER_OP("Greater", InferOrder, RunCompare<GreaterOp>);
SAMPAN_REGISTER_OP("LessOrEqual", InferOrder, RunCompare<LessEqualOp>);
SAMPAN_REGISTER_OP("GreaterOrEqual", InferOrder, RunCompare<GreaterEqualOp>);
SAMPAN_REGISTER_OP("And", InferLogical, RunLogical<0>);
SAMPAN_REGISTER_OP("Or", InferLogical, RunLogical<1>);
SAMPAN_REGISTER_OP("Xor", InferLogical, RunLogical<2>);
SAMPAN_REGISTER_OP("BitwiseAnd", InferBitwise, RunBitwise<0>);
SAMPAN_REGISTER_OP("BitwiseOr", InferBitwise, RunBitwise<1>);
SAMPAN_REGISTER_OP("BitwiseXor", InferBitwise, RunBitwise<2>);
SAMPAN_REGISTER_OP("BitwiseNot", InferBitwiseNot, RunBitwiseNot);
SAMPAN_REGISTER_OP("BitShift", InferBitShift, RunBitShift);

}  // namespace
}  // namespace sampan::ops
