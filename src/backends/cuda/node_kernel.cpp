#include "backends/cuda/node_kernel.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <map>
#include <set>

#include "backends/cuda/attention_kernel.h"
#include "backends/cuda/cast.h"
#include "backends/cuda/conv_kernel.h"
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
    if (op == "FusedConv") return MakeConv(node, in, out[0], opt, env);
    if (op == "ImageInput") return MakeImageInput(node, in, out[0], opt);
    if (op == "FusedGemm") return MakeGemm(node, in, out[0], opt, env);
    if (op == "FusedMatMul") return MakeMatMul(node, in, out[0], opt, env);
    if (op == "AddLayerNorm") return MakeAddLayerNorm(node, in, out[0]);
    if (op == "Attention") return MakeAttention(node, in, out[0], opt, env);
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
    return MakeConv(node, in, out[0], opt, env);
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
