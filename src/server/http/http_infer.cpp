#include "server/http/http_infer.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "server/core/bytes_format.h"

namespace sampan::server::http {
namespace {

using rapidjson::Value;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Nesting deeper than any real tensor rank; bounds the recursion over "data".
constexpr int kMaxDataDepth = 64;

const char* JsonTypeName(const Value& v) {
  if (v.IsNull()) return "null";
  if (v.IsBool()) return "a boolean";
  if (v.IsString()) return "a string";
  if (v.IsArray()) return "an array";
  if (v.IsObject()) return "an object";
  if (v.IsInt64() || v.IsUint64()) return "an integer";
  return "a number";
}

// A string member of `obj`, or an error naming `where`.
Status GetString(const Value& obj, const char* key, const std::string& where, std::string* out) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd()) return InvalidArgument(where, ": missing '", key, "'");
  if (!it->value.IsString())
    return InvalidArgument(where, ": '", key, "' must be a string, got ", JsonTypeName(it->value));
  out->assign(it->value.GetString(), it->value.GetStringLength());
  return Status::Ok();
}

Result<bool> GetBoolParam(const Value& v, const std::string& where, const char* key) {
  if (!v.IsBool()) return InvalidArgument(where, ": parameter '", key, "' must be a boolean, got ", JsonTypeName(v));
  return v.GetBool();
}

Result<uint64_t> GetUintParam(const Value& v, const std::string& where, const char* key) {
  if (!v.IsUint64())
    return InvalidArgument(where, ": parameter '", key, "' must be a non-negative integer, got ", JsonTypeName(v));
  return v.GetUint64();
}

// Reads the shared-memory parameters of an input or output. *region stays
// empty when none is given; without a registry (extension off) they are refused.
Status SharedMemoryParams(const Value& params, const std::string& where, const SharedMemoryRegistry* shm,
                          std::string* region, uint64_t* offset, std::optional<uint64_t>* byte_size) {
  auto r = params.FindMember("shared_memory_region");
  const bool any = r != params.MemberEnd() || params.HasMember("shared_memory_offset") ||
                   params.HasMember("shared_memory_byte_size");
  if (!any) return Status::Ok();
  if (!shm)
    return Unsupported(where,
                       ": the shared memory extensions (system and CUDA) are not enabled on this server (start "
                       "sampan serve with --enable-shared-memory)");
  if (r == params.MemberEnd())
    return InvalidArgument(where, ": shared-memory parameters without 'shared_memory_region'");
  if (!r->value.IsString()) return InvalidArgument(where, ": 'shared_memory_region' must be a string");
  region->assign(r->value.GetString(), r->value.GetStringLength());
  if (auto o = params.FindMember("shared_memory_offset"); o != params.MemberEnd()) {
    SP_ASSIGN_OR_RETURN(*offset, GetUintParam(o->value, where, "shared_memory_offset"));
  }
  if (auto b = params.FindMember("shared_memory_byte_size"); b != params.MemberEnd()) {
    SP_ASSIGN_OR_RETURN(uint64_t v, GetUintParam(b->value, where, "shared_memory_byte_size"));
    *byte_size = v;
  }
  return Status::Ok();
}

// Writes the elements of (possibly nested) JSON array `v` into out[0, n).
template <class T>
class DataReader {
 public:
  DataReader(T* out, int64_t n, const std::string& input, const char* datatype)
      : out_(out), n_(n), input_(input), datatype_(datatype) {}

  Status Read(const Value& v, int depth) {
    if (v.IsArray()) {
      if (depth > kMaxDataDepth) return InvalidArgument("input '", input_, "': 'data' is nested too deeply");
      for (const Value& e : v.GetArray()) SP_RETURN_IF_ERROR(Read(e, depth + 1));
      return Status::Ok();
    }
    if (count_ >= n_) return TooMany();
    SP_RETURN_IF_ERROR(Convert(v, &out_[count_]));
    ++count_;
    return Status::Ok();
  }

  Status Finish() const {
    if (count_ != n_) return CountError(count_);
    return Status::Ok();
  }

