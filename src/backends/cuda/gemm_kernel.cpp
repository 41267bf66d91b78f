// GEMM family: Gemm, MatMul and the fused forms through cuBLASLt (bias and activation epilogues),
// and sampan::QMatMul with float8 operands (cuBLASLt FP8).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/families.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

class GemmKernel : public GemmNodeKernel {
 public:
  // C (Gemm's third input) is materialised into the output first when it is not
  // a plain bias; `c_copy` describes that broadcast copy. A residual (input 3, the
  // output's shape) is cuBLASLt's C as it is.
  Status Init(const GemmShape& shape, const KernelOptions& opt, const RunEnv& env, std::optional<StridedShape> c_copy,
              bool residual, size_t elem, UnaryOp post, float p0, float p1, int64_t out_n) {
    // 16 of the heuristic's candidates are timed: past its first 8 are tile shapes and split
    // factors that fill the 132 SMs better for some products (BERT's [4096 x 2304] QKV).
    SP_RETURN_IF_ERROR(PrepareGemm(env, shape, opt.algo));
    c_copy_ = c_copy;
    residual_ = residual;
    elem_ = elem;
    post_ = post;
    p0_ = p0;
    p1_ = p1;
    out_n_ = out_n;
    type_ = shape.type;
    has_bias_ = shape.has_bias;
    return Status::Ok();
  }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* c = nullptr;
    if (c_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, in[2], out[0], *c_copy_, env.stream));
      c = out[0];
    }
    if (residual_) c = in[3];
    const void* bias = has_bias_ ? in[2] : nullptr;
    SP_RETURN_IF_ERROR(
        gemm_.Run(env.lt, in[0], in[1], c, bias, out[0], env.workspace, env.workspace_bytes, env.stream));
    if (post_ != UnaryOp::kIdentity) SP_CUDA(LaunchUnary(post_, type_, out[0], out[0], out_n_, p0_, p1_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cublaslt gemm"; }
  Gemm& gemm() { return gemm_; }

 private:
  std::optional<StridedShape> c_copy_;
  size_t elem_ = 4;
  UnaryOp post_ = UnaryOp::kIdentity;
  float p0_ = 0, p1_ = 0;
  int64_t out_n_ = 0;
  FloatType type_ = FloatType::kF32;
  bool has_bias_ = false;
  bool residual_ = false;
};

// Input 3 of FusedGemm / FusedMatMul: added through cuBLASLt's C (beta 1), read in place.
Status AddResidual(const ir::Node& node, const std::vector<KernelInput>& in, const Shape& out, bool c_taken,
                   GemmShape* s, bool* residual) {
  *residual = in.size() > 3 && in[3].present;
  if (!*residual) return Status::Ok();
  if (in[3].shape != out) return Unsupported(node.Label(), ": a residual that broadcasts to the output");
  if (c_taken) return Unsupported(node.Label(), ": a residual next to a C that is not a row bias");
  s->has_c = true;
  s->beta = 1.f;
  return Status::Ok();
}

Result<KernelChoice> MakeGemm(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                              const KernelOptions& opt, const RunEnv& env) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  if (in[0].shape.size() != 2 || in[1].shape.size() != 2) return Unsupported("Gemm rank");
  GemmShape s;
  s.type = t;
  s.tf32 = opt.tf32;
  s.trans_a = node.attr_int("transA", 0) != 0;
  s.trans_b = node.attr_int("transB", 0) != 0;
  s.alpha = node.attr_float("alpha", 1.f);
  const float beta = node.attr_float("beta", 1.f);
  s.m = out.shape[0];
  s.n = out.shape[1];
  s.k = s.trans_a ? in[0].shape[0] : in[0].shape[1];
  if (s.k == 0) return Unsupported(node.Label(), ": empty inner dimension");
  UnaryOp act = UnaryOp::kIdentity;
  float p0 = 0, p1 = 0;
  SP_RETURN_IF_ERROR(ActivationOf(node, &act, &p0, &p1));
  std::optional<StridedShape> c_copy;
  const bool has_c = in.size() > 2 && in[2].present && beta != 0.f;
  if (has_c) {
    const Shape& c = in[2].shape;
    const bool row_bias = NumElements(c) == s.n && (c.size() == 1 || (c.size() == 2 && c[0] == 1));
    if (row_bias && beta == 1.f && s.n > 1) {
      s.has_bias = true;
    } else {
      SP_ASSIGN_OR_RETURN(StridedShape cs, MakeStrided(out.shape, {BroadcastStrides(c, out.shape), Packed(out.shape)}));
      c_copy = cs;
      s.has_c = true;
      s.beta = beta;
    }
  }
  bool residual = false;
  SP_RETURN_IF_ERROR(AddResidual(node, in, out.shape, s.has_c, &s, &residual));
  GemmEpilogue epi;
  UnaryOp post;
  SplitEpilogue(act, s.type, &epi, &post);  // the epilogue applies after beta * C: act(Gemm + Z)
  s.epilogue = epi;
  if (opt.check_only) return KernelChoice{};  // capability query: cuBLASLt is not asked
  auto k = std::make_unique<GemmKernel>();
  SP_RETURN_IF_ERROR(
      k->Init(s, opt, env, c_copy, residual, DTypeSize(in[0].dtype), post, p0, p1, NumElements(out.shape)));
  return KernelChoice{false, std::move(k)};
}

