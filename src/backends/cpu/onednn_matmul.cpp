// MatMul, sampan::FusedMatMul, Gemm and sampan::FusedGemm.
// A constant right-hand side [K, N] with a left side [..., K] is run as one
// [M, K] x [K, N] product (M = all leading rows) on our packed GEMM (packed_gemm.h;
// activations it has no epilogue for follow as a oneDNN eltwise step in place) or on
// oneDNN's matmul, chosen per node for the program's shapes (product_algo.h).
// Otherwise oneDNN matmul: batched with broadcast batch dims on plain row-major
// operands, bias and activation fused (bias operand, eltwise post-op).
#include <optional>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/product_algo.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool AcceptsMatMul(const ir::Node& node) {
  const bool fused = node.domain == ops::kSampanDomain && node.op_type == "FusedMatMul";
  if (!fused && !(node.domain.empty() && node.op_type == "MatMul")) return false;
  if (fused && node.input(2) && !node.input(2)->is_constant()) return false;
  if (fused && node.num_inputs() > 3 && node.input(3)) return false;  // a residual: the reference kernel adds it
  return AllFloat32(node) && FusedActivationOf(node).ok();
}

dnnl::memory::desc Strided(const dims& d, const dims& strides) {
  return dnnl::memory::desc(d, dt::f32, strides);
}

dims RowMajorStrides(const dims& d) {
  dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

struct MatMulSpec {
  dnnl::memory::desc src, wei, dst;  // logical layouts of the operands as stored
  dnnl::memory::desc bias;           // zero desc when none
  bool wei_const = false;
};

class PackedGemmStep : public Kernel {
 public:
  PackedGemmStep(std::shared_ptr<const PackedGemm> gemm, int src, int dst)
      : gemm_(std::move(gemm)), src_id_(src), dst_id_(dst) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    src_ = static_cast<const float*>(ptrs[static_cast<size_t>(src_id_)]);
    dst_ = static_cast<float*>(ptrs[static_cast<size_t>(dst_id_)]);
    return Status::Ok();
  }
  Status Run(const RunCtx&) override {
    gemm_->Run(src_, dst_);
    return Status::Ok();
  }

 private:
  std::shared_ptr<const PackedGemm> gemm_;
  int src_id_, dst_id_;
  const float* src_ = nullptr;
  float* dst_ = nullptr;
};

// PackedGemm's in-register epilogue for `a` (*act), or, for the activations it has none for, the
// oneDNN eltwise algorithm run after it in place (*post, undef when none) and that step's alpha.
void PackedGemmActivation(const ops::FusedActivation& a, GemmAct* act, dnnl::algorithm* post, float* alpha) {
  using ops::Activation;
  using alg = dnnl::algorithm;
  *act = GemmAct::kNone;
  *post = alg::undef;
  *alpha = 0.f;
  switch (a.kind) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      *act = GemmAct::kRelu;
      break;
    case Activation::kLeakyRelu:
      *act = GemmAct::kLeakyRelu;
      break;
    case Activation::kClip:
      *act = GemmAct::kClip;
      break;
    case Activation::kHardSigmoid:
      *act = GemmAct::kHardSigmoid;
      break;
    case Activation::kGelu:
      *act = GemmAct::kGelu;
      break;
    case Activation::kSigmoid:
      *post = alg::eltwise_logistic;
      break;
    case Activation::kSiLU:
      *post = alg::eltwise_swish;  // x * sigmoid(alpha x)
      *alpha = 1.f;
      break;
    case Activation::kTanh:
      *post = alg::eltwise_tanh;
      break;
    case Activation::kHardSwish:
      *post = alg::eltwise_hardswish;
      break;
    case Activation::kGeluTanh:
      *post = alg::eltwise_gelu_tanh;
      break;
  }
}

// The product as the packed GEMM would run it ([M, K] x constant [K, N], plain rows); nullopt
// when it does not apply.
std::optional<PackedProduct> PackedProductOf(ProgramBuilder& b, const ir::Node& node, const MatMulSpec& m,
                                             const ir::Value* w, const ir::Value* bias,
                                             const ops::FusedActivation& activation) {
  if (!m.wei_const || !PackedGemm::CpuSupported() || m.src.dims().size() != 2) return std::nullopt;
  dnnl::memory::dims ss, ws, ds;
  if (!StridedLayout(m.src, &ss) || !StridedLayout(m.wei, &ws) || !StridedLayout(m.dst, &ds)) return std::nullopt;
  PackedProduct p;
  p.node = node.name;
  p.rows = m.src.dims()[0];
  p.k = m.src.dims()[1];
  p.n = m.wei.dims()[1];
  if (ss != dims{p.k, 1} || ds != dims{p.n, 1} || p.rows < 1 || p.k < 1 || p.n < 1) return std::nullopt;
  if (bias) {
    const dims bd = m.bias.dims();
    if (bd.size() != 2 || bd[0] != 1 || (bd[1] != p.n && bd[1] != 1)) return std::nullopt;
    p.bias_n = bd[1];
    p.bias_tensor = b.state(bias).known;
    p.bias = static_cast<const float*>(p.bias_tensor->raw());
  }
  PackedGemmActivation(activation, &p.act, &p.post, &p.post_alpha);
  p.p0 = activation.p0;
  p.p1 = activation.p1;
  p.weights = b.state(w).known;
  p.w = static_cast<const float*>(p.weights->raw());
  p.stride_k = ws[0];
  p.stride_n = ws[1];
  return p;
}

