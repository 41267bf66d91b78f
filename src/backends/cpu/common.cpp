// The family table and the helpers kernel factories share.
#include <algorithm>
#include <set>

#include "backends/cpu/exec_arena.h"
#include "backends/cpu/kernels.h"

namespace sampan::cpu {

const std::vector<KernelFamily>& Families() {
  static const std::vector<KernelFamily> families = {
      kConvFamily,   kConvTransposeFamily, kMatMulFamily,    kGemmFamily,         kPoolFamily,      kUnaryFamily,
      kBinaryFamily, kSoftmaxFamily,       kLayerNormFamily, kAddLayerNormFamily, kBatchNormFamily, kAttentionFamily,
      kViewFamily,   kTransposeFamily,     kConcatFamily,    kSliceFamily,        kSplitFamily,     kGatherFamily,
      kCastFamily,   kResizeFamily,        kQuantizedFamily, kQdqFamily,          kQAddFamily,      kQPointwiseFamily,
  };
  return families;
}

const KernelFamily* FindFamily(const std::string& tactic) {
  for (const KernelFamily& f : Families())
    if (tactic == f.tactic) return &f;
  return nullptr;
}

bool TouchesStrings(const ir::Node& node) {
  for (const ir::Value* v : node.inputs())
    if (v != nullptr && IsObjectDType(v->type.dtype)) return true;
  for (const ir::Value* v : node.outputs())
    if (v != nullptr && IsObjectDType(v->type.dtype)) return true;
  return false;
}

const KernelFamily* ChooseFamily(const ir::Node& node) {
  if (TouchesStrings(node)) return nullptr;  // string tensors are objects: reference steps only
  for (const KernelFamily& f : Families())
    if (f.accepts(node)) return &f;
  return nullptr;
}

bool AllFloat32(const ir::Node& node) {
  auto ok = [](const ir::Value* v) { return v == nullptr || v->type.dtype == DType::kFloat32; };
  for (const ir::Value* v : node.inputs())
    if (!ok(v)) return false;
  for (const ir::Value* v : node.outputs())
    if (!ok(v)) return false;
  return true;
}

Result<ops::FusedActivation> FusedActivationOf(const ir::Node& node) {
  if (node.domain != ops::kSampanDomain) return ops::FusedActivation{};
  Result<ops::FusedActivation> a = ops::ReadActivation(node);
  if (!a.ok()) return Unsupported(a.status().message());
  return a;
}

void AppendActivation(dnnl::post_ops& po, const ops::FusedActivation& act) {
  using alg = dnnl::algorithm;
  using ops::Activation;
  switch (act.kind) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      po.append_eltwise(1.f, alg::eltwise_relu, 0.f, 0.f);
      break;
    case Activation::kLeakyRelu:
      po.append_eltwise(1.f, alg::eltwise_relu, act.p0, 0.f);
      break;
    case Activation::kSigmoid:
      po.append_eltwise(1.f, alg::eltwise_logistic, 0.f, 0.f);
      break;
    case Activation::kSiLU:
      po.append_eltwise(1.f, alg::eltwise_swish, 1.f, 0.f);
      break;
    case Activation::kTanh:
      po.append_eltwise(1.f, alg::eltwise_tanh, 0.f, 0.f);
      break;
    case Activation::kHardSwish:
      po.append_eltwise(1.f, alg::eltwise_hardswish, 0.f, 0.f);
      break;
    case Activation::kGelu:
      po.append_eltwise(1.f, alg::eltwise_gelu_erf, 0.f, 0.f);
      break;
    case Activation::kGeluTanh:
      po.append_eltwise(1.f, alg::eltwise_gelu_tanh, 0.f, 0.f);
      break;
    case Activation::kClip:
      po.append_eltwise(1.f, alg::eltwise_clip, act.p0, act.p1);
      break;
    case Activation::kHardSigmoid:  // max(0, min(1, alpha*x + beta))
      po.append_eltwise(1.f, alg::eltwise_linear, act.p0, act.p1);
      po.append_eltwise(1.f, alg::eltwise_clip, 0.f, 1.f);
      break;
  }
}

bool DenseBlockedLayout(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0) return false;
  const auto& blk = d.format_desc.blocking;
  if (blk.inner_nblks > 1 || (blk.inner_nblks == 1 && blk.inner_idxs[0] != 1)) return false;
  int64_t n = 1;
  for (int i = 0; i < d.ndims; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return false;
    n *= d.dims[i];
  }
  if (n == 0 || static_cast<int64_t>(md.get_size()) != n * 4) return false;  // dense
  if (blk.inner_nblks == 1) return true;                                     // nChw8c, nChw16c
  // Channels-last (nhwc, nwc, ndhwc): channels innermost, the rest row-major. Other strided
  // layouts (a Transpose's view) take the plain path.
  if (d.ndims < 3 || d.dims[1] == 1 || blk.strides[1] != 1) return false;
  int64_t acc = d.dims[1];
  for (int i = d.ndims; i-- > 0;) {
    if (i == 1) continue;
    if (d.dims[i] != 1 && blk.strides[i] != acc) return false;
    acc *= d.dims[i];
  }
  return true;
}

