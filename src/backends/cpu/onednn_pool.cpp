// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on oneDNN pooling.
// The source is taken in whatever format its producer left it (blocked after a
// convolution), so pooling between convolutions costs no reorder. 2-D MaxPool on
// nChw8c runs our own loop instead (max_pool_blocked.cpp: several times faster).
#include "backends/cpu/kernels.h"
#include "ops/conv_util.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool AcceptsPool(const ir::Node& node) {
  if (!node.domain.empty()) return false;
  const std::string& op = node.op_type;
  if (op != "MaxPool" && op != "AveragePool" && op != "GlobalAveragePool" && op != "GlobalMaxPool") return false;
  if (op == "MaxPool" && node.output(1) != nullptr) return false;  // Indices: reference kernel
  // Max pooling of int8/uint8 tensors is exact (quantized models pool their integers).
  const DType t = node.input(0)->type.dtype;
  if ((op == "MaxPool" || op == "GlobalMaxPool") && (t == DType::kUInt8 || t == DType::kInt8))
    return node.output(0)->type.dtype == t;
  return AllFloat32(node);
}

Status BuildPool(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ir::Value* x = node.input(0);
  const ir::Value* y = node.output(0);
  dnnl::memory::desc src_md;
  const ValueState& xs = b.state(x);
  src_md = xs.md;
  const Shape out = b.state(y).shape;
  const size_t r = xs.shape.size();
  if (r < 3 || r > 5) return Unsupported("rank");
  const bool global = node.op_type.rfind("Global", 0) == 0;
  const bool is_max = node.op_type.find("Max") != std::string::npos;
  dims kernel, strides, dil, pl, pr;
  bool unused_tail = false;  // the last window ends before the input does (oneDNN declines that)
  dnnl::algorithm alg = is_max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  if (global) {
    for (size_t i = 2; i < r; ++i) {
      kernel.push_back(xs.shape[i]);
      strides.push_back(1);
      dil.push_back(0);
      pl.push_back(0);
      pr.push_back(0);
    }
  } else {
    ops::SpatialAttrs a;
    a.kernel = node.attr_ints("kernel_shape");
    if (a.kernel.size() != r - 2) return Unsupported("kernel_shape");
    SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &a, true, is_max));
    const bool include_pad = !is_max && node.attr_int("count_include_pad", 0) != 0;
    if (include_pad) alg = dnnl::algorithm::pooling_avg_include_padding;
    for (size_t i = 0; i < r - 2; ++i) {
      int64_t pb = 0, pe = 0;
      const int64_t o = ops::SpatialOutDim(a, i, xs.shape[i + 2], &pb, &pe);
      if (o != out[i + 2]) return Unsupported("output size");
      const int64_t end = (o - 1) * a.strides[i] + a.effective_kernel(i) - xs.shape[i + 2] - pb;
      unused_tail |= end < 0;
      // A ceil_mode window running past the explicit pad must not count its padding.
      if (include_pad && end > pe) return Unsupported("ceil_mode with count_include_pad");
      kernel.push_back(a.kernel[i]);
      strides.push_back(a.strides[i]);
      dil.push_back(a.dilations[i] - 1);
      pl.push_back(pb);
      pr.push_back(end);
    }
  }
  const bool float32 = xs.dtype == DType::kFloat32;
  if (is_max && !global && float32) {
    SP_ASSIGN_OR_RETURN(bool built, BuildMaxPoolBlocked(b, node, kernel, strides, dil, pl));
    if (built) return Status::Ok();
  }
  if (unused_tail) return Unsupported("padding");
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::memory::desc dst_any(dims(out.begin(), out.end()), DnnlType(xs.dtype), tag::any);
  dnnl::pooling_v2_forward::primitive_desc pd;
  try {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src_md, dst_any, strides, kernel, dil, pl,
                                     pr);
    pd = dnnl::pooling_v2_forward::primitive_desc(d, attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN pooling: ", e.what());
  }
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  const dnnl::memory::desc dst_md = pd.dst_desc();
  const int dst = b.Output(y, &dst_md);
  auto step = std::make_unique<DnnlStep>(dnnl::pooling_v2_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kPoolFamily{"onednn:pool", AcceptsPool, BuildPool};

}  // namespace sampan::cpu
