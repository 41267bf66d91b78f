// Integer kernels: sampan::QConv and sampan::QMatMul on oneDNN's int8 convolution and matmul
// (u8 or s8 activations, s8 weights, s32 accumulation; VNNI/AMX where the CPU has them, AVX2's
// u8 x s8 pairs otherwise), and per-tensor QuantizeLinear / DequantizeLinear as element-wise
// steps that keep the layout a primitive chose (nChw8c u8 stays nChw8c).
//
// The integer product computes, per output channel c (oneDNN 2.x int8 semantics, checked by
// tests/backends/cpu/cpu_quant_test.cpp against the reference kernels):
//   dst = post_ops(x_scale * w_scale[c] * (sum (X - x_zp) * W + B[c] / (x_scale * w_scale[c])))
// post-ops: the residual (sum, float output only), the activation in real units, then
// 1 / y_scale when the output is quantized; oneDNN adds y_zp and saturates.
// CPUs without VNNI (AVX2, AVX-512 before Cascade Lake) add u8 x s8 products in pairs into 16-bit
// sums (vpmaddubsw), which saturate once |w| > 64 meets large activations; there weights wider
// than 7 bits are halved (rounded half to even) and their scales doubled, the same trade oneDNN
// makes for s8 sources: 7 significant bits instead of a wrong sum. The step label says "w7".
// Weights with a non-zero zero point, uint8 weights, and QMatMul inputs of rank > 2 that are
// not row-major go to the reference kernel (the plan says so in --verbose).
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"
#include "ops/conv_util.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

enum Input : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kB, kZ, kYScale, kYZp };

const ir::Value* In(const ir::Node& n, size_t i) {
  return i < n.num_inputs() ? n.input(i) : nullptr;
}

bool ConstOrNull(const ir::Value* v) {
  return v == nullptr || v->is_constant();
}

bool AcceptsQuantized(const ir::Node& node) {
  if (node.domain != ops::kSampanDomain || (node.op_type != "QConv" && node.op_type != "QMatMul")) return false;
  for (size_t i : {kXScale, kXZp, kW, kWScale, kWZp, kB, kYScale, kYZp})
    if (!ConstOrNull(In(node, i))) return false;
  const ir::Value* w = In(node, kW);
  if (w == nullptr || w->data.dtype() != DType::kInt8) return false;
  if (const ir::Value* wzp = In(node, kWZp)) {
    const auto* p = static_cast<const int8_t*>(wzp->data.raw());
    for (int64_t i = 0; i < wzp->data.numel(); ++i)
      if (p[i] != 0) return false;
  }
  if (In(node, kZ) && In(node, kYScale)) return false;  // sum post-op reads dst's type
  return FusedActivationOf(node).ok();
}

bool HasVnni() {
  static const bool vnni = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
           (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
  }();
  return vnni;
}

// The int8 weights the kernel multiplies: `w` itself, or (no VNNI, |w| > 63) w / 2 rounded half to
// even, made once per engine. *factor receives what the weight scales are multiplied by.
Result<const Tensor*> KernelWeights(ProgramBuilder& b, const Tensor& w, bool pairs, float* factor) {
  *factor = 1.f;
  if (HasVnni() || !pairs) return &w;
  const auto* p = static_cast<const int8_t*>(w.raw());
  bool wide = false;
  for (int64_t i = 0; i < w.numel() && !wide; ++i) wide = p[i] > 64 || p[i] < -64;  // 2 x 255 x 64 < 2^15
  if (!wide) return &w;
  *factor = 2.f;
  auto halved = std::static_pointer_cast<const Tensor>(b.weights().Derived(w, "int8 weights halved", [&] {
    auto t = std::make_shared<Tensor>(Tensor::Alloc(DType::kInt8, w.shape()));
    auto* q = static_cast<int8_t*>(t->mutable_raw());
    for (int64_t i = 0; i < w.numel(); ++i) q[i] = static_cast<int8_t>(std::nearbyint(p[i] * 0.5f));
    return std::make_pair(std::shared_ptr<const void>(t), static_cast<size_t>(t->nbytes()));
  }));
  return halved.get();
}

