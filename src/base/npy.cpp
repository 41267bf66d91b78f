#include "base/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/utf8.h"

namespace sampan {

namespace {

const char* DescrOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt8:
      return "|i1";
    case DType::kInt16:
      return "<i2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt8:
      return "|u1";
    case DType::kUInt16:
      return "<u2";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
    case DType::kBool:
      return "|b1";
    default:
      return nullptr;  // bfloat16 and the small types have no NumPy dtype
  }
}

DType DTypeOfDescr(const std::string& d) {
  static const std::pair<const char*, DType> table[] = {
      {"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16}, {"i1", DType::kInt8},
      {"i2", DType::kInt16},   {"i4", DType::kInt32},   {"i8", DType::kInt64},   {"u1", DType::kUInt8},
      {"u2", DType::kUInt16},  {"u4", DType::kUInt32},  {"u8", DType::kUInt64},  {"b1", DType::kBool},
  };
  if (d.size() != 3) return DType::kUndefined;
  if (d[0] != '<' && d[0] != '|' && d[0] != '=') return DType::kUndefined;  // big-endian rejected
  for (auto& [name, t] : table)
    if (d.compare(1, 2, name) == 0) return t;
  return DType::kUndefined;
}

// Finds the value text following 'key': in the header dict.
Result<std::string> DictValue(const std::string& header, const std::string& key, const std::string& what) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return InvalidArgument(what, ": .npy header has no '", key, "'");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) return InvalidArgument(what, ": malformed .npy header");
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) return InvalidArgument(what, ": malformed .npy header");
  size_t end;
  if (header[start] == '(') {
    end = header.find(')', start);
    if (end == std::string::npos) return InvalidArgument(what, ": malformed shape in .npy header");
    return header.substr(start, end - start + 1);
  }
  if (header[start] == '\'') {
    end = header.find('\'', start + 1);
    if (end == std::string::npos) return InvalidArgument(what, ": malformed .npy header");
    return header.substr(start + 1, end - start - 1);
  }
  end = header.find_first_of(",}", start);
  if (end == std::string::npos) return InvalidArgument(what, ": malformed .npy header");
  std::string v = header.substr(start, end - start);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

}  // namespace

Result<Tensor> ParseNpy(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return InvalidArgument(what, ": not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len;
  size_t offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return InvalidArgument(what, ": truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return Unsupported(what, ": .npy format version ", major);
  }
  if (bytes.size() < offset + header_len) return InvalidArgument(what, ": truncated .npy header");
  const std::string header = bytes.substr(offset, header_len);
  SP_ASSIGN_OR_RETURN(std::string descr, DictValue(header, "descr", what));
  SP_ASSIGN_OR_RETURN(std::string fortran, DictValue(header, "fortran_order", what));
  SP_ASSIGN_OR_RETURN(std::string shape_text, DictValue(header, "shape", what));
  // Strings: '<U<n>' (n UTF-32 code points an element) or '|S<n>' (n bytes), zero-padded.
  int64_t str_width = -1;
  bool utf32 = false;
  if (descr.size() >= 3 && (descr.compare(0, 2, "<U") == 0 || descr.compare(0, 2, "|S") == 0)) {
    utf32 = descr[1] == 'U';
    char* end = nullptr;
    const long long w = std::strtoll(descr.c_str() + 2, &end, 10);
    if (end == descr.c_str() + 2 || *end != '\0' || w < 0 || w > (1 << 24))
      return InvalidArgument(what, ": bad string dtype '", descr, "' in .npy header");
    str_width = w;
  }
  if (descr == "|O")
    return Unsupported(what,
                       ": .npy arrays of Python objects (pickled); save strings with dtype=str (np.str_) instead");
  const DType dtype = str_width >= 0 ? DType::kString : DTypeOfDescr(descr);
  if (dtype == DType::kUndefined) return Unsupported(what, ": .npy dtype '", descr, "'");
  if (fortran != "False") return Unsupported(what, ": Fortran-ordered .npy arrays");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')')
    return InvalidArgument(what, ": bad shape '", shape_text, "' in .npy header (expected a tuple such as (2, 3))");
  Shape shape;
  std::string inner = shape_text.substr(1, shape_text.size() - 2);
  size_t pos = 0;
  while (pos < inner.size()) {
    size_t comma = inner.find(',', pos);
    std::string item = inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    item.erase(0, item.find_first_not_of(' '));
    if (!item.empty()) {
      while (!item.empty() && (item.back() == ' ' || item.back() == 'L')) item.pop_back();
      char* end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (end == item.c_str() || *end != '\0' || v < 0)
        return InvalidArgument(what, ": bad shape ", shape_text, " in .npy header");
      shape.push_back(v);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  Status st = CheckShape(shape, (int64_t{1} << 36));
  if (!st.ok()) return st.WithContext(what);
  const size_t data_offset = offset + header_len;
  if (dtype == DType::kString) {
    const size_t item = static_cast<size_t>(str_width) * (utf32 ? 4 : 1);
    const auto n = static_cast<size_t>(NumElements(shape));
    if (item != 0 && n > (bytes.size() - data_offset) / item + 1)
      return InvalidArgument(what, ": .npy data is too short for ", n, " strings of ", str_width, " characters");
    if (bytes.size() - data_offset != n * item)
      return InvalidArgument(what, ": .npy data has ", bytes.size() - data_offset, " bytes but ", n, " strings of '",
                             descr, "' need ", n * item);
    SP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kString, shape));
    std::string* out = t.mutable_strings();
    for (size_t i = 0; i < n; ++i) {
      const char* p = bytes.data() + data_offset + i * item;
      std::string& e = out[i];
      if (!utf32) {
        size_t len = item;
        while (len > 0 && p[len - 1] == '\0') --len;
        e.assign(p, len);
        continue;
      }
      size_t len = static_cast<size_t>(str_width);
      auto cp_at = [&](size_t k) {
        const auto* u = reinterpret_cast<const unsigned char*>(p + 4 * k);
        return static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 | static_cast<uint32_t>(u[2]) << 16 |
               static_cast<uint32_t>(u[3]) << 24;
      };
      while (len > 0 && cp_at(len - 1) == 0) --len;
      for (size_t k = 0; k < len; ++k) {
        const uint32_t c = cp_at(k);
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
          return InvalidArgument(what, ": string ", i, " holds an invalid code point ", c);
        AppendUtf8(static_cast<char32_t>(c), &e);
      }
    }
    return t;
  }
  // The byte count is checked before allocating: a header may claim any shape.
  const size_t nbytes = DTypeBytes(dtype, NumElements(shape));
  if (bytes.size() - data_offset != nbytes)
    return InvalidArgument(what, ": .npy data has ", bytes.size() - data_offset, " bytes but ", DTypeName(dtype),
                           ShapeToString(shape), " needs ", nbytes);
  Tensor t = Tensor::Alloc(dtype, shape);
  if (t.nbytes()) std::memcpy(t.mutable_raw(), bytes.data() + data_offset, t.nbytes());
  return t;
}