bool PaddedChannelBlockedLayout(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0) return false;
  const auto& blk = d.format_desc.blocking;
  if (blk.inner_nblks != 1 || blk.inner_idxs[0] != 1 || d.ndims < 2) return false;
  int64_t n = 1;
  for (int i = 0; i < d.ndims; ++i) {
    if (i != 1 && d.padded_dims[i] != d.dims[i]) return false;
    n *= d.padded_dims[i];
  }
  return n > 0 && static_cast<int64_t>(md.get_size()) == n * 4;
}

std::vector<PhysicalAxis> PhysicalAxes(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  const auto& blk = d.format_desc.blocking;
  const int64_t block = blk.inner_nblks == 1 ? blk.inner_blks[0] : 1;
  std::vector<std::pair<int64_t, PhysicalAxis>> axes;  // (memory stride, axis)
  for (int i = 0; i < d.ndims; ++i) {
    const bool blocked = blk.inner_nblks == 1 && i == blk.inner_idxs[0];
    axes.push_back({blk.strides[i], PhysicalAxis{blocked ? d.dims[i] / block : d.dims[i], i, blocked ? block : 1}});
  }
  // Outermost first; among equal strides (size-1 dims), the logical order.
  std::stable_sort(axes.begin(), axes.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<PhysicalAxis> out;
  for (const auto& a : axes) out.push_back(a.second);
  if (block > 1) out.push_back(PhysicalAxis{block, static_cast<int>(blk.inner_idxs[0]), 1});
  return out;
}

std::vector<int64_t> PhysicalStrides(const dnnl::memory::desc& md) {
  const auto& blk = md.data.format_desc.blocking;
  const std::vector<PhysicalAxis> axes = PhysicalAxes(md);
  std::vector<int64_t> strides;
  for (size_t k = 0; k < axes.size(); ++k) {
    const bool inner_block = blk.inner_nblks == 1 && k + 1 == axes.size();
    strides.push_back(inner_block ? 1 : blk.strides[axes[k].dim]);
  }
  return strides;
}

std::optional<dnnl::memory::desc> DenseLayoutLike(const dnnl::memory::desc& md, const dnnl::memory::dims& dims) {
  if (!DenseBlockedLayout(md) || static_cast<int>(dims.size()) != md.data.ndims) return std::nullopt;
  dnnl_memory_desc_t d = md.data;
  auto& blk = d.format_desc.blocking;
  const int64_t block = blk.inner_nblks == 1 ? blk.inner_blks[0] : 1;
  if (dims[1] % block != 0) return std::nullopt;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) return std::nullopt;
    d.dims[i] = d.padded_dims[i] = dims[i];
  }
  // The same physical order, innermost first: each axis's stride is the size of what is inside it.
  const std::vector<PhysicalAxis> axes = PhysicalAxes(md);
  int64_t acc = block;
  for (size_t k = axes.size(); k-- > 0;) {
    if (block > 1 && k + 1 == axes.size()) continue;  // the inner channel block (stride 1)
    const PhysicalAxis& a = axes[k];
    blk.strides[a.dim] = acc;
    acc *= a.scale > 1 ? dims[static_cast<size_t>(a.dim)] / block : dims[static_cast<size_t>(a.dim)];
  }
  dnnl::memory::desc out(d);
  if (!DenseBlockedLayout(out)) return std::nullopt;
  return out;
}

bool ReadersTakeBlockedLayout(const ProgramBuilder& b, const ir::Value* v) {
  static const std::set<std::string> kTakes = {"Conv",
                                               "ConvTranspose",
                                               "Concat",
                                               "Resize",
                                               "Add",
                                               "Sub",
                                               "Mul",
                                               "Div",
                                               "Relu",
                                               "Sigmoid",
                                               "Tanh",
                                               "Clip",
                                               "LeakyRelu",
                                               "HardSigmoid",
                                               "HardSwish",
                                               "Elu",
                                               "MaxPool",
                                               "AveragePool",
                                               "GlobalAveragePool",
                                               "GlobalMaxPool"};
  if (v == nullptr || v->uses().empty() || b.IsGraphIo(v)) return false;
  for (const auto& [reader, slot] : v->uses()) {
    (void)slot;
    const bool sampan_conv = reader->domain == "sampan" && reader->op_type == "FusedConv";
    if (!sampan_conv && (!reader->domain.empty() || !kTakes.count(reader->op_type))) return false;
  }
  return true;
}

