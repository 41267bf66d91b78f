// Conv, sampan::FusedConv and ConvTranspose on oneDNN primitives.
// The primitive chooses its source/destination formats (format_tag::any:
// nChw8c on AVX2, nChw16c on AVX-512...), so chains of convolutions stay in the
// blocked format; weights are reordered into the primitive's format once per
// engine. FusedConv's epilogue becomes post-ops: sum (residual Z: the output
// takes over Z's buffer when this is Z's last reader, else Z is copied into the
// destination first) then the activation. 3x3 stride-1 convolutions may run on
// our Winograd kernel instead, when it times faster (conv_winograd.cpp).
#include "backends/cpu/kernels.h"
#include "backends/cpu/winograd.h"
#include "ops/conv_util.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool AcceptsConv(const ir::Node& node) {
  const bool fused = node.domain == ops::kSampanDomain && node.op_type == "FusedConv";
  if (!fused && !(node.domain.empty() && node.op_type == "Conv")) return false;
  if (!AllFloat32(node)) return false;
  if (node.input(1) == nullptr || !node.input(1)->is_constant()) return false;
  if (node.input(2) && !node.input(2)->is_constant()) return false;
  return !fused || FusedActivationOf(node).ok();
}

dims ToDims(const Shape& s) {
  return dims(s.begin(), s.end());
}