 private:
  Status TooMany() const {
    return InvalidArgument("input '", input_, "': 'data' has more than the ", n_, " elements its shape holds");
  }
  Status CountError(int64_t got) const {
    return InvalidArgument("input '", input_, "': 'data' has ", got, " elements, its shape holds ", n_);
  }
  Status BadElement(const Value& v, const char* expected) const {
    return InvalidArgument("input '", input_, "': data element ", count_, " is ", JsonTypeName(v), ", expected ",
                           expected, " for datatype ", datatype_);
  }

  Status Convert(const Value& v, T* out) const {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!v.IsString()) return BadElement(v, "a string");
      out->assign(v.GetString(), v.GetStringLength());
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.IsBool()) return BadElement(v, "a boolean");
      *out = v.GetBool();
    } else if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      if (!v.IsNumber()) return BadElement(v, "a number");
      *out = ConvertElement<T>(v.GetDouble());
    } else if constexpr (std::is_signed_v<T>) {
      if (!v.IsInt64()) return BadElement(v, "an integer");
      const int64_t x = v.GetInt64();
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
        return InvalidArgument("input '", input_, "': data element ", count_, " (", x, ") is out of range for ",
                               datatype_);
      *out = static_cast<T>(x);
    } else {
      if (!v.IsUint64()) return BadElement(v, "a non-negative integer");
      const uint64_t x = v.GetUint64();
      if (x > std::numeric_limits<T>::max())
        return InvalidArgument("input '", input_, "': data element ", count_, " (", x, ") is out of range for ",
                               datatype_);
      *out = static_cast<T>(x);
    }
    return Status::Ok();
  }

  T* out_;
  int64_t n_;
  int64_t count_ = 0;
  const std::string& input_;
  const char* datatype_;
};

Result<Shape> ParseShape(const Value& input, const std::string& where) {
  auto it = input.FindMember("shape");
  if (it == input.MemberEnd()) return InvalidArgument(where, ": missing 'shape'");
  if (!it->value.IsArray()) return InvalidArgument(where, ": 'shape' must be an array of integers");
  Shape shape;
  shape.reserve(it->value.Size());
  for (const Value& d : it->value.GetArray()) {
    if (!d.IsInt64() || d.GetInt64() < 0)
      return InvalidArgument(where, ": 'shape' must hold non-negative integers, got ",
                             d.IsInt64() ? std::to_string(d.GetInt64()) : JsonTypeName(d));
    shape.push_back(d.GetInt64());
  }
  Status s = CheckShape(shape);
  if (!s.ok()) return InvalidArgument(where, ": shape ", ShapeToString(shape), ": ", s.message());
  return shape;
}

