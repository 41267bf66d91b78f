// TensorProto <-> Tensor, including external data in side files.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/small_types.h"
#include "onnx/importer.h"
#include "onnx/onnx-data_pb.h"
#include "onnx/onnx_pb.h"

namespace sampan::onnx_import {

namespace {

Result<std::string> ReadExternal(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what,
                                 size_t expected_bytes) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    } catch (const std::exception&) {
      return InvalidArgument(what, ": external_data '", kv.key(), "' is not a number: '", kv.value(), "'");
    }
  }
  if (location.empty()) return InvalidArgument(what, ": external data without a 'location'");
  if (base_dir.empty())
    return InvalidArgument(what, ": external data '", location, "' but the model was not loaded from a file");
  std::filesystem::path rel(location);
  if (rel.is_absolute() || location.find("..") != std::string::npos)
    return InvalidArgument(what, ": external data location '", location,
                           "' must be a relative path inside the model's directory");
  std::filesystem::path full = std::filesystem::path(base_dir) / rel;
  std::ifstream f(full, std::ios::binary);
  if (!f) return NotFound(what, ": external data file '", full.string(), "' cannot be opened");
  f.seekg(0, std::ios::end);
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  if (length < 0) length = static_cast<int64_t>(expected_bytes);
  if (offset < 0 || length < 0 || offset > file_size || length > file_size - offset)
    return OutOfRange(what, ": external data range [", offset, ", ", offset + length, ") is outside '", full.string(),
                      "' (", file_size, " bytes)");
  if (static_cast<size_t>(length) != expected_bytes)
    return InvalidArgument(what, ": external data length ", length, " does not match the tensor's ", expected_bytes,
                           " bytes");
  std::string buf(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(buf.data(), length);
  if (!f) return IoError(what, ": reading external data from '", full.string(), "' failed");
  return buf;
}

template <class Field>
Status CheckCount(const Field& field, int64_t numel, const std::string& what, const char* name) {
  if (static_cast<int64_t>(field.size()) != numel)
    return InvalidArgument(what, ": ", name, " holds ", field.size(), " values but the dims need ", numel);
  return Status::Ok();
}

// " (i4: 2 elements a byte)" for packed types, to explain a byte count in an error.
std::string PackingNote(DType dtype) {
  const int bits = DTypeBits(dtype);
  if (bits % 8 == 0) return {};
  if (8 % bits == 0) return StrCat(" (", DTypeName(dtype), " packs ", 8 / bits, " elements a byte)");
  return StrCat(" (", DTypeName(dtype), " packs ", bits, " bits an element)");
}

// Zeroes the bits past the last element of a packed tensor, so equal tensors have equal bytes.
void ClearPadding(Tensor& t) {
  const auto used = static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(DTypeBits(t.dtype()));
  if (used % 8 == 0) return;
  static_cast<uint8_t*>(t.mutable_raw())[used / 8] &= static_cast<uint8_t>((1u << (used % 8)) - 1);
}

// int32_data of the packed 2/4-bit types holds the packed bytes, one per entry, as onnx writes them.
bool Int32DataIsPackedBytes(DType dtype) {
  return IsPackedDType(dtype) && 8 % DTypeBits(dtype) == 0;
}

}  // namespace