Result<Tensor> ReadNpy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open .npy file '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return ParseNpy(bytes, path);
}

namespace {

// A string tensor's elements as NumPy's fixed-width unicode ('<U<n>', UTF-32LE); strings that
// are not valid UTF-8 make it a bytes array ('|S<n>') instead. Returns the descr.
std::string StringPayload(const Tensor& t, std::string* payload) {
  std::vector<std::u32string> cps(static_cast<size_t>(t.numel()));
  bool utf8 = true;
  size_t width = 0;
  for (int64_t i = 0; i < t.numel() && utf8; ++i) {
    std::u32string& out = cps[static_cast<size_t>(i)];
    utf8 = DecodeUtf8(t.strings()[i], &out);
    width = std::max(width, out.size());
  }
  if (!utf8) {
    size_t bytes_width = 1;
    for (int64_t i = 0; i < t.numel(); ++i) bytes_width = std::max(bytes_width, t.strings()[i].size());
    for (int64_t i = 0; i < t.numel(); ++i) {
      std::string e = t.strings()[i];
      e.resize(bytes_width, '\0');
      *payload += e;
    }
    return StrCat("|S", bytes_width);
  }
  width = std::max<size_t>(width, 1);
  for (const std::u32string& e : cps)
    for (size_t k = 0; k < width; ++k) {
      const uint32_t c = k < e.size() ? static_cast<uint32_t>(e[k]) : 0;
      for (int b = 0; b < 4; ++b) *payload += static_cast<char>((c >> (8 * b)) & 0xFF);
    }
  return StrCat("<U", width);
}

}  // namespace

std::string SerializeNpy(const Tensor& tensor) {
  Tensor t = tensor;
  std::string string_descr, string_payload;
  if (t.is_string()) string_descr = StringPayload(t, &string_payload);
  const char* descr = t.is_string() ? string_descr.c_str() : DescrOf(t.dtype());
  if (descr == nullptr) {
    // No NumPy dtype (bfloat16, float8/float4/float6, 2/4-bit integers): widen, exactly, to one
    // NumPy reads: the integers to int8/uint8, the floats to float32.
    const bool is_signed = t.dtype() == DType::kInt4 || t.dtype() == DType::kInt2;
    const DType wide = IsNarrowIntegerDType(t.dtype()) ? (is_signed ? DType::kInt8 : DType::kUInt8) : DType::kFloat32;
    t = *CastTensor(tensor, wide);
    descr = DescrOf(wide);
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i)
    shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
  shape += ")";
  std::string header = StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  if (t.is_string())
    out += string_payload;
  else
    out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Status WriteNpy(const std::string& path, const Tensor& tensor) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return IoError("cannot write '", path, "'");
  std::string bytes = SerializeNpy(tensor);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return IoError("writing '", path, "' failed");
  return Status::Ok();
}

}  // namespace sampan