Status ParseInput(const Value& input, size_t index, const char* body, size_t size, size_t json_size,
                  size_t* binary_offset, const std::shared_ptr<void>& owner, const SharedMemoryRegistry* shm,
                  InferTensor* out) {
  // Error context, built with plain appends: StrCat's ostringstream was 4% of the front end's
  // time under load for these two strings a tensor.
  std::string where = "inputs[" + std::to_string(index) + "]";
  if (!input.IsObject()) return InvalidArgument(where, ": must be an object");
  SP_RETURN_IF_ERROR(GetString(input, "name", where, &out->name));
  where = "input '" + out->name + "'";
  std::string datatype;
  SP_RETURN_IF_ERROR(GetString(input, "datatype", where, &datatype));
  out->dtype = DTypeFromKServe(datatype);
  if (out->dtype == DType::kUndefined) return InvalidArgument(where, ": unknown datatype '", datatype, "'");
  SP_ASSIGN_OR_RETURN(out->shape, ParseShape(input, where));
  const int64_t numel = NumElements(out->shape);
  const bool bytes = out->dtype == DType::kString;  // BYTES: length-prefixed elements (bytes_format.h)
  const size_t nbytes = static_cast<size_t>(numel) * DTypeSize(out->dtype);

  std::optional<uint64_t> binary_size;
  auto params = input.FindMember("parameters");
  if (params != input.MemberEnd()) {
    if (!params->value.IsObject()) return InvalidArgument(where, ": 'parameters' must be an object");
    std::string region;
    uint64_t offset = 0;
    std::optional<uint64_t> region_bytes;
    SP_RETURN_IF_ERROR(SharedMemoryParams(params->value, where, shm, &region, &offset, &region_bytes));
    if (!region.empty()) {
      if (params->value.HasMember("binary_data_size") || input.HasMember("data"))
        return InvalidArgument(where, ": has shared-memory parameters and also 'data' or binary_data_size");
      if (!region_bytes) return InvalidArgument(where, ": 'shared_memory_byte_size' is required with a region");
      if (bytes) {
        Result<SharedMemoryView> view = shm->View(region, offset, *region_bytes);
        if (!view.ok()) return view.status().WithContext(where);
        if (view->device < 0) {
          SP_ASSIGN_OR_RETURN(out->data, ParseBytesTensor(view->data, *region_bytes, out->shape, where));
          return Status::Ok();
        }
        std::string host(*region_bytes, '\0');  // CUDA region: to the host first
        SP_RETURN_IF_ERROR(CopyFromView(*view, host.data(), host.size()).WithContext(where));
        SP_ASSIGN_OR_RETURN(out->data, ParseBytesTensor(host.data(), host.size(), out->shape, where));
        return Status::Ok();
      }
      if (*region_bytes != nbytes)
        return InvalidArgument(where, ": shared_memory_byte_size is ", *region_bytes, " bytes (region '", region,
                               "') but shape ", ShapeToString(out->shape), " of ", datatype, " needs ", nbytes);
      Result<SharedMemoryView> view = shm->View(region, offset, nbytes);
      if (!view.ok()) return view.status().WithContext(where);
      // A system region: the tensor wraps the mapping itself (zero copies; the mapping outlives
      // an unregister that races with this request). A CUDA region is copied to the host.
      if (view->device < 0 && reinterpret_cast<uintptr_t>(view->data) % DTypeSize(out->dtype) == 0) {
        out->data = Tensor::Wrap(out->dtype, out->shape, view->keepalive, view->data);
      } else {
        out->data = Tensor::Alloc(out->dtype, out->shape);
        SP_RETURN_IF_ERROR(CopyFromView(*view, out->data.mutable_raw(), nbytes).WithContext(where));
      }
      return Status::Ok();
    }
    auto b = params->value.FindMember("binary_data_size");
    if (b != params->value.MemberEnd()) {
      SP_ASSIGN_OR_RETURN(binary_size, GetUintParam(b->value, where, "binary_data_size"));
    }
  }
  auto data = input.FindMember("data");
  if (binary_size && bytes) {
    if (data != input.MemberEnd()) return InvalidArgument(where, ": has both 'data' and binary_data_size");
    if (*binary_offset + *binary_size > size)
      return InvalidArgument(where, ": binary data truncated: needs ", *binary_size, " bytes at offset ",
                             *binary_offset - json_size, " of the binary part, which holds only ", size - json_size);
    const char* p = body + *binary_offset;
    *binary_offset += *binary_size;
    SP_ASSIGN_OR_RETURN(out->data, ParseBytesTensor(p, *binary_size, out->shape, where));
    return Status::Ok();
  }
  if (binary_size) {
    if (data != input.MemberEnd()) return InvalidArgument(where, ": has both 'data' and binary_data_size");
    if (*binary_size != nbytes)
      return InvalidArgument(where, ": binary_data_size is ", *binary_size, " bytes but shape ",
                             ShapeToString(out->shape), " of ", datatype, " needs ", nbytes);
    if (*binary_offset + nbytes > size)
      return InvalidArgument(where, ": binary data truncated: needs ", nbytes, " bytes at offset ",
                             *binary_offset - json_size, " of the binary part, which holds only ", size - json_size);
    const char* p = body + *binary_offset;
    *binary_offset += nbytes;
    if (reinterpret_cast<uintptr_t>(p) % DTypeSize(out->dtype) == 0) {
      out->data = Tensor::Wrap(out->dtype, out->shape, owner, p);
    } else {
      // Only mixed-width inputs can land here (the body is placed so the
      // binary part starts 64-byte aligned): copy rather than misalign.
      out->data = Tensor::Alloc(out->dtype, out->shape);
      std::memcpy(out->data.mutable_raw(), p, nbytes);
    }
    return Status::Ok();
  }
  if (data == input.MemberEnd()) return InvalidArgument(where, ": has neither 'data' nor binary_data_size");
  if (!data->value.IsArray()) return InvalidArgument(where, ": 'data' must be an array");
  // Every JSON element takes at least one byte: refuse before allocating a
  // tensor that the text cannot fill.
  if (static_cast<uint64_t>(numel) > json_size)
    return InvalidArgument(where, ": shape ", ShapeToString(out->shape), " holds ", numel,
                           " elements, more than 'data' can have");
  out->data = Tensor::Alloc(out->dtype, out->shape);
  Status status;
  if (bytes) {  // JSON strings, one per element
    DataReader<std::string> reader(out->data.mutable_strings(), numel, out->name, datatype.c_str());
    status = reader.Read(data->value, 0);
    if (status.ok()) status = reader.Finish();
    return status;
  }
  Status dispatch = DispatchDType(out->dtype, [&]<class T>() {
    DataReader<T> reader(out->data.mutable_data<T>(), numel, out->name, datatype.c_str());
    status = reader.Read(data->value, 0);
    if (status.ok()) status = reader.Finish();
  });
  SP_RETURN_IF_ERROR(dispatch);
  return status;
}

