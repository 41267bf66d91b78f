#include "server/grpc/grpc_convert.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "server/core/bytes_format.h"
#include "server/core/secret.h"

namespace sampan::server {

namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

std::string ParameterToString(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return p.bool_param() ? "true" : "false";
    case InferParameter::kInt64Param:
      return std::to_string(p.int64_param());
    case InferParameter::kStringParam:
      return p.string_param();
    case InferParameter::kDoubleParam:
      return StrCat(p.double_param());
    case InferParameter::kUint64Param:
      return std::to_string(p.uint64_param());
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "";
}

//! A non-negative integer parameter (int64_param >= 0 or uint64_param);
//! `what` names it in the error ("request parameter 'timeout'").
Result<uint64_t> NonNegativeParameter(const std::string& what, const InferParameter& p) {
  if (p.parameter_choice_case() == InferParameter::kUint64Param) return p.uint64_param();
  if (p.parameter_choice_case() == InferParameter::kInt64Param && p.int64_param() >= 0)
    return static_cast<uint64_t>(p.int64_param());
  return InvalidArgument(what, " must be a non-negative integer (int64_param or uint64_param)",
                         p.parameter_choice_case() == InferParameter::kInt64Param
                             ? StrCat(", got ", p.int64_param())
                             : std::string(", got a non-integer value"));
}

Result<uint64_t> UnsignedParameter(const std::string& key, const InferParameter& p) {
  return NonNegativeParameter(StrCat("request parameter '", key, "'"), p);
}

using ParameterMap = ::google::protobuf::Map<std::string, InferParameter>;

constexpr const char* kShmRegion = "shared_memory_region";
constexpr const char* kShmByteSize = "shared_memory_byte_size";
constexpr const char* kShmOffset = "shared_memory_offset";

bool HasSharedMemoryParameters(const ParameterMap& params) {
  return params.count(kShmRegion) || params.count(kShmByteSize) || params.count(kShmOffset);
}

//! A tensor's non-negative integer parameter; `where` names the tensor.
Result<uint64_t> TensorUnsignedParameter(const std::string& where, const char* key, const InferParameter& p) {
  return NonNegativeParameter(StrCat(where, ": parameter '", key, "'"), p);
}

struct ShmParams {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// The shared-memory parameters of a tensor (`where`: "input 'x'" or "output
// 'y'"), or nullopt when it names no region. Refused when the extension is off.
Result<std::optional<ShmParams>> ReadSharedMemoryParams(const ParameterMap& params, const std::string& where,
                                                        const SharedMemoryRegistry* shm) {
  if (!HasSharedMemoryParameters(params)) return std::optional<ShmParams>();
  if (shm == nullptr)
    return Unsupported(where,
                       ": the shared memory extensions (system and CUDA) are not enabled on this server (start "
                       "sampan serve with --enable-shared-memory)");
  auto r = params.find(kShmRegion);
  if (r == params.end())
    return InvalidArgument(where, ": '", kShmByteSize, "' or '", kShmOffset, "' given without '", kShmRegion, "'");
  if (r->second.parameter_choice_case() != InferParameter::kStringParam || r->second.string_param().empty())
    return InvalidArgument(where, ": parameter '", kShmRegion, "' must be a non-empty string_param");
  ShmParams out;
  out.region = r->second.string_param();
  auto b = params.find(kShmByteSize);
  if (b == params.end())
    return InvalidArgument(where, ": parameter '", kShmByteSize, "' is required with shared-memory region '",
                           out.region, "'");
  SP_ASSIGN_OR_RETURN(out.byte_size, TensorUnsignedParameter(where, kShmByteSize, b->second));
  if (auto o = params.find(kShmOffset); o != params.end()) {
    SP_ASSIGN_OR_RETURN(out.offset, TensorUnsignedParameter(where, kShmOffset, o->second));
  }
  return std::optional<ShmParams>(std::move(out));
}

// The tensor of an input in shared memory: wraps a system region's mapping
// (zero copy; the view's keepalive keeps it mapped even if the region is
// unregistered while the request runs), or copies: when the bytes are not
// aligned for the element type, and always from a CUDA region (device to host).
Result<Tensor> TensorFromSharedMemory(const std::string& where, const ShmParams& p, DType dtype, const Shape& shape,
                                      const std::string& datatype, const SharedMemoryRegistry& shm) {
  if (dtype == DType::kString) {  // BYTES: length-prefixed elements, byte_size of them
    Result<SharedMemoryView> view = shm.View(p.region, p.offset, p.byte_size);
    if (!view.ok()) return view.status().WithContext(where);
    if (view->device < 0) return ParseBytesTensor(view->data, p.byte_size, shape, where);
    std::string host(p.byte_size, '\0');  // CUDA region: to the host first
    SP_RETURN_IF_ERROR(CopyFromView(*view, host.data(), host.size()).WithContext(where));
    return ParseBytesTensor(host.data(), host.size(), shape, where);
  }
  const uint64_t nbytes = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(dtype);
  if (p.byte_size != nbytes)
    return InvalidArgument(where, ": ", kShmByteSize, " is ", p.byte_size, " bytes (region '", p.region, "') but ",
                           datatype, " ", ShapeToString(shape), " needs ", nbytes);
  Result<SharedMemoryView> view = shm.View(p.region, p.offset, nbytes);
  if (!view.ok()) return view.status().WithContext(where);
  if (view->device < 0 && reinterpret_cast<uintptr_t>(view->data) % DTypeSize(dtype) == 0)
    return Tensor::Wrap(dtype, shape, view->keepalive, view->data);
  Tensor t = Tensor::Alloc(dtype, shape);
  SP_RETURN_IF_ERROR(CopyFromView(*view, t.mutable_raw(), nbytes).WithContext(where));
  return t;
}

// Which InferTensorContents field carries each datatype, for messages.
const char* ContentsFieldFor(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "bool_contents";
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
      return "int_contents";
    case DType::kInt64:
      return "int64_contents";
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
      return "uint_contents";
    case DType::kUInt64:
      return "uint64_contents";
    case DType::kFloat32:
      return "fp32_contents";
    case DType::kFloat64:
      return "fp64_contents";
    case DType::kString:
      return "bytes_contents";
    default:
      return nullptr;
  }
}

// Element counts of every field of `c`, by field name.
std::vector<std::pair<const char*, int>> ContentsSizes(const InferTensorContents& c) {
  return {{"bool_contents", c.bool_contents_size()},     {"int_contents", c.int_contents_size()},
          {"int64_contents", c.int64_contents_size()},   {"uint_contents", c.uint_contents_size()},
          {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
          {"fp64_contents", c.fp64_contents_size()},     {"bytes_contents", c.bytes_contents_size()}};
}

// Copies `src` into a new tensor of element type E, checking that every value
// fits E (int_contents carries INT8/INT16 as int32, uint_contents UINT8/UINT16).
template <class E, class Field>
Result<Tensor> TensorFromField(const std::string& input, DType dtype, const Shape& shape, const Field& src) {
  Tensor t = Tensor::Alloc(dtype, shape);
  E* out = t.mutable_data<E>();
  for (int i = 0; i < src.size(); ++i) {
    const auto v = src.Get(i);
    if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool> && sizeof(E) < sizeof(v)) {
      if (!std::in_range<E>(v))
        return InvalidArgument("input '", input, "': contents[", i, "] = ", v, " does not fit ", KServeDatatype(dtype));
    }
    out[i] = static_cast<E>(v);
  }
  return t;
}

Result<Tensor> TensorFromContents(const ModelInferRequest::InferInputTensor& in, DType dtype, const Shape& shape) {
  const std::string& name = in.name();
  const int64_t numel = NumElements(shape);
  const char* field = ContentsFieldFor(dtype);
  if (field == nullptr)
    return InvalidArgument("input '", name, "': ", in.datatype(),
                           " has no typed contents field; send it in raw_input_contents");
  const InferTensorContents& c = in.contents();
  int64_t count = -1;
  for (const auto& [f, n] : ContentsSizes(c)) {
    if (std::strcmp(f, field) == 0) {
      count = n;
    } else if (n > 0) {
      return InvalidArgument("input '", name, "' is ", in.datatype(), ", whose values go in contents.", field,
                             ", but the request uses contents.", f);
    }
  }
  if (count != numel)
    return InvalidArgument("input '", name, "': contents.", field, " holds ", count, " values, but shape ",
                           ShapeToString(shape), " needs ", numel);
  switch (dtype) {
    case DType::kBool:
      return TensorFromField<bool>(name, dtype, shape, c.bool_contents());
    case DType::kInt8:
      return TensorFromField<int8_t>(name, dtype, shape, c.int_contents());
    case DType::kInt16:
      return TensorFromField<int16_t>(name, dtype, shape, c.int_contents());
    case DType::kInt32:
      return TensorFromField<int32_t>(name, dtype, shape, c.int_contents());
    case DType::kInt64:
      return TensorFromField<int64_t>(name, dtype, shape, c.int64_contents());
    case DType::kUInt8:
      return TensorFromField<uint8_t>(name, dtype, shape, c.uint_contents());
    case DType::kUInt16:
      return TensorFromField<uint16_t>(name, dtype, shape, c.uint_contents());
    case DType::kUInt32:
      return TensorFromField<uint32_t>(name, dtype, shape, c.uint_contents());
    case DType::kUInt64:
      return TensorFromField<uint64_t>(name, dtype, shape, c.uint64_contents());
    case DType::kFloat32:
      return TensorFromField<float>(name, dtype, shape, c.fp32_contents());
    case DType::kFloat64:
      return TensorFromField<double>(name, dtype, shape, c.fp64_contents());
    case DType::kString:
      return Tensor::FromStrings(std::vector<std::string>(c.bytes_contents().begin(), c.bytes_contents().end()), shape);
    default:
      break;
  }
  return Internal("input '", name, "': no conversion for ", in.datatype());
}

Status ApplyRequestParameters(const ModelInferRequest& msg, InferRequest* req) {
  for (const auto& [key, value] : msg.parameters()) {
    if (key == "priority") {
      SP_ASSIGN_OR_RETURN(uint64_t priority, UnsignedParameter(key, value));
      if (priority > std::numeric_limits<uint32_t>::max())
        return InvalidArgument("request parameter 'priority' = ", priority, " is out of range");
      req->priority = static_cast<uint32_t>(priority);
    } else if (key == "timeout") {
      SP_ASSIGN_OR_RETURN(req->timeout_us, UnsignedParameter(key, value));
    } else if (key == "sequence_id") {
      switch (value.parameter_choice_case()) {
        case InferParameter::kStringParam:
          req->sequence.text = value.string_param();
          break;
        case InferParameter::kUint64Param:
          req->sequence.number = value.uint64_param();
          break;
        case InferParameter::kInt64Param:
          if (value.int64_param() < 0)
            return InvalidArgument("request parameter 'sequence_id' = ", value.int64_param(), " is negative");
          req->sequence.number = static_cast<uint64_t>(value.int64_param());
          break;
        default:
          return InvalidArgument("request parameter 'sequence_id' must be an integer or a string");
      }
    } else if (key == "sequence_start" || key == "sequence_end") {
      if (value.parameter_choice_case() != InferParameter::kBoolParam)
        return InvalidArgument("request parameter '", key, "' must be a bool");
      (key == "sequence_start" ? req->sequence.start : req->sequence.end) = value.bool_param();
    } else {
      req->parameters[key] = ParameterToString(value);
    }
  }
  return Status::Ok();
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

::grpc::Status ToGrpcStatus(const Status& status) {
  using ::grpc::StatusCode;
  StatusCode code = StatusCode::UNKNOWN;
  switch (status.code()) {
    case sampan::StatusCode::kOk:
      return ::grpc::Status::OK;
    case sampan::StatusCode::kInvalidArgument:
      code = StatusCode::INVALID_ARGUMENT;
      break;
    case sampan::StatusCode::kNotFound:
      code = StatusCode::NOT_FOUND;
      break;
    case sampan::StatusCode::kUnsupported:
      code = StatusCode::UNIMPLEMENTED;
      break;
    case sampan::StatusCode::kIoError:
      code = StatusCode::INTERNAL;
      break;
    case sampan::StatusCode::kOutOfRange:
      code = StatusCode::OUT_OF_RANGE;
      break;
    case sampan::StatusCode::kFailedPrecondition:
      code = StatusCode::FAILED_PRECONDITION;
      break;
    case sampan::StatusCode::kInternal:
      code = StatusCode::INTERNAL;
      break;
    case sampan::StatusCode::kUnavailable:
      code = StatusCode::UNAVAILABLE;
      break;
    case sampan::StatusCode::kCancelled:
      code = StatusCode::CANCELLED;
      break;
    case sampan::StatusCode::kDeadlineExceeded:
      code = StatusCode::DEADLINE_EXCEEDED;
      break;
  }
  return ::grpc::Status(code, status.message());
}

Result<InferRequest> InferRequestFromProto(std::shared_ptr<const ModelInferRequest> msg,
                                           const SharedMemoryRegistry* shm,
                                           std::vector<SharedMemoryOutput>* shm_outputs) {
  InferRequest req;
  if (msg->model_name().empty()) return InvalidArgument("ModelInferRequest.model_name is empty");
  if (shm != nullptr && shm_outputs == nullptr)
    return Internal("InferRequestFromProto: a shared-memory registry without shm_outputs");
  req.model_name = msg->model_name();
  req.model_version = msg->model_version();
  req.id = msg->id();
  SP_RETURN_IF_ERROR(ApplyRequestParameters(*msg, &req));

  // Inputs in shared memory have no raw_input_contents entry (as Triton's).
  int shm_inputs = 0;
  for (const auto& in : msg->inputs()) shm_inputs += HasSharedMemoryParameters(in.parameters()) ? 1 : 0;
  const int raw_expected = msg->inputs_size() - shm_inputs;
  const bool raw = msg->raw_input_contents_size() > 0;
  if (raw && msg->raw_input_contents_size() != raw_expected) {
    if (shm_inputs == 0)
      return InvalidArgument("the request has ", msg->inputs_size(), " inputs but ", msg->raw_input_contents_size(),
                             " raw_input_contents; there must be one per input, in the order of the inputs");
    return InvalidArgument("the request has ", raw_expected, " inputs not in shared memory but ",
                           msg->raw_input_contents_size(),
                           " raw_input_contents; there must be one per input not in shared memory, in the order of "
                           "the inputs");
  }
  req.inputs.reserve(static_cast<size_t>(msg->inputs_size()));
  int raw_index = 0;
  for (int i = 0; i < msg->inputs_size(); ++i) {
    const auto& in = msg->inputs(i);
    const std::string& name = in.name();
    if (name.empty()) return InvalidArgument("inputs[", i, "] has no name");
    const std::string where = "input '" + name + "'";  // plain appends: every request runs this
    SP_ASSIGN_OR_RETURN(std::optional<ShmParams> shm_params, ReadSharedMemoryParams(in.parameters(), where, shm));
    InferTensor t;
    t.name = name;
    t.dtype = DTypeFromKServe(in.datatype());
    if (t.dtype == DType::kUndefined)
      return InvalidArgument("input '", name, "': unknown datatype '", in.datatype(),
                             "' (expected BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64 or BYTES)");
    t.shape.assign(in.shape().begin(), in.shape().end());
    for (int64_t d : t.shape) {
      if (d < 0)
        return InvalidArgument("input '", name, "': shape ", ShapeToString(t.shape), " has a negative dimension");
    }
    if (Status s = CheckShape(t.shape); !s.ok()) return s.WithContext(StrCat("input '", name, "'"));
    const int64_t numel = NumElements(t.shape);
    if (shm_params) {
      if (in.has_contents())
        return InvalidArgument(where, " is in shared-memory region '", shm_params->region,
                               "' and also has contents; use one or the other");
      SP_ASSIGN_OR_RETURN(t.data, TensorFromSharedMemory(where, *shm_params, t.dtype, t.shape, in.datatype(), *shm));
    } else if (raw) {
      if (in.has_contents())
        return InvalidArgument("input '", name, "' has contents although the request uses raw_input_contents; ",
                               "use one or the other for all inputs");
      const int r = raw_index++;
      const std::string& bytes = msg->raw_input_contents(r);
      if (t.dtype == DType::kString) {
        SP_ASSIGN_OR_RETURN(t.data, ParseBytesTensor(bytes.data(), bytes.size(), t.shape,
                                                     StrCat("input '", name, "': raw_input_contents[", r, "]")));
        req.inputs.push_back(std::move(t));
        continue;
      }
      const uint64_t expected = static_cast<uint64_t>(numel) * DTypeSize(t.dtype);
      if (bytes.size() != expected)
        return InvalidArgument("input '", name, "': raw_input_contents[", r, "] holds ", bytes.size(), " bytes, but ",
                               in.datatype(), " ", ShapeToString(t.shape), " needs ", expected);
      // Zero copy: the tensor points into the message, which the keepalive owns.
      t.data = Tensor::Wrap(t.dtype, t.shape, msg, bytes.data());
    } else {
      SP_ASSIGN_OR_RETURN(t.data, TensorFromContents(in, t.dtype, t.shape));
    }
    req.inputs.push_back(std::move(t));
  }

  req.outputs.reserve(static_cast<size_t>(msg->outputs_size()));
  for (const auto& out : msg->outputs()) {
    const std::string where = "output '" + out.name() + "'";
    if (out.parameters().count("classification"))
      return Unsupported(where, ": the classification extension is not supported");
    SP_ASSIGN_OR_RETURN(std::optional<ShmParams> shm_params, ReadSharedMemoryParams(out.parameters(), where, shm));
    if (shm_params) {
      for (const SharedMemoryOutput& o : *shm_outputs) {
        if (o.name == out.name()) return InvalidArgument(where, " is requested in shared memory twice");
      }
      // Resolved now: an unknown region or a range beyond it fails before the
      // model runs.
      Result<SharedMemoryView> view = shm->View(shm_params->region, shm_params->offset, shm_params->byte_size);
      if (!view.ok()) return view.status().WithContext(where);
      shm_outputs->push_back(
          {out.name(), shm_params->region, shm_params->offset, shm_params->byte_size, std::move(view).value()});
    }
    req.outputs.push_back(out.name());
  }
  req.keepalive = std::const_pointer_cast<ModelInferRequest>(std::move(msg));
  return req;
}

Status InferResponseToProto(const InferResponse& response, inference::ModelInferResponse* out,
                            const std::vector<SharedMemoryOutput>& shm_outputs) {
  out->set_model_name(response.model_name);
  out->set_model_version(response.model_version);
  out->set_id(response.id);
  for (const auto& [key, value] : response.parameters) (*out->mutable_parameters())[key].set_string_param(value);
  for (const InferTensor& t : response.outputs) {
    auto* o = out->add_outputs();
    o->set_name(t.name);
    o->set_datatype(KServeDatatype(t.dtype));
    for (int64_t d : t.shape) o->add_shape(d);
    const SharedMemoryOutput* target = nullptr;
    for (const SharedMemoryOutput& s : shm_outputs) {
      if (s.name == t.name) target = &s;
    }
    // BYTES travel length-prefixed (bytes_format.h), as Triton writes them.
    const Tensor wire = t.data.is_string() ? SerializeBytesTensor(t.data) : t.data;
    if (target == nullptr) {
      // The protocol's one copy: protobuf bytes fields own their storage.
      out->add_raw_output_contents()->assign(static_cast<const char*>(wire.raw()), wire.nbytes());
      continue;
    }
    const uint64_t nbytes = wire.nbytes();
    if (nbytes > target->byte_size)
      return InvalidArgument("output '", t.name, "' has ", nbytes, " bytes, more than the ", target->byte_size,
                             " bytes given in shared-memory region '", target->region, "'");
    // A CUDA region is written host to device, on this thread (an instance's: its device is restored).
    SP_RETURN_IF_ERROR(CopyToView(target->view, wire.raw(), nbytes).WithContext(StrCat("output '", t.name, "'")));
    auto& params = *o->mutable_parameters();
    params[kShmRegion].set_string_param(target->region);
    params[kShmByteSize].set_int64_param(static_cast<int64_t>(nbytes));
    if (target->offset != 0) params[kShmOffset].set_int64_param(static_cast<int64_t>(target->offset));
    // Empty, so raw_output_contents[i] still belongs to outputs[i] (tritonclient indexes them together).
    out->add_raw_output_contents();
  }
  return Status::Ok();
}

void ModelMetadataToProto(const ModelMetadata& metadata, inference::ModelMetadataResponse* out) {
  out->set_name(metadata.name);
  for (const auto& v : metadata.versions) out->add_versions(v);
  out->set_platform(metadata.platform);
  auto fill = [](const TensorMetadata& t, inference::ModelMetadataResponse::TensorMetadata* o) {
    o->set_name(t.name);
    o->set_datatype(t.datatype);
    for (int64_t d : t.shape) o->add_shape(d);
  };
  for (const auto& t : metadata.inputs) fill(t, out->add_inputs());
  for (const auto& t : metadata.outputs) fill(t, out->add_outputs());
}

void ModelStatsToProto(const ModelStats& stats, inference::ModelStatistics* out) {
  auto dur = [](const DurationStat& d, inference::StatisticDuration* o) {
    o->set_count(d.count);
    o->set_ns(d.ns);
  };
  out->set_name(stats.name);
  out->set_version(stats.version);
  out->set_last_inference(stats.last_inference_ms);
  out->set_inference_count(stats.inference_count);
  out->set_execution_count(stats.execution_count);
  const InferStats& s = stats.inference_stats;
  auto* o = out->mutable_inference_stats();
  dur(s.success, o->mutable_success());
  dur(s.fail, o->mutable_fail());
  dur(s.queue, o->mutable_queue());
  dur(s.compute_input, o->mutable_compute_input());
  dur(s.compute_infer, o->mutable_compute_infer());
  dur(s.compute_output, o->mutable_compute_output());
  dur(s.cache_hit, o->mutable_cache_hit());
  dur(s.cache_miss, o->mutable_cache_miss());
  for (const BatchStat& b : stats.batch_stats) {
    auto* ob = out->add_batch_stats();
    ob->set_batch_size(b.batch_size);
    dur(b.compute_input, ob->mutable_compute_input());
    dur(b.compute_infer, ob->mutable_compute_infer());
    dur(b.compute_output, ob->mutable_compute_output());
  }
  for (const MemoryUsage& m : stats.memory_usage) {
    auto* om = out->add_memory_usage();
    om->set_type(m.type);
    om->set_id(m.id);
    om->set_byte_size(m.byte_size);
  }
  for (const auto& [index, r] : stats.response_stats) {
    auto& o2 = (*out->mutable_response_stats())[std::to_string(index)];
    dur(r.compute_infer, o2.mutable_compute_infer());
    dur(r.compute_output, o2.mutable_compute_output());
    dur(r.success, o2.mutable_success());
    dur(r.fail, o2.mutable_fail());
    dur(r.empty_response, o2.mutable_empty_response());
    dur(r.cancel, o2.mutable_cancel());
  }
}

bool IsLoopbackPeer(std::string_view peer_view) {
  // gRPC percent-encodes the brackets of IPv6 peers in some versions ("ipv6:%5B::1%5D:80").
  const std::string peer = PercentDecode(peer_view);
  if (peer.rfind("unix:", 0) == 0 || peer.rfind("unix-abstract:", 0) == 0) return true;
  if (peer.rfind("ipv4:", 0) == 0) {
    const std::string hostport = peer.substr(5);
    const size_t colon = hostport.rfind(':');
    const std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
    in_addr a{};
    return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
  }
  if (peer.rfind("ipv6:", 0) == 0) {
    const size_t open = peer.find('['), close = peer.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return false;
    const std::string host = peer.substr(open + 1, close - open - 1);
    in6_addr a{};
    if (inet_pton(AF_INET6, host.c_str(), &a) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

bool BearerTokenMatches(std::string_view authorization, std::string_view token) {
  constexpr std::string_view kScheme = "bearer ";
  if (token.empty() || authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  return SecretEquals(authorization.substr(kScheme.size()), token);
}

}  // namespace sampan::server
