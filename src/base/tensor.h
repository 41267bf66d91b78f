// Tensor: a dtype, a static shape and a (shared, 64-byte aligned) buffer.
// Copying a Tensor shares its storage; Clone() copies the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/convert.h"
#include "base/dtype.h"
#include "base/half.h"
#include "base/status.h"

namespace sampan {

using Shape = std::vector<int64_t>;

//! Product of dims (1 for a scalar). Caller guarantees dims are >= 0.
int64_t NumElements(const Shape& shape);
//! "[1,3,224,224]"
std::string ShapeToString(const Shape& shape);
//! Checks every dim is >= 0 and the element count fits `max_elements`.
Status CheckShape(const Shape& shape, int64_t max_elements = int64_t{1} << 40);

class Tensor {
 public:
  Tensor() = default;
  //! Allocates a zero-filled tensor. Fails for non-storable dtypes or absurd sizes.
  static Result<Tensor> Zeros(DType dtype, Shape shape);
  //! Like Zeros but for callers that already validated dtype and shape.
  static Tensor Alloc(DType dtype, Shape shape);
  //! Wraps memory owned by `owner` (e.g. a mapped file) without copying.
  static Tensor Wrap(DType dtype, Shape shape, std::shared_ptr<const void> owner, const void* data);
  //! Wraps writable memory owned by `owner` (e.g. an arena slot) without copying.
  static Tensor WrapMutable(DType dtype, Shape shape, std::shared_ptr<void> owner, void* data);
  //! A sequence (dtype kSequence, shape []) of tensors of element type `elem` (kUndefined: unknown).
  static Tensor Sequence(DType elem, std::vector<Tensor> items);
  //! An optional (dtype kOptional, shape []) holding `value` or nothing; `elem` is the type of
  //! what it holds (kSequence for an optional sequence, kUndefined when unknown).
  static Tensor Optional(DType elem, std::optional<Tensor> value);
  bool is_sequence() const { return dtype_ == DType::kSequence; }
  bool is_optional() const { return dtype_ == DType::kOptional; }
  //! A sequence's items, or an optional's value (none or one); requires one of the two.
  const std::vector<Tensor>& items() const;
  //! The element type a sequence or optional declares.
  DType elem_dtype() const;
  //! A string tensor of `shape` from values (values.size() must equal the element count).
  static Tensor FromStrings(std::vector<std::string> values, Shape shape);
  //! A scalar or 1-D tensor from values.
  template <class T>
  static Tensor FromVector(DType dtype, const std::vector<T>& values, Shape shape);

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t numel() const { return NumElements(shape_); }
  //! Storage bytes; packed (sub-byte) types round up to whole bytes. 0 for strings.
  size_t nbytes() const { return DTypeBytes(dtype_, numel()); }
  bool is_string() const { return dtype_ == DType::kString; }
  //! A string tensor's elements (UTF-8); requires is_string().
  const std::string* strings() const { return static_cast<const std::string*>(data_); }
  std::string* mutable_strings() { return static_cast<std::string*>(mutable_raw()); }

  const void* raw() const { return data_; }
  //! Writable pointer. Wrapped (read-only) storage is copied first.
  void* mutable_raw();
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <class T>
  T* mutable_data() {
    return static_cast<T*>(mutable_raw());
  }

  //! Same storage, new shape with the same element count.
  Tensor Reshaped(Shape shape) const;
  //! Deep copy.
  Tensor Clone() const;
  //! One-line description: "f32[1,3,224,224]".
  std::string Describe() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  bool writable_ = false;
};

//! Total bytes of a string tensor's elements (for size limits and reports); nbytes() otherwise.
size_t ContentBytes(const Tensor& t);

//! Reads element i of any storable non-string tensor as double / int64 (attributes, shape inputs,
//! comparisons); small floats and packed types are decoded.
double ElementAsDouble(const Tensor& t, int64_t i);
int64_t ElementAsInt64(const Tensor& t, int64_t i);
//! All elements of an integer tensor as int64 (shape-like inputs). Error names `what`.
Result<std::vector<int64_t>> ToInt64Vector(const Tensor& t, const std::string& what);
//! How a conversion to float8e8m0 rounds (Cast-24's `round_mode`: "up", "down", "nearest").
enum class E8M0Rounding { kUp, kDown, kNearest };
//! Cast attributes that change a conversion's result.
struct CastOptions {
  //! Out-of-range values to float8 saturate to the largest finite value (else inf or NaN); to e8m0,
  //! rounding up from the largest exponent stays there (else NaN). Cast-19 `saturate`.
  bool saturate = true;
  E8M0Rounding round_mode = E8M0Rounding::kUp;
};
//! Element-wise conversion with ONNX Cast semantics (as onnx's reference: float->int truncates,
//! ->bool is !=0, ->float8/float4/float6 round to nearest even, ->2/4-bit integers wrap from
//! integers and give 0 for out-of-range floats). Any pair of storable types.
Result<Tensor> CastTensor(const Tensor& t, DType to, const CastOptions& options = {});

//! Calls fn.template operator()<T>() with T the C++ element type of dtype. Only the types kernels
//! compute on have one (not small floats or packed types: see IsSmallFloatDType, IsPackedDType);
//! others return Unsupported.
template <class Fn>
Status DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn.template operator()<float>();
      break;
    case DType::kFloat64:
      fn.template operator()<double>();
      break;
    case DType::kFloat16:
      fn.template operator()<Half>();
      break;
    case DType::kBFloat16:
      fn.template operator()<BFloat16>();
      break;
    case DType::kInt8:
      fn.template operator()<int8_t>();
      break;
    case DType::kInt16:
      fn.template operator()<int16_t>();
      break;
    case DType::kInt32:
      fn.template operator()<int32_t>();
      break;
    case DType::kInt64:
      fn.template operator()<int64_t>();
      break;
    case DType::kUInt8:
      fn.template operator()<uint8_t>();
      break;
    case DType::kUInt16:
      fn.template operator()<uint16_t>();
      break;
    case DType::kUInt32:
      fn.template operator()<uint32_t>();
      break;
    case DType::kUInt64:
      fn.template operator()<uint64_t>();
      break;
    case DType::kBool:
      fn.template operator()<bool>();
      break;
    default:
      return Unsupported("element type ", DTypeName(dtype));
  }
  return Status::Ok();
}

//! The DType of a C++ element type.
template <class T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType DTypeOf<Half>() {
  return DType::kFloat16;
}
template <>
constexpr DType DTypeOf<BFloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType DTypeOf<int8_t>() {
  return DType::kInt8;
}
template <>
constexpr DType DTypeOf<int16_t>() {
  return DType::kInt16;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kUInt8;
}
template <>
constexpr DType DTypeOf<uint16_t>() {
  return DType::kUInt16;
}
template <>
constexpr DType DTypeOf<uint32_t>() {
  return DType::kUInt32;
}
template <>
constexpr DType DTypeOf<uint64_t>() {
  return DType::kUInt64;
}
template <>
constexpr DType DTypeOf<bool>() {
  return DType::kBool;
}

template <class T>
Tensor Tensor::FromVector(DType dtype, const std::vector<T>& values, Shape shape) {
  Tensor t = Alloc(dtype, std::move(shape));
  (void)DispatchDType(dtype, [&]<class E>() {
    E* out = t.mutable_data<E>();
    for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.numel()); ++i)
      out[i] = ConvertElement<E>(values[i]);
  });
  return t;
}

}  // namespace sampan