Status ParseRequestParameters(const Value& params, InferRequest* request, OutputFormat* format) {
  if (!params.IsObject()) return InvalidArgument("request 'parameters' must be an object");
  const std::string where = "request parameters";
  for (auto it = params.MemberBegin(); it != params.MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    const Value& v = it->value;
    if (key == "binary_data_output") {
      SP_ASSIGN_OR_RETURN(format->default_binary, GetBoolParam(v, where, "binary_data_output"));
    } else if (key == "priority") {
      SP_ASSIGN_OR_RETURN(uint64_t p, GetUintParam(v, where, "priority"));
      if (p > std::numeric_limits<uint32_t>::max()) return InvalidArgument(where, ": priority ", p, " is too large");
      request->priority = static_cast<uint32_t>(p);
    } else if (key == "timeout") {
      SP_ASSIGN_OR_RETURN(request->timeout_us, GetUintParam(v, where, "timeout"));
    } else if (key == "sequence_id") {
      if (v.IsString()) {
        request->sequence.text.assign(v.GetString(), v.GetStringLength());
      } else if (v.IsUint64()) {
        request->sequence.number = v.GetUint64();
      } else {
        return InvalidArgument(where, ": 'sequence_id' must be a non-negative integer or a string, got ",
                               JsonTypeName(v));
      }
    } else if (key == "sequence_start") {
      SP_ASSIGN_OR_RETURN(request->sequence.start, GetBoolParam(v, where, "sequence_start"));
    } else if (key == "sequence_end") {
      SP_ASSIGN_OR_RETURN(request->sequence.end, GetBoolParam(v, where, "sequence_end"));
    } else if (key == "shared_memory_region") {
      return Unsupported(where, ": the shared memory extension is not enabled on this server");
    } else if (v.IsString()) {
      request->parameters[key].assign(v.GetString(), v.GetStringLength());
    } else if (v.IsBool()) {
      request->parameters[key] = v.GetBool() ? "true" : "false";
    } else if (v.IsInt64()) {
      request->parameters[key] = std::to_string(v.GetInt64());
    } else if (v.IsUint64()) {
      request->parameters[key] = std::to_string(v.GetUint64());
    } else if (v.IsNumber()) {
      request->parameters[key] = std::to_string(v.GetDouble());
    } else {
      return InvalidArgument(where, ": '", key, "' must be a string, number or boolean, got ", JsonTypeName(v));
    }
  }
  return Status::Ok();
}

