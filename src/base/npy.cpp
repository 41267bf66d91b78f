#include "base/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace sampan {

namespace {

const char* DescrOf(DType t) {
  switch (t) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kFloat16: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kInt16: return "<i2";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
    case DType::kUInt8: return "|u1";
    case DType::kUInt16: return "<u2";
    case DType::kUInt32: return "<u4";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    default: return nullptr;  // bfloat16 and the small types have no NumPy dtype
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
  const DType dtype = DTypeOfDescr(descr);
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
  // The byte count is checked before allocating: a header may claim any shape.
  const size_t nbytes = DTypeBytes(dtype, NumElements(shape));
  const size_t data_offset = offset + header_len;
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

std::string SerializeNpy(const Tensor& tensor) {
  Tensor t = tensor;
  const char* descr = DescrOf(t.dtype());
  if (descr == nullptr) {
    // No NumPy dtype (bfloat16, float8/float4/float6, 2/4-bit integers): widen, exactly, to one
    // NumPy reads: the integers to int8/uint8, the floats to float32.
    const bool is_signed = t.dtype() == DType::kInt4 || t.dtype() == DType::kInt2;
    const DType wide = IsNarrowIntegerDType(t.dtype()) ? (is_signed ? DType::kInt8 : DType::kUInt8) : DType::kFloat32;
    t = *CastTensor(tensor, wide);
    descr = DescrOf(wide);
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
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