Status BuildConv(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const bool fused = node.op_type == "FusedConv";
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* bias = node.input(2);
  const ir::Value* z = fused ? node.input(3) : nullptr;
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const ValueState& ws = b.state(w);
  const Shape out = b.state(y).shape;
  if (ws.known == nullptr) return Unsupported("conv weights not constant");
  if (bias && b.state(bias).known == nullptr) return Unsupported("conv bias not constant");
  if (z && (b.state(z).shape != out || b.state(z).dtype != DType::kFloat32)) return Unsupported("residual shape");
  SP_ASSIGN_OR_RETURN(ConvGeometry geo, MakeConvGeometry(node, xs.shape, ws.shape, out));
  const ops::SpatialAttrs& a = geo.attrs;
  const int64_t group = geo.group;
  const dims& strides = geo.strides;
  const dims& dil = geo.dilations;
  const dims& pl = geo.pad_l;
  const dims& pr = geo.pad_r;
  const dims& wdims = geo.weights;
  const int64_t oc = ws.shape[0];
  ops::FusedActivation act;
  if (fused) {
    SP_ASSIGN_OR_RETURN(act, FusedActivationOf(node));
  }
  dnnl::post_ops po;
  if (z) po.append_sum(1.f);
  AppendActivation(po, act);
  // y * output_scale + output_bias after the activation (fuse_conv_output_affine.h).
  const float out_scale = node.attr_float("output_scale", 1.f), out_bias = node.attr_float("output_bias", 0.f);
  const bool affine = fused && (out_scale != 1.f || out_bias != 0.f);
  if (affine) po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, out_scale, out_bias);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // A BF16 layer (plan precision, on a CPU with AVX512-BF16/AMX) multiplies BF16 operands (its
  // input converted by the reorder Input() adds, unless it already is BF16; the weights once)
  // into an FP32 result, or a BF16 one when only BF16 convolutions read it (the middle of a
  // ResNet bottleneck), so the next one needs no conversion.
  const bool bf16 = b.RunsBf16(node.name);
  const dt operand = bf16 ? dt::bf16 : dt::f32;
  const dt result = bf16 && b.OnlyBf16ConvsRead(y) ? dt::bf16 : dt::f32;
  dnnl::memory::desc src_any(ToDims(xs.shape), operand, tag::any);
  dnnl::memory::desc w_any(wdims, operand, tag::any);
  dnnl::memory::desc dst_any(ToDims(out), result, tag::any);
  dnnl::memory::desc bias_md({oc}, dt::f32, tag::x);
  dnnl::convolution_forward::primitive_desc pd;
  try {
    auto d =
        bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               src_any, w_any, bias_md, dst_any, strides, dil, pl, pr)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               src_any, w_any, dst_any, strides, dil, pl, pr);
    pd = dnnl::convolution_forward::primitive_desc(d, attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN convolution: ", e.what());
  }
  // Grouped weights [G*OCg, IC, k...] are the same bytes as [G, OCg, IC, k...].
  const dnnl::memory::desc w_plain(wdims, dt::f32, geo.weights_tag);
  ConvTactic tactic;
  tactic.x = xs.shape;
  tactic.y = out;
  tactic.weights = static_cast<const float*>(ws.known->raw());
  tactic.weights_tensor = ws.known;
  tactic.weights_md = w_plain;
  tactic.bias = bias ? static_cast<const float*>(b.state(bias).known->raw()) : nullptr;
  tactic.kernel = a.kernel;
  tactic.strides = a.strides;
  tactic.dilations = a.dilations;
  tactic.group = group;
  tactic.pad_t = pl[0];
  tactic.pad_l = pl.size() > 1 ? pl[1] : 0;
  tactic.sum = z != nullptr;
  tactic.node = node.name;
  tactic.activation = act;
  std::shared_ptr<const WinogradConv> wino;
  if (!bf16 && !affine) {  // Winograd: FP32, and its epilogue has no output affine
    SP_ASSIGN_OR_RETURN(wino, ChooseWinograd(b, tactic, pd));
  }
  // From here on the program is changed: errors are real errors.
  dnnl::memory wmem;
  if (!wino) {
    SP_ASSIGN_OR_RETURN(wmem, ConstantIn(b, w, w_plain, pd.weights_desc()));
  }
  const dnnl::memory::desc dst_md = pd.dst_desc();
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  int dst = -1;
  if (z) {
    // The sum post-op adds into what dst holds. When this is the residual's last
    // reader and it is stored as dst wants, the output simply takes over its
    // buffer (no copy); otherwise the residual is copied into a new buffer first.
    dnnl::memory::desc zmd;
    const int zb = b.AnyInput(z, &zmd);
    if (zmd == dst_md && zb != src && b.LastUse(z, node)) {
      dst = zb;
      b.ViewOutput(y, zb, dst_md);
    } else {
      dst = b.Output(y, &dst_md);
      SP_RETURN_IF_ERROR(AddReorderStep(b, zb, zmd, dst, dst_md, StrCat("residual ", z->name(), " -> ", node.name)));
      b.UseBuffer(dst);
      b.UseBuffer(src);
    }
  } else {
    dst = b.Output(y, &dst_md);
  }
  if (wino) {
    const int m = wino->tile();
    AddWinogradStep(b, std::move(wino), src, dst,
                    StrCat(node.op_type, " ", node.name, " [winograd f", m, "x", m, " avx2]"));
    return Status::Ok();
  }
  auto step = std::make_unique<DnnlStep>(dnnl::convolution_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  if (bias) {
    SP_ASSIGN_OR_RETURN(dnnl::memory bmem, ConstantIn(b, bias, bias_md, bias_md));
    step->AddFixed(DNNL_ARG_BIAS, bmem);
  }
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  return Status::Ok();
}

bool AcceptsConvTranspose(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "ConvTranspose" && AllFloat32(node) && node.input(1) &&
         node.input(1)->is_constant() && (!node.input(2) || node.input(2)->is_constant());
}