Result<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what) {
  if (!IsKnownDType(proto.data_type())) return InvalidArgument(what, ": unknown data_type ", proto.data_type());
  const auto dtype = static_cast<DType>(proto.data_type());
  if (!IsStorableDType(dtype)) return Unsupported(what, ": tensors of type ", DTypeName(dtype));
  if (proto.has_segment()) return Unsupported(what, ": segmented tensors");
  Shape shape(proto.dims().begin(), proto.dims().end());
  Status shape_ok = CheckShape(shape, (int64_t{1} << 34));
  if (!shape_ok.ok()) return shape_ok.WithContext(what);
  const int64_t n = NumElements(shape);
  if (dtype == DType::kString) {
    // Strings travel only in string_data, one entry an element (no raw or external form).
    if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.has_raw_data())
      return InvalidArgument(what, ": string tensors must use string_data, not raw_data or external data");
    SP_RETURN_IF_ERROR(CheckCount(proto.string_data(), n, what, "string_data"));
    std::vector<std::string> values(proto.string_data().begin(), proto.string_data().end());
    return Tensor::FromStrings(std::move(values), shape);
  }
  const size_t bytes = DTypeBytes(dtype, n);
  // Every size is checked against the data actually present before the tensor is
  // allocated: dims are just numbers in the file.
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    SP_ASSIGN_OR_RETURN(std::string data, ReadExternal(proto, base_dir, what, bytes));
    Tensor t = Tensor::Alloc(dtype, shape);
    if (bytes) std::memcpy(t.mutable_raw(), data.data(), bytes);
    ClearPadding(t);
    return t;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes)
      return InvalidArgument(what, ": raw_data has ", proto.raw_data().size(), " bytes but ", DTypeName(dtype),
                             ShapeToString(shape), " needs ", bytes, PackingNote(dtype));
    Tensor t = Tensor::Alloc(dtype, shape);
    if (bytes) std::memcpy(t.mutable_raw(), proto.raw_data().data(), bytes);
    ClearPadding(t);
    return t;
  }
  switch (dtype) {
    case DType::kFloat32:
      SP_RETURN_IF_ERROR(CheckCount(proto.float_data(), n, what, "float_data"));
      break;
    case DType::kFloat64:
      SP_RETURN_IF_ERROR(CheckCount(proto.double_data(), n, what, "double_data"));
      break;
    case DType::kInt64:
      SP_RETURN_IF_ERROR(CheckCount(proto.int64_data(), n, what, "int64_data"));
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      SP_RETURN_IF_ERROR(CheckCount(proto.uint64_data(), n, what, "uint64_data"));
      break;
    default:
      if (Int32DataIsPackedBytes(dtype)) {
        const auto want = static_cast<int64_t>(bytes);
        if (proto.int32_data_size() != want)
          return InvalidArgument(what, ": int32_data holds ", proto.int32_data_size(), " packed bytes but ",
                                 DTypeName(dtype), ShapeToString(shape), " needs ", want, PackingNote(dtype));
      } else {
        SP_RETURN_IF_ERROR(CheckCount(proto.int32_data(), n, what, "int32_data"));
      }
      break;
  }
  Tensor t = Tensor::Alloc(dtype, shape);
  char* dst = static_cast<char*>(t.mutable_raw());
  switch (dtype) {
    case DType::kFloat32:
      if (n) std::memcpy(dst, proto.float_data().data(), bytes);
      break;
    case DType::kFloat64:
      if (n) std::memcpy(dst, proto.double_data().data(), bytes);
      break;
    case DType::kInt64:
      if (n) std::memcpy(dst, proto.int64_data().data(), bytes);
      break;
    case DType::kUInt32:
    case DType::kUInt64: {
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::kUInt32)
          t.mutable_data<uint32_t>()[i] = static_cast<uint32_t>(proto.uint64_data(i));
        else
          t.mutable_data<uint64_t>()[i] = proto.uint64_data(i);
      }
      break;
    }
    default: {  // everything else travels in int32_data (16-bit floats and small floats as raw bits)
      if (Int32DataIsPackedBytes(dtype)) {
        auto* p = static_cast<uint8_t*>(t.mutable_raw());
        for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(proto.int32_data(static_cast<int>(i)));
        ClearPadding(t);
        break;
      }
      if (IsSmallFloatDType(dtype)) {  // float8 types: a byte an entry; float6: 6 bits an entry
        for (int64_t i = 0; i < n; ++i)
          StoreSmallBits(t.mutable_raw(), dtype, i, static_cast<uint8_t>(proto.int32_data(static_cast<int>(i))));
        break;
      }
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = proto.int32_data(static_cast<int>(i));
        switch (dtype) {
          case DType::kInt32:
            t.mutable_data<int32_t>()[i] = v;
            break;
          case DType::kInt16:
            t.mutable_data<int16_t>()[i] = static_cast<int16_t>(v);
            break;
          case DType::kInt8:
            t.mutable_data<int8_t>()[i] = static_cast<int8_t>(v);
            break;
          case DType::kUInt16:
            t.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(v);
            break;
          case DType::kUInt8:
            t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(v);
            break;
          case DType::kBool:
            t.mutable_data<bool>()[i] = v != 0;
            break;
          case DType::kFloat16:
            t.mutable_data<Half>()[i].bits = static_cast<uint16_t>(v);
            break;
          case DType::kBFloat16:
            t.mutable_data<BFloat16>()[i].bits = static_cast<uint16_t>(v);
            break;
          default:
            return Internal(what, ": unhandled type ", DTypeName(dtype));
        }
      }
      break;
    }
  }
  return t;
}

