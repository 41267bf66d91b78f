// sampan::QPointwise (quantized_pointwise.h): inference and the reference kernel.
#include "ops/quantized_pointwise.h"

#include <algorithm>
#include <map>

#include "ops/common.h"

namespace sampan::ops {

bool ParsePwOp(const std::string& t, PwOp* op) {
  static const std::map<std::string, PwOp> kOps = {{"Add", PwOp::kAdd},
                                                   {"Sub", PwOp::kSub},
                                                   {"Mul", PwOp::kMul},
                                                   {"Div", PwOp::kDiv},
                                                   {"Pow", PwOp::kPow},
                                                   {"Relu", PwOp::kRelu},
                                                   {"Sigmoid", PwOp::kSigmoid},
                                                   {"Tanh", PwOp::kTanh},
                                                   {"Neg", PwOp::kNeg},
                                                   {"Abs", PwOp::kAbs},
                                                   {"Sqrt", PwOp::kSqrt},
                                                   {"Exp", PwOp::kExp},
                                                   {"HardSwish", PwOp::kHardSwish},
                                                   {"HardSigmoid", PwOp::kHardSigmoid},
                                                   {"Clip", PwOp::kClip},
                                                   {"LeakyRelu", PwOp::kLeakyRelu}};
  auto it = kOps.find(t);
  if (it == kOps.end()) return false;
  *op = it->second;
  return true;
}

int PwParams(PwOp op) {
  return op == PwOp::kHardSigmoid || op == PwOp::kClip ? 2 : op == PwOp::kLeakyRelu ? 1 : 0;
}

namespace {

// ONNX element types of the quantized tensors.
constexpr int64_t kOnnxUint8 = 2, kOnnxInt8 = 3;

Result<bool> QuantTypeIsU8(const ir::Node& node, const char* attr, int64_t t) {
  if (t != kOnnxUint8 && t != kOnnxInt8)
    return InvalidArgument(node.Label(), ": ", attr, " must be 2 (uint8) or 3 (int8), got ", t);
  return t == kOnnxUint8;
}

// The integer range of a quantized type, less the zero point, as floats.
void Range(bool u8, int32_t zp, float* lo, float* hi) {
  *lo = static_cast<float>(u8 ? 0 : -128) - static_cast<float>(zp);
  *hi = static_cast<float>(u8 ? 255 : 127) - static_cast<float>(zp);
}

}  // namespace

Result<PwProgram> ReadPwProgram(const ir::Node& node, size_t num_inputs) {
  PwProgram p;
  const std::vector<float> in_scales = node.attr_floats("in_scales");
  const std::vector<int64_t> in_zps = node.attr_ints("in_zero_points");
  if (num_inputs == 0) return InvalidArgument(node.Label(), ": no inputs");
  if (in_scales.size() != num_inputs || in_zps.size() != num_inputs)
    return InvalidArgument(node.Label(), ": in_scales and in_zero_points need one value per input (", num_inputs,
                           "), got ", in_scales.size(), " and ", in_zps.size());
  for (size_t i = 0; i < num_inputs; ++i) {
    if (!(in_scales[i] >= 0) || std::isinf(in_scales[i]))
      return InvalidArgument(node.Label(), ": in_scales[", i, "] must be > 0 (or 0 for a float input), got ",
                             in_scales[i]);
    p.inputs.push_back({in_scales[i], static_cast<int32_t>(in_zps[i])});
  }
  const ir::Attribute* ops = node.attr("ops");
  if (ops == nullptr || ops->type != ir::AttrType::kStrings || ops->strings.empty())
    return InvalidArgument(node.Label(), ": attribute 'ops' (strings) is required");
  const size_t m = ops->strings.size();
  const std::vector<int64_t> lhs = node.attr_ints("lhs"), rhs = node.attr_ints("rhs");
  const std::vector<float> params = node.attr_floats("params");
  const std::vector<float> fq_scales = node.attr_floats("fq_scales");
  const std::vector<int64_t> fq_zps = node.attr_ints("fq_zero_points"), fq_types = node.attr_ints("fq_types");
  if (lhs.size() != m || rhs.size() != m || params.size() != 2 * m || fq_scales.size() != m || fq_zps.size() != m ||
      fq_types.size() != m)
    return InvalidArgument(node.Label(), ": lhs, rhs, fq_scales, fq_zero_points and fq_types need one value per op (",
                           m, "), params two");
  for (size_t j = 0; j < m; ++j) {
    PwProgram::Instr in;
    if (!ParsePwOp(ops->strings[j], &in.op))
      return InvalidArgument(node.Label(), ": ops[", j, "] '", ops->strings[j], "' is not an element-wise op it runs");
    const int64_t regs = static_cast<int64_t>(num_inputs + j);  // registers defined before op j
    if (lhs[j] < 0 || lhs[j] >= regs)
      return InvalidArgument(node.Label(), ": lhs[", j, "] = ", lhs[j], " is not a register defined before it (0..",
                             regs - 1, ")");
    if (PwBinary(in.op) ? (rhs[j] < 0 || rhs[j] >= regs) : rhs[j] != -1)
      return InvalidArgument(node.Label(), ": rhs[", j, "] = ", rhs[j],
                             PwBinary(in.op) ? " is not a register defined before it" : " must be -1 (unary op)");
    in.lhs = static_cast<int>(lhs[j]);
    in.rhs = static_cast<int>(rhs[j]);
    in.p0 = params[2 * j];
    in.p1 = params[2 * j + 1];
    if (!(fq_scales[j] >= 0) || std::isinf(fq_scales[j]))
      return InvalidArgument(node.Label(), ": fq_scales[", j, "] must be > 0 (or 0: none), got ", fq_scales[j]);
    in.fq_scale = fq_scales[j];
    in.fq_zp = static_cast<int32_t>(fq_zps[j]);
    if (in.fq_scale > 0) {
      SP_ASSIGN_OR_RETURN(in.fq_u8, QuantTypeIsU8(node, "fq_types[j]", fq_types[j]));
    }
    p.instrs.push_back(in);
  }
  p.y_scale = node.attr_float("y_scale", 0.f);
  if (!(p.y_scale > 0) || std::isinf(p.y_scale))
    return InvalidArgument(node.Label(), ": y_scale must be > 0, got ", p.y_scale);
  p.y_zp = static_cast<int32_t>(node.attr_int("y_zero_point", 0));
  SP_ASSIGN_OR_RETURN(p.y_u8, QuantTypeIsU8(node, "y_type", node.attr_int("y_type", kOnnxUint8)));
  float lo, hi;
  Range(p.y_u8, p.y_zp, &lo, &hi);
  if (lo > 0 || hi < 0) return InvalidArgument(node.Label(), ": y_zero_point ", p.y_zp, " is outside its type");
  for (const auto& in : p.instrs) {
    Range(in.fq_u8, in.fq_zp, &lo, &hi);
    if (in.fq_scale > 0 && (lo > 0 || hi < 0))
      return InvalidArgument(node.Label(), ": fq zero point ", in.fq_zp, " is outside its type");
  }
  return p;
}

namespace {

Status InferQPointwise(InferContext& ctx) {
  const size_t n = ctx.num_inputs();
  SP_ASSIGN_OR_RETURN(PwProgram p, ReadPwProgram(ctx.node(), n));
  for (size_t i = 0; i < n; ++i) {
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is required");
    const DType t = ctx.input_dtype(i);
    if (p.inputs[i].scale > 0 ? (t != DType::kUInt8 && t != DType::kInt8) : t != DType::kFloat32)
      return ctx.Error("input ", i, " must be ", p.inputs[i].scale > 0 ? "int8 or uint8 (in_scales > 0)" : "float32",
                       ", got ", DTypeName(t));
  }
  return InferBroadcastOutput(ctx, p.y_u8 ? DType::kUInt8 : DType::kInt8);
}

Status RunQPointwise(KernelContext& ctx) {
  const size_t n = ctx.inputs.size();
  SP_ASSIGN_OR_RETURN(PwProgram p, ReadPwProgram(ctx.node, n));
  std::vector<Shape> shapes;
  for (const Tensor* t : ctx.inputs) shapes.push_back(t->shape());
  const Shape out = BroadcastShapes(shapes);
  const size_t rank = out.size();
  // Per input, its element stride along each output axis (0 where broadcast).
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < n; ++i) {
    const Shape& s = shapes[i];
    int64_t acc = 1;
    for (size_t d = s.size(); d-- > 0;) {
      const size_t od = rank - s.size() + d;
      strides[i][od] = s[d] == 1 ? 0 : acc;
      acc *= s[d];
    }
  }
  Tensor& y = ctx.out(0);
  const int64_t count = NumElements(out);
  std::vector<int64_t> idx(rank, 0), off(n, 0);
  std::vector<float> reg(n + p.instrs.size());
  float ylo, yhi;
  Range(p.y_u8, p.y_zp, &ylo, &yhi);
  for (int64_t k = 0; k < count; ++k) {
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = *ctx.inputs[i];
      const int64_t o = off[i];
      if (p.inputs[i].scale == 0) {
        reg[i] = t.data<float>()[o];
      } else {
        const int32_t q = t.dtype() == DType::kUInt8 ? static_cast<int32_t>(t.data<uint8_t>()[o])
                                                     : static_cast<int32_t>(t.data<int8_t>()[o]);
        reg[i] = static_cast<float>(q - p.inputs[i].zero_point) * p.inputs[i].scale;
      }
    }
    for (size_t j = 0; j < p.instrs.size(); ++j) {
      const PwProgram::Instr& in = p.instrs[j];
      float v = PwApply(in.op, reg[static_cast<size_t>(in.lhs)], in.rhs >= 0 ? reg[static_cast<size_t>(in.rhs)] : 0.f,
                        in.p0, in.p1);
      if (in.fq_scale > 0) {
        float lo, hi;
        Range(in.fq_u8, in.fq_zp, &lo, &hi);
        v = PwQuantizeRel(v, in.fq_scale, lo, hi, static_cast<float>(in.fq_zp)) * in.fq_scale;
      }
      reg[n + j] = v;
    }
    const float r = PwQuantizeRel(reg.back(), p.y_scale, ylo, yhi, static_cast<float>(p.y_zp));
    const int32_t q = static_cast<int32_t>(r) + p.y_zp;
    if (p.y_u8)
      y.mutable_data<uint8_t>()[k] = static_cast<uint8_t>(q);
    else
      y.mutable_data<int8_t>()[k] = static_cast<int8_t>(q);
    // Next output index, and each input's offset with it.
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) {
        for (size_t i = 0; i < n; ++i) off[i] += strides[i][d];
        break;
      }
      for (size_t i = 0; i < n; ++i) off[i] -= strides[i][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_DOMAIN_OP("sampan", "QPointwise", InferQPointwise, RunQPointwise);

}  // namespace sampan::ops
