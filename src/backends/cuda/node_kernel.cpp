#include "backends/cuda/node_kernel.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <map>
#include <set>

#include "backends/cuda/attention.h"
#include "backends/cuda/cast.h"
#include "backends/cuda/conv.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/gather.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/image_input.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/layer_norm.h"
#include "backends/cuda/logical_op.h"
#include "backends/cuda/pool.h"
#include "backends/cuda/softmax.h"
#include "backends/cuda/strided_copy.h"
#include "ops/attention.h"
#include "ops/conv_util.h"

namespace sampan::cuda {
namespace {

constexpr size_t kGemmWorkspace = 32u << 20;

// "cudnn conv algo=3 tf32" -> 3; -1 when the tactic names no algorithm.
int TacticAlgo(const std::string& tactic) {
  const size_t p = tactic.find("algo=");
  return p == std::string::npos ? -1 : std::atoi(tactic.c_str() + p + 5);
}

bool ActivationOf(const std::string& name, const std::vector<float>& p, UnaryOp* op, float* p0, float* p1) {
  static const std::map<std::string, UnaryOp> k = {
      {"", UnaryOp::kIdentity},       {"Relu", UnaryOp::kRelu},           {"Sigmoid", UnaryOp::kSigmoid},
      {"Tanh", UnaryOp::kTanh},       {"SiLU", UnaryOp::kSiLU},           {"HardSigmoid", UnaryOp::kHardSigmoid},
      {"HardSwish", UnaryOp::kHardSwish}, {"LeakyRelu", UnaryOp::kLeakyRelu}, {"Clip", UnaryOp::kClip},
      {"Gelu", UnaryOp::kGelu},       {"GeluTanh", UnaryOp::kGeluTanh}};
  auto it = k.find(name);
  if (it == k.end()) return false;
  *op = it->second;
  *p0 = p.size() > 0 ? p[0] : 0.f;
  *p1 = p.size() > 1 ? p[1] : 0.f;
  return true;
}

// ---------------------------------------------------------------- element-wise

class BinaryKernel : public NodeKernel {
 public:
  BinaryKernel(BinaryOp op, FloatType t, StridedShape s) : op_(op), t_(t), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchBinary(op_, t_, in[0], in[1], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "elementwise"; }

 private:
  BinaryOp op_;
  FloatType t_;
  StridedShape s_;
};

class UnaryKernel : public NodeKernel {
 public:
  UnaryKernel(UnaryOp op, FloatType t, int64_t n, float p0, float p1) : op_(op), t_(t), n_(n), p0_(p0), p1_(p1) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchUnary(op_, t_, in[0], out[0], n_, p0_, p1_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "elementwise"; }

 private:
  UnaryOp op_;
  FloatType t_;
  int64_t n_;
  float p0_, p1_;
};

const std::map<std::string, BinaryOp>& BinaryOps() {
  static const std::map<std::string, BinaryOp> k = {{"Add", BinaryOp::kAdd}, {"Sub", BinaryOp::kSub},
                                                    {"Mul", BinaryOp::kMul}, {"Div", BinaryOp::kDiv},
                                                    {"Pow", BinaryOp::kPow}, {"PRelu", BinaryOp::kPRelu}};
  return k;
}

const std::map<std::string, UnaryOp>& UnaryOps() {
  static const std::map<std::string, UnaryOp> k = {
      {"Relu", UnaryOp::kRelu},       {"Sigmoid", UnaryOp::kSigmoid},   {"Tanh", UnaryOp::kTanh},
      {"Exp", UnaryOp::kExp},         {"Log", UnaryOp::kLog},           {"Sqrt", UnaryOp::kSqrt},
      {"Neg", UnaryOp::kNeg},         {"Abs", UnaryOp::kAbs},           {"Erf", UnaryOp::kErf},
      {"Reciprocal", UnaryOp::kReciprocal}, {"Floor", UnaryOp::kFloor}, {"Ceil", UnaryOp::kCeil},
      {"Gelu", UnaryOp::kGelu},       {"HardSigmoid", UnaryOp::kHardSigmoid}, {"HardSwish", UnaryOp::kHardSwish},
      {"LeakyRelu", UnaryOp::kLeakyRelu}, {"Clip", UnaryOp::kClip},     {"Softplus", UnaryOp::kSoftplus},
      {"Elu", UnaryOp::kElu},         {"Sin", UnaryOp::kSin},           {"Cos", UnaryOp::kCos},
      {"Identity", UnaryOp::kIdentity}};
  return k;
}

Result<KernelChoice> MakeBinary(const ir::Node& node, BinaryOp op, const std::vector<KernelInput>& in,
                                const KernelOutput& out) {
  if (in.size() != 2 || in[0].dtype != in[1].dtype) return Unsupported(node.Label(), ": mixed types");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  if (op == BinaryOp::kPRelu && in[1].shape.size() > out.shape.size()) return Unsupported("PRelu slope rank");
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(out.shape, {BroadcastStrides(in[0].shape, out.shape),
                                                              BroadcastStrides(in[1].shape, out.shape)}));
  return KernelChoice{false, std::make_unique<BinaryKernel>(op, t, s)};
}

Result<KernelChoice> MakeUnary(const ir::Node& node, int64_t opset, UnaryOp op, const std::vector<KernelInput>& in,
                               const KernelOutput& out) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  float p0 = 0.f, p1 = 0.f;
  if (op == UnaryOp::kLeakyRelu) p0 = node.attr_float("alpha", 0.01f);
  if (op == UnaryOp::kElu) p0 = node.attr_float("alpha", 1.f);
  if (op == UnaryOp::kHardSigmoid) {
    p0 = node.attr_float("alpha", 0.2f);
    p1 = node.attr_float("beta", 0.5f);
  }
  if (op == UnaryOp::kGelu && node.attr_string("approximate", "none") == "tanh") op = UnaryOp::kGeluTanh;
  if (op == UnaryOp::kClip) {
    p0 = -3.4028234663852886e38f;
    p1 = 3.4028234663852886e38f;
    if (opset < 11) {
      p0 = node.attr_float("min", p0);
      p1 = node.attr_float("max", p1);
    } else {
      for (size_t i = 1; i < 3 && i < in.size(); ++i) {
        if (!in[i].present) continue;
        if (!in[i].host) return Unsupported(node.Label(), ": Clip bounds computed on the device");
        (i == 1 ? p0 : p1) = static_cast<float>(ElementAsDouble(*in[i].host, 0));
      }
    }
  }
  return KernelChoice{false, std::make_unique<UnaryKernel>(op, t, NumElements(out.shape), p0, p1)};
}

