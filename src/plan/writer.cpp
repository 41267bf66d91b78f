// Plan -> bytes.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstring>
#include <fstream>
#include <unordered_map>

#include "plan.pb.h"
#include "plan/plan.h"

namespace sampan::plan {

namespace pb = ::sampan::planfile;

namespace {

class BlobWriter {
 public:
  void Add(const Tensor& t, pb::WeightRef* ref) {
    if (t.is_sequence() || t.is_optional()) {
      ref->set_dtype(static_cast<int32_t>(t.dtype()));
      ref->set_elem_dtype(static_cast<int32_t>(t.elem_dtype()));
      for (const Tensor& item : t.items()) Add(item, ref->add_items());
      return;
    }
    if (t.is_string()) {
      ref->set_dtype(static_cast<int32_t>(t.dtype()));
      for (int64_t d : t.shape()) ref->add_shape(d);
      for (int64_t i = 0; i < t.numel(); ++i) ref->add_strings(t.strings()[i]);
      return;
    }
    size_t offset = (blob_.size() + kAlignment - 1) / kAlignment * kAlignment;
    blob_.resize(offset, '\0');
    blob_.append(static_cast<const char*>(t.raw()), t.nbytes());
    ref->set_dtype(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.shape()) ref->add_shape(d);
    ref->set_offset(offset);
    ref->set_nbytes(t.nbytes());
  }
  std::string& blob() { return blob_; }

