// Element-wise family: binary ops with broadcasting, unary math and activations.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/families.h"
#include "backends/cuda/kernel_util.h"
#include "base/tensor.h"

namespace sampan::cuda {
namespace {

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

// Sum, Mean, Max, Min of any number of inputs: the first two combined into the
// output, each further one folded into it, Mean scaled at the end.
class VariadicKernel : public NodeKernel {
 public:
  VariadicKernel(BinaryOp op, FloatType t, std::vector<StridedShape> steps, int64_t n, float scale)
      : op_(op), t_(t), steps_(std::move(steps)), n_(n), scale_(scale) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    for (size_t k = 0; k < steps_.size(); ++k)
      SP_CUDA(LaunchBinary(op_, t_, k == 0 ? in[0] : out[0], in.size() > k + 1 ? in[k + 1] : in[0], out[0], steps_[k],
                           env.stream));
    if (scale_ != 1.f) SP_CUDA(LaunchUnary(UnaryOp::kScale, t_, out[0], out[0], n_, scale_, 0.f, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "elementwise"; }

 private:
  BinaryOp op_;
  FloatType t_;
  std::vector<StridedShape> steps_;
  int64_t n_;
  float scale_;
};

const std::map<std::string, BinaryOp>& BinaryOps() {
  static const std::map<std::string, BinaryOp> k = {{"Add", BinaryOp::kAdd}, {"Sub", BinaryOp::kSub},
                                                    {"Mul", BinaryOp::kMul}, {"Div", BinaryOp::kDiv},
                                                    {"Pow", BinaryOp::kPow}, {"PRelu", BinaryOp::kPRelu}};
  return k;
}

const std::map<std::string, UnaryOp>& UnaryOps() {
  static const std::map<std::string, UnaryOp> k = {{"Relu", UnaryOp::kRelu},
                                                   {"Sigmoid", UnaryOp::kSigmoid},
                                                   {"Tanh", UnaryOp::kTanh},
                                                   {"Exp", UnaryOp::kExp},
                                                   {"Log", UnaryOp::kLog},
                                                   {"Sqrt", UnaryOp::kSqrt},
                                                   {"Neg", UnaryOp::kNeg},
                                                   {"Abs", UnaryOp::kAbs},
                                                   {"Erf", UnaryOp::kErf},
                                                   {"Reciprocal", UnaryOp::kReciprocal},
                                                   {"Floor", UnaryOp::kFloor},
                                                   {"Ceil", UnaryOp::kCeil},
                                                   {"Gelu", UnaryOp::kGelu},
                                                   {"HardSigmoid", UnaryOp::kHardSigmoid},
                                                   {"HardSwish", UnaryOp::kHardSwish},
                                                   {"LeakyRelu", UnaryOp::kLeakyRelu},
                                                   {"Clip", UnaryOp::kClip},
                                                   {"Softplus", UnaryOp::kSoftplus},
                                                   {"Elu", UnaryOp::kElu},
                                                   {"Sin", UnaryOp::kSin},
                                                   {"Cos", UnaryOp::kCos},
                                                   {"Identity", UnaryOp::kIdentity},
                                                   {"Selu", UnaryOp::kSelu},
                                                   {"Celu", UnaryOp::kCelu},
                                                   {"Softsign", UnaryOp::kSoftsign},
                                                   {"Mish", UnaryOp::kMish},
                                                   {"ThresholdedRelu", UnaryOp::kThresholdedRelu},
                                                   {"Shrink", UnaryOp::kShrink},
                                                   {"Round", UnaryOp::kRound},
                                                   {"Sign", UnaryOp::kSign},
                                                   {"Tan", UnaryOp::kTan},
                                                   {"Asin", UnaryOp::kAsin},
                                                   {"Acos", UnaryOp::kAcos},
                                                   {"Atan", UnaryOp::kAtan},
                                                   {"Sinh", UnaryOp::kSinh},
                                                   {"Cosh", UnaryOp::kCosh},
                                                   {"Asinh", UnaryOp::kAsinh},
                                                   {"Acosh", UnaryOp::kAcosh},
                                                   {"Atanh", UnaryOp::kAtanh},
                                                   {"Swish", UnaryOp::kSwish}};
  return k;
}

// Each operand and the output may be stored channels-last (layout.h): the output is
// visited in its memory order, operands read through their own strides.
Result<KernelChoice> MakeBinary(const ir::Node& node, BinaryOp op, const std::vector<KernelInput>& in,
                                const KernelOutput& out, const KernelOptions& opt) {
  if (in.size() != 2 || !in[1].present || in[0].dtype != in[1].dtype) return Unsupported(node.Label(), ": mixed types");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  if (op == BinaryOp::kPRelu && in[1].shape.size() > out.shape.size())
    return Unsupported(node.Label(), ": PRelu slope of higher rank than x");
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStridedFor(out.shape, opt.out_nhwc,
                                                     {BroadcastStrides(in[0].shape, out.shape, opt.input_nhwc(0)),
                                                      BroadcastStrides(in[1].shape, out.shape, opt.input_nhwc(1))}));
  return KernelChoice{false, std::make_unique<BinaryKernel>(op, t, s)};
}

Result<KernelChoice> MakeUnary(const ir::Node& node, int64_t opset, UnaryOp op, const std::vector<KernelInput>& in,
                               const KernelOutput& out) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  float p0 = 0.f, p1 = 0.f;
  if (op == UnaryOp::kLeakyRelu) p0 = node.attr_float("alpha", 0.01f);
  if (op == UnaryOp::kElu || op == UnaryOp::kCelu || op == UnaryOp::kThresholdedRelu)
    p0 = node.attr_float("alpha", 1.f);
  if (op == UnaryOp::kSwish) p0 = node.attr_float("alpha", 1.f);
  if (op == UnaryOp::kSelu) {
    p0 = node.attr_float("alpha", 1.67326319217681884765625f);
    p1 = node.attr_float("gamma", 1.05070102214813232421875f);
  }
  if (op == UnaryOp::kShrink) {
    p0 = node.attr_float("bias", 0.f);
    p1 = node.attr_float("lambd", 0.5f);
  }
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

}  // namespace

std::vector<std::string> BinaryOpNames() {
  std::vector<std::string> names{"Max", "Min", "Sum", "Mean"};
  for (const auto& [op, b] : BinaryOps()) names.push_back(op);
  return names;
}

std::vector<std::string> UnaryOpNames() {
  std::vector<std::string> names;
  for (const auto& [op, u] : UnaryOps()) names.push_back(op);
  return names;
}

Result<KernelChoice> MakeVariadic(const KernelRequest& r, BinaryOp op) {
  const Shape& o = r.out[0].shape;
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(r.out[0].dtype, r.node));
  for (const KernelInput& x : r.in)
    if (!x.present || x.dtype != r.out[0].dtype) return Unsupported(r.node.Label(), ": mixed or missing inputs");
  const float scale = r.node.op_type == "Mean" ? 1.f / static_cast<float>(r.in.size()) : 1.f;
  std::vector<StridedShape> steps;
  if (r.in.size() == 1) {  // a copy of the one input, as max(x, x)
    const auto xs = BroadcastStrides(r.in[0].shape, o, r.opt.input_nhwc(0));
    SP_ASSIGN_OR_RETURN(StridedShape s, MakeStridedFor(o, r.opt.out_nhwc, {xs, xs}));
    return KernelChoice{false, std::make_unique<VariadicKernel>(BinaryOp::kMax, t, std::vector<StridedShape>{s},
                                                                NumElements(o), scale)};
  }
  for (size_t k = 1; k < r.in.size(); ++k) {
    const auto prev =
        k == 1 ? BroadcastStrides(r.in[0].shape, o, r.opt.input_nhwc(0)) : StorageStrides(o, r.opt.out_nhwc);
    SP_ASSIGN_OR_RETURN(
        StridedShape s,
        MakeStridedFor(o, r.opt.out_nhwc, {prev, BroadcastStrides(r.in[k].shape, o, r.opt.input_nhwc(k))}));
    steps.push_back(s);
  }
  return KernelChoice{false, std::make_unique<VariadicKernel>(op, t, std::move(steps), NumElements(o), scale)};
}