std::optional<CastType> CastTypeOf(DType t) {
  switch (t) {
    case DType::kFloat32: return CastType::kF32;
    case DType::kFloat16: return CastType::kF16;
    case DType::kBFloat16: return CastType::kBF16;
    case DType::kInt32: return CastType::kI32;
    case DType::kInt64: return CastType::kI64;
    case DType::kBool: return CastType::kBool;
    default: return std::nullopt;
  }
}

class CastKernel : public NodeKernel {
 public:
  CastKernel(CastType from, CastType to, int64_t n) : from_(from), to_(to), n_(n) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchCast(from_, to_, in[0], out[0], n_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cast"; }

 private:
  CastType from_, to_;
  int64_t n_;
};

// ---------------------------------------------------------------- data movement

class CopyKernel : public NodeKernel {
 public:
  struct Part {
    int input;
    int64_t src_offset, dst_offset;  // elements
    StridedShape shape;
  };
  CopyKernel(size_t elem, std::vector<Part> parts, const char* fam) : elem_(elem), parts_(std::move(parts)), fam_(fam) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    for (const Part& p : parts_)
      SP_CUDA(LaunchStridedCopy(elem_, static_cast<const char*>(in[static_cast<size_t>(p.input)]) + p.src_offset * elem_,
                                static_cast<char*>(out[0]) + p.dst_offset * elem_, p.shape, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return fam_; }

 private:
  size_t elem_;
  std::vector<Part> parts_;
  const char* fam_;
};

Result<KernelChoice> MakeTranspose(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  const Shape& x = in[0].shape;
  std::vector<int64_t> perm = node.attr_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < x.size(); ++i) perm.insert(perm.begin(), static_cast<int64_t>(i));
  const auto xs = Packed(x);
  std::vector<int64_t> src(x.size());
  for (size_t i = 0; i < perm.size(); ++i) src[i] = xs[static_cast<size_t>(perm[i])];
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(out.shape, {src, Packed(out.shape)}));
  std::vector<CopyKernel::Part> parts{{0, 0, 0, s}};
  return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(in[0].dtype), parts, "transpose")};
}

Result<KernelChoice> MakeConcat(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  const auto os = Packed(out.shape);
  std::vector<CopyKernel::Part> parts;
  int64_t offset = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].present) continue;
    if (NumElements(in[i].shape) > 0) {
      SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(in[i].shape, {Packed(in[i].shape), os}));
      parts.push_back({static_cast<int>(i), 0, offset * os[static_cast<size_t>(axis)], s});
    }
    offset += in[i].shape[static_cast<size_t>(axis)];
  }
  return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(out.dtype), parts, "concat")};
}

Result<KernelChoice> MakeExpand(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(out.shape, {BroadcastStrides(in[0].shape, out.shape), Packed(out.shape)}));
  std::vector<CopyKernel::Part> parts{{0, 0, 0, s}};
  return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(out.dtype), parts, "expand")};
}

// Slice: out[i] = x[start + i * step] per axis (ONNX clamping, as the reference does).
Result<KernelChoice> MakeSlice(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& in,
                               const KernelOutput& out) {
  const Shape& x = in[0].shape;
  const size_t r = x.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes");
  } else {
    for (size_t i = 1; i < 5; ++i) {
      if (i >= in.size() || !in[i].present) continue;
      if (!in[i].host) return Unsupported(node.Label(), ": slice bounds computed on the device");
      SP_ASSIGN_OR_RETURN(auto v, ToInt64Vector(*in[i].host, "slice input"));
      (i == 1 ? starts : i == 2 ? ends : i == 3 ? axes : steps) = v;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> begin(r, 0), step(r, 1);
  for (size_t k = 0; k < starts.size() && k < axes.size() && k < ends.size(); ++k) {
    int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(r) : axes[k];
    const int64_t d = x[static_cast<size_t>(a)], st = steps[k];
    if (st == 0) return InvalidArgument(node.Label(), ": step 0");
    int64_t s = starts[k];
    if (s < 0) s += d;
    s = st > 0 ? std::clamp<int64_t>(s, 0, d) : std::clamp<int64_t>(s, 0, d - 1);
    begin[static_cast<size_t>(a)] = s;
    step[static_cast<size_t>(a)] = st;
  }
  const auto xs = Packed(x);
  int64_t base = 0;
  std::vector<int64_t> src(r);
  for (size_t i = 0; i < r; ++i) {
    base += begin[i] * xs[i];
    src[i] = xs[i] * step[i];
  }
  if (NumElements(out.shape) == 0) return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(out.dtype), std::vector<CopyKernel::Part>{}, "slice")};
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(out.shape, {src, Packed(out.shape)}));
  std::vector<CopyKernel::Part> parts{{0, base, 0, s}};
  return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(out.dtype), parts, "slice")};
}

class GatherKernel : public NodeKernel {
 public:
  GatherKernel(size_t elem, bool i64, int64_t outer, int64_t axis_dim, int64_t inner, int64_t n)
      : elem_(elem), i64_(i64), outer_(outer), axis_dim_(axis_dim), inner_(inner), n_(n) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchGather(elem_, in[0], in[1], i64_, out[0], outer_, axis_dim_, inner_, n_, env.bad_index, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "gather"; }

 private:
  size_t elem_;
  bool i64_;
  int64_t outer_, axis_dim_, inner_, n_;
};

Result<KernelChoice> MakeGather(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  if (in[1].dtype != DType::kInt64 && in[1].dtype != DType::kInt32) return Unsupported("Gather index type");
  const Shape& x = in[0].shape;
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < x.size(); ++i) inner *= x[i];
  return KernelChoice{false, std::make_unique<GatherKernel>(DTypeSize(in[0].dtype), in[1].dtype == DType::kInt64, outer,
                                                            x[static_cast<size_t>(axis)], inner,
                                                            NumElements(in[1].shape))};
}

// ---------------------------------------------------------------- pooling, softmax, norms