Status ParseOutputs(const Value& outputs, InferRequest* request, OutputFormat* format,
                    const SharedMemoryRegistry* shm) {
  if (!outputs.IsArray()) return InvalidArgument("'outputs' must be an array");
  request->outputs.reserve(outputs.Size());
  for (rapidjson::SizeType i = 0; i < outputs.Size(); ++i) {
    const Value& o = outputs[i];
    std::string where = "outputs[" + std::to_string(i) + "]";
    if (!o.IsObject()) return InvalidArgument(where, ": must be an object");
    std::string name;
    SP_RETURN_IF_ERROR(GetString(o, "name", where, &name));
    where = "output '" + name + "'";
    for (const std::string& seen : request->outputs)
      if (seen == name) return InvalidArgument(where, ": requested twice");
    auto params = o.FindMember("parameters");
    if (params != o.MemberEnd()) {
      if (!params->value.IsObject()) return InvalidArgument(where, ": 'parameters' must be an object");
      OutputFormat::ShmTarget target;
      std::optional<uint64_t> region_bytes;
      SP_RETURN_IF_ERROR(SharedMemoryParams(params->value, where, shm, &target.region, &target.offset, &region_bytes));
      if (!target.region.empty()) {
        if (!region_bytes) return InvalidArgument(where, ": 'shared_memory_byte_size' is required with a region");
        target.byte_size = *region_bytes;
        SP_RETURN_IF_ERROR(shm->View(target.region, target.offset, target.byte_size).status().WithContext(where));
        format->shm.emplace_back(name, std::move(target));
      }
      if (params->value.HasMember("classification"))
        return Unsupported(where, ": the classification extension is not supported");
      auto b = params->value.FindMember("binary_data");
      if (b != params->value.MemberEnd()) {
        SP_ASSIGN_OR_RETURN(bool binary, GetBoolParam(b->value, where, "binary_data"));
        format->explicit_binary.emplace_back(name, binary);
      }
    }
    request->outputs.push_back(std::move(name));
  }
  return Status::Ok();
}

// Shortest text that reads back as the same float/double; JSON has no NaN or
// infinities, so they are written the way Python's json module reads them.
template <class F>
void WriteFloat(Writer& w, F x) {
  if (std::isnan(x)) {
    w.RawValue("NaN", 3, rapidjson::kNumberType);
  } else if (std::isinf(x)) {
    if (x > 0)
      w.RawValue("Infinity", 8, rapidjson::kNumberType);
    else
      w.RawValue("-Infinity", 9, rapidjson::kNumberType);
  } else {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof(buf), x);
    w.RawValue(buf, static_cast<size_t>(r.ptr - buf), rapidjson::kNumberType);
  }
}

void WriteData(Writer& w, const Tensor& t) {
  w.StartArray();
  if (t.is_string()) {
    for (int64_t i = 0; i < t.numel(); ++i)
      w.String(t.strings()[i].data(), static_cast<rapidjson::SizeType>(t.strings()[i].size()));
    w.EndArray();
    return;
  }
  (void)DispatchDType(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bool>)
        w.Bool(p[i]);
      else if constexpr (kIsReducedFloat<T>)
        WriteFloat(w, static_cast<float>(p[i]));
      else if constexpr (std::is_floating_point_v<T>)
        WriteFloat(w, p[i]);
      else if constexpr (std::is_signed_v<T>)
        w.Int64(p[i]);
      else
        w.Uint64(p[i]);
    }
  });
  w.EndArray();
}

void Key(Writer& w, std::string_view key) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}
void Str(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

}  // namespace

bool OutputFormat::Binary(const std::string& name) const {
  for (const auto& [n, binary] : explicit_binary)
    if (n == name) return binary;
  return default_binary;
}