float ScalarF(const ir::Value* v) {
  return *static_cast<const float*>(v->data.raw());
}

int32_t ScalarZp(const ir::Value* v) {
  if (v == nullptr) return 0;
  return v->data.dtype() == DType::kUInt8 ? static_cast<int32_t>(*static_cast<const uint8_t*>(v->data.raw()))
                                          : static_cast<int32_t>(*static_cast<const int8_t*>(v->data.raw()));
}

// A runtime s32 zero point as fixed memory.
dnnl::memory ZeroPointMemory(const dnnl::engine& eng, int32_t zp) {
  dnnl::memory m({{1}, dt::s32, tag::x}, eng);
  std::memcpy(m.get_data_handle(), &zp, sizeof(zp));
  return m;
}

// What QConv and QMatMul share: scales, bias, zero points, post-ops.
struct QuantParams {
  float sx = 1.f;
  int32_t zx = 0;
  std::vector<float> sw;  // 1 or channels
  std::vector<float> out_scales;
  std::vector<float> bias;  // in accumulator units; empty: none
  bool quantized_out = false;
  float sy = 1.f;
  int32_t zy = 0;
  DType out_type = DType::kFloat32;
  dnnl::primitive_attr attr;
};

Result<QuantParams> MakeParams(const ir::Node& node, int64_t channels, int out_channel_dim, float w_factor) {
  QuantParams q;
  q.sx = ScalarF(In(node, kXScale));
  q.zx = ScalarZp(In(node, kXZp));
  const Tensor& ws = In(node, kWScale)->data;
  const float* wsp = static_cast<const float*>(ws.raw());
  for (int64_t i = 0; i < ws.numel(); ++i) q.sw.push_back(wsp[i] * w_factor);
  if (q.sw.size() != 1 && static_cast<int64_t>(q.sw.size()) != channels) return Unsupported("w_scale size");
  for (float s : q.sw)
    if (!(s > 0.f) || !std::isfinite(s)) return Unsupported("w_scale not positive");
  if (!(q.sx > 0.f) || !std::isfinite(q.sx)) return Unsupported("x_scale not positive");
  for (float s : q.sw) q.out_scales.push_back(q.sx * s);
  if (const ir::Value* b = In(node, kB)) {
    if (b->data.numel() != channels) return Unsupported("bias size");
    const float* bp = static_cast<const float*>(b->data.raw());
    for (int64_t c = 0; c < channels; ++c)
      q.bias.push_back(bp[c] / q.out_scales[q.out_scales.size() == 1 ? 0 : static_cast<size_t>(c)]);
  }
  q.quantized_out = In(node, kYScale) != nullptr;
  if (q.quantized_out) {
    q.sy = ScalarF(In(node, kYScale));
    if (!(q.sy > 0.f) || !std::isfinite(q.sy)) return Unsupported("y_scale not positive");
    q.zy = ScalarZp(In(node, kYZp));
    q.out_type = In(node, kYZp)->data.dtype();
  }
  SP_ASSIGN_OR_RETURN(const ops::FusedActivation act, FusedActivationOf(node));
  dnnl::post_ops po;
  if (In(node, kZ)) po.append_sum(1.f);
  AppendActivation(po, act);
  if (q.quantized_out) po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f / q.sy, 0.f);
  q.attr.set_post_ops(po);
  q.attr.set_output_scales(q.out_scales.size() == 1 ? 0 : (1 << out_channel_dim), q.out_scales);
  if (q.zx != 0) q.attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (q.zy != 0) q.attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  q.attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return q;
}

// Binds bias, zero points and scratchpad of a quantized primitive.
void BindCommon(ProgramBuilder& b, DnnlStep& step, const QuantParams& q, const dnnl::memory::desc& bias_md,
                const dnnl::memory::desc& scratch) {
  if (!q.bias.empty()) {
    dnnl::memory bm(bias_md, b.engine());
    std::memcpy(bm.get_data_handle(), q.bias.data(), q.bias.size() * sizeof(float));
    step.AddFixed(DNNL_ARG_BIAS, bm);
  }
  if (q.zx != 0) step.AddFixed(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, ZeroPointMemory(b.engine(), q.zx));
  if (q.zy != 0) step.AddFixed(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, ZeroPointMemory(b.engine(), q.zy));
  if (scratch.get_size() > 0) step.AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(scratch.get_size()), scratch);
}