class PoolKernel : public NodeKernel {
 public:
  PoolKernel(FloatType t, Pool2dParams p, bool global, int64_t rows, int64_t inner)
      : t_(t), p_(p), global_(global), rows_(rows), inner_(inner) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (global_ && p_.in_nhwc)
      SP_CUDA(LaunchGlobalPoolNhwc(t_, in[0], out[0], p_.n, inner_, p_.c, p_.is_max, env.stream));
    else if (global_) SP_CUDA(LaunchGlobalPool(t_, in[0], out[0], rows_, inner_, p_.is_max, env.stream));
    else SP_CUDA(LaunchPool2d(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "pool"; }

 private:
  FloatType t_;
  Pool2dParams p_;
  bool global_;
  int64_t rows_, inner_;
};

Result<KernelChoice> MakePool(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                              const KernelOptions& opt) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  const Shape& x = in[0].shape;
  if (x.size() < 3) return Unsupported("pool rank");
  Pool2dParams p;
  p.is_max = node.op_type == "MaxPool" || node.op_type == "GlobalMaxPool";
  if (node.op_type == "GlobalAveragePool" || node.op_type == "GlobalMaxPool") {
    int64_t inner = 1;
    for (size_t i = 2; i < x.size(); ++i) inner *= x[i];
    p.in_nhwc = opt.input_nhwc(0) && x.size() == 4;  // y [N, C, 1, 1] is the same in both layouts
    p.n = x[0];
    p.c = x[1];
    return KernelChoice{false, std::make_unique<PoolKernel>(t, p, true, x[0] * x[1], inner)};
  }
  if (x.size() != 4 || node.num_outputs() > 1 || node.attr_int("storage_order", 0) != 0)
    return Unsupported(node.Label(), ": only 2-D pooling without indices runs on the GPU");
  ops::SpatialAttrs a;
  a.kernel = node.attr_ints("kernel_shape");
  if (a.kernel.size() != 2) return Unsupported("pool kernel rank");
  SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &a, true));
  const ops::SpatialGeometry g = ops::ComputeGeometry(a, x);
  p.n = x[0];
  p.c = x[1];
  p.h = x[2];
  p.w = x[3];
  p.oh = out.shape[2];
  p.ow = out.shape[3];
  p.kh = static_cast<int>(a.kernel[0]);
  p.kw = static_cast<int>(a.kernel[1]);
  p.sh = static_cast<int>(a.strides[0]);
  p.sw = static_cast<int>(a.strides[1]);
  p.dh = static_cast<int>(a.dilations[0]);
  p.dw = static_cast<int>(a.dilations[1]);
  p.pad_top = static_cast<int>(g.pad_begin[0]);
  p.pad_left = static_cast<int>(g.pad_begin[1]);
  p.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  p.in_nhwc = opt.input_nhwc(0);
  p.out_nhwc = opt.out_nhwc;
  p.h_padded = x[2] + g.pad_begin[0] + g.pad_end[0];
  p.w_padded = x[3] + g.pad_begin[1] + g.pad_end[1];
  return KernelChoice{false, std::make_unique<PoolKernel>(t, p, false, 0, 0)};
}

class SoftmaxKernel : public NodeKernel {
 public:
  SoftmaxKernel(FloatType t, SoftmaxParams p) : t_(t), p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchSoftmax(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "softmax"; }

 private:
  FloatType t_;
  SoftmaxParams p_;
};

Result<KernelChoice> MakeSoftmax(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& in) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  const Shape& x = in[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  SoftmaxParams p;
  p.log = node.op_type == "LogSoftmax";
  if (rank == 0) return KernelChoice{false, std::make_unique<SoftmaxKernel>(t, p)};
  axis = std::clamp<int64_t>(axis, 0, rank);
  p.outer = 1;
  for (int64_t i = 0; i < axis; ++i) p.outer *= x[static_cast<size_t>(i)];
  if (opset >= 13) {
    p.n = x[static_cast<size_t>(axis)];
    p.inner = 1;
    for (size_t i = static_cast<size_t>(axis) + 1; i < x.size(); ++i) p.inner *= x[i];
  } else {  // coerced to 2-D at axis
    p.n = 1;
    for (size_t i = static_cast<size_t>(axis); i < x.size(); ++i) p.n *= x[i];
    p.inner = 1;
  }
  return KernelChoice{false, std::make_unique<SoftmaxKernel>(t, p)};
}

class LayerNormKernel : public NodeKernel {
 public:
  LayerNormKernel(FloatType t, int64_t rows, int64_t n, float eps, bool rms) : t_(t), rows_(rows), n_(n), eps_(eps), rms_(rms) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchLayerNorm(t_, in[0], in[1], in.size() > 2 ? in[2] : nullptr, out[0], rows_, n_, eps_, rms_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "layernorm"; }

 private:
  FloatType t_;
  int64_t rows_, n_;
  float eps_;
  bool rms_;
};

Result<KernelChoice> MakeLayerNorm(const ir::Node& node, const std::vector<KernelInput>& in) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  for (size_t i = 1; i < node.num_outputs(); ++i)
    if (node.output(i)) return Unsupported(node.Label(), ": mean/inv-std outputs run on the host");
  const Shape& x = in[0].shape;
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  int64_t rows = 1, n = 1;
  for (size_t i = 0; i < x.size(); ++i) (static_cast<int64_t>(i) < axis ? rows : n) *= x[i];
  for (size_t i = 1; i < 3 && i < in.size(); ++i)
    if (in[i].present && (in[i].dtype != in[0].dtype || NumElements(in[i].shape) != n))
      return Unsupported(node.Label(), ": broadcast scale/bias run on the host");
  return KernelChoice{false, std::make_unique<LayerNormKernel>(t, rows, n, node.attr_float("epsilon", 1e-5f),
                                                               node.op_type == "RMSNormalization")};
}

