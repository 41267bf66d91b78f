#include "base/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/small_types.h"

namespace sampan {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Status CheckShape(const Shape& shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("negative dimension in shape ", ShapeToString(shape));
    if (d != 0 && n > max_elements / d)
      return OutOfRange("shape ", ShapeToString(shape), " has more than ", max_elements, " elements");
    n *= d;
  }
  return Status::Ok();
}

namespace {
std::shared_ptr<void> AllocateAligned(size_t bytes) {
  size_t padded = (bytes + 63) / 64 * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, padded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Result<Tensor> Tensor::Zeros(DType dtype, Shape shape) {
  if (!IsStorableDType(dtype)) return Unsupported("tensors of element type ", DTypeName(dtype));
  SP_RETURN_IF_ERROR(CheckShape(shape, (int64_t{1} << 39) / DTypeBits(dtype)));  // 64 GiB
  Tensor t = Alloc(dtype, std::move(shape));
  if (t.data_ == nullptr) return OutOfRange("cannot allocate ", t.nbytes(), " bytes for ", t.Describe());
  return t;
}

Tensor Tensor::Alloc(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  auto mem = AllocateAligned(t.nbytes());
  t.data_ = mem.get();
  t.owner_ = std::move(mem);
  t.writable_ = true;
  return t;
}

Tensor Tensor::Wrap(DType dtype, Shape shape, std::shared_ptr<const void> owner, const void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.writable_ = false;
  return t;
}

Tensor Tensor::WrapMutable(DType dtype, Shape shape, std::shared_ptr<void> owner, void* data) {
  Tensor t = Wrap(dtype, std::move(shape), std::move(owner), data);
  t.writable_ = true;
  return t;
}

void* Tensor::mutable_raw() {
  if (!writable_ && defined()) {
    Tensor copy = Clone();
    *this = std::move(copy);
  }
  return const_cast<void*>(data_);
}

Tensor Tensor::Reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Alloc(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(const_cast<void*>(t.data_), data_, nbytes());
  return t;
}

std::string Tensor::Describe() const { return StrCat(DTypeName(dtype_), ShapeToString(shape_)); }

double ElementAsDouble(const Tensor& t, int64_t i) {
  if (IsSmallFloatDType(t.dtype())) return SmallFloatToDouble(t.dtype(), LoadSmallBits(t.raw(), t.dtype(), i));
  if (IsNarrowIntegerDType(t.dtype()))
    return static_cast<double>(NarrowIntValue(t.dtype(), LoadSmallBits(t.raw(), t.dtype(), i)));
  double out = 0;
  (void)DispatchDType(t.dtype(), [&]<class T>() { out = ConvertElement<double>(t.data<T>()[i]); });
  return out;
}

int64_t ElementAsInt64(const Tensor& t, int64_t i) {
  if (IsSmallFloatDType(t.dtype())) return ConvertElement<int64_t>(ElementAsDouble(t, i));
  if (IsNarrowIntegerDType(t.dtype())) return NarrowIntValue(t.dtype(), LoadSmallBits(t.raw(), t.dtype(), i));
  int64_t out = 0;
  (void)DispatchDType(t.dtype(), [&]<class T>() { out = ConvertElement<int64_t>(t.data<T>()[i]); });
  return out;
}

Result<std::vector<int64_t>> ToInt64Vector(const Tensor& t, const std::string& what) {
  if (!IsIntegerDType(t.dtype()))
    return InvalidArgument(what, " must be an integer tensor, got ", t.Describe());
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = ElementAsInt64(t, i);
  return v;
}

namespace {

// One source element on its way through a cast involving a small type: integers (bool and the
// 2/4-bit ones included) keep their exact value, everything else travels as double (exact for
// every float type).
struct Scalar {
  bool is_int;
  int64_t i;  // the value, or a uint64's bits
  double d;   // the value
};

// Reads element k of t (any storable non-string type) as a Scalar.
Scalar LoadScalar(const Tensor& t, int64_t k) {
  const DType dt = t.dtype();
  if (IsSmallFloatDType(dt)) return {false, 0, ElementAsDouble(t, k)};
  if (IsNarrowIntegerDType(dt)) {
    const int64_t v = ElementAsInt64(t, k);
    return {true, v, static_cast<double>(v)};
  }
  Scalar s{false, 0, 0};
  (void)DispatchDType(dt, [&]<class T>() {
    const T v = t.data<T>()[k];
    if constexpr (std::is_integral_v<T>) {
      s = {true, static_cast<int64_t>(v), static_cast<double>(v)};
    } else {
      s = {false, 0, static_cast<double>(static_cast<ComputeType<T>>(v))};
    }
  });
  return s;
}

// Writes s as element k of out (a small type) with Cast semantics.
void StoreSmall(Tensor& out, int64_t k, const Scalar& s, const CastOptions& options) {
  const DType to = out.dtype();
  uint8_t bits;
  if (IsNarrowIntegerDType(to)) {
    bits = s.is_int ? NarrowIntWrap(to, s.i) : NarrowIntFromDouble(to, s.d);
  } else if (to == DType::kFloat8E8M0) {
    bits = ToFloat8E8M0(static_cast<float>(s.d), options.saturate, options.round_mode);
  } else {
    // Cast's `saturate` applies to the float8 types; float4/float6 saturate regardless.
    bits = SmallFloatFromDouble(to, s.d, options.saturate || DTypeSize(to) == 0);
  }
  StoreSmallBits(out.mutable_raw(), to, k, bits);
}

}  // namespace

Result<Tensor> CastTensor(const Tensor& t, DType to, const CastOptions& options) {
  if (t.dtype() == to) return t;
  if (!IsStorableDType(t.dtype())) return Unsupported("cast from ", DTypeName(t.dtype()));
  if (!IsStorableDType(to)) return Unsupported("cast to ", DTypeName(to));
  Tensor out = Tensor::Alloc(to, t.shape());
  const int64_t n = t.numel();
  const bool small_from = IsSmallFloatDType(t.dtype()) || IsNarrowIntegerDType(t.dtype());
  const bool small_to = IsSmallFloatDType(to) || IsNarrowIntegerDType(to);
  if (small_to) {
    for (int64_t k = 0; k < n; ++k) StoreSmall(out, k, LoadScalar(t, k), options);
    return out;
  }
  if (small_from) {
    SP_RETURN_IF_ERROR(DispatchDType(to, [&]<class To>() {
      To* dst = out.mutable_data<To>();
      for (int64_t k = 0; k < n; ++k) {
        const Scalar s = LoadScalar(t, k);
        dst[k] = s.is_int ? ConvertElement<To>(s.i) : ConvertElement<To>(s.d);
      }
    }));
    return out;
  }
  Status st = DispatchDType(t.dtype(), [&]<class From>() {
    const From* src = t.data<From>();
    (void)DispatchDType(to, [&]<class To>() {
      To* dst = out.mutable_data<To>();
      for (int64_t i = 0; i < n; ++i) dst[i] = ConvertElement<To>(src[i]);
    });
  });
  SP_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace sampan