// MatMul [..., M, K] x [..., K, N]: B without batch dims folds A's batch into M;
// otherwise a strided batch where each operand is either full or broadcast.
Result<KernelChoice> MakeMatMul(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                                const KernelOptions& opt, const RunEnv& env) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  Shape a = in[0].shape, b = in[1].shape;
  if (a.size() < 2 || b.size() < 2) return Unsupported(node.Label(), ": 1-D MatMul operands run on the host");
  GemmShape s;
  s.type = t;
  s.tf32 = opt.tf32;
  s.k = a.back();
  if (s.k == 0) return Unsupported(node.Label(), ": empty inner dimension");
  s.n = b.back();
  const Shape& o = out.shape;
  const size_t batch_rank = o.size() - 2;
  int64_t batch = 1;
  for (size_t i = 0; i < batch_rank; ++i) batch *= o[i];
  auto batch_of = [&](const Shape& x) {
    int64_t n = 1;
    for (size_t i = 0; i + 2 < x.size(); ++i) n *= x[i];
    return n;
  };
  const int64_t ba = batch_of(a), bb = batch_of(b);
  if (bb == 1) {
    s.m = NumElements(a) / s.k;
    s.batch = 1;
  } else if ((ba == batch || ba == 1) && bb == batch) {
    // Full or broadcast A; full B. Batch dims must match exactly when both are full.
    Shape ob(o.begin(), o.end() - 2), bbs(b.begin(), b.end() - 2);
    while (bbs.size() < ob.size()) bbs.insert(bbs.begin(), 1);
    if (bbs != ob) return Unsupported(node.Label(), ": mixed batch broadcasting");
    if (ba == batch) {
      Shape abs(a.begin(), a.end() - 2);
      while (abs.size() < ob.size()) abs.insert(abs.begin(), 1);
      if (abs != ob) return Unsupported(node.Label(), ": mixed batch broadcasting");
    }
    s.m = a[a.size() - 2];
    s.batch = batch;
    s.stride_a = ba == 1 ? 0 : s.m * s.k;
    s.stride_b = s.k * s.n;
    s.stride_c = s.stride_d = s.m * s.n;
  } else {
    return Unsupported(node.Label(), ": broadcast batch of the first operand");
  }
  UnaryOp act = UnaryOp::kIdentity;
  float p0 = 0, p1 = 0;
  SP_RETURN_IF_ERROR(ActivationOf(node, &act, &p0, &p1));
  std::optional<StridedShape> c_copy;
  if (in.size() > 2 && in[2].present) {  // FusedMatMul bias, broadcast to the output
    const Shape& c = in[2].shape;
    if (NumElements(c) == s.n && c.back() == s.n && s.n > 1) {
      s.has_bias = true;
    } else {
      SP_ASSIGN_OR_RETURN(StridedShape cs, MakeStrided(o, {BroadcastStrides(c, o), Packed(o)}));
      c_copy = cs;
      s.has_c = true;
      s.beta = 1.f;
    }
  }
  bool residual = false;
  SP_RETURN_IF_ERROR(AddResidual(node, in, o, s.has_c, &s, &residual));
  GemmEpilogue epi;
  UnaryOp post;
  SplitEpilogue(act, s.type, &epi, &post);
  s.epilogue = epi;
  if (opt.check_only) return KernelChoice{};  // capability query: cuBLASLt is not asked
  auto k = std::make_unique<GemmKernel>();
  SP_RETURN_IF_ERROR(k->Init(s, opt, env, c_copy, residual, DTypeSize(in[0].dtype), post, p0, p1, NumElements(o)));
  return KernelChoice{false, std::move(k)};
}