// sampan::AddLayerNorm: LayerNorm(a + b) in one kernel when each operand is the output's
// rows or broadcast over whole leading dims (a row index r % rows); otherwise the sum is
// formed in the workspace first.
class AddLayerNormKernel : public NodeKernel {
 public:
  AddLayerNormKernel(FloatType t, int64_t rows, int64_t n, float eps, int64_t a_rows, int64_t b_rows,
                     std::optional<StridedShape> sum, size_t sum_bytes)
      : t_(t), rows_(rows), n_(n), eps_(eps), a_rows_(a_rows), b_rows_(b_rows), sum_(sum), sum_bytes_(sum_bytes) {}
  size_t workspace() const override { return sum_ ? sum_bytes_ : 0; }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = in.size() > 3 ? in[3] : nullptr;
    if (sum_) {
      SP_CUDA(LaunchBinary(BinaryOp::kAdd, t_, in[0], in[1], env.workspace, *sum_, env.stream));
      SP_CUDA(LaunchLayerNorm(t_, env.workspace, in[2], bias, out[0], rows_, n_, eps_, false, env.stream));
      return Status::Ok();
    }
    SP_CUDA(LaunchAddLayerNorm(t_, in[0], a_rows_, in[1], b_rows_, in[2], bias, out[0], rows_, n_, eps_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "layernorm"; }

 private:
  FloatType t_;
  int64_t rows_, n_;
  float eps_;
  int64_t a_rows_, b_rows_;
  std::optional<StridedShape> sum_;
  size_t sum_bytes_;
};

// Rows of `s` when, broadcast to `y`, it repeats whole rows of the first `axis` dims
// (leading 1s, then y's own dims) and matches y from `axis` on; -1 otherwise.
int64_t RepeatedRows(const Shape& s, const Shape& y, size_t axis) {
  if (s.size() > y.size()) return -1;
  Shape p(y.size() - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  int64_t rows = 1;
  bool prefix = true;
  for (size_t i = 0; i < y.size(); ++i) {
    if (i < axis && prefix && p[i] == 1) continue;
    prefix = false;
    if (p[i] != y[i]) return -1;
    if (i < axis) rows *= p[i];
  }
  return rows;
}

Result<KernelChoice> MakeAddLayerNorm(const ir::Node& node, const std::vector<KernelInput>& in,
                                      const KernelOutput& out) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  if (in.size() < 3 || !in[2].present) return Unsupported(node.Label(), ": AddLayerNorm without scale");
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].present && in[i].dtype != in[0].dtype) return Unsupported(node.Label(), ": mixed types");
  const Shape& y = out.shape;
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(y.size());
  if (axis < 0 || axis > static_cast<int64_t>(y.size())) return Unsupported(node.Label(), ": axis");
  int64_t rows = 1, n = 1;
  for (size_t i = 0; i < y.size(); ++i) (static_cast<int64_t>(i) < axis ? rows : n) *= y[i];
  for (size_t i = 2; i < 4 && i < in.size(); ++i)
    if (in[i].present && NumElements(in[i].shape) != n)
      return Unsupported(node.Label(), ": broadcast scale/bias run on the host");
  const float eps = node.attr_float("epsilon", 1e-5f);
  const int64_t a_rows = RepeatedRows(in[0].shape, y, static_cast<size_t>(axis));
  const int64_t b_rows = RepeatedRows(in[1].shape, y, static_cast<size_t>(axis));
  if (a_rows > 0 && b_rows > 0)
    return KernelChoice{false, std::make_unique<AddLayerNormKernel>(t, rows, n, eps, a_rows, b_rows, std::nullopt, 0)};
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(y, {BroadcastStrides(in[0].shape, y), BroadcastStrides(in[1].shape, y)}));
  const size_t bytes = static_cast<size_t>(NumElements(y)) * DTypeSize(in[0].dtype);
  return KernelChoice{false, std::make_unique<AddLayerNormKernel>(t, rows, n, eps, 1, 1, s, bytes)};
}

// ---------------------------------------------------------------- convolution

class ConvKernel : public NodeKernel {
 public:
  Status Init(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
              const KernelOptions& opt, const RunEnv& env) {
    SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
    const Shape& x = in[0].shape;
    const Shape& w = in[1].shape;
    if (x.size() < 3 || x.size() > 5) return Unsupported(node.Label(), ": conv rank");
    ops::SpatialAttrs a;
    a.kernel = node.attr_ints("kernel_shape");
    if (a.kernel.empty()) a.kernel.assign(w.begin() + 2, w.end());
    SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &a, false));
    const ops::SpatialGeometry g = ops::ComputeGeometry(a, x);
    ConvShape s;
    s.type = t;
    s.tf32 = opt.tf32;
    s.groups = node.attr_int("group", 1);
    for (size_t i = 0; i < a.rank(); ++i) {
      if (g.pad_begin[i] != g.pad_end[i]) return Unsupported(node.Label(), ": asymmetric pads run on the host");
      s.pads.push_back(g.pad_begin[i]);
    }
    s.strides = a.strides;
    s.dilations = a.dilations;
    s.x = x;
    s.w = w;
    s.y = out.shape;
    if (x.size() == 3) {  // 1-D as 2-D with H = 1
      s.x.insert(s.x.begin() + 2, 1);
      s.w.insert(s.w.begin() + 2, 1);
      s.y.insert(s.y.begin() + 2, 1);
      s.pads.insert(s.pads.begin(), 0);
      s.strides.insert(s.strides.begin(), 1);
      s.dilations.insert(s.dilations.begin(), 1);
    }
    s.has_bias = in.size() > 2 && in[2].present;
    if (in.size() > 3 && in[3].present) {
      if (in[3].shape != out.shape) return Unsupported(node.Label(), ": broadcast residual runs on the host");
      s.has_z = true;
    }
    if (!ActivationOf(node.attr_string("activation", ""), node.attr_floats("activation_params"), &s.act, &s.act_p0,
                      &s.act_p1))
      return Unsupported(node.Label(), ": activation");
    // Channels-last: the output's layout decides; inputs stored the other way are
    // converted in the workspace (only at the edges of an NHWC region).
    s.nhwc = opt.out_nhwc && x.size() == 4 && s.groups == 1;
    elem_ = DTypeSize(in[0].dtype);
    const bool w_known = in[1].host && in[1].host->nbytes() == static_cast<size_t>(NumElements(w)) * elem_;
    // (Zero-padding a first layer's 3 channels to 8 for tensor cores was measured on the
    // H200 and made ResNet-50's conv1 slower under cuDNN's legacy API, so it is not done.)
    if (opt.input_nhwc(0) != s.nhwc) {
      SP_ASSIGN_OR_RETURN(StridedShape xc, LayoutCopy(x, s.nhwc));
      x_copy_ = xc;
      x_bytes_ = Aligned(static_cast<size_t>(NumElements(x)) * elem_);
    }
    if (s.has_z && opt.input_nhwc(3) != s.nhwc) {
      SP_ASSIGN_OR_RETURN(StridedShape zc, LayoutCopy(out.shape, s.nhwc));
      z_copy_ = zc;
      z_bytes_ = Aligned(static_cast<size_t>(NumElements(out.shape)) * elem_);
    }
    if (s.nhwc) {
      // Filters as [K, R, S, C]: transposed once here when the weights are constant,
      // else on every run into the workspace.
      if (w_known) {
        const Tensor& wt = *in[1].host;
        const int64_t K = w[0], C = w[1], R = w[2], S = w[3];
        std::vector<char> host(wt.nbytes());
        const char* src = static_cast<const char*>(wt.raw());
        for (int64_t k = 0; k < K; ++k)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t q = 0; q < S; ++q)
                std::memcpy(&host[static_cast<size_t>(((k * R + r) * S + q) * C + c) * elem_],
                            src + static_cast<size_t>(((k * C + c) * R + r) * S + q) * elem_, elem_);
        SP_CUDA(cudaMalloc(&w_nhwc_, std::max<size_t>(host.size(), 1)));
        SP_CUDA(cudaMemcpy(w_nhwc_, host.data(), host.size(), cudaMemcpyHostToDevice));
      } else {
        SP_ASSIGN_OR_RETURN(StridedShape wc, LayoutCopy(w, true));
        w_copy_ = wc;
        w_bytes_ = Aligned(static_cast<size_t>(NumElements(w)) * elem_);
      }
    }
    env_dnn_ = env.dnn;
    SP_RETURN_IF_ERROR(conv_.Prepare(env.dnn, s, TacticAlgo(opt.tactic)));
    // cuDNN's fused call needs a bias; a convolution without one gets zeros.
    if (!s.has_bias) {
      SP_CUDA(cudaMalloc(&zero_bias_, static_cast<size_t>(s.y[1]) * 4));
      SP_CUDA(cudaMemset(zero_bias_, 0, static_cast<size_t>(s.y[1]) * 4));
    }
    return Status::Ok();
  }
  ~ConvKernel() override {
    if (zero_bias_) cudaFree(zero_bias_);
    if (w_nhwc_) cudaFree(w_nhwc_);
  }
  size_t workspace() const override { return x_bytes_ + z_bytes_ + w_bytes_ + conv_.workspace_needed(); }
  std::vector<int> Candidates() const override { return conv_.candidates(); }
  Status Select(int algo) override { return conv_.SetAlgo(env_dnn_, algo); }
  int selected() const override { return conv_.algo(); }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = in.size() > 2 && in[2] ? in[2] : zero_bias_;
    const void* x = in[0];
    const void* w = w_nhwc_ ? w_nhwc_ : in[1];
    const void* z = in.size() > 3 ? in[3] : nullptr;
    char* ws = static_cast<char*>(env.workspace);
    if (x_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, x, ws, *x_copy_, env.stream));
      x = ws;
      ws += x_bytes_;
    }
    if (z_copy_ && z) {
      SP_CUDA(LaunchStridedCopy(elem_, z, ws, *z_copy_, env.stream));
      z = ws;
      ws += z_bytes_;
    }
    if (w_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, w, ws, *w_copy_, env.stream));
      w = ws;
      ws += w_bytes_;
    }
    const size_t used = static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    return conv_.Run(env.dnn, x, w, bias, z, out[0], ws, env.workspace_bytes - used, env.stream);
  }
  const char* family() const override { return "cudnn conv"; }

 private:
  static size_t Aligned(size_t b) { return (b + 255) / 256 * 256; }
  Conv conv_;
  size_t elem_ = 4;
  std::optional<StridedShape> x_copy_, z_copy_, w_copy_;
  size_t x_bytes_ = 0, z_bytes_ = 0, w_bytes_ = 0;
  void* w_nhwc_ = nullptr;  //!< filters as [K, R, S, C] (constant weights, channels-last)
  cudnnHandle_t env_dnn_ = nullptr;
  void* zero_bias_ = nullptr;
};

