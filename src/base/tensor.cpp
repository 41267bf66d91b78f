#include "base/tensor.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

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
  // 64 GiB; a string element costs at least the std::string itself.
  const int64_t bits = IsObjectDType(dtype) ? 8 * static_cast<int64_t>(sizeof(std::string)) : DTypeBits(dtype);
  SP_RETURN_IF_ERROR(CheckShape(shape, (int64_t{1} << 39) / bits));
  Tensor t = Alloc(dtype, std::move(shape));
  if (t.data_ == nullptr) return OutOfRange("cannot allocate ", t.nbytes(), " bytes for ", t.Describe());
  return t;
}

namespace {
// The storage of a sequence or optional.
struct TensorList {
  DType elem = DType::kUndefined;
  std::vector<Tensor> items;
};
}  // namespace

Tensor Tensor::Sequence(DType elem, std::vector<Tensor> items) {
  Tensor t = Alloc(DType::kSequence, {});
  auto* list = static_cast<TensorList*>(const_cast<void*>(t.data_));
  list->elem = elem;
  list->items = std::move(items);
  return t;
}

Tensor Tensor::Optional(DType elem, std::optional<Tensor> value) {
  Tensor t = Alloc(DType::kOptional, {});
  auto* list = static_cast<TensorList*>(const_cast<void*>(t.data_));
  list->elem = value ? value->dtype() : elem;
  if (value) list->items.push_back(std::move(*value));
  return t;
}

const std::vector<Tensor>& Tensor::items() const {
  return static_cast<const TensorList*>(data_)->items;
}
DType Tensor::elem_dtype() const {
  return static_cast<const TensorList*>(data_)->elem;
}

Tensor Tensor::Alloc(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  if (dtype == DType::kSequence || dtype == DType::kOptional) {  // a list of tensors (shape [])
    auto list = std::make_shared<TensorList>();
    t.data_ = list.get();
    t.owner_ = std::move(list);
    t.writable_ = true;
    return t;
  }
  if (dtype == DType::kString) {
    const auto n = static_cast<size_t>(std::max<int64_t>(t.numel(), 1));
    std::shared_ptr<std::string[]> mem(new (std::nothrow) std::string[n]);
    t.data_ = mem.get();
    t.owner_ = std::move(mem);
    t.writable_ = true;
    return t;
  }
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

Tensor Tensor::FromStrings(std::vector<std::string> values, Shape shape) {
  Tensor t = Alloc(DType::kString, std::move(shape));
  std::string* out = static_cast<std::string*>(const_cast<void*>(t.data_));
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.numel()); ++i) out[i] = std::move(values[i]);
  return t;
}

size_t ContentBytes(const Tensor& t) {
  if (!t.is_string()) return t.nbytes();
  size_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += t.strings()[i].size();
  return n;
}

Tensor Tensor::Clone() const {
  if (dtype_ == DType::kSequence || dtype_ == DType::kOptional) {  // the list is copied; items are immutable
    Tensor t = Alloc(dtype_, shape_);
    *static_cast<TensorList*>(const_cast<void*>(t.data_)) = *static_cast<const TensorList*>(data_);
    return t;
  }
  Tensor t = Alloc(dtype_, shape_);
  if (dtype_ == DType::kString) {
    std::string* out = static_cast<std::string*>(const_cast<void*>(t.data_));
    for (int64_t i = 0; i < numel(); ++i) out[i] = strings()[i];
    return t;
  }
  if (nbytes() > 0) std::memcpy(const_cast<void*>(t.data_), data_, nbytes());
  return t;
}

std::string Tensor::Describe() const {
  if (is_sequence()) return StrCat("sequence of ", items().size());
  if (is_optional()) return items().empty() ? "empty optional" : StrCat("optional ", items()[0].Describe());
  return StrCat(DTypeName(dtype_), ShapeToString(shape_));
}

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
  if (!IsIntegerDType(t.dtype())) return InvalidArgument(what, " must be an integer tensor, got ", t.Describe());
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

// Python's repr of a float (what numpy's astype(str) gives): the shortest digits that read back
// exactly, fixed notation for decimal exponents -4..15 (with ".0" when integral), otherwise
// d.ddde+XX; "inf", "-inf", "nan".
template <class F>
std::string FloatToString(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const bool neg = sci[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  std::string out = neg ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      // Appended piece by piece: GCC 12's -O3 reads `"0." + std::string&&` as an overlapping copy
      // (-Wrestrict, a false positive).
      out += "0.";
      out.append(static_cast<size_t>(-exp10 - 1), '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exp10 + 1) {
      out += digits + std::string(static_cast<size_t>(exp10 + 1) - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(exp10 + 1));
      out += '.';
      out.append(digits, static_cast<size_t>(exp10 + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return out + ebuf;
}

// Element k of a numeric tensor as Cast-to-string writes it.
std::string ElementToString(const Tensor& t, int64_t k) {
  const DType dt = t.dtype();
  if (dt == DType::kBool) return t.data<bool>()[k] ? "True" : "False";
  if (dt == DType::kFloat32) return FloatToString(t.data<float>()[k]);
  if (dt == DType::kFloat64) return FloatToString(t.data<double>()[k]);
  if (IsFloatDType(dt) || IsSmallFloatDType(dt)) return FloatToString(static_cast<float>(ElementAsDouble(t, k)));
  if (dt == DType::kUInt64) return std::to_string(t.data<uint64_t>()[k]);
  return std::to_string(ElementAsInt64(t, k));
}

// Cast from string: plain or scientific decimal notation; "INF"/"+INF"/"-INF"/"NaN" in any case.
Result<double> StringToNumber(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string v = s.substr(b, e - b);
  std::string lower;
  for (char c : v) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity")
    return std::numeric_limits<double>::infinity();
  if (lower == "-inf" || lower == "-infinity") return -std::numeric_limits<double>::infinity();
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return std::numeric_limits<double>::quiet_NaN();
  if (!v.empty() && v[0] == '+') v.erase(0, 1);
  double out = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
    return InvalidArgument("cannot cast string \"", s.size() > 64 ? s.substr(0, 64) + "..." : s, "\" to a number");
  return out;
}

}  // namespace

Result<Tensor> CastTensor(const Tensor& t, DType to, const CastOptions& options) {
  if (t.dtype() == to) return t;
  if (!IsStorableDType(t.dtype())) return Unsupported("cast from ", DTypeName(t.dtype()));
  if (!IsStorableDType(to)) return Unsupported("cast to ", DTypeName(to));
  Tensor out = Tensor::Alloc(to, t.shape());
  const int64_t n = t.numel();
  if (to == DType::kString) {
    std::string* dst = out.mutable_strings();
    for (int64_t k = 0; k < n; ++k) dst[k] = ElementToString(t, k);
    return out;
  }
  if (t.is_string()) {
    // Through a float64 tensor: Cast's float->T rules then apply (truncation, saturation...).
    Tensor d = Tensor::Alloc(DType::kFloat64, t.shape());
    double* dd = d.mutable_data<double>();
    for (int64_t k = 0; k < n; ++k) {
      SP_ASSIGN_OR_RETURN(dd[k], StringToNumber(t.strings()[k]));
    }
    return CastTensor(d, to, options);
  }
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