// The packed GEMM's step for `p` (and the eltwise step of an activation it has no epilogue for).
Status AddPackedGemm(ProgramBuilder& b, const ir::Node& node, const MatMulSpec& m, const ir::Value* a,
                     const PackedProduct& p, const ops::FusedActivation& activation) {
  const std::string kind = StrCat("packed-gemm ", p.k, "x", p.n, " strides ", p.stride_k, ",", p.stride_n, " bias ",
                                  reinterpret_cast<uintptr_t>(p.bias), "/", p.bias_n);
  auto packed = std::static_pointer_cast<const PackedWeights>(b.weights().Derived(
      *p.weights, kind,
      [&] {
        auto made = std::make_shared<const PackedWeights>(p.w, p.k, p.n, p.stride_k, p.stride_n, p.bias, p.bias_n);
        return std::make_pair(std::shared_ptr<const void>(made), made->bytes());
      },
      {p.bias_tensor}));
  auto gemm = std::make_shared<const PackedGemm>(packed, p.rows, p.act, p.p0, p.p1, b.threads());
  SP_ASSIGN_OR_RETURN(int src, b.PlainInput(a));
  const int dst = b.Output(node.output(0));
  b.UseBuffer(src);
  b.UseBuffer(dst);
  b.AddStep(std::make_unique<PackedGemmStep>(gemm, src, dst),
            StrCat(node.op_type, " ", node.name, " [cpu packed gemm]"));
  if (p.post == dnnl::algorithm::undef) return Status::Ok();
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, p.post, m.dst, p.post_alpha, 0.f), attr,
        b.engine());
    auto step = std::make_unique<DnnlStep>(dnnl::eltwise_forward(pd), b.engine());
    step->AddBuffer(DNNL_ARG_SRC, dst, m.dst);
    step->AddBuffer(DNNL_ARG_DST, dst, m.dst);
    if (pd.scratchpad_desc().get_size() > 0)
      step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
    b.UseBuffer(dst);
    b.AddStep(std::move(step),
              StrCat(ops::ActivationName(activation.kind), " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  } catch (const dnnl::error& e) {
    return Internal(node.Label(), ": oneDNN eltwise for ", ops::ActivationName(activation.kind), ": ", e.what());
  }
  return Status::Ok();
}