// ---------------------------------------------------------------- GEMM / MatMul

class GemmKernel : public NodeKernel {
 public:
  // C (Gemm's third input) is materialised into the output first when it is not
  // a plain bias; `c_copy` describes that broadcast copy.
  Status Init(const GemmShape& shape, const KernelOptions& opt, const RunEnv& env, std::optional<StridedShape> c_copy,
              size_t elem, UnaryOp post, float p0, float p1, int64_t out_n) {
    SP_RETURN_IF_ERROR(gemm_.Prepare(env.lt, shape, kGemmWorkspace));
    const int a = TacticAlgo(opt.tactic);
    if (a >= 0 && a < gemm_.num_algos()) gemm_.select(a);
    c_copy_ = c_copy;
    elem_ = elem;
    post_ = post;
    p0_ = p0;
    p1_ = p1;
    out_n_ = out_n;
    type_ = shape.type;
    has_bias_ = shape.has_bias;
    return Status::Ok();
  }
  size_t workspace() const override { return kGemmWorkspace; }
  std::vector<int> Candidates() const override {
    std::vector<int> c;
    for (int i = 0; i < gemm_.num_algos(); ++i) c.push_back(i);
    return c;
  }
  Status Select(int algo) override {
    if (algo < 0 || algo >= gemm_.num_algos()) return InvalidArgument("no cuBLASLt algorithm ", algo);
    gemm_.select(algo);
    return Status::Ok();
  }
  int selected() const override { return gemm_.selected(); }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* c = nullptr;
    if (c_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, in[2], out[0], *c_copy_, env.stream));
      c = out[0];
    }
    const void* bias = has_bias_ ? in[2] : nullptr;
    SP_RETURN_IF_ERROR(gemm_.Run(env.lt, in[0], in[1], c, bias, out[0], env.workspace, env.workspace_bytes, env.stream));
    if (post_ != UnaryOp::kIdentity) SP_CUDA(LaunchUnary(post_, type_, out[0], out[0], out_n_, p0_, p1_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cublaslt gemm"; }
  Gemm& gemm() { return gemm_; }

 private:
  Gemm gemm_;
  std::optional<StridedShape> c_copy_;
  size_t elem_ = 4;
  UnaryOp post_ = UnaryOp::kIdentity;
  float p0_ = 0, p1_ = 0;
  int64_t out_n_ = 0;
  FloatType type_ = FloatType::kF32;
  bool has_bias_ = false;
};

// Splits an activation into what cuBLASLt fuses (ReLU, tanh-GELU) and what runs after.
// In half precision the erf form of GELU also goes to the tanh-form epilogue: the two
// differ by at most 4.7e-4 (at x = 2.7, where fp16's spacing is 2e-3), less than the
// rounding of the fp16 result, and it saves a pass over the widest activation in BERT.
void SplitEpilogue(UnaryOp act, FloatType type, GemmEpilogue* epi, UnaryOp* post) {
  *epi = GemmEpilogue::kNone;
  *post = act;
  if (act == UnaryOp::kRelu) *epi = GemmEpilogue::kRelu;
  if (act == UnaryOp::kGeluTanh) *epi = GemmEpilogue::kGeluTanh;
  if (act == UnaryOp::kGelu && (type == FloatType::kF16 || type == FloatType::kBF16)) *epi = GemmEpilogue::kGeluTanh;
  if (*epi != GemmEpilogue::kNone) *post = UnaryOp::kIdentity;
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
  if (!ActivationOf(node.attr_string("activation", ""), node.attr_floats("activation_params"), &act, &p0, &p1))
    return Unsupported("activation");
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
  GemmEpilogue epi;
  UnaryOp post;
  SplitEpilogue(act, s.type, &epi, &post);
  if (s.has_c && epi != GemmEpilogue::kNone) {  // epilogue activations apply after beta*C: fine, same order
  }
  s.epilogue = epi;
  auto k = std::make_unique<GemmKernel>();
  SP_RETURN_IF_ERROR(k->Init(s, opt, env, c_copy, DTypeSize(in[0].dtype), post, p0, p1, NumElements(out.shape)));
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
  if (!ActivationOf(node.attr_string("activation", ""), node.attr_floats("activation_params"), &act, &p0, &p1))
    return Unsupported("activation");
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
  GemmEpilogue epi;
  UnaryOp post;
  SplitEpilogue(act, s.type, &epi, &post);
  s.epilogue = epi;
  auto k = std::make_unique<GemmKernel>();
  SP_RETURN_IF_ERROR(k->Init(s, opt, env, c_copy, DTypeSize(in[0].dtype), post, p0, p1, NumElements(o)));
  return KernelChoice{false, std::move(k)};
}

// ---------------------------------------------------------------- attention

// The [B, H, S, D] view of a bshd (ops/attention.h) shape or stride list.
template <class V>
V AttentionLogical(V d, bool bshd) {
  if (bshd) std::swap(d[1], d[2]);
  return d;
}

// out = softmax(Q K^T * scale + mask) V. FP16/BF16 with head size <= 128 run the fused
// kernel (attention.cu), which reads every layout through strides. Otherwise two
// cuBLASLt batched products around our masked softmax, the [B, Sq, Sk] scores in the
// workspace; a bshd layout is first copied to [B, H, S, D] there (and the output back).
class AttentionKernel : public NodeKernel {
 public:
  Status Init(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
              const KernelOptions& opt, const RunEnv& env) {
    SP_ASSIGN_OR_RETURN(type_, FloatOf(in[0].dtype, node));
    const bool bshd = ops::AttentionIsBshd(node);
    const size_t r = in[0].shape.size();
    if (r < 2 || in[1].shape.size() != r || in[2].shape.size() != r || out.shape.size() != r)
      return Unsupported(node.Label(), ": attention ranks");
    if (bshd && r != 4) return Unsupported(node.Label(), ": bshd attention needs rank 4");
    // Logical [lead..., S, D] shapes (the stored ones for bhsd).
    const Shape q = AttentionLogical(in[0].shape, bshd);
    const Shape k = AttentionLogical(in[1].shape, bshd);
    const Shape v = AttentionLogical(in[2].shape, bshd);
    const Shape y = AttentionLogical(out.shape, bshd);
    const bool kt = node.attr_int("k_transposed", 0) != 0;
    batch_ = 1;
    for (size_t i = 0; i + 2 < r; ++i) batch_ *= q[i];
    sq_ = q[r - 2];
    d_ = q[r - 1];
    sk_ = kt ? k[r - 1] : k[r - 2];
    dv_ = v[r - 1];
    if (batch_ == 0 || sq_ == 0 || sk_ == 0 || d_ == 0 || dv_ == 0) return Unsupported(node.Label(), ": empty attention");
    const float scale = node.attr_float("scale", 1.f);
    if (in.size() > 3 && in[3].present) {
      // Mask broadcast to [lead..., Sq, Sk]: supported when its leading dims
      // broadcast as one block (all of them, none, or a prefix with the rest 1).
      Shape m = in[3].shape;
      if (m.size() > r) return Unsupported(node.Label(), ": mask rank");
      while (m.size() < r) m.insert(m.begin(), 1);
      if ((m[r - 1] != sk_ && m[r - 1] != 1) || (m[r - 2] != sq_ && m[r - 2] != 1))
        return Unsupported(node.Label(), ": mask shape");
      mask_col_stride_ = m[r - 1] == 1 ? 0 : 1;
      mask_row_stride_ = m[r - 2] == 1 ? 0 : m[r - 1];
      // Leading dims: the mask's batch index is (b / div) % mod over the flattened
      // batch b, which covers masks whose full dims are outermost ([B, 1, Sq|1, Sk]).
      int64_t div = 1, mask_batch = 1;
      bool ones_phase = true;
      for (size_t i = r - 2; i-- > 0;) {
        if (q[i] == 1) continue;
        if (m[i] == 1) {
          if (!ones_phase) return Unsupported(node.Label(), ": mask broadcast pattern");
          div *= q[i];
        } else {
          if (m[i] != q[i]) return Unsupported(node.Label(), ": mask shape");
          ones_phase = false;
          mask_batch *= m[i];
        }
      }
      mask_batch_div_ = div;
      mask_batch_mod_ = mask_batch;
      mask_batch_stride_ = m[r - 2] * m[r - 1];
      has_mask_ = true;
    }
    elem_ = DTypeSize(in[0].dtype);
    int device = 0, cc_major = 0;
    SP_CUDA(cudaGetDevice(&device));
    SP_CUDA(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
    if (FusedAttentionSupports(type_, d_, dv_, cc_major)) {
      fused_ = true;
      AttentionParams& p = fused_params_;
      p.slices = batch_;
      p.sq = sq_;
      p.sk = sk_;
      p.d = d_;
      p.scale = scale;
      if (bshd) {  // [B, S, H, D]: slice b = (b / H, b % H)
        const int64_t h = in[0].shape[2];
        p.heads = h;
        p.q = {sq_ * h * d_, d_, h * d_, 1};
        p.k = {sk_ * h * d_, d_, h * d_, 1};
        p.v = {sk_ * h * dv_, dv_, h * dv_, 1};
        p.out = {sq_ * h * dv_, dv_, h * dv_, 1};
      } else {
        p.heads = 1;
        p.q = {sq_ * d_, 0, d_, 1};
        p.k = kt ? AttentionStrides{d_ * sk_, 0, 1, sk_} : AttentionStrides{sk_ * d_, 0, d_, 1};
        p.v = {sk_ * dv_, 0, dv_, 1};
        p.out = {sq_ * dv_, 0, dv_, 1};
      }
      p.mask_batch_div = mask_batch_div_;
      p.mask_batch_mod = mask_batch_mod_;
      p.mask_batch_stride = mask_batch_stride_;
      p.mask_row_stride = mask_row_stride_;
      p.mask_col_stride = mask_col_stride_;
      return Status::Ok();
    }
    GemmShape s1;
    s1.type = type_;
    s1.tf32 = opt.tf32;
    s1.m = sq_;
    s1.n = sk_;
    s1.k = d_;
    s1.trans_b = !kt;
    s1.batch = batch_;
    s1.stride_a = sq_ * d_;
    s1.stride_b = sk_ * d_;
    s1.stride_c = s1.stride_d = sq_ * sk_;
    SP_RETURN_IF_ERROR(qk_.Prepare(env.lt, s1, kGemmWorkspace));
    GemmShape s2;
    s2.type = type_;
    s2.tf32 = opt.tf32;
    s2.m = sq_;
    s2.n = dv_;
    s2.k = sk_;
    s2.batch = batch_;
    s2.stride_a = sq_ * sk_;
    s2.stride_b = sk_ * dv_;
    s2.stride_c = s2.stride_d = sq_ * dv_;
    SP_RETURN_IF_ERROR(pv_.Prepare(env.lt, s2, kGemmWorkspace));
    sm_.outer = batch_ * sq_;
    sm_.n = sk_;
    sm_.inner = 1;
    sm_.scale = scale;
    sm_.zero_invalid_rows = true;  // as the reference op: fully masked (or NaN) rows give zeros
    sm_.mask_col_stride = mask_col_stride_;
    sm_.mask_row_stride = mask_row_stride_;
    sm_.mask_rows_per_batch = sq_;
    sm_.mask_batch_div = mask_batch_div_;
    sm_.mask_batch_mod = mask_batch_mod_;
    sm_.mask_batch_stride = mask_batch_stride_;
    if (bshd) {
      // Gather Q, K, V into [B, H, S, D] in the workspace; scatter the output back.
      const Shape* logical[4] = {&q, &k, &v, &y};
      const Shape* stored[4] = {&in[0].shape, &in[1].shape, &in[2].shape, &out.shape};
      for (int i = 0; i < 4; ++i) {
        const std::vector<int64_t> st = AttentionLogical(Packed(*stored[i]), true);
        const std::vector<int64_t> packed = Packed(*logical[i]);
        SP_ASSIGN_OR_RETURN(StridedShape c, MakeStrided(*logical[i], i < 3 ? std::vector<std::vector<int64_t>>{st, packed}
                                                                             : std::vector<std::vector<int64_t>>{packed, st}));
        copies_[i] = c;
        copy_bytes_[i] = Aligned(static_cast<size_t>(NumElements(*logical[i])) * elem_);
      }
      bshd_copies_ = true;
    }
    return Status::Ok();
  }
  size_t workspace() const override {
    if (fused_) return 0;
    size_t b = ScoresBytes() + kGemmWorkspace;
    if (bshd_copies_)
      for (size_t c : copy_bytes_) b += c;
    return b;
  }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* mask = has_mask_ ? in[3] : nullptr;
    if (fused_) {
      AttentionParams p = fused_params_;
      p.mask = mask;
      SP_CUDA(LaunchFusedAttention(type_, in[0], in[1], in[2], out[0], p, env.stream));
      return Status::Ok();
    }
    char* ws = static_cast<char*>(env.workspace);
    char* scores = ws;
    ws += ScoresBytes();
    const void* q = in[0];
    const void* k = in[1];
    const void* v = in[2];
    void* y = out[0];
    if (bshd_copies_) {
      const void* src[3] = {in[0], in[1], in[2]};
      const void* dst[3];
      for (int i = 0; i < 3; ++i) {
        SP_CUDA(LaunchStridedCopy(elem_, src[i], ws, copies_[i], env.stream));
        dst[i] = ws;
        ws += copy_bytes_[i];
      }
      q = dst[0];
      k = dst[1];
      v = dst[2];
      y = ws;
      ws += copy_bytes_[3];
    }
    const size_t ws_bytes = env.workspace_bytes - static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    SP_RETURN_IF_ERROR(qk_.Run(env.lt, q, k, nullptr, nullptr, scores, ws, ws_bytes, env.stream));
    SoftmaxParams p = sm_;
    p.mask = mask;
    SP_CUDA(LaunchSoftmax(type_, scores, scores, p, env.stream));
    SP_RETURN_IF_ERROR(pv_.Run(env.lt, scores, v, nullptr, nullptr, y, ws, ws_bytes, env.stream));
    if (bshd_copies_) SP_CUDA(LaunchStridedCopy(elem_, y, out[0], copies_[3], env.stream));
    return Status::Ok();
  }
  const char* family() const override { return fused_ ? "fused attention" : "attention"; }

 private:
  static size_t Aligned(size_t b) { return (b + 255) / 256 * 256; }
  size_t ScoresBytes() const { return Aligned(static_cast<size_t>(batch_ * sq_ * sk_) * elem_); }
  FloatType type_ = FloatType::kF32;
  int64_t batch_ = 1, sq_ = 0, sk_ = 0, d_ = 0, dv_ = 0;
  size_t elem_ = 4;
  bool has_mask_ = false;
  int64_t mask_batch_div_ = 1, mask_batch_mod_ = 1, mask_batch_stride_ = 0, mask_row_stride_ = 0,
          mask_col_stride_ = 0;
  bool fused_ = false;
  AttentionParams fused_params_;
  Gemm qk_, pv_;
  SoftmaxParams sm_;
  bool bshd_copies_ = false;
  StridedShape copies_[4];  //!< Q, K, V gathered to [B, H, S, D]; the output scattered back
  size_t copy_bytes_[4] = {};
};

// ---------------------------------------------------------------- image input

class ImageInputKernel : public NodeKernel {
 public:
  ImageInputKernel(FloatType t, ImageInputParams p) : t_(t), p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchImageInput(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "image input"; }

 private:
  FloatType t_;
  ImageInputParams p_;
};

Result<KernelChoice> MakeImageInput(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                                    const KernelOptions& opt) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(out.dtype, node));
  const Shape& x = in[0].shape;
  const auto mean = node.attr_floats("mean");
  const auto scale = node.attr_floats("scale");
  if (in[0].dtype != DType::kUInt8 || x.size() != 4 || mean.size() != scale.size() ||
      static_cast<int64_t>(mean.size()) != x[3])
    return Unsupported(node.Label(), ": ImageInput shape/attributes");
  if (x[3] > kMaxImageChannels) return Unsupported(node.Label(), ": more than ", kMaxImageChannels, " channels");
  ImageInputParams p;
  p.n = x[0];
  p.h = x[1];
  p.w = x[2];
  p.c = x[3];
  for (size_t i = 0; i < mean.size(); ++i) {
    p.mean[i] = mean[i];
    p.scale[i] = scale[i];
  }
  p.out_nhwc = node.attr_string("layout", "NCHW") == "NHWC" || opt.out_nhwc;
  return KernelChoice{false, std::make_unique<ImageInputKernel>(t, p)};
}