Result<KernelChoice> MakeElementwise(const KernelRequest& r) {
  const std::string& op = r.node.op_type;
  if (op == "Sum" || op == "Mean") return MakeVariadic(r, BinaryOp::kAdd);
  if ((op == "Max" || op == "Min") && r.in.size() != 2)
    return MakeVariadic(r, op == "Max" ? BinaryOp::kMax : BinaryOp::kMin);
  if (auto b = BinaryOps().find(op); b != BinaryOps().end())
    return MakeBinary(r.node, b->second, r.in, r.out[0], r.opt);
  if (op == "Max" || op == "Min") {
    if (r.in.size() != 2) return Unsupported(r.node.Label(), ": ", op, " of ", r.in.size(), " inputs");
    return MakeBinary(r.node, op == "Max" ? BinaryOp::kMax : BinaryOp::kMin, r.in, r.out[0], r.opt);
  }
  if (auto u = UnaryOps().find(op); u != UnaryOps().end()) {
    if (r.opt.input_nhwc(0) != r.opt.out_nhwc) return Unsupported(r.node.Label(), ": input and output layouts differ");
    return MakeUnary(r.node, r.opset, u->second, r.in, r.out[0]);
  }
  return Unsupported(r.node.Label(), ": not an element-wise op");
}

}  // namespace sampan::cuda