// A product by a constant weight runs on the packed GEMM or oneDNN's matmul, whichever
// ChooseProductAlgo picks (product_algo.h); any other on oneDNN's matmul.
Status Finish(ProgramBuilder& b, const ir::Node& node, const MatMulSpec& m, const ir::Value* a, const ir::Value* w,
              const ir::Value* bias, bool fused) {
  ops::FusedActivation act;
  if (fused) {
    SP_ASSIGN_OR_RETURN(act, FusedActivationOf(node));
  }
  const std::optional<PackedProduct> packed = PackedProductOf(b, node, m, w, bias, act);
  dnnl::post_ops po;
  AppendActivation(po, act);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd;
  const dnnl::memory::desc wei_req = m.wei_const ? dnnl::memory::desc(m.wei.dims(), dt::f32, tag::any) : m.wei;
  try {
    auto d = bias ? dnnl::matmul::desc(m.src, wei_req, m.bias, m.dst) : dnnl::matmul::desc(m.src, wei_req, m.dst);
    pd = dnnl::matmul::primitive_desc(d, attr, b.engine());
  } catch (const dnnl::error& e) {
    if (packed) return AddPackedGemm(b, node, m, a, *packed, act);
    return Unsupported(node.Label(), ": oneDNN matmul: ", e.what());
  }
  if (packed) {
    SP_ASSIGN_OR_RETURN(ProductAlgo algo, ChooseProductAlgo(b, *packed, pd, m.wei, m.bias));
    if (algo == ProductAlgo::kPackedGemm) return AddPackedGemm(b, node, m, a, *packed, act);
  }
  // The operands are handed over as row-major buffers viewed through m.src/m.wei.
  SP_ASSIGN_OR_RETURN(int src, b.PlainInput(a));
  auto step = std::make_unique<DnnlStep>(dnnl::matmul(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, m.src);
  if (m.wei_const) {
    SP_ASSIGN_OR_RETURN(dnnl::memory wmem, ConstantIn(b, w, m.wei, pd.weights_desc()));
    step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  } else {
    SP_ASSIGN_OR_RETURN(int wb, b.PlainInput(w));
    step->AddBuffer(DNNL_ARG_WEIGHTS, wb, m.wei);
  }
  if (bias) {
    SP_ASSIGN_OR_RETURN(dnnl::memory bmem, ConstantIn(b, bias, m.bias, m.bias));
    step->AddFixed(DNNL_ARG_BIAS, bmem);
  }
  const int dst = b.Output(node.output(0));
  step->AddBuffer(DNNL_ARG_DST, dst, m.dst);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  return Status::Ok();
}

Status BuildMatMul(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const bool fused = node.op_type == "FusedMatMul";
  const ir::Value* a = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* bias = fused ? node.input(2) : nullptr;
  const Shape as = b.state(a).shape, ws = b.state(w).shape, ys = b.state(node.output(0)).shape;
  if (as.size() < 2 || ws.size() < 2 || ys.size() > 12) return Unsupported("matmul rank");
  const int64_t k = as.back(), n = ws.back();
  if (bias) {
    const Shape bs = b.state(bias).shape;
    if (NumElements(bs) != n || (!bs.empty() && bs.back() != n)) return Unsupported("bias shape");
  }
  MatMulSpec m;
  if (b.state(w).known && ws.size() == 2) {
    const int64_t rows = NumElements(as) / std::max<int64_t>(k, 1);
    m.src = Strided({rows, k}, {k, 1});
    m.wei = Strided({k, n}, {n, 1});
    m.dst = Strided({rows, n}, {n, 1});
    m.bias = Strided({1, n}, {n, 1});
    m.wei_const = true;
  } else {
    const size_t r = ys.size();
    auto pad = [&](const Shape& s) {
      dims d(r - s.size(), 1);
      d.insert(d.end(), s.begin(), s.end());
      return d;
    };
    const dims ad = pad(as), wd = pad(ws), yd(ys.begin(), ys.end());
    m.src = Strided(ad, RowMajorStrides(ad));
    m.wei = Strided(wd, RowMajorStrides(wd));
    m.dst = Strided(yd, RowMajorStrides(yd));
    dims bd(r, 1);
    bd.back() = n;
    m.bias = Strided(bd, RowMajorStrides(bd));
    m.wei_const = false;
  }
  return Finish(b, node, m, a, w, bias, fused);
}

bool AcceptsGemm(const ir::Node& node) {
  const bool fused = node.domain == ops::kSampanDomain && node.op_type == "FusedGemm";
  if (!fused && !(node.domain.empty() && node.op_type == "Gemm")) return false;
  if (node.attr_float("alpha", 1.f) != 1.f) return false;
  if (node.input(2) && (!node.input(2)->is_constant() || node.attr_float("beta", 1.f) != 1.f)) return false;
  if (fused && node.num_inputs() > 3 && node.input(3)) return false;  // a residual: the reference kernel adds it
  return AllFloat32(node) && FusedActivationOf(node).ok();
}

Status BuildGemm(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const bool fused = node.op_type == "FusedGemm";
  const ir::Value* a = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* c = node.input(2);
  const Shape as = b.state(a).shape, ws = b.state(w).shape;
  if (as.size() != 2 || ws.size() != 2) return Unsupported("gemm rank");
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const int64_t m_ = ta ? as[1] : as[0], k = ta ? as[0] : as[1];
  const int64_t n = tb ? ws[0] : ws[1];
  MatMulSpec m;
  m.src = ta ? Strided({m_, k}, {1, m_}) : Strided({m_, k}, {k, 1});
  m.wei = tb ? Strided({k, n}, {1, k}) : Strided({k, n}, {n, 1});
  m.dst = Strided({m_, n}, {n, 1});
  m.wei_const = b.state(w).known != nullptr;
  if (c) {
    const Shape cs = b.state(c).shape;
    if (cs.size() > 2) return Unsupported("C rank");
    dims cd{1, 1};
    if (cs.size() == 2) cd = {cs[0], cs[1]};
    if (cs.size() == 1) cd = {1, cs[0]};
    if ((cd[0] != 1 && cd[0] != m_) || (cd[1] != 1 && cd[1] != n)) return Unsupported("C shape");
    m.bias = Strided(cd, {cd[1], 1});
  }
  return Finish(b, node, m, a, w, c, fused);
}

}  // namespace

const KernelFamily kMatMulFamily{"onednn:matmul", AcceptsMatMul, BuildMatMul};
const KernelFamily kGemmFamily{"onednn:gemm", AcceptsGemm, BuildGemm};

}  // namespace sampan::cpu