const std::set<std::string>& ViewOps() {
  static const std::set<std::string> k = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"};
  return k;
}

}  // namespace

Result<KernelChoice> MakeKernel(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& in,
                                const std::vector<KernelOutput>& out, const KernelOptions& opt, const RunEnv& env) {
  const std::string& op = node.op_type;
  const bool sampan_domain = node.domain == "sampan";
  if (!node.domain.empty() && !sampan_domain) return Unsupported(node.Label(), ": domain ", node.domain);
  if (in.empty() || !in[0].present || out.empty()) return Unsupported(node.Label(), ": no data input");
  if (!sampan_domain && ViewOps().count(op)) {
    // Dropout is a view only in inference form (no mask output, training_mode off).
    if (op == "Dropout" && (node.output(1) != nullptr || (in.size() > 2 && in[2].present)))
      return Unsupported(node.Label(), ": Dropout with mask or training_mode");
    if (out[0].dtype != in[0].dtype) return Unsupported("view type");
    return KernelChoice{true, nullptr};
  }
  if (sampan_domain) {
    if (op == "FusedConv") {
      auto k = std::make_unique<ConvKernel>();
      SP_RETURN_IF_ERROR(k->Init(node, in, out[0], opt, env));
      return KernelChoice{false, std::move(k)};
    }
    if (op == "ImageInput") return MakeImageInput(node, in, out[0], opt);
    if (op == "FusedGemm") return MakeGemm(node, in, out[0], opt, env);
    if (op == "FusedMatMul") return MakeMatMul(node, in, out[0], opt, env);
    if (op == "AddLayerNorm") return MakeAddLayerNorm(node, in, out[0]);
    if (op == "Attention") {
      for (size_t i = 1; i < in.size(); ++i)
        if (in[i].present && in[i].dtype != in[0].dtype) return Unsupported("attention types");
      auto k = std::make_unique<AttentionKernel>();
      SP_RETURN_IF_ERROR(k->Init(node, in, out[0], opt, env));
      return KernelChoice{false, std::move(k)};
    }
    return Unsupported(node.Label(), ": no CUDA kernel");
  }
  if (auto b = BinaryOps().find(op); b != BinaryOps().end()) return MakeBinary(node, b->second, in, out[0]);
  if ((op == "Max" || op == "Min") && in.size() == 2)
    return MakeBinary(node, op == "Max" ? BinaryOp::kMax : BinaryOp::kMin, in, out[0]);
  if (auto u = UnaryOps().find(op); u != UnaryOps().end()) return MakeUnary(node, opset, u->second, in, out[0]);
  if (op == "Cast") {
    auto from = CastTypeOf(in[0].dtype), to = CastTypeOf(out[0].dtype);
    if (!from || !to) return Unsupported(node.Label(), ": cast types");
    return KernelChoice{false, std::make_unique<CastKernel>(*from, *to, NumElements(out[0].shape))};
  }
  if (*LogicalFamily(op)) return MakeLogicalOp(node, in, out[0]);
  if (op == "Transpose") return MakeTranspose(node, in, out[0]);
  if (op == "Concat") return MakeConcat(node, in, out[0]);
  if (op == "Expand") return MakeExpand(node, in, out[0]);
  if (op == "Slice") return MakeSlice(node, opset, in, out[0]);
  if (op == "Gather") return MakeGather(node, in, out[0]);
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return MakePool(node, in, out[0], opt);
  if (op == "Softmax" || op == "LogSoftmax") return MakeSoftmax(node, opset, in);
  if (op == "LayerNormalization" || op == "RMSNormalization") return MakeLayerNorm(node, in);
  if (op == "Conv") {
    if (in.size() > 3) return Unsupported("conv inputs");
    auto k = std::make_unique<ConvKernel>();
    SP_RETURN_IF_ERROR(k->Init(node, in, out[0], opt, env));
    return KernelChoice{false, std::move(k)};
  }
  if (op == "Gemm") return MakeGemm(node, in, out[0], opt, env);
  if (op == "MatMul") return MakeMatMul(node, in, out[0], opt, env);
  return Unsupported(node.Label(), ": no CUDA kernel for ", op);
}