dims ToDims(const Shape& s) {
  return dims(s.begin(), s.end());
}

// The residual Z into the destination buffer (the sum post-op adds into it).
Result<int> ResidualDst(ProgramBuilder& b, const ir::Node& node, const ir::Value* z, const ir::Value* y,
                        const dnnl::memory::desc& dst_md, int src) {
  dnnl::memory::desc zmd;
  const int zb = b.AnyInput(z, &zmd);
  if (zmd == dst_md && zb != src && b.LastUse(z, node)) {
    b.ViewOutput(y, zb, dst_md);
    return zb;
  }
  const int dst = b.Output(y, &dst_md);
  SP_RETURN_IF_ERROR(AddReorderStep(b, zb, zmd, dst, dst_md, StrCat("residual ", z->name(), " -> ", node.name)));
  b.UseBuffer(dst);
  b.UseBuffer(src);
  return dst;
}

Status BuildQConv(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ir::Value* x = In(node, kX);
  const ir::Value* w = In(node, kW);
  const ir::Value* z = In(node, kZ);
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const Tensor& wt = w->data;
  const Shape out = b.state(y).shape;
  if (z && (b.state(z).shape != out || b.state(z).dtype != DType::kFloat32)) return Unsupported("residual shape");
  SP_ASSIGN_OR_RETURN(ConvGeometry geo, MakeConvGeometry(node, xs.shape, wt.shape(), out));
  const int64_t group = geo.group;
  const int64_t oc = wt.shape()[0];
  float w_factor = 1.f;
  // Depthwise kernels multiply in 32 bits: no pairs to saturate.
  const bool depthwise = group > 1 && wt.shape()[1] == 1 && oc == group;
  SP_ASSIGN_OR_RETURN(const Tensor* kw, KernelWeights(b, wt, !depthwise, &w_factor));
  SP_ASSIGN_OR_RETURN(QuantParams q, MakeParams(node, oc, 1, w_factor));
  const dt src_t = DnnlType(xs.dtype);
  const dt dst_t = DnnlType(q.out_type);
  dnnl::memory::desc src_any(ToDims(xs.shape), src_t, tag::any);
  dnnl::memory::desc w_any(geo.weights, dt::s8, tag::any);
  dnnl::memory::desc dst_any(ToDims(out), dst_t, tag::any);
  dnnl::memory::desc bias_md({oc}, dt::f32, tag::x);
  dnnl::convolution_forward::primitive_desc pd;
  try {
    auto d = !q.bias.empty()
                 ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::convolution_direct, src_any, w_any, bias_md,
                                                   dst_any, geo.strides, geo.dilations, geo.pad_l, geo.pad_r)
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::convolution_direct, src_any, w_any, dst_any,
                                                   geo.strides, geo.dilations, geo.pad_l, geo.pad_r);
    pd = dnnl::convolution_forward::primitive_desc(d, q.attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN int8 convolution: ", e.what());
  }
  const dnnl::memory::desc w_plain(geo.weights, dt::s8, geo.weights_tag);
  // From here on the program is changed: errors are real errors.
  SP_ASSIGN_OR_RETURN(dnnl::memory wmem, b.weights().Get(b.engine(), *kw, w_plain, pd.weights_desc()));
  const dnnl::memory::desc dst_md = pd.dst_desc();
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  int dst = -1;
  if (z) {
    SP_ASSIGN_OR_RETURN(dst, ResidualDst(b, node, z, y, dst_md, src));
  } else {
    dst = b.Output(y, &dst_md);
  }
  auto step = std::make_unique<DnnlStep>(dnnl::convolution_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  BindCommon(b, *step, q, bias_md, pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat("QConv ", node.name, " [onednn ", pd.impl_info_str(), " ", DTypeName(xs.dtype),
                                    "->", DTypeName(q.out_type), w_factor != 1.f ? " w7" : "", "]"));
  return Status::Ok();
}