// sampan::QMatMul with float8 operands (ops/quantized_fused.cpp): cuBLASLt's FP8 product. The
// constant weight is transposed once to [N, K] (cuBLASLt's TN form), alpha = x_scale * w_scale,
// bias and ReLU/GELU in the epilogue, a residual as C; with a fused output QuantizeLinear the
// result is written as float8 through cuBLASLt's D scale (1 / y_scale).
class Fp8GemmKernel : public GemmNodeKernel {
 public:
  ~Fp8GemmKernel() override {
    if (w_) cudaFree(w_);
    if (d_scale_) cudaFree(d_scale_);
  }
  Status Init(const GemmShape& s, const KernelOptions& opt, const RunEnv& env, const Tensor& w, float inv_y_scale,
              bool residual) {
    SP_RETURN_IF_ERROR(PrepareGemm(env, s, opt.algo));
    // W [K, N] -> [N, K], one byte per element.
    const int64_t k = w.shape()[0], n = w.shape()[1];
    std::vector<uint8_t> t(static_cast<size_t>(k * n));
    const auto* src = static_cast<const uint8_t*>(w.raw());
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) t[static_cast<size_t>(j * k + i)] = src[i * n + j];
    SP_CUDA(cudaMalloc(&w_, std::max<size_t>(t.size(), 1)));
    device_bytes_ += std::max<size_t>(t.size(), 1);
    SP_CUDA(cudaMemcpy(w_, t.data(), t.size(), cudaMemcpyHostToDevice));
    if (s.fp8_d != Fp8Type::kNone) {
      SP_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_scale_), sizeof(float)));
      device_bytes_ += sizeof(float);
      SP_CUDA(cudaMemcpy(d_scale_, &inv_y_scale, sizeof(float), cudaMemcpyHostToDevice));
    }
    residual_ = residual;
    has_bias_ = s.has_bias;
    return Status::Ok();
  }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = has_bias_ ? in[6] : nullptr;
    const void* c = residual_ ? in[7] : nullptr;
    return gemm_.Run(env.lt, in[0], w_, c, bias, out[0], env.workspace, env.workspace_bytes, env.stream, d_scale_);
  }
  const char* family() const override { return "cublaslt fp8 gemm"; }

 private:
  void* w_ = nullptr;
  float* d_scale_ = nullptr;
  size_t device_bytes_ = 0;  //!< what w_ and d_scale_ hold
  bool residual_ = false, has_bias_ = false;
};

Fp8Type Fp8Of(DType t) {
  return t == DType::kFloat8E4M3FN ? Fp8Type::kE4M3 : t == DType::kFloat8E5M2 ? Fp8Type::kE5M2 : Fp8Type::kNone;
}

// A host-known one-element input as a float; NaN when not known.
float HostScalar(const KernelInput& in) {
  if (!in.present || in.host == nullptr || in.host->numel() != 1) return std::nanf("");
  return static_cast<float>(ElementAsDouble(*in.host, 0));
}