bool StridedLayout(const dnnl::memory::desc& md, dnnl::memory::dims* strides) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0) return false;
  if (d.extra.flags != 0) return false;
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i]) return false;
  strides->assign(d.format_desc.blocking.strides, d.format_desc.blocking.strides + d.ndims);
  return true;
}

Status DnnlStep::Bind(const std::vector<void*>& ptrs) {
  c_args_.clear();
  try {
    for (Arg& a : args_) {
      if (a.buffer >= 0) a.mem = dnnl::memory(a.md, eng_, ptrs[static_cast<size_t>(a.buffer)]);
      c_args_.push_back(dnnl_exec_arg_t{a.arg, a.mem.get()});
    }
  } catch (const dnnl::error& e) {
    return Internal("oneDNN memory binding failed: ", e.what());
  }
  return Status::Ok();
}

Status DnnlStep::Run(const RunCtx& ctx) {
  // The C API takes the prepared argument array as is (the C++ wrapper would
  // build a new one from a map on every call); what oneDNN still allocates
  // inside comes from this thread's arena (exec_arena.h), not the heap.
  ExecArenaScope arena;
  dnnl_status_t st =
      dnnl_primitive_execute(prim_.get(), ctx.stream->get(), static_cast<int>(c_args_.size()), c_args_.data());
  if (st != dnnl_success) return Internal("oneDNN primitive failed (status ", static_cast<int>(st), ")");
  return Status::Ok();
}

Status AddReorderStep(ProgramBuilder& b, int src_buffer, const dnnl::memory::desc& src, int dst_buffer,
                      const dnnl::memory::desc& dst, const std::string& label) {
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::reorder::primitive_desc pd(b.engine(), src, b.engine(), dst, attr);
    auto step = std::make_unique<DnnlStep>(dnnl::reorder(pd), b.engine());
    step->AddBuffer(DNNL_ARG_FROM, src_buffer, src);
    step->AddBuffer(DNNL_ARG_TO, dst_buffer, dst);
    if (pd.scratchpad_desc().get_size() > 0)
      step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
    b.UseBuffer(src_buffer);
    b.UseBuffer(dst_buffer);
    b.AddStep(std::move(step), label);
  } catch (const dnnl::error& e) {
    return Internal(label, ": oneDNN reorder failed: ", e.what());
  }
  return Status::Ok();
}

Result<dnnl::memory> ConstantIn(ProgramBuilder& b, const ir::Value* v, const dnnl::memory::desc& logical,
                                const dnnl::memory::desc& want) {
  const ValueState& s = b.state(v);
  if (s.known == nullptr) return Internal("'", v->name(), "' is not a constant");
  return b.weights().Get(b.engine(), *s.known, logical, want);
}

Result<ConvGeometry> MakeConvGeometry(const ir::Node& node, const Shape& x, const Shape& w, const Shape& y) {
  using tag = dnnl::memory::format_tag;
  ConvGeometry g;
  const size_t r = x.size();
  if (r < 3 || r > 5 || w.size() != r || y.size() != r) return Unsupported("conv rank");
  g.group = node.attr_int("group", 1);
  g.attrs.kernel = node.attr_ints("kernel_shape", Shape(w.begin() + 2, w.end()));
  if (g.attrs.kernel.size() != r - 2) return Unsupported("kernel_shape");
  SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &g.attrs, false));
  for (size_t i = 0; i < r - 2; ++i) {
    int64_t pb = 0, pe = 0;
    const int64_t o = ops::SpatialOutDim(g.attrs, i, x[i + 2], &pb, &pe);
    if (o != y[i + 2]) return Unsupported("output size");
    g.strides.push_back(g.attrs.strides[i]);
    g.dilations.push_back(g.attrs.dilations[i] - 1);
    g.pad_l.push_back(pb);
    // oneDNN wants pads consistent with the output size exactly.
    g.pad_r.push_back((o - 1) * g.attrs.strides[i] + g.attrs.effective_kernel(i) - x[i + 2] - pb);
  }
  if (g.group > 1) {
    g.weights = {g.group, w[0] / g.group};
    for (size_t i = 1; i < r; ++i) g.weights.push_back(w[i]);
    g.weights_tag = r == 3 ? tag::goiw : r == 4 ? tag::goihw : tag::goidhw;
  } else {
    g.weights.assign(w.begin(), w.end());
    g.weights_tag = r == 3 ? tag::oiw : r == 4 ? tag::oihw : tag::oidhw;
  }
  return g;
}

}  // namespace sampan::cpu
