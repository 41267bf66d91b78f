// bytes -> Plan, validating everything: a plan file is external input.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "ops/run_node.h"
#include "plan.pb.h"
#include "plan/plan.h"
#include "plan/signature.h"

namespace sampan::plan {

namespace pb = ::sampan::planfile;

namespace {

struct Source {
  const char* data;
  size_t size;
  std::shared_ptr<const void> owner;
  std::string what;
};

Result<Tensor> TensorFromRef(const pb::WeightRef& ref, const Source& src, const PlanHeader& h,
                             const std::string& what) {
  if (ref.dtype() == static_cast<int32_t>(DType::kSequence) || ref.dtype() == static_cast<int32_t>(DType::kOptional)) {
    const bool seq = ref.dtype() == static_cast<int32_t>(DType::kSequence);
    const int32_t elem = ref.elem_dtype();
    if (elem != 0 && elem != static_cast<int32_t>(DType::kSequence) && !IsKnownDType(elem))
      return InvalidArgument(src.what, ": ", what, " holds elements of invalid dtype ", elem);
    if (!seq && ref.items_size() > 1)
      return InvalidArgument(src.what, ": ", what, " is an optional holding ", ref.items_size(), " values");
    std::vector<Tensor> items;
    for (int i = 0; i < ref.items_size(); ++i) {
      SP_ASSIGN_OR_RETURN(Tensor t, TensorFromRef(ref.items(i), src, h, StrCat(what, " item ", i)));
      if (elem != 0 && static_cast<int32_t>(t.dtype()) != elem)
        return InvalidArgument(src.what, ": ", what, " item ", i, " is ", DTypeName(t.dtype()), ", not ",
                               DTypeName(static_cast<DType>(elem)));
      items.push_back(std::move(t));
    }
    if (seq) return Tensor::Sequence(static_cast<DType>(elem), std::move(items));
    if (items.empty()) return Tensor::Optional(static_cast<DType>(elem), std::nullopt);
    return Tensor::Optional(static_cast<DType>(elem), std::move(items[0]));
  }
  if (ref.items_size() != 0) return InvalidArgument(src.what, ": ", what, " is a tensor but holds items");
  if (!IsKnownDType(ref.dtype()) || !IsStorableDType(static_cast<DType>(ref.dtype())))
    return InvalidArgument(src.what, ": ", what, " has invalid dtype ", ref.dtype());
  const DType dtype = static_cast<DType>(ref.dtype());
  Shape shape(ref.shape().begin(), ref.shape().end());
  Status st = CheckShape(shape, int64_t{1} << 40);
  if (!st.ok()) return st.WithContext(StrCat(src.what, ": ", what));
  if (dtype == DType::kString) {
    if (static_cast<int64_t>(ref.strings_size()) != NumElements(shape))
      return InvalidArgument(src.what, ": ", what, " holds ", ref.strings_size(), " strings but ", ShapeToString(shape),
                             " needs ", NumElements(shape));
    return Tensor::FromStrings(std::vector<std::string>(ref.strings().begin(), ref.strings().end()), std::move(shape));
  }
  if (ref.strings_size() != 0)
    return InvalidArgument(src.what, ": ", what, " is ", DTypeName(dtype), " but holds strings");
  const uint64_t nbytes = DTypeBytes(dtype, NumElements(shape));
  if (nbytes != ref.nbytes())
    return InvalidArgument(src.what, ": ", what, " records ", ref.nbytes(), " bytes but ", DTypeName(dtype),
                           ShapeToString(shape), " needs ", nbytes);
  if (ref.offset() % kAlignment != 0 || ref.offset() > h.blob_size || nbytes > h.blob_size - ref.offset())
    return OutOfRange(src.what, ": ", what, " lies outside the weights blob (offset ", ref.offset(), ", ", nbytes,
                      " bytes, blob ", h.blob_size, " bytes)");
  return Tensor::Wrap(dtype, std::move(shape), src.owner, src.data + h.blob_offset + ref.offset());
}

Result<ir::TensorType> TypeFromProto(const pb::TensorType& t, const std::string& what) {
  ir::TensorType out;
  if (t.dtype() != 0 && !IsKnownDType(t.dtype()) && t.dtype() != static_cast<int>(DType::kSequence) &&
      t.dtype() != static_cast<int>(DType::kOptional))
    return InvalidArgument(what, ": invalid dtype ", t.dtype());
  out.dtype = static_cast<DType>(t.dtype());
  if (t.has_rank()) {
    out.dims = ir::Dims{};
    for (const auto& d : t.dims()) out.dims->push_back(ir::Dim{d.value() < 0 ? -1 : d.value(), d.param()});
  }
  return out;
}

Result<std::shared_ptr<ir::Graph>> GraphFromProto(const pb::Graph& pg, const Source& src, const PlanHeader& h,
                                                  Plan* plan, const std::string& where);

Result<ir::Attribute> AttrFromProto(const pb::Attribute& a, const Source& src, const PlanHeader& h,
                                    const std::string& what) {
  ir::Attribute out;
  if (a.type() < 0 || a.type() > static_cast<int>(ir::AttrType::kGraphs))
    return InvalidArgument(src.what, ": ", what, " has invalid type ", a.type());
  out.type = static_cast<ir::AttrType>(a.type());
  switch (out.type) {
    case ir::AttrType::kFloat:
      out.f = a.f();
      break;
    case ir::AttrType::kInt:
      out.i = a.i();
      break;
    case ir::AttrType::kString:
      out.s = a.s();
      break;
    case ir::AttrType::kFloats:
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case ir::AttrType::kInts:
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case ir::AttrType::kStrings:
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case ir::AttrType::kTensor: {
      SP_ASSIGN_OR_RETURN(out.t, TensorFromRef(a.t(), src, h, what));
      break;
    }
    case ir::AttrType::kTensors:
      for (const auto& r : a.tensors()) {
        SP_ASSIGN_OR_RETURN(Tensor t, TensorFromRef(r, src, h, what));
        out.tensors.push_back(std::move(t));
      }
      break;
    case ir::AttrType::kGraph: {
      if (!a.has_g()) return InvalidArgument(src.what, ": ", what, " is a graph attribute without a graph");
      SP_ASSIGN_OR_RETURN(out.g, GraphFromProto(a.g(), src, h, nullptr, what));
      break;
    }
    case ir::AttrType::kGraphs:
      for (const auto& sub : a.graphs()) {
        SP_ASSIGN_OR_RETURN(auto g, GraphFromProto(sub, src, h, nullptr, what));
        out.graphs.push_back(std::move(g));
      }
      break;
  }
  return out;
}

// A graph and, recursively, its subgraphs (plan == nullptr: a subgraph, whose nodes carry
// no tactic and which may have captures). `where` names the attribute holding a subgraph.
Result<std::shared_ptr<ir::Graph>> GraphFromProto(const pb::Graph& pg, const Source& src, const PlanHeader& h,
                                                  Plan* plan, const std::string& where) {
  auto graph = std::make_shared<ir::Graph>();
  // Errors inside a subgraph say which attribute holds it.
  const std::string in = where.empty() ? src.what : StrCat(src.what, ": ", where);
  graph->name = pg.name();
  for (const auto& e : pg.opsets()) graph->opsets[e.key()] = e.value();
  std::set<int32_t> capture_index(pg.captures().begin(), pg.captures().end());
  if (capture_index.size() != static_cast<size_t>(pg.captures_size()))
    return InvalidArgument(in, ": a value is listed twice among the captures");
  if (plan != nullptr && !capture_index.empty()) return InvalidArgument(in, ": the top-level graph has captures");
  for (int32_t i : capture_index)
    if (i < 0 || i >= pg.values_size())
      return InvalidArgument(in, ": capture refers to value ", i, " of ", pg.values_size());
  std::vector<ir::Value*> values;
  for (int i = 0; i < pg.values_size(); ++i) {
    const pb::Value& pv = pg.values(i);
    std::string what = StrCat("value ", i, " '", pv.name(), "'");
    Result<ir::Value*> v = [&]() -> Result<ir::Value*> {
      if (pv.is_constant()) {
        if (capture_index.count(i)) return InvalidArgument(what, ": a constant cannot be a capture");
        // (TensorFromRef's errors name the plan themselves.)
        auto t = TensorFromRef(pv.constant(), src, h, where.empty() ? what : StrCat(where, ", ", what));
        if (!t.ok()) return t.status();
        return graph->AddConstant(pv.name(), std::move(t).value());
      }
      SP_ASSIGN_OR_RETURN(ir::TensorType type, TypeFromProto(pv.type(), what));
      if (capture_index.count(i)) return graph->AddCapture(pv.name(), type);
      return graph->AddValue(pv.name(), type);
    }();
    if (!v.ok()) return pv.is_constant() && !capture_index.count(i) ? v.status() : v.status().WithContext(in);
    values.push_back(*v);
  }
  auto lookup = [&](int32_t i, const std::string& what) -> Result<ir::Value*> {
    if (i == -1) return static_cast<ir::Value*>(nullptr);
    if (i < 0 || static_cast<size_t>(i) >= values.size())
      return InvalidArgument(in, ": ", what, " refers to value ", i, " of ", values.size());
    return values[static_cast<size_t>(i)];
  };
  for (int n = 0; n < pg.nodes_size(); ++n) {
    const pb::Node& pn = pg.nodes(n);
    std::string what = StrCat("node ", n, " '", pn.name(), "'");
    std::vector<ir::Value*> ins, outs;
    for (int32_t i : pn.inputs()) {
      SP_ASSIGN_OR_RETURN(ir::Value * v, lookup(i, what));
      ins.push_back(v);
    }
    for (int32_t i : pn.outputs()) {
      SP_ASSIGN_OR_RETURN(ir::Value * v, lookup(i, what));
      outs.push_back(v);
    }
    Result<ir::Node*> node = graph->AddNode(pn.op_type(), ins, outs, pn.name());
    if (!node.ok()) return node.status().WithContext(in);
    (*node)->domain = pn.domain();
    for (const auto& a : pn.attrs()) {
      SP_ASSIGN_OR_RETURN(
          ir::Attribute attr,
          AttrFromProto(a, src, h, StrCat(where.empty() ? "" : where + ", ", what, " attribute '", a.name(), "'")));
      (*node)->attrs[a.name()] = std::move(attr);
    }
    if (plan == nullptr) continue;  // subgraph nodes carry no tactic
    Tactic tactic;
    if (!pn.tactic().empty()) {  // a plan written before the structured fields
      auto t = Tactic::Parse(pn.tactic());
      if (!t.ok()) return t.status().WithContext(StrCat(in, ": node '", pn.name(), "'"));
      tactic = *t;
    }
    if (!pn.kernel_family().empty()) tactic.family = pn.kernel_family();
    if (pn.has_algo()) {
      if (pn.algo() < 0) return InvalidArgument(in, ": node '", pn.name(), "': algorithm ", pn.algo(), " < 0");
      tactic.algo = pn.algo();
    }
    tactic.tf32 = tactic.tf32 || pn.tf32();
    tactic.nhwc = tactic.nhwc || pn.nhwc();
    if (!pn.precision().empty() || !tactic.empty()) plan->choices[pn.name()] = NodeChoice{pn.precision(), tactic};
  }
  for (int32_t i : pg.inputs()) {
    SP_ASSIGN_OR_RETURN(ir::Value * v, lookup(i, "graph input"));
    if (v == nullptr) return InvalidArgument(in, ": graph input index -1");
    graph->inputs().push_back(v);
  }
  for (int32_t i : pg.outputs()) {
    SP_ASSIGN_OR_RETURN(ir::Value * v, lookup(i, "graph output"));
    if (v == nullptr) return InvalidArgument(in, ": graph output index -1");
    graph->outputs().push_back(v);
  }
  // Captures bind by position: the listed order, whatever order the values were made in.
  graph->captures().clear();
  for (int32_t i : pg.captures()) graph->captures().push_back(values[static_cast<size_t>(i)]);
  return graph;
}

// Every profile names graph inputs, with min/opt/max of the input's rank and
// 0 <= min <= opt <= max (the runtime indexes them by the input's dims).
Status CheckProfiles(const std::vector<Profile>& profiles, const ir::Graph& graph) {
  for (size_t p = 0; p < profiles.size(); ++p) {
    for (const auto& [name, r] : profiles[p]) {
      const ir::Value* input = nullptr;
      for (const ir::Value* v : graph.inputs())
        if (v->name() == name) input = v;
      const std::string where = StrCat("profile ", p, ", input '", name, "'");
      if (!input) return InvalidArgument(where, ": the graph has no such input");
      if (r.min.size() != r.opt.size() || r.min.size() != r.max.size())
        return InvalidArgument(where, ": min, opt and max have different ranks (", r.min.size(), ", ", r.opt.size(),
                               ", ", r.max.size(), ")");
      if (input->type.has_rank() && input->type.dims->size() != r.min.size())
        return InvalidArgument(where, ": shapes of rank ", r.min.size(), " for an input of rank ",
                               input->type.dims->size());
      for (size_t d = 0; d < r.min.size(); ++d)
        if (r.min[d] < 0 || r.min[d] > r.opt[d] || r.opt[d] > r.max[d])
          return InvalidArgument(where, ": dimension ", d, " needs 0 <= min <= opt <= max, got ", r.min[d], ", ",
                                 r.opt[d], ", ", r.max[d]);
    }
  }
  return Status::Ok();
}

Result<Plan> Parse(const Source& src) {
  if (src.size == 0) return InvalidArgument(src.what, ": not a Sampan plan (empty file)");
  if (std::memcmp(src.data, kMagic, std::min(src.size, sizeof(kMagic))) != 0)
    return InvalidArgument(src.what, ": not a Sampan plan (bad magic)");
  if (src.size < sizeof(PlanHeader))
    return InvalidArgument(src.what, ": plan is truncated (", src.size, " bytes is shorter than the ",
                           sizeof(PlanHeader), "-byte plan header)");
  PlanHeader h;
  std::memcpy(&h, src.data, sizeof(h));
  if (h.format_version > kFormatVersion || h.format_version < kMinFormatVersion)
    return FailedPrecondition(src.what, ": plan format version ", h.format_version, " is not supported by this build",
                              " (it reads versions ", kMinFormatVersion, " to ", kFormatVersion,
                              "); rebuild the plan with this version of sampan");
  // Written so that no sum can wrap around (the header is not covered by the checksum).
  if (h.header_size != sizeof(PlanHeader) || h.meta_offset < sizeof(PlanHeader) || h.meta_offset > h.blob_offset ||
      h.meta_size > h.blob_offset - h.meta_offset || h.meta_size > static_cast<uint64_t>(INT32_MAX) ||
      h.blob_offset % kAlignment != 0)
    return InvalidArgument(src.what, ": corrupt plan header");
  const uint64_t end = h.blob_offset + h.blob_size;
  if (end < h.blob_offset || end > src.size)
    return InvalidArgument(src.what, ": plan is truncated (header describes ", end, " bytes, file has ", src.size, ")");
  // A signature trailer (plan/signature.h) may follow; whoever requires one checks it
  // (VerifyPlanSignature). Anything else after the plan is damage.
  const bool signature = src.size - end == kTrailerSize && std::memcmp(src.data + end, kSignatureMagic, 8) == 0;
  if (end < src.size && !signature)
    return InvalidArgument(src.what, ": plan has ", src.size - end, " unexpected trailing bytes");
  const uint64_t sum = Hash64(src.data + h.meta_offset, end - h.meta_offset);
  if (sum != h.checksum) return InvalidArgument(src.what, ": plan checksum mismatch (the file is corrupt)");

  pb::PlanProto proto;
  if (!proto.ParseFromArray(src.data + h.meta_offset, static_cast<int>(h.meta_size)))
    return InvalidArgument(src.what, ": plan metadata does not parse");
  Plan plan;
  plan.format_version = h.format_version;
  plan.builder_version = proto.builder_version();
  plan.source_model = proto.source_model();
  plan.created_utc = proto.created_utc();
  const auto& fp = proto.fingerprint();
  plan.fingerprint = Fingerprint{fp.backend(),      fp.isa(),           fp.gpu_name(),      fp.compute_capability(),
                                 fp.cuda_version(), fp.cudnn_version(), fp.cublas_version()};
  const auto& o = proto.options();
  plan.options.precision = o.precision();
  plan.options.layer_precision.assign(o.layer_precision().begin(), o.layer_precision().end());
  plan.options.disabled_passes.assign(o.disabled_passes().begin(), o.disabled_passes().end());
  plan.options.workspace_bytes = o.workspace_bytes();
  plan.options.portable = o.portable();
  plan.options.quantization = o.quantization();
  for (const auto& p : proto.profiles()) {
    Profile prof;
    for (const auto& s : p.shapes())
      prof[s.input()] = ShapeRange{
          {s.min().begin(), s.min().end()}, {s.opt().begin(), s.opt().end()}, {s.max().begin(), s.max().end()}};
    plan.profiles.push_back(std::move(prof));
  }
  plan.rewrites.assign(proto.rewrites().begin(), proto.rewrites().end());
  for (const auto& d : proto.backend_data()) {
    if (!plan.backend_data.emplace(d.key(), d.value()).second)
      return InvalidArgument(src.what, ": backend data key '", d.key(), "' appears twice");
  }

  SP_ASSIGN_OR_RETURN(std::shared_ptr<ir::Graph> graph, GraphFromProto(proto.graph(), src, h, &plan, ""));
  Status st = ops::CheckOpsRegistered(*graph);
  if (st.ok()) st = ir::Verify(*graph);
  if (st.ok()) st = ops::InferTypes(*graph);
  if (st.ok()) st = CheckProfiles(plan.profiles, *graph);
  if (!st.ok()) return st.WithContext(src.what);
  plan.graph = std::move(graph);
  return plan;
}

}  // namespace

Result<Plan> ParsePlan(std::shared_ptr<const std::string> bytes, const std::string& what) {
  if (reinterpret_cast<uintptr_t>(bytes->data()) % kAlignment == 0) {
    Source src{bytes->data(), bytes->size(), bytes, what};
    return Parse(src);
  }
  // Weights are used in place and tensors are 64-byte aligned: copy to an aligned buffer.
  const size_t size = (bytes->size() + kAlignment - 1) / kAlignment * kAlignment;
  std::shared_ptr<char> copy(static_cast<char*>(std::aligned_alloc(kAlignment, std::max(size, kAlignment))),
                             [](char* p) { std::free(p); });
  if (!copy) return IoError(what, ": cannot allocate ", size, " bytes for the plan");
  if (!bytes->empty()) std::memcpy(copy.get(), bytes->data(), bytes->size());
  Source src{copy.get(), bytes->size(), copy, what};
  return Parse(src);
}

Result<Plan> ReadPlan(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open plan '", path, "'");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'", path, "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(PlanHeader)) {
    char head[sizeof(PlanHeader)];
    const ssize_t got = ::pread(fd, head, size, 0);
    ::close(fd);
    if (got != static_cast<ssize_t>(size)) return IoError("cannot read plan '", path, "'");
    Source src{head, size, nullptr, path};
    return Parse(src).status();  // bad magic or truncated
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return IoError("cannot map plan '", path, "'");
  std::shared_ptr<const void> owner(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  Source src{static_cast<const char*>(map), size, owner, path};
  return Parse(src);
}

bool LooksLikePlan(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[sizeof(kMagic)];
  const bool ok = ::read(fd, magic, sizeof(magic)) == static_cast<ssize_t>(sizeof(magic)) &&
                  std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace sampan::plan