std::string StaticKernelFamily(const ir::Node& node) {
  const std::string& op = node.op_type;
  if (node.domain == "sampan") {
    if (op == "FusedConv") return "cudnn conv";
    if (op == "FusedGemm" || op == "FusedMatMul") return "cublaslt gemm";
    if (op == "Attention") return "attention";
    if (op == "AddLayerNorm") return "layernorm";
    if (op == "ImageInput") return "image input";
    return "host";
  }
  if (!node.domain.empty()) return "host";
  if (ViewOps().count(op)) return "view";
  if (op == "Conv") return "cudnn conv";
  if (op == "Gemm" || op == "MatMul") return "cublaslt gemm";
  if (BinaryOps().count(op) || UnaryOps().count(op) || op == "Max" || op == "Min") return "elementwise";
  if (const char* f = LogicalFamily(op); *f) return f;
  static const std::map<std::string, std::string> k = {
      {"Cast", "cast"}, {"Transpose", "transpose"}, {"Concat", "concat"}, {"Expand", "expand"}, {"Slice", "slice"},
      {"Gather", "gather"}, {"MaxPool", "pool"}, {"AveragePool", "pool"}, {"GlobalAveragePool", "pool"},
      {"GlobalMaxPool", "pool"}, {"Softmax", "softmax"}, {"LogSoftmax", "softmax"}, {"LayerNormalization", "layernorm"},
      {"RMSNormalization", "layernorm"}};
  auto it = k.find(op);
  return it == k.end() ? "host" : it->second;
}

}  // namespace sampan::cuda