Status BuildConvTranspose(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* bias = node.input(2);
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const ValueState& ws = b.state(w);
  const Shape out = b.state(y).shape;
  const size_t r = xs.shape.size();
  if (r < 3 || r > 5 || ws.known == nullptr || ws.shape.size() != r) return Unsupported("rank");
  const int64_t group = node.attr_int("group", 1);
  const size_t sp = r - 2;
  const Shape kernel = node.attr_ints("kernel_shape", Shape(ws.shape.begin() + 2, ws.shape.end()));
  const Shape st = node.attr_ints("strides", Shape(sp, 1));
  const Shape dl = node.attr_ints("dilations", Shape(sp, 1));
  const Shape pads = node.attr_ints("pads", Shape(2 * sp, 0));
  const Shape opad = node.attr_ints("output_padding", Shape(sp, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (kernel.size() != sp || st.size() != sp || dl.size() != sp || pads.size() != 2 * sp || opad.size() != sp)
    return Unsupported("attributes");
  dims strides, dil, pl, pr;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t in = xs.shape[i + 2], ek = (kernel[i] - 1) * dl[i] + 1, o = out[i + 2];
    int64_t begin = pads[i];
    if (node.has_attr("output_shape") || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = st[i] * (in - 1) + opad[i] + ek - o;
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else if (auto_pad == "VALID") {
      begin = 0;
    }
    const int64_t end = (in - 1) * st[i] + ek - begin - o;
    if (begin < 0 || end < 0) return Unsupported("padding");
    strides.push_back(st[i]);
    dil.push_back(dl[i] - 1);
    pl.push_back(begin);
    pr.push_back(end);
  }
  // ONNX W is [IC, OC/g, k...] = [G][IC/g][OC/g][k...]; oneDNN's logical weights are [G, OC/g, IC/g, k...].
  const int64_t icg = ws.shape[0] / group, ocg = ws.shape[1];
  int64_t ksize = 1;
  for (size_t i = 2; i < r; ++i) ksize *= ws.shape[i];
  dims wdims, wstrides;
  if (group > 1) {
    wdims = {group, ocg, icg};
    wstrides = {icg * ocg * ksize, ksize, ocg * ksize};
  } else {
    wdims = {ocg, icg};
    wstrides = {ksize, ocg * ksize};
  }
  {
    int64_t s = 1;
    dims ks;
    for (size_t i = r; i-- > 2;) {
      ks.insert(ks.begin(), s);
      s *= ws.shape[i];
    }
    for (size_t i = 2; i < r; ++i) {
      wdims.push_back(ws.shape[i]);
      wstrides.push_back(ks[i - 2]);
    }
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::memory::desc src_any(ToDims(xs.shape), dt::f32, tag::any);
  dnnl::memory::desc w_any(wdims, dt::f32, tag::any);
  dnnl::memory::desc dst_any(ToDims(out), dt::f32, tag::any);
  dnnl::memory::desc bias_md({group * ocg}, dt::f32, tag::x);
  dnnl::deconvolution_forward::primitive_desc pd;
  try {
    auto d = bias ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::deconvolution_direct, src_any, w_any, bias_md,
                                                      dst_any, strides, dil, pl, pr)
                  : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::deconvolution_direct, src_any, w_any, dst_any,
                                                      strides, dil, pl, pr);
    pd = dnnl::deconvolution_forward::primitive_desc(d, attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN deconvolution: ", e.what());
  }
  dnnl::memory::desc w_plain(wdims, dt::f32, wstrides);
  SP_ASSIGN_OR_RETURN(dnnl::memory wmem, ConstantIn(b, w, w_plain, pd.weights_desc()));
  const dnnl::memory::desc dst_md = pd.dst_desc();
  const int dst = b.Output(y, &dst_md);
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  auto step = std::make_unique<DnnlStep>(dnnl::deconvolution_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  if (bias) {
    SP_ASSIGN_OR_RETURN(dnnl::memory bmem, ConstantIn(b, bias, bias_md, bias_md));
    step->AddFixed(DNNL_ARG_BIAS, bmem);
  }
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat("ConvTranspose ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kConvFamily{"onednn:conv", AcceptsConv, BuildConv};
const KernelFamily kConvTransposeFamily{"onednn:deconv", AcceptsConvTranspose, BuildConvTranspose};

}  // namespace sampan::cpu