 private:
  std::string blob_;
};

void ToProto(const ir::TensorType& t, pb::TensorType* out) {
  out->set_dtype(static_cast<int32_t>(t.dtype));
  out->set_has_rank(t.dims.has_value());
  if (t.dims)
    for (const ir::Dim& d : *t.dims) {
      pb::Dim* pd = out->add_dims();
      pd->set_value(d.value);
      pd->set_param(d.param);
    }
}

Status GraphToProto(const ir::Graph& g, const Plan* plan, BlobWriter& blob, pb::Graph* pg);

Status AttrToProto(const std::string& name, const ir::Attribute& a, BlobWriter& blob, pb::Attribute* out) {
  out->set_name(name);
  out->set_type(static_cast<int32_t>(a.type));
  switch (a.type) {
    case ir::AttrType::kFloat:
      out->set_f(a.f);
      break;
    case ir::AttrType::kInt:
      out->set_i(a.i);
      break;
    case ir::AttrType::kString:
      out->set_s(a.s);
      break;
    case ir::AttrType::kFloats:
      for (float f : a.floats) out->add_floats(f);
      break;
    case ir::AttrType::kInts:
      for (int64_t i : a.ints) out->add_ints(i);
      break;
    case ir::AttrType::kStrings:
      for (const auto& s : a.strings) out->add_strings(s);
      break;
    case ir::AttrType::kTensor:
      blob.Add(a.t, out->mutable_t());
      break;
    case ir::AttrType::kTensors:
      for (const auto& t : a.tensors) blob.Add(t, out->add_tensors());
      break;
    case ir::AttrType::kGraph:
      if (!a.g) return InvalidArgument("attribute '", name, "': no graph");
      SP_RETURN_IF_ERROR(GraphToProto(*a.g, nullptr, blob, out->mutable_g()));
      break;
    case ir::AttrType::kGraphs:
      for (const auto& sub : a.graphs) {
        if (!sub) return InvalidArgument("attribute '", name, "': no graph");
        SP_RETURN_IF_ERROR(GraphToProto(*sub, nullptr, blob, out->add_graphs()));
      }
      break;
  }
  return Status::Ok();
}

// A graph and, recursively, its subgraphs. `plan` (the top level only) supplies each
// node's precision and tactic; subgraph nodes run on the reference kernels and have none.
Status GraphToProto(const ir::Graph& g, const Plan* plan, BlobWriter& blob, pb::Graph* pg) {
  pg->set_name(g.name);
  for (const auto& [domain, version] : g.opsets) {  // std::map: key order, so one build gives one byte sequence
    auto* e = pg->add_opsets();
    e->set_key(domain);
    e->set_value(version);
  }
  std::unordered_map<const ir::Value*, int32_t> index;
  for (const ir::Value* v : g.values()) {
    index[v] = static_cast<int32_t>(pg->values_size());
    pb::Value* pv = pg->add_values();
    pv->set_name(v->name());
    ToProto(v->type, pv->mutable_type());
    if (v->is_constant()) {
      pv->set_is_constant(true);
      blob.Add(v->data, pv->mutable_constant());
    }
  }
  auto idx = [&](const ir::Value* v) { return v == nullptr ? -1 : index.at(v); };
  for (const auto& n : g.nodes()) {
    pb::Node* pn = pg->add_nodes();
    pn->set_name(n->name);
    pn->set_op_type(n->op_type);
    pn->set_domain(n->domain);
    for (const ir::Value* v : n->inputs()) pn->add_inputs(idx(v));
    for (const ir::Value* v : n->outputs()) pn->add_outputs(idx(v));
    for (const auto& [name, a] : n->attrs)
      SP_RETURN_IF_ERROR(AttrToProto(name, a, blob, pn->add_attrs()).WithContext(n->Label()));
    if (plan == nullptr) continue;
    auto c = plan->choices.find(n->name);
    if (c != plan->choices.end()) {
      pn->set_precision(c->second.precision);
      const Tactic& t = c->second.tactic;
      pn->set_kernel_family(t.family);
      if (t.algo >= 0) pn->set_algo(t.algo);
      pn->set_tf32(t.tf32);
      pn->set_nhwc(t.nhwc);
    }
  }
  for (const ir::Value* v : g.inputs()) pg->add_inputs(idx(v));
  for (const ir::Value* v : g.outputs()) pg->add_outputs(idx(v));
  for (const ir::Value* v : g.captures()) pg->add_captures(idx(v));
  return Status::Ok();
}

}  // namespace

Result<std::string> SerializePlan(const Plan& plan) {
  if (!plan.graph) return InvalidArgument("plan has no graph");
  pb::PlanProto proto;
  proto.set_format_version(plan.format_version);
  proto.set_builder_version(plan.builder_version);
  proto.set_source_model(plan.source_model);
  proto.set_created_utc(plan.created_utc);
  auto* fp = proto.mutable_fingerprint();
  fp->set_backend(plan.fingerprint.backend);
  fp->set_isa(plan.fingerprint.isa);
  fp->set_gpu_name(plan.fingerprint.gpu_name);
  fp->set_compute_capability(plan.fingerprint.compute_capability);
  fp->set_cuda_version(plan.fingerprint.cuda_version);
  fp->set_cudnn_version(plan.fingerprint.cudnn_version);
  fp->set_cublas_version(plan.fingerprint.cublas_version);
  auto* opts = proto.mutable_options();
  opts->set_precision(plan.options.precision);
  for (const auto& s : plan.options.layer_precision) opts->add_layer_precision(s);
  for (const auto& s : plan.options.disabled_passes) opts->add_disabled_passes(s);
  opts->set_workspace_bytes(plan.options.workspace_bytes);
  opts->set_portable(plan.options.portable);
  opts->set_quantization(plan.options.quantization);
  for (const Profile& p : plan.profiles) {
    auto* pp = proto.add_profiles();
    for (const auto& [name, r] : p) {
      auto* s = pp->add_shapes();
      s->set_input(name);
      for (int64_t d : r.min) s->add_min(d);
      for (int64_t d : r.opt) s->add_opt(d);
      for (int64_t d : r.max) s->add_max(d);
    }
  }
  for (const auto& r : plan.rewrites) proto.add_rewrites(r);
  for (const auto& [key, value] : plan.backend_data) {  // std::map: key order
    auto* d = proto.add_backend_data();
    d->set_key(key);
    d->set_value(value);
  }

  BlobWriter blob;
  SP_RETURN_IF_ERROR(GraphToProto(*plan.graph, &plan, blob, proto.mutable_graph()));

  std::string meta;
  {
    // Deterministic: map fields (opsets) in key order, so one build gives one byte sequence.
    google::protobuf::io::StringOutputStream stream(&meta);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!proto.SerializeToCodedStream(&coded) || coded.HadError())
      return Internal("plan metadata does not serialize (over 2 GiB?)");
  }
  PlanHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format_version = plan.format_version;
  h.header_size = sizeof(PlanHeader);
  h.meta_offset = sizeof(PlanHeader);
  h.meta_size = meta.size();
  h.blob_offset = (h.meta_offset + h.meta_size + kAlignment - 1) / kAlignment * kAlignment;
  h.blob_size = blob.blob().size();
  std::string out(h.blob_offset + h.blob_size, '\0');
  std::memcpy(out.data() + h.meta_offset, meta.data(), meta.size());
  if (h.blob_size) std::memcpy(out.data() + h.blob_offset, blob.blob().data(), h.blob_size);
  h.checksum = Hash64(out.data() + h.meta_offset, out.size() - h.meta_offset);
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

Status WritePlan(const Plan& plan, const std::string& path) {
  SP_ASSIGN_OR_RETURN(std::string bytes, SerializePlan(plan));
  return WritePlanBytes(bytes, path);
}

Status WritePlanBytes(const std::string& bytes, const std::string& path) {
  // Write beside the target and rename, so a crash never leaves half a plan.
  std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return IoError("cannot write plan '", tmp, "'");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) return IoError("writing plan '", tmp, "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IoError("cannot move plan into place at '", path, "'");
  return Status::Ok();
}

}  // namespace sampan::plan