namespace {

Result<Tensor> ValueFromOptional(const onnx::OptionalProto& p, const std::string& dir, const std::string& what,
                                 int depth);

// SequenceProto.elem_type / OptionalProto.elem_type: TENSOR 1, SPARSE_TENSOR 2, SEQUENCE 3, MAP 4, OPTIONAL 5.
Result<Tensor> ValueFromSequence(const onnx::SequenceProto& p, const std::string& dir, const std::string& what,
                                 int depth) {
  if (depth > 16) return InvalidArgument(what, ": sequences nested too deeply");
  std::vector<Tensor> items;
  DType elem = DType::kUndefined;
  switch (p.elem_type()) {
    case 0:  // UNDEFINED: an empty sequence
      break;
    case 1:
      for (int i = 0; i < p.tensor_values_size(); ++i) {
        SP_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(p.tensor_values(i), dir, StrCat(what, " item ", i)));
        elem = t.dtype();
        items.push_back(std::move(t));
      }
      break;
    case 3:
      elem = DType::kSequence;
      for (int i = 0; i < p.sequence_values_size(); ++i) {
        SP_ASSIGN_OR_RETURN(Tensor t,
                            ValueFromSequence(p.sequence_values(i), dir, StrCat(what, " item ", i), depth + 1));
        items.push_back(std::move(t));
      }
      break;
    case 5:
      elem = DType::kOptional;
      for (int i = 0; i < p.optional_values_size(); ++i) {
        SP_ASSIGN_OR_RETURN(Tensor t,
                            ValueFromOptional(p.optional_values(i), dir, StrCat(what, " item ", i), depth + 1));
        items.push_back(std::move(t));
      }
      break;
    default:
      return Unsupported(what, ": sequences of elem_type ", p.elem_type(), " (sparse tensors and maps)");
  }
  return Tensor::Sequence(elem, std::move(items));
}

Result<Tensor> ValueFromOptional(const onnx::OptionalProto& p, const std::string& dir, const std::string& what,
                                 int depth) {
  if (depth > 16) return InvalidArgument(what, ": optionals nested too deeply");
  switch (p.elem_type()) {
    case 0:
      return Tensor::Optional(DType::kUndefined, std::nullopt);
    case 1:
      if (!p.has_tensor_value()) return Tensor::Optional(DType::kUndefined, std::nullopt);
      {
        SP_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(p.tensor_value(), dir, what));
        return Tensor::Optional(t.dtype(), std::move(t));
      }
    case 3:
      if (!p.has_sequence_value()) return Tensor::Optional(DType::kSequence, std::nullopt);
      {
        SP_ASSIGN_OR_RETURN(Tensor t, ValueFromSequence(p.sequence_value(), dir, what, depth + 1));
        return Tensor::Optional(DType::kSequence, std::move(t));
      }
    default:
      return Unsupported(what, ": optionals of elem_type ", p.elem_type(), " (sparse tensors, maps, optionals)");
  }
}

}  // namespace

Result<Tensor> ReadValueProtoFile(const std::string& path, DType type) {
  if (type != DType::kSequence && type != DType::kOptional) {
    SP_ASSIGN_OR_RETURN(auto named, ReadTensorProtoFile(path));
    return std::move(named.second);
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string what = StrCat("value in '", path, "'");
  if (type == DType::kSequence) {
    onnx::SequenceProto proto;
    if (!proto.ParseFromString(bytes)) return InvalidArgument("'", path, "' is not a serialized SequenceProto");
    return ValueFromSequence(proto, dir, what, 0);
  }
  onnx::OptionalProto proto;
  if (!proto.ParseFromString(bytes)) return InvalidArgument("'", path, "' is not a serialized OptionalProto");
  return ValueFromOptional(proto, dir, what, 0);
}

Result<std::pair<std::string, Tensor>> ReadTensorProtoFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes)) return InvalidArgument("'", path, "' is not a serialized TensorProto");
  std::string dir = std::filesystem::path(path).parent_path().string();
  SP_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(proto, dir, StrCat("tensor in '", path, "'")));
  return std::make_pair(proto.name(), std::move(t));
}

}  // namespace sampan::onnx_import