Status BuildQMatMul(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ir::Value* x = In(node, kX);
  const ir::Value* w = In(node, kW);
  const ir::Value* z = In(node, kZ);
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const Tensor& wt = w->data;
  if (xs.shape.size() < 2 || wt.shape().size() != 2 || xs.shape.back() != wt.shape()[0])
    return Unsupported("QMatMul shapes");
  const int64_t k = wt.shape()[0], n = wt.shape()[1];
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < xs.shape.size(); ++i) rows *= xs.shape[i];
  if (rows < 1) return Unsupported("empty");
  if (z && b.state(z).dtype != DType::kFloat32) return Unsupported("residual type");
  float w_factor = 1.f;
  SP_ASSIGN_OR_RETURN(const Tensor* kw, KernelWeights(b, wt, true, &w_factor));
  SP_ASSIGN_OR_RETURN(QuantParams q, MakeParams(node, n, 1, w_factor));
  const dnnl::memory::desc src_md({rows, k}, DnnlType(xs.dtype), tag::ab);
  const dnnl::memory::desc w_any({k, n}, dt::s8, tag::any);
  const dnnl::memory::desc dst_md({rows, n}, DnnlType(q.out_type), tag::ab);
  const dnnl::memory::desc bias_md({1, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    auto d = !q.bias.empty() ? dnnl::matmul::desc(src_md, w_any, bias_md, dst_md)
                             : dnnl::matmul::desc(src_md, w_any, dst_md);
    pd = dnnl::matmul::primitive_desc(d, q.attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN int8 matmul: ", e.what());
  }
  if (z && b.state(z).shape != b.state(y).shape) return Unsupported("residual shape");
  SP_ASSIGN_OR_RETURN(dnnl::memory wmem,
                      b.weights().Get(b.engine(), *kw, dnnl::memory::desc({k, n}, dt::s8, tag::ab), pd.weights_desc()));
  SP_ASSIGN_OR_RETURN(int src, b.PlainInput(x));
  int dst = -1;
  if (z) {
    SP_ASSIGN_OR_RETURN(int zsrc, b.PlainInput(z));
    if (zsrc != src && b.LastUse(z, node)) {
      dst = zsrc;
      b.ViewOutput(y, zsrc, PlainDesc(DType::kFloat32, b.state(y).shape));
    } else {
      dst = b.Output(y);
      SP_RETURN_IF_ERROR(AddReorderStep(b, zsrc, PlainDesc(DType::kFloat32, b.state(z).shape), dst,
                                        PlainDesc(DType::kFloat32, b.state(y).shape),
                                        StrCat("residual ", z->name(), " -> ", node.name)));
      b.UseBuffer(dst);
      b.UseBuffer(src);
    }
  } else {
    dst = b.Output(y);
  }
  auto step = std::make_unique<DnnlStep>(dnnl::matmul(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, src_md);
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  BindCommon(b, *step, q, bias_md, pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat("QMatMul ", node.name, " [onednn ", pd.impl_info_str(), " ", DTypeName(xs.dtype),
                                    "->", DTypeName(q.out_type), w_factor != 1.f ? " w7" : "", "]"));
  return Status::Ok();
}

Status BuildQuantized(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  return node.op_type == "QConv" ? BuildQConv(b, node, opset) : BuildQMatMul(b, node, opset);
}

// ---- QuantizeLinear / DequantizeLinear, per tensor -----------------------------------------

bool IsInt8Type(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8;
}

bool AcceptsQdq(const ir::Node& node) {
  const bool q = node.domain.empty() && node.op_type == "QuantizeLinear";
  const bool dq = node.domain.empty() && node.op_type == "DequantizeLinear";
  if ((!q && !dq) || node.num_inputs() < 2 || node.num_outputs() != 1) return false;
  const ir::Value* x = node.input(0);
  const ir::Value* s = node.input(1);
  const ir::Value* zp = node.num_inputs() > 2 ? node.input(2) : nullptr;
  if (!s->is_constant() || s->data.numel() != 1 || s->data.dtype() != DType::kFloat32) return false;
  if (zp && (!zp->is_constant() || zp->data.numel() != 1)) return false;
  if (node.attr_int("block_size", 0) != 0 || node.has_attr("output_dtype") || node.has_attr("precision")) return false;
  if (q)
    return x->type.dtype == DType::kFloat32 && zp && IsInt8Type(zp->data.dtype()) && node.attr_int("saturate", 1) == 1;
  return IsInt8Type(x->type.dtype) && node.output(0)->type.dtype == DType::kFloat32;
}

// Element-wise over a buffer in any layout (per-tensor parameters make padding harmless).
class QdqStep : public Kernel {
 public:
  QdqStep(bool quantize, DType qtype, float scale, int32_t zp, int64_t count, int src, int dst)
      : quantize_(quantize), qtype_(qtype), scale_(scale), zp_(zp), count_(count), src_id_(src), dst_id_(dst) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    src_ = ptrs[static_cast<size_t>(src_id_)];
    dst_ = ptrs[static_cast<size_t>(dst_id_)];
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    const float s = scale_;
    const int32_t zp = zp_;
    const bool u8 = qtype_ == DType::kUInt8;
    const void* src = src_;
    void* dst = dst_;
    if (quantize_) {
      ParallelFor(ctx, count_, 1 << 14, [=](int64_t b, int64_t e) {
        const float* x = static_cast<const float*>(src) + b;
        if (u8)
          vec::QuantizeU8(x, s, zp, static_cast<uint8_t*>(dst) + b, e - b);
        else
          vec::QuantizeS8(x, s, zp, static_cast<int8_t*>(dst) + b, e - b);
      });
    } else {
      ParallelFor(ctx, count_, 1 << 14, [=](int64_t b, int64_t e) {
        float* x = static_cast<float*>(dst) + b;
        if (u8)
          vec::DequantizeU8(static_cast<const uint8_t*>(src) + b, s, zp, x, e - b);
        else
          vec::DequantizeS8(static_cast<const int8_t*>(src) + b, s, zp, x, e - b);
      });
    }
    return Status::Ok();
  }

 private:
  bool quantize_;
  DType qtype_;
  float scale_;
  int32_t zp_;
  int64_t count_;
  int src_id_, dst_id_;
  const void* src_ = nullptr;
  void* dst_ = nullptr;
};

Status BuildQdq(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const bool quantize = node.op_type == "QuantizeLinear";
  const ir::Value* x = node.input(0);
  const ir::Value* zpv = node.num_inputs() > 2 ? node.input(2) : nullptr;
  const DType qtype = quantize ? zpv->data.dtype() : b.state(x).dtype;
  const DType out_type = quantize ? qtype : DType::kFloat32;
  dnnl::memory::desc md;
  const int src = b.AnyInput(x, &md);
  // The same layout (blocked or plain) with the output's element type.
  dnnl::memory::desc out_md = md;
  out_md.data.data_type = static_cast<dnnl_data_type_t>(DnnlType(out_type));
  if (out_md.data.extra.flags != 0) return Unsupported("layout with extra data");
  const int64_t count = static_cast<int64_t>(out_md.get_size() / DTypeSize(out_type));
  const int dst = b.Output(node.output(0), &out_md);
  b.UseBuffer(src);
  auto step = std::make_unique<QdqStep>(quantize, qtype, *static_cast<const float*>(node.input(1)->data.raw()),
                                        ScalarZp(zpv), count, src, dst);
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [cpu per-tensor ", DTypeName(qtype), "]"));
  return Status::Ok();
}

// ---- com.microsoft::QLinearAdd, per tensor, same shapes ------------------------------------

bool AcceptsQAdd(const ir::Node& node) {
  if (node.domain != "com.microsoft" || node.op_type != "QLinearAdd" || node.num_inputs() < 7) return false;
  const DType t = node.input(0)->type.dtype;
  if (!IsInt8Type(t) || node.input(3)->type.dtype != t || node.output(0)->type.dtype != t) return false;
  for (size_t i : {1, 2, 4, 5, 6, 7}) {
    const ir::Value* v = In(node, i);
    if (v == nullptr) continue;
    if (!v->is_constant() || v->data.numel() != 1) return false;
    if ((i == 1 || i == 4 || i == 6) && v->data.dtype() != DType::kFloat32) return false;
  }
  return true;
}

// c = saturate(round((float(a - za) * sa + float(b - zb) * sb) / sc) + zc): the Q/DQ graph's
// arithmetic in its order, so the result is the reference kernel's bit for bit.
template <class T>
class QAddStep : public Kernel {
 public:
  QAddStep(float sa, int32_t za, float sb, int32_t zb, float sc, int32_t zc, int64_t count, int a, int b, int c)
      : sa_(sa), sb_(sb), sc_(sc), za_(za), zb_(zb), zc_(zc), count_(count), a_id_(a), b_id_(b), c_id_(c) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    a_ = static_cast<const T*>(ptrs[static_cast<size_t>(a_id_)]);
    b_ = static_cast<const T*>(ptrs[static_cast<size_t>(b_id_)]);
    c_ = static_cast<T*>(ptrs[static_cast<size_t>(c_id_)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    const T* pa = a_;
    const T* pb = b_;
    T* pc = c_;
    const float sa = sa_, sb = sb_, sc = sc_;
    const int32_t za = za_, zb = zb_, zc = zc_;
    ParallelFor(ctx, count_, 1 << 14, [=](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, uint8_t>)
        vec::QAddU8(pa + b, sa, za, pb + b, sb, zb, sc, zc, pc + b, e - b);
      else
        vec::QAddS8(pa + b, sa, za, pb + b, sb, zb, sc, zc, pc + b, e - b);
    });
    return Status::Ok();
  }

 private:
  float sa_, sb_, sc_;
  int32_t za_, zb_, zc_;
  int64_t count_;
  int a_id_, b_id_, c_id_;
  const T* a_ = nullptr;
  const T* b_ = nullptr;
  T* c_ = nullptr;
};

Status BuildQAdd(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ir::Value* av = node.input(0);
  const ir::Value* bv = node.input(3);
  if (b.state(av).shape != b.state(bv).shape) return Unsupported("QLinearAdd with broadcasting");
  dnnl::memory::desc md;
  const int a = b.AnyInput(av, &md);
  if (md.data.extra.flags != 0) return Unsupported("layout with extra data");
  SP_ASSIGN_OR_RETURN(int bb, b.Input(bv, md));
  const int c = b.Output(node.output(0), &md);
  b.UseBuffer(a);
  const DType t = b.state(av).dtype;
  const int64_t count = static_cast<int64_t>(md.get_size() / DTypeSize(t));
  const float sa = ScalarF(In(node, 1)), sb = ScalarF(In(node, 4)), sc = ScalarF(In(node, 6));
  const int32_t za = ScalarZp(In(node, 2)), zb = ScalarZp(In(node, 5)), zc = ScalarZp(In(node, 7));
  std::unique_ptr<Kernel> step;
  if (t == DType::kUInt8)
    step = std::make_unique<QAddStep<uint8_t>>(sa, za, sb, zb, sc, zc, count, a, bb, c);
  else
    step = std::make_unique<QAddStep<int8_t>>(sa, za, sb, zb, sc, zc, count, a, bb, c);
  b.AddStep(std::move(step), StrCat("QLinearAdd ", node.name, " [cpu per-tensor ", DTypeName(t), "]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kQAddFamily{"cpu:qadd", AcceptsQAdd, BuildQAdd};
const KernelFamily kQuantizedFamily{"onednn:int8", AcceptsQuantized, BuildQuantized};
const KernelFamily kQdqFamily{"cpu:qdq", AcceptsQdq, BuildQdq};

}  // namespace sampan::cpu