// RapidJSON 1.1's full-precision number parser (kParseFullPrecisionFlag) takes a
// zero written with an exponent or many fraction digits ("0e+300", "0.000e310",
// "0.00000000000000000000000") through clz(0), which is undefined: on x86 the
// value comes out as garbage (-2.2e-75 for 0e+300; found by the libFuzzer tier's
// UBSan). When the JSON has such a zero, a copy with each one rewritten as "0.0" or
// "-0.0" (padded with spaces, so offsets stay; whitespace is valid there) is parsed.
// Numbers that are not well-formed are left for the parser to refuse. Returns false,
// and copies nothing, when there is none.
static bool CanonicalizeZeros(const char* json, size_t n, std::string* out) {
  bool in_string = false, copied = false;
  auto digits = [&](size_t j) {
    while (j < n && json[j] >= '0' && json[j] <= '9') ++j;
    return j;
  };
  for (size_t i = 0; i < n; ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    // A number token: -? int (. digits)? ([eE] [+-]? digits)?
    const bool negative = c == '-';
    size_t j = i + negative;
    const size_t int_end = digits(j);
    bool zero = int_end > j, well_formed = int_end > j, fraction = false, exponent = false;
    for (size_t m = j; m < int_end; ++m) zero &= json[m] == '0';
    j = int_end;
    if (j < n && json[j] == '.') {
      const size_t f_end = digits(j + 1);
      well_formed &= f_end > j + 1;
      for (size_t m = j + 1; m < f_end; ++m) zero &= json[m] == '0';
      fraction = true;
      j = f_end;
    }
    if (j < n && (json[j] == 'e' || json[j] == 'E')) {
      size_t k = j + 1;
      if (k < n && (json[k] == '+' || json[k] == '-')) ++k;
      const size_t e_end = digits(k);
      well_formed &= e_end > k;
      exponent = true;
      j = e_end;
    }
    const char* canonical = negative ? "-0.0" : "0.0";
    const size_t len = j - i, clen = negative ? 4 : 3;
    if (zero && well_formed && (fraction || exponent) && len >= clen &&
        !(len == clen && std::memcmp(json + i, canonical, clen) == 0)) {
      if (!copied) out->assign(json, n), copied = true;
      std::memcpy(out->data() + i, canonical, clen);
      std::memset(out->data() + i + clen, ' ', len - clen);
    }
    i = j > i ? j - 1 : i;
  }
  return copied;
}

Status ParseInferRequest(const char* body, size_t size, size_t json_size, std::shared_ptr<void> owner,
                         const std::string& model_name, const std::string& model_version, InferRequest* request,
                         OutputFormat* format, const SharedMemoryRegistry* shm) {
  if (json_size > size)
    return InvalidArgument("Inference-Header-Content-Length is ", json_size, " but the body has only ", size, " bytes");
  // The JSON header of a request is small: its values and the parser's stack live in buffers on
  // this stack (pools grow onto the heap for large ones). A default Document mallocs and frees a
  // 64 KiB chunk a request, several percent of the front end's time under load.
  alignas(std::max_align_t) char value_buffer[8192];
  alignas(std::max_align_t) char stack_buffer[4096];
  rapidjson::MemoryPoolAllocator<> value_pool(value_buffer, sizeof value_buffer);
  rapidjson::MemoryPoolAllocator<> stack_pool(stack_buffer, sizeof stack_buffer);
  rapidjson::GenericDocument<rapidjson::UTF8<>, rapidjson::MemoryPoolAllocator<>, rapidjson::MemoryPoolAllocator<>> doc(
      &value_pool, 1024, &stack_pool);
  constexpr unsigned kFlags =
      rapidjson::kParseFullPrecisionFlag | rapidjson::kParseNanAndInfFlag | rapidjson::kParseIterativeFlag;
  std::string patched;
  if (CanonicalizeZeros(body, json_size, &patched))
    doc.Parse<kFlags>(patched.data(), patched.size());
  else
    doc.Parse<kFlags>(body, json_size);
  if (doc.HasParseError())
    return InvalidArgument("malformed JSON in request body at byte ", doc.GetErrorOffset(), ": ",
                           rapidjson::GetParseError_En(doc.GetParseError()));
  if (!doc.IsObject()) return InvalidArgument("request body must be a JSON object, got ", JsonTypeName(doc));

  request->model_name = model_name;
  request->model_version = model_version;
  auto id = doc.FindMember("id");
  if (id != doc.MemberEnd()) {
    if (!id->value.IsString()) return InvalidArgument("'id' must be a string, got ", JsonTypeName(id->value));
    request->id.assign(id->value.GetString(), id->value.GetStringLength());
  }
  auto params = doc.FindMember("parameters");
  if (params != doc.MemberEnd()) SP_RETURN_IF_ERROR(ParseRequestParameters(params->value, request, format));

  auto inputs = doc.FindMember("inputs");
  if (inputs == doc.MemberEnd()) return InvalidArgument("request has no 'inputs'");
  if (!inputs->value.IsArray()) return InvalidArgument("'inputs' must be an array");
  size_t binary_offset = json_size;
  request->inputs.resize(inputs->value.Size());
  for (rapidjson::SizeType i = 0; i < inputs->value.Size(); ++i) {
    SP_RETURN_IF_ERROR(
        ParseInput(inputs->value[i], i, body, size, json_size, &binary_offset, owner, shm, &request->inputs[i]));
    for (rapidjson::SizeType j = 0; j < i; ++j)
      if (request->inputs[j].name == request->inputs[i].name)
        return InvalidArgument("input '", request->inputs[i].name, "' is given twice");
  }
  if (binary_offset != size)
    return InvalidArgument("the body holds ", size - binary_offset,
                           " bytes of binary data that no input claims (binary_data_size)");

  auto outputs = doc.FindMember("outputs");
  if (outputs != doc.MemberEnd()) SP_RETURN_IF_ERROR(ParseOutputs(outputs->value, request, format, shm));
  request->keepalive = std::move(owner);
  return Status::Ok();
}