Result<KernelChoice> MakeQMatMulFp8(const KernelRequest& r) {
  enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kB, kZ, kYScale, kYZp };
  const ir::Node& node = r.node;
  const auto& in = r.in;
  auto has = [&](size_t i) { return i < in.size() && in[i].present; };
  const Fp8Type fa = Fp8Of(in[kX].dtype);
  if (fa == Fp8Type::kNone || !has(kW) || Fp8Of(in[kW].dtype) == Fp8Type::kNone)
    return Unsupported(node.Label(), ": integer QMatMul has no CUDA kernel yet (FP8 operands only)");
  if (node.attr_int("w_axis", 1) != 1 && node.attr_int("w_axis", 1) != -1)
    return Unsupported(node.Label(), ": w_axis other than 1");
  const Shape& a = in[kX].shape;
  const KernelInput& w = in[kW];
  if (a.size() < 2 || w.shape.size() != 2 || w.host == nullptr)
    return Unsupported(node.Label(), ": FP8 products take a 2-D constant weight and an input of rank >= 2");
  // Per-tensor scales known at build time, zero points 0 (float8 has none).
  const float sx = HostScalar(in[kXScale]), sw = HostScalar(in[kWScale]);
  if (!(sx > 0) || !(sw > 0) || !std::isfinite(sx * sw))
    return Unsupported(node.Label(), ": FP8 products need positive per-tensor scales known at build time");
  for (size_t i : {kXZp, kWZp, kYZp})
    if (has(i) && HostScalar(in[i]) != 0.f)
      return Unsupported(node.Label(), ": a float8 zero point that is not a constant 0");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[kXScale].dtype, node));
  GemmShape s;
  s.type = t;
  s.k = a.back();
  s.n = w.shape[1];
  if (w.shape[0] != s.k) return InvalidArgument(node.Label(), ": X has ", s.k, " columns, W ", w.shape[0], " rows");
  s.m = NumElements(a) / std::max<int64_t>(s.k, 1);
  if (s.k == 0) return Unsupported(node.Label(), ": empty inner dimension");
  s.trans_b = true;  // the weight is stored [N, K] (transposed in Init)
  s.fp8_a = fa;
  s.fp8_b = Fp8Of(w.dtype);
  s.alpha = sx * sw;
  float inv_y = 1.f;
  if (has(kYScale)) {
    s.fp8_d = Fp8Of(r.out[0].dtype);
    const float sy = HostScalar(in[kYScale]);
    if (s.fp8_d == Fp8Type::kNone)
      return Unsupported(node.Label(), ": a fused output QuantizeLinear to ", DTypeName(r.out[0].dtype),
                         " (FP8 products write float8 or float)");
    if (!(sy > 0) || !std::isfinite(1.f / sy))
      return Unsupported(node.Label(), ": the output scale is not a positive constant");
    inv_y = 1.f / sy;
  } else if (r.out[0].dtype != in[kXScale].dtype) {
    return Unsupported(node.Label(), ": output type ", DTypeName(r.out[0].dtype), " is not the scales' ",
                       DTypeName(in[kXScale].dtype));
  }
  UnaryOp act = UnaryOp::kIdentity;
  float p0 = 0, p1 = 0;
  SP_RETURN_IF_ERROR(ActivationOf(node, &act, &p0, &p1));
  GemmEpilogue epi;
  UnaryOp post;
  SplitEpilogue(act, t, &epi, &post);
  if (post != UnaryOp::kIdentity)
    return Unsupported(node.Label(), ": activation '", node.attr_string("activation", ""),
                       "' is not one cuBLASLt's FP8 epilogue runs (ReLU, GELU)");
  s.epilogue = epi;
  if (has(kB)) {
    if (NumElements(in[kB].shape) != s.n) return Unsupported(node.Label(), ": a bias that is not one value per column");
    s.has_bias = true;
  }
  const bool residual = has(kZ);
  if (residual) {
    if (in[kZ].shape != r.out[0].shape) return Unsupported(node.Label(), ": a residual that broadcasts to the output");
    s.has_c = true;
    s.beta = 1.f;
  }
  if (Status st = CheckFp8Operands(s); !st.ok()) return Unsupported(node.Label(), ": ", st.message());
  if (s.n % 16 != 0) return Unsupported(node.Label(), ": FP8 products need N in multiples of 16 (N=", s.n, ")");
  if (r.opt.check_only) return KernelChoice{};  // capability query: neither the device nor cuBLASLt is asked
  int dev = 0, major = 0, minor = 0;
  SP_CUDA(cudaGetDevice(&dev));
  SP_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  SP_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major * 10 + minor < 89)
    return Unsupported(node.Label(), ": FP8 products need compute capability 8.9 or newer (this GPU: ", major, ".",
                       minor, ")");
  auto k = std::make_unique<Fp8GemmKernel>();
  SP_RETURN_IF_ERROR(k->Init(s, r.opt, r.env, *w.host, inv_y, residual));
  return KernelChoice{false, std::move(k)};
}

}  // namespace

Result<KernelChoice> MakeQMatMul(const KernelRequest& r) {
  return MakeQMatMulFp8(r);
}
Result<KernelChoice> MakeGemm(const KernelRequest& r) {
  return MakeGemm(r.node, r.in, r.out[0], r.opt, r.env);
}
Result<KernelChoice> MakeMatMul(const KernelRequest& r) {
  return MakeMatMul(r.node, r.in, r.out[0], r.opt, r.env);
}

}  // namespace sampan::cuda
