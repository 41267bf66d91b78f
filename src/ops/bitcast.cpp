// BitCast (opset 26): the input's bits read as the element type `to`, which must
// have the same bit width; the shape is kept. Bytes are copied as they are
// (little-endian, as the spec asks, and as Sampan stores tensors).
#include <cstring>
#include <iterator>

#include "ops/common.h"

namespace sampan::ops {
namespace {

// Bits per element of each ONNX element type, indexed by TensorProto.DataType
// (0: undefined and string, which have no fixed width).
constexpr int kOnnxBits[] = {0,   32, 8, 8, 16, 16, 32, 64, 0, 8, 16, 64, 32, 64, 64,
                             128, 16, 8, 8, 8,  8,  4,  4,  4, 8, 2,  2,  6,  6};

std::string TypeName(int64_t t) {
  if (IsKnownDType(static_cast<int32_t>(t))) return DTypeName(static_cast<DType>(t));
  return StrCat("element type ", t);
}

Status InferBitCast(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.opset() < 26)
    return ctx.Error("BitCast is defined from opset 26 (the model imports opset ", ctx.opset(), ")");
  SP_ASSIGN_OR_RETURN(int64_t to, ctx.node().required_int("to"));
  if (to <= 0 || to >= static_cast<int64_t>(std::size(kOnnxBits)))
    return ctx.Error("attribute 'to' = ", to, " is not a valid element type");
  const DType from = ctx.input_dtype(0);
  const int64_t from_code = static_cast<int64_t>(from);
  if (from == DType::kString || to == static_cast<int64_t>(DType::kString))
    return ctx.Error("BitCast from or to string is not defined");
  const int from_bits = kOnnxBits[from_code], to_bits = kOnnxBits[to];
  if (from_bits != to_bits)
    return ctx.Error("input type ", TypeName(from_code), " (", from_bits, " bits) and 'to' type ", TypeName(to), " (",
                     to_bits, " bits) differ in bit width");
  if (!IsStorableDType(from)) return ctx.NotSupported("input of type ", TypeName(from_code));
  if (!IsKnownDType(static_cast<int32_t>(to)) || !IsStorableDType(static_cast<DType>(to)))
    return ctx.NotSupported("attribute 'to' = ", TypeName(to));
  const DType dt = static_cast<DType>(to);
  if (DTypeSize(from) != DTypeSize(dt) || DTypeSize(dt) == 0)
    return ctx.NotSupported(DTypeName(from), " and ", DTypeName(dt), " are not stored with the same byte size");
  ctx.set_output(0, dt, ctx.input_dims(0));
  return Status::Ok();
}

Status RunBitCast(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const auto* src = static_cast<const unsigned char*>(x.raw());
  if (y.dtype() == DType::kBool) {
    // A bool holds 0 or 1; any other byte has no bool meaning.
    for (int64_t i = 0; i < x.numel(); ++i)
      if (src[i] > 1)
        return ctx.Error("element ", i, " has the byte value ", static_cast<int>(src[i]),
                         ", which is not a bool (0 or 1)");
  }
  if (x.nbytes() > 0) std::memcpy(y.mutable_raw(), src, x.nbytes());
  return Status::Ok();
}

SAMPAN_REGISTER_OP("BitCast", InferBitCast, RunBitCast);

}  // namespace
}  // namespace sampan::ops