Result<InferReply> BuildInferReply(const InferResponse& response, const OutputFormat& format,
                                   const SharedMemoryRegistry* shm) {
  InferReply reply;
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "model_name");
  Str(w, response.model_name);
  Key(w, "model_version");
  Str(w, response.model_version);
  if (!response.id.empty()) {
    Key(w, "id");
    Str(w, response.id);
  }
  if (!response.parameters.empty()) {
    Key(w, "parameters");
    w.StartObject();
    for (const auto& [k, v] : response.parameters) {
      Key(w, k);
      Str(w, v);
    }
    w.EndObject();
  }
  Key(w, "outputs");
  w.StartArray();
  for (const InferTensor& out : response.outputs) {
    w.StartObject();
    Key(w, "name");
    Str(w, out.name);
    Key(w, "datatype");
    w.String(KServeDatatype(out.dtype));
    Key(w, "shape");
    w.StartArray();
    for (int64_t d : out.shape) w.Int64(d);
    w.EndArray();
    const OutputFormat::ShmTarget* target = nullptr;
    for (const auto& [n, t] : format.shm)
      if (n == out.name) target = &t;
    // BYTES leave as length-prefixed elements in binary form and shared memory, strings in JSON.
    const Tensor wire =
        out.data.is_string() && (target || format.Binary(out.name)) ? SerializeBytesTensor(out.data) : out.data;
    if (target) {
      const size_t nbytes = wire.nbytes();
      if (!shm) return Internal("output '", out.name, "': shared-memory target without a registry");
      if (nbytes > target->byte_size)
        return InvalidArgument("output '", out.name, "' has ", nbytes, " bytes, more than the ", target->byte_size,
                               " bytes given in shared-memory region '", target->region, "'");
      const std::string where = "output '" + out.name + "'";
      Result<SharedMemoryView> view = shm->View(target->region, target->offset, nbytes);
      if (!view.ok()) return view.status().WithContext(where);
      SP_RETURN_IF_ERROR(CopyToView(*view, wire.raw(), nbytes).WithContext(where));
      Key(w, "parameters");
      w.StartObject();
      Key(w, "shared_memory_region");
      Str(w, target->region);
      Key(w, "shared_memory_byte_size");
      w.Uint64(nbytes);
      if (target->offset) {
        Key(w, "shared_memory_offset");
        w.Uint64(target->offset);
      }
      w.EndObject();
    } else if (format.Binary(out.name)) {
      const size_t nbytes = wire.nbytes();
      Key(w, "parameters");
      w.StartObject();
      Key(w, "binary_data_size");
      w.Uint64(nbytes);
      w.EndObject();
      reply.binary.push_back(wire);
      reply.binary_bytes += nbytes;
    } else {
      if (out.data.is_string())
        for (int64_t i = 0; i < out.data.numel(); ++i)
          if (!IsUtf8(out.data.strings()[i]))
            return InvalidArgument("output '", out.name, "' element ", i,
                                   " is not UTF-8 text, which JSON cannot carry: request it with binary_data");
      Key(w, "data");
      WriteData(w, out.data);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  reply.json.assign(buffer.GetString(), buffer.GetSize());
  return reply;
}

}  // namespace sampan::server::http
