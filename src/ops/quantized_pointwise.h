// sampan::QPointwise: a region of element-wise float ops between quantized tensors, as one
// node (what fuse_quantized makes of the DequantizeLinear -> op -> QuantizeLinear -> ... chains
// of a Q/DQ model around its activations: PaddleOCR's hard-swish and its learnable affines are
// 7 ops and 14 Q/DQ nodes each). It computes exactly what the Q/DQ graph computes:
//
//   inputs X0..Xn-1: int8/uint8 tensors, dequantized with in_scales[i] and in_zero_points[i],
//                    or float32 tensors taken as they are (in_scales[i] == 0);
//   registers r0..rn-1 = the inputs; instruction j (j < m) computes
//       r(n+j) = op_j(r[lhs_j], r[rhs_j])        (rhs_j = -1 for a unary op)
//   and, when fq_scales[j] > 0, rounds it to the grid of a QuantizeLinear followed by a
//   DequantizeLinear of that scale, zero point (fq_zero_points[j]) and type (fq_types[j], the
//   ONNX element type: 2 uint8, 3 int8): the graph's intermediate Q/DQ pairs;
//   Y = QuantizeLinear(r(n+m-1), y_scale, y_zero_point) of type y_type (2 or 3).
//
// Ops (ops[j]): Add Sub Mul Div Pow (binary); Relu Sigmoid Tanh Neg Abs Sqrt Exp HardSwish
// (unary); HardSigmoid (alpha, beta), Clip (min, max), LeakyRelu (alpha) with their parameters
// at params[2j], params[2j+1]. Float math in float32, the ONNX reference kernels' formulas, so
// the node's result equals the unfused graph's bit for bit. Inputs broadcast (numpy rules) to
// the output shape.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::ops {

enum class PwOp : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kRelu,
  kSigmoid,
  kTanh,
  kNeg,
  kAbs,
  kSqrt,
  kExp,
  kHardSwish,
  kHardSigmoid,
  kClip,
  kLeakyRelu,
};

//! The op named `op_type` (an ONNX op of the default domain), or false.
bool ParsePwOp(const std::string& op_type, PwOp* op);
inline bool PwBinary(PwOp op) {
  return op <= PwOp::kPow;
}
//! Parameters an op takes (0, 1 or 2).
int PwParams(PwOp op);

//! A QPointwise node's attributes, read and checked.
struct PwProgram {
  struct Input {
    float scale = 0;  //!< 0: a float32 input
    int32_t zero_point = 0;
  };
  struct Instr {
    PwOp op;
    int lhs = 0, rhs = -1;
    float p0 = 0, p1 = 0;
    float fq_scale = 0;  //!< 0: no rounding to a quantization grid
    int32_t fq_zp = 0;
    bool fq_u8 = true;
  };
  std::vector<Input> inputs;
  std::vector<Instr> instrs;
  float y_scale = 1;
  int32_t y_zp = 0;
  bool y_u8 = true;
};

//! Reads and checks the attributes of `node` (a sampan::QPointwise with `num_inputs` inputs);
//! errors name the node and the attribute.
Result<PwProgram> ReadPwProgram(const ir::Node& node, size_t num_inputs);

//! The ONNX reference kernels' float formulas.
inline float PwApply(PwOp op, float a, float b, float p0, float p1) {
  switch (op) {
    case PwOp::kAdd:
      return a + b;
    case PwOp::kSub:
      return a - b;
    case PwOp::kMul:
      return a * b;
    case PwOp::kDiv:
      return a / b;
    case PwOp::kPow:
      return std::pow(a, b);
    case PwOp::kRelu:
      return a < 0.f ? 0.f : a;
    case PwOp::kSigmoid: {
      if (a >= 0.f) return 1.f / (1.f + std::exp(-a));
      const float e = std::exp(a);
      return e / (1.f + e);
    }
    case PwOp::kTanh:
      return std::tanh(a);
    case PwOp::kNeg:
      return -a;
    case PwOp::kAbs:
      return std::fabs(a);
    case PwOp::kSqrt:
      return std::sqrt(a);
    case PwOp::kExp:
      return std::exp(a);
    case PwOp::kHardSwish:
      return a * std::max(0.f, std::min(1.f, a / 6.f + 0.5f));
    case PwOp::kHardSigmoid:
      return std::max(0.f, std::min(1.f, p0 * a + p1));
    case PwOp::kClip:
      return std::min(std::max(a, p0), p1);
    case PwOp::kLeakyRelu:
      return a >= 0.f ? a : p0 * a;
  }
  return a;
}

//! QuantizeLinear's integer of x (before the zero point is added), as a float: x / s rounded
//! half to even, saturated to [lo, hi] = [qmin - zp, qmax - zp]; a NaN quotient gives -zp (the
//! reference kernel stores 0 for NaN).
inline float PwQuantizeRel(float x, float s, float lo, float hi, float zp) {
  const float q = x / s;
  if (q != q) return -zp;
  const float c = q < lo ? lo : (q > hi ? hi : q);
  return std::nearbyint(c);
}

}  // namespace sampan::ops
